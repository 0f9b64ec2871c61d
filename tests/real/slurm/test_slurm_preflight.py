"""The pre-flight across the 3 hosts of the Slurm testbed: a log dir per host is a warning; a host it refuses (a full
temp dir, a link throttled with tc) is left out (--bad-nodes exclude) or ends the job (refuse); spilling leaves
nothing."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest

import netns
from helpers import (
    BIN,
    JOB_TIMEOUT_S,
    OLDEST,
    PYTHON,
    SPILLER,
    START_RAY,
    driver_report,
    needs_root,
    rank_events,
)

STORE = 80 * 2**20  # the object store of each node: Ray's least is 75 MiB
NODES = "import ray; ray.init(); print('NODES', sum(n['Alive'] for n in ray.nodes()), flush=True)"


def full_temp_dir_on(bed, jobs, tmp_path, bad: str, full, *options: str):
    """srun -N3 with the last host's temp dir (MPIRAY_TEMP_DIR there alone) on a full file system."""
    return bed.run(["srun", f"--job-name={jobs.name}", "-N3", "-n3", "--cpus-per-task=2", "--mpi=pmi2", "bash", "-c",
                    f'if [ "$(hostname)" = {bad} ]; then export MPIRAY_TEMP_DIR={full}; fi; exec "$@"', "bash", PYTHON,
                    str(START_RAY), "--log-dir", str(tmp_path / "logs"), *options, "--", PYTHON, "-c", NODES],
                   timeout=JOB_TIMEOUT_S)


@contextlib.contextmanager
def full_tmpfs_on(node):
    """A RAM file system of 1 MiB on that host alone, 95% or more of it full (Ray cannot spill there); its path."""
    point = f"/tmp/full-{os.getpid()}"
    netns.on_host(node, ["sh", "-c", f"mkdir {point} && mount -t tmpfs -o size=1m,mode=0755 tmpfs {point} && "
                                     f"head -c {1024 * 1024 - 4096 * 4} /dev/zero > {point}/filler"])
    try:
        yield point
    finally:
        netns.on_host(node, ["sh", "-c", f"umount -l {point}; rmdir {point}"])


@contextlib.contextmanager
def throttled(bed, name: str, rate: str = "4mbit"):
    """What the host sends on its Ray network (eth0) throttled with tc's token bucket, as a degraded link is."""
    (node,) = [node for node in bed.nodes if node.name == name]
    tc = ["nsenter", f"--net={node.netns_path}", "tc", "qdisc"]
    subprocess.run([*tc, "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"],
                   check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run([*tc, "del", "dev", "eth0", "root"], check=True, timeout=30)


def test_a_log_dir_each_host_has_its_own_is_a_warning_naming_where_the_logs_are(slurm_testbed, jobs, tmp_path):
    """A relative --log-dir from a different directory on each host, as a node-local cwd makes it."""
    bed = slurm_testbed
    for node in bed.node_names:
        (tmp_path / node).mkdir()
    result = bed.run(["srun", f"--job-name={jobs.name}", "-N3", "-n3", "--cpus-per-task=2", "--mpi=pmi2", "bash", "-c",
                      f'cd {tmp_path}/$(hostname) && exec "$@"', "bash", PYTHON, str(START_RAY), "--log-dir", "logs",
                      "--", PYTHON, "-c", "pass"], timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    (job_dir,) = (tmp_path / bed.node_names[0] / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    warned = [r["fields"] for r in rank_events(job_dir, 0) if r["event"] == "preflight_warning"]
    assert sorted(w["host"] for w in warned if w["check"] == "log_dir_not_shared") == bed.node_names[1:]
    assert all(f"{tmp_path}/{w['host']}/logs" in w["message"] for w in warned if w["check"] == "log_dir_not_shared")
    jobs.wait_until_gone(job_dir.name)


@pytest.mark.parametrize("python", [PYTHON, pytest.param(str(OLDEST), id="ray-2.52", marks=pytest.mark.skipif(
    not OLDEST.exists(), reason="needs .envs/ray-2.52"))])
def test_a_driver_that_spills_three_times_its_store_on_three_hosts_leaves_nothing(slurm_testbed, jobs, tmp_path,
                                                                                    python):
    """--spill-dir on the testbed's shared file system: every node spills below the job's dir there (Ray adds
    each node's id), which is gone at the end. On Ray 2.52 every worker node spills to the head's path: the same."""
    bed = slurm_testbed
    root = tmp_path / "spill"
    result = bed.run(["srun", f"--job-name={jobs.name}", "-N3", "-n3", "--cpus-per-task=2", "--mpi=pmi2",
                      f"--chdir={tmp_path}", python, str(START_RAY), "--log-dir", str(tmp_path / "logs"),
                      "--spill-dir", str(root), "--object-store-memory", str(STORE), "--", python, str(SPILLER),
                      str(root), str(STORE >> 20)], timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (job_dir,) = (tmp_path / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    spilled = driver_report(result.stdout, "SPILLED", result.stderr)
    assert spilled["nodes"] == 3 and spilled["node_dirs"] == 3 and spilled["files"] >= 3, spilled
    assert list(root.iterdir()) == []  # the job's spill dir, and every node's objects, removed
    jobs.wait_until_gone(job_dir.name)


@needs_root
def test_a_host_whose_temp_dir_is_full_is_left_out_and_named_with_the_line_for_the_next_job(slurm_testbed, jobs,
                                                                                              tmp_path):
    """--bad-nodes exclude (the default): the cluster starts on the two good hosts, the console, the log, `mpiray logs`
    and the job's excluded_hosts file name the bad one with why and `sbatch --exclude=`; --bad-nodes refuse ends the
    job with exit 2 naming it, before any Ray starts."""
    bed = slurm_testbed
    bad = bed.node_names[2]
    with full_tmpfs_on(bed.nodes[2]) as full:
        result = full_temp_dir_on(bed, jobs, tmp_path, bad, full)
        refused = full_temp_dir_on(bed, jobs, tmp_path / "refuse", bad, full, "--bad-nodes", "refuse")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "NODES 2" in result.stdout
    assert f"mpiray: pre-flight: left out {bad} (2 of 3 Ray nodes start): {bad}: dir_full: the temp dir {full} is " \
           in result.stdout
    assert f"next time: sbatch --exclude={bad}" in result.stdout
    (job_dir,) = (tmp_path / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    (left_out,) = [r["fields"] for r in rank_events(job_dir, 0) if r["event"] == "nodes_excluded"]
    assert left_out["hosts"] == bad and left_out["exclude"] == f"sbatch --exclude={bad}"
    assert [r["event"] for r in rank_events(job_dir, 2) if r["event"] == "host_refused"] == ["host_refused"]
    assert (job_dir / "excluded_hosts").read_text().startswith(f"{bad}\tdir_full\t")
    logs = bed.run([str(BIN / "mpiray"), "logs", str(job_dir)], timeout=60)
    assert f"left out by the pre-flight: {bad} (2 of 3 Ray nodes started)" in logs.stdout, logs.stdout[-3000:]
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert f"on {bad}: the temp dir {full} is " in refused.stderr
    assert "NODES" not in refused.stdout
    (refused_dir,) = (tmp_path / "refuse" / "logs").iterdir()
    jobs.ids.append(refused_dir.name)
    assert not [r for r in rank_events(refused_dir, 0) if r["event"] == "head_alive"]
    jobs.wait_until_gone(job_dir.name)
    jobs.wait_until_gone(refused_dir.name)


@needs_root
def test_a_host_whose_link_is_throttled_is_named_with_its_figure_and_left_out(slurm_testbed, jobs, tmp_path):
    """tc throttles what the last host sends to 4 Mbit/s: the link check names it with its figure, the cluster
    starts on the two others; --bad-nodes refuse ends the job with exit 2 naming it, before any Ray starts."""
    bed = slurm_testbed
    bad = bed.node_names[2]

    def srun(log_dir, *options):
        return bed.run(["srun", f"--job-name={jobs.name}", "-N3", "-n3", "--cpus-per-task=2", "--mpi=pmi2", PYTHON,
                        str(START_RAY), "--log-dir", str(log_dir), *options, "--", PYTHON, "-c", NODES],
                       timeout=JOB_TIMEOUT_S)

    with throttled(bed, bad):
        result = srun(tmp_path / "logs")
        refused = srun(tmp_path / "refuse", "--bad-nodes", "refuse")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "NODES 2" in result.stdout
    (links,) = [line for line in result.stdout.splitlines() if line.startswith("mpiray: pre-flight: links")]
    assert f"{bad} " in links and links.count("(slow)") == 1 and links.index(bad) < links.index("(slow)"), links
    assert f"mpiray: pre-flight: left out {bad} (2 of 3 Ray nodes start): {bad}: slow_link: its link sends at " \
        in result.stdout
    (job_dir,) = (tmp_path / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    (check,) = [r["fields"] for r in rank_events(job_dir, 0) if r["event"] == "link_check"]
    figures = check["hosts"]
    assert figures[bad]["send_mbit"] < 20, figures  # tc's 4 Mbit/s, with its burst
    assert all(row["send_mbit"] > 200 and row["receive_mbit"] > 200 for host, row in figures.items() if host != bad)
    assert set(check["refused"]) == {bad}
    assert (job_dir / "excluded_hosts").read_text().startswith(f"{bad}\tslow_link\t")
    # Each host's spill dir lies in its own /tmp (the job's TMPDIR): none is left on any host, the left-out one's neither.
    left = [path for node in bed.nodes for path in bed.room.path(node, "/tmp").rglob(f"mpiray-*-spill-{job_dir.name}-*")]
    assert not left, left
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert f"on {bad}: its link sends at " in refused.stderr
    assert "NODES" not in refused.stdout
    (refused_dir,) = (tmp_path / "refuse").iterdir()
    jobs.ids.append(refused_dir.name)
    assert not [r for r in rank_events(refused_dir, 0) if r["event"] == "head_alive"]
    jobs.wait_until_gone(job_dir.name)
    jobs.wait_until_gone(refused_dir.name)


def test_hosts_that_share_a_hostname_are_refused_before_ray_in_one_line(slurm_testbed, jobs, tmp_path):
    """Each task in a UTS namespace of its own called `vm`, as containers that share one name: MPI still tells the
    hosts apart (srun's PMI), mpiray would take them for one."""
    bed = slurm_testbed
    result = bed.run(["srun", f"--job-name={jobs.name}", "-N2", "-n4", "--cpus-per-task=1", "--mpi=pmi2", "unshare",
                      "--uts", "sh", "-c", 'hostname vm && exec "$@"', "sh", PYTHON, str(START_RAY), "--log-dir",
                      str(tmp_path / "logs"), "--", PYTHON, "-c", "pass"], timeout=JOB_TIMEOUT_S)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert ("hosts that MPI tells apart share a hostname: 'vm' is the hostname of 2 hosts (ranks 0-3, their first "
            "ranks 0, 2)") in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (job_dir,) = (tmp_path / "logs").iterdir()
    jobs.ids.append(job_dir.name)
    assert not any(r["event"] == "head_alive" for r in rank_events(job_dir, 0))
    jobs.wait_until_gone(job_dir.name)
