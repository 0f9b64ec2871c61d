"""Clusters across batch jobs, on the 3-host Slurm testbed: another job joins a running cluster
(--join), a shell attaches a driver, `mpiray list` shows them; what cannot work fails at once; and an
elastic cluster grows and shrinks through Ray's autoscaler (--autoscale)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mpiray.elastic.registry import Registry
from mpiray.logs.events import read_events
from mpiray.logs.report.jobdir import read_job

from helpers import (
    BIN,
    JOB_TIMEOUT_S,
    PYTHON,
    ROOT,
    client_server_logs,
    driver_report,
    rank_events,
    tagged_lines,
    wait_for_text,
)
from slurm import fixture
from slurm.fixture import start

DRIVER = ROOT / "tests" / "slurm" / "elastic_driver.py"


def wait_for_cluster(registry: Registry, jobs, timeout: float = JOB_TIMEOUT_S) -> str:
    """This test's cluster (its Slurm job carries the test's job name) once the registry lists it; another test's
    cluster still listed (one killed with -9 whose entry is not yet seen stale) is not it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ours = set(jobs.bed.run(["squeue", "--noheader", f"--name={jobs.name}", "--format=%i"], timeout=60).stdout.split())
        running = [entry.job_id for entry in registry.running() if entry.job_id in ours]
        if running:
            return running[0]
        time.sleep(0.3)
    pytest.fail("no cluster of this test showed up in the registry")


def finish(proc: subprocess.Popen, timeout: float = JOB_TIMEOUT_S) -> int:
    return fixture.finish(proc, timeout)


def mpiray(*args: str, env=None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mpiray"), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def login(bed, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`mpiray ARGS` on the testbed's login host."""
    return bed.login([str(BIN / "mpiray"), *args], timeout, env={**os.environ}, check=False)


def test_another_job_joins_a_running_cluster_a_shell_attaches_and_both_leave_cleanly(
        slurm_testbed, jobs, tmp_path, private_registry):
    bed, registry = slurm_testbed, Registry(private_registry)
    marker = tmp_path / "go"
    head = start(bed, jobs.srun(tmp_path, 1, "--", PYTHON, str(DRIVER), "wait-nodes", "3", str(marker)),
                 tmp_path / "head.out")
    try:
        cluster = wait_for_cluster(registry, jobs)
        jobs.ids.append(cluster)
        joiner = start(bed, jobs.srun(tmp_path, 2, "--join", cluster), tmp_path / "join.out")
        ready = driver_report(wait_for_text(tmp_path, "head.out", "ELASTIC ").read_text(), "ELASTIC")
        assert ready == {"ready": 3, "ran_on": 3}  # a task ran on each of the joined job's nodes too
        # From the login host: no raylet of the cluster in its process table, as on a site's login node.
        listed = json.loads(login(bed, "list", "--json").stdout)
        # (the session's registry may still list another test's cluster that was killed with -9)
        assert [(c["job_id"], c["total_nodes"], len(c["joins"])) for c in listed if c["job_id"] == cluster] == \
            [(cluster, 3, 1)]
        attached = login(bed, "attach", cluster, "--", PYTHON, str(DRIVER), "count")
        assert attached.returncode == 0, attached.stderr + client_server_logs(tmp_path / "logs" / cluster)
        assert driver_report(attached.stdout, "ELASTIC")["nodes"] == 3
        assert "ray://" in attached.stderr  # through Ray Client: the login host runs no raylet
        marker.touch()  # the head's driver ends: the cluster ends, and the joined job leaves by itself
        assert finish(head) == 0, (tmp_path / "head.out").read_text()[-3000:]
        ended = time.monotonic()
        assert finish(joiner) == 0, (tmp_path / "join.out").read_text()[-3000:]
        assert time.monotonic() - ended < 30
    finally:
        marker.touch()
        for proc in (head,):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    report = read_job(tmp_path / "logs" / cluster)
    (joined,) = report.joined_jobs
    assert len(joined.ranks) == 2 and joined.exit_code == 0
    assert all(r.joined_s is not None and r.left_s is not None for r in joined.ranks)
    assert max(count for _, count in report.nodes_over_time) == 3
    assert cluster not in [entry.job_id for entry in registry.running()]  # withdrawn at the end
    job_ids = {path.name.split("-rank-")[0] for path in (tmp_path / "logs" / cluster).glob("join-*-rank-*.jsonl")}
    assert len(job_ids) == 1  # the joined job's own id names its files
    joined_records = rank_events(tmp_path / "logs" / cluster, 0)
    assert joined_records[-1]["event"] == "exit"
    for job_id in [cluster, joined.job_id]:
        jobs.wait_until_gone(job_id)


@pytest.mark.parametrize("problem", ["gone", "token", "version", "other-user"])
def test_a_join_that_cannot_work_fails_at_once_with_its_reason(slurm_testbed, jobs, tmp_path, private_registry,
                                                                problem):
    bed, registry = slurm_testbed, Registry(private_registry)
    if problem == "gone":
        argv, expected, cause = jobs.srun(tmp_path, 1, "--join", "424242"), "no running cluster '424242'", \
            "no_such_cluster"
        head = None
    else:
        marker = tmp_path / "go"
        head = start(bed, jobs.srun(tmp_path, 1, "--", PYTHON, str(DRIVER), "wait-nodes", "1", str(marker)),
                     tmp_path / "head.out")
        cluster = wait_for_cluster(registry, jobs)
        jobs.ids.append(cluster)
        env = {}
        argv = jobs.srun(tmp_path, 1, "--join", cluster)
        if problem == "token":
            registry.token_path(cluster).write_text("0" * 64)
            expected, cause = "InvalidAuthToken", "foreign_gcs"
        elif problem == "version":  # a job from another environment: Ray 2.52's (tests/envs.sh ray-2.52)
            oldest = ROOT / ".envs" / "ray-2.52" / "bin" / "python"
            if not oldest.exists():
                marker.touch()
                finish(head)
                pytest.skip("needs .envs/ray-2.52 (bash tests/envs.sh ray-2.52 --build-only)")
            argv = [str(oldest) if arg == PYTHON else arg for arg in argv]
            expected, cause = "runs Ray 2.60", "version_skew"
        else:  # a registry of another user's, given by --registry
            theirs = tmp_path / "theirs"
            theirs.mkdir()
            os.chown(theirs, 65534, 65534)
            argv = jobs.srun(tmp_path, 1, "--join", cluster, "--registry", str(theirs))
            expected, cause = "is not a directory of yours", "config"
    started = time.monotonic()
    result = bed.run(argv, env=bed.env({**os.environ, **(env if head else {})}), timeout=JOB_TIMEOUT_S)
    took = time.monotonic() - started
    if head is not None:
        marker.touch()
        assert finish(head) == 0
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr, result.stderr[-3000:]
    assert took < 30, f"it took {took:.0f} s to say so"
    # The joining rank says why in its log: its own job's dir, or the cluster's once it found the cluster.
    failures = [r["fields"] for path in (tmp_path / "logs").rglob("*.jsonl") for r in read_events(path)
                if r["event"] == "failed"]
    assert [f["cause"] for f in failures] == [cause], failures
    for job_id in dict.fromkeys(jobs.ids + jobs.ended_ids()):
        jobs.wait_until_gone(job_id)


# ---- elastic: Ray's autoscaler, worker jobs -------------------------------------------------------


def worker_jobs(bed, cluster: str) -> dict[str, str]:
    """job id -> state of the cluster's worker jobs still in the queue (pending, running, completing)."""
    result = bed.run(["squeue", "--noheader", "--format=%i %j %T"], timeout=60, check=True)
    return {job: state for job, name, state in (line.split() for line in result.stdout.splitlines())
            if name.startswith(f"mpiray-{cluster}-w")}


def autoscaler_events(job_dir: Path) -> list[tuple[str, dict]]:
    path = job_dir / "autoscaler-rank-0000.jsonl"
    return [(r["event"], r["fields"]) for r in read_events(path)] if path.exists() else []


def wait_until_no_worker_job(bed, cluster: str, timeout: float) -> float:
    """Seconds until the queue held no worker job of the cluster; fails at the timeout."""
    started = time.monotonic()
    while worker_jobs(bed, cluster) and time.monotonic() - started < timeout:
        time.sleep(0.5)
    assert not worker_jobs(bed, cluster), worker_jobs(bed, cluster)
    return time.monotonic() - started


def autoscaled(bed, jobs, tmp_path: Path, bounds: str, *driver: str, cooldown: float = 20) -> list[str]:
    return jobs.srun(tmp_path, 1, "--autoscale", bounds, "--worker-cpus", "2", "--cooldown", f"{cooldown:g}",
                     "--", PYTHON, str(DRIVER), *driver)


def test_a_placement_group_that_needs_three_nodes_grows_the_cluster_then_every_worker_job_ends(
        slurm_testbed, jobs, tmp_path, private_registry):
    bed = slurm_testbed
    result = bed.run(autoscaled(bed, jobs, tmp_path, "1:3", "spread", "3"), timeout=JOB_TIMEOUT_S)
    ended = time.monotonic()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = tagged_lines(result.stdout, "ELASTIC")
    assert lines[0]["placement_group_ready"] and lines[0]["nodes"] == 3 and lines[1] == {"ran_on": 3}
    (job_dir,) = (tmp_path / "logs").glob("*/autoscaler-rank-0000.jsonl")
    cluster = job_dir.parent.name
    jobs.ids.append(cluster)
    decisions = [name for name, _ in autoscaler_events(job_dir.parent)]
    assert decisions.count("job_submitted") == 2 and "node_joined" in decisions
    wait_until_no_worker_job(bed, cluster, 60)
    assert time.monotonic() - ended < 60  # from the job's end, the wait above included once
    report = read_job(job_dir.parent)
    assert max(count for _, count in report.nodes_over_time) == 3
    # Each left: cancelled by the head's end (143), or it saw the cluster end first (0).
    assert len(report.joined_jobs) == 2 and all(j.exit_code in (0, 143) for j in report.joined_jobs)


@pytest.mark.train
def test_a_tune_run_grows_the_cluster_gets_its_result_and_the_idle_worker_jobs_end_after_the_cooldown(
        slurm_testbed, jobs, tmp_path, private_registry):
    bed = slurm_testbed
    cooldown = 15
    result = bed.run(autoscaled(bed, jobs, tmp_path, "1:3", "tune", str(tmp_path / "results"), str(cooldown + 45),
                                cooldown=cooldown), timeout=JOB_TIMEOUT_S * 2)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (tuned, at_end) = tagged_lines(result.stdout, "ELASTIC")
    assert (tuned["best_x"], tuned["trials"], tuned["errors"]) == (3, 6, 0)  # as on any cluster
    assert tuned["nodes_used"] > 1  # the worker jobs' nodes took trials
    assert at_end["nodes_at_the_end"] == 1  # the idle ones were cancelled while the driver still ran
    (events,) = [autoscaler_events(path.parent) for path in (tmp_path / "logs").glob("*/autoscaler-rank-0000.jsonl")]
    idle = [fields for name, fields in events if name == "job_cancelled" and "idle" in fields["why"]]
    assert len(idle) == len([1 for name, _ in events if name == "job_submitted"]) >= 1


def test_a_cancelled_worker_job_is_replaced_while_the_work_goes_on(slurm_testbed, jobs, tmp_path, private_registry):
    bed = slurm_testbed
    head = start(bed, autoscaled(bed, jobs, tmp_path, "1:3", "tasks"), tmp_path / "head.out")
    try:
        cluster = wait_for_cluster(Registry(private_registry), jobs)
        jobs.ids.append(cluster)
        job_dir = tmp_path / "logs" / cluster
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while sum(name == "node_joined" for name, _ in autoscaler_events(job_dir)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        victim = next(fields["job"] for name, fields in autoscaler_events(job_dir) if name == "node_joined")
        bed.run(["scancel", victim], timeout=60, check=True)
        assert finish(head, JOB_TIMEOUT_S * 2) == 0, (tmp_path / "head.out").read_text()[-3000:]
    finally:
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGKILL)
    done = driver_report((tmp_path / "head.out").read_text(), "ELASTIC")
    assert done["total"] == sum(i * i for i in range(8))  # every task finished, retried where its node went
    events = autoscaler_events(job_dir)
    assert ("worker_job_ended", victim) in [(name, fields.get("job")) for name, fields in events]
    assert sum(name == "job_submitted" for name, _ in events) >= 3  # the cancelled one was replaced
    wait_until_no_worker_job(bed, cluster, 60)


def test_a_worker_job_at_the_end_of_its_walltime_drains_leaves_and_is_replaced_while_demand_remains(
        slurm_testbed, jobs, tmp_path, private_registry):
    bed = slurm_testbed
    template = tmp_path / "worker.sh"
    # A 2-minute walltime: Slurm sends the worker job's SIGTERM (--signal=TERM@60) 30-60 s after it starts.
    template.write_text(f"#SBATCH --partition={bed.partition}\n#SBATCH --time=2\n")
    marker = tmp_path / "enough"
    argv = jobs.srun(tmp_path, 1, "--autoscale", "1:3", "--worker-cpus", "2", "--cooldown", "60",
                     "--worker-job", str(template), "--", PYTHON, str(DRIVER), "busy", str(marker))
    head = start(bed, argv, tmp_path / "head.out")
    try:
        cluster = wait_for_cluster(Registry(private_registry), jobs)
        jobs.ids.append(cluster)
        job_dir = tmp_path / "logs" / cluster
        deadline = time.monotonic() + 120 + JOB_TIMEOUT_S  # the walltime, then a replacement's start
        replaced = None
        while replaced is None and time.monotonic() < deadline and head.poll() is None:
            events = autoscaler_events(job_dir)
            order = [fields.get("job") for name, fields in events if name == "job_submitted"]
            ended = next((f["job"] for name, f in events if name == "worker_job_ended"), None)
            if ended:
                replaced = next((f["job"] for name, f in events if name == "node_joined"
                                 and order.index(f["job"]) >= 2), None)  # a third worker job's node joined
            time.sleep(0.5)
        assert replaced, f"no worker job ended and was replaced: {autoscaler_events(job_dir)}"
        marker.touch()
        assert finish(head, JOB_TIMEOUT_S * 2) == 0, (tmp_path / "head.out").read_text()[-3000:]
    finally:
        marker.touch()
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGKILL)
    done = driver_report((tmp_path / "head.out").read_text(), "ELASTIC")
    assert done["stopped_by_marker"] and done["done"] > 6  # every task finished, retried where its node went
    # The ended worker job left on its walltime's warning, before Slurm's limit: it drained and stopped its node.
    ended_job = bed.wait_for_job(ended, timeout=60)
    assert ended_job.state != "TIMEOUT", ended_job
    (join_log,) = job_dir.glob(f"join-{ended}-rank-0000.jsonl")
    records = read_events(join_log)
    (warned,) = [r["time"] for r in records if r["event"] == "stop_signal" and r["fields"]["signum"] == signal.SIGTERM]
    assert records[-1]["event"] == "exit"
    at = {(r["event"], r["fields"].get("job")): r["time"] for r in read_events(job_dir / "autoscaler-rank-0000.jsonl")}
    print(f"\n{ended}: walltime_warning_after_start {warned - at['job_started', ended]:.1f} s, warning_to_job_gone "
          f"{at['worker_job_ended', ended] - warned:.1f} s, job_gone_to_replacement_joined "
          f"{at['node_joined', replaced] - at['worker_job_ended', ended]:.1f} s")
    wait_until_no_worker_job(bed, cluster, 60)


@pytest.mark.parametrize("how", ["scancel", "sigkill"])
def test_the_worker_jobs_end_within_a_minute_when_the_head_job_does(slurm_testbed, jobs, tmp_path, private_registry,
                                                                     how):
    bed = slurm_testbed
    head = start(bed, autoscaled(bed, jobs, tmp_path, "1:3", "spread", "3", "600"), tmp_path / "head.out")
    try:
        cluster = wait_for_cluster(Registry(private_registry), jobs)
        jobs.ids.append(cluster)
        wait_for_text(tmp_path, "head.out", '"ran_on": 3')  # the worker jobs' nodes are part of the cluster
        # SIGKILL of every process of the head job: nobody of it cancels anything.
        bed.run(["scancel", *(["--signal=KILL", "--full"] if how == "sigkill" else []), cluster], timeout=60, check=True)
        killed = time.monotonic()
        assert wait_until_no_worker_job(bed, cluster, 60) < 60
        assert time.monotonic() - killed < 60
    finally:
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)


def test_the_elastic_job_script_grows_its_cluster_and_completes(slurm_testbed, jobs, tmp_path, private_registry):
    bed = slurm_testbed
    template = tmp_path / "worker.sh"
    template.write_text(f"#SBATCH --partition={bed.partition}\nsource {Path(PYTHON).parent / 'activate'}\n")
    env = jobs.env(tmp_path, [PYTHON, str(DRIVER), "spread", "3"], MAX_NODES="3", WORKER_CPUS="1",
                   WORKER_TEMPLATE=str(template), COOLDOWN="20", MPIRAY_REGISTRY=str(private_registry))
    job_id = jobs.submit(ROOT / "jobs" / "slurm_elastic.sh", tmp_path, env, "--cpus-per-task=2")
    result = bed.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = (tmp_path / f"{jobs.name}-{job_id}.out").read_text()
    assert result.state == "COMPLETED" and result.exit_code == 0, output[-3000:]
    assert '"placement_group_ready": true' in output and '"ran_on": 3' in output
    wait_until_no_worker_job(bed, job_id, 60)
    jobs.wait_until_gone(job_id)


@pytest.mark.train
def test_the_elastic_scripts_default_driver_grows_the_cluster_past_its_minimum(slurm_testbed, jobs, tmp_path,
                                                                             private_registry):
    """jobs/slurm_elastic.sh as shipped (its default driver: MAX_NODES trials of the trainer): the trials that
    do not fit the head job's node are Ray's demand, and its autoscaler adds worker jobs for them."""
    bed = slurm_testbed
    template = tmp_path / "worker.sh"
    template.write_text(f"#SBATCH --partition={bed.partition}\nsource {Path(PYTHON).parent / 'activate'}\n")
    env = jobs.env(tmp_path, [], MAX_NODES="3", WORKER_CPUS="1", WORKER_TEMPLATE=str(template), COOLDOWN="20",
                   MPIRAY_REGISTRY=str(private_registry))
    del env["MPIRAY_DRIVER"]  # the script's own default driver
    job_id = jobs.submit(ROOT / "jobs" / "slurm_elastic.sh", tmp_path, env, "--cpus-per-task=2")
    output = tmp_path / f"{jobs.name}-{job_id}.out"
    try:
        wait_for_text(output.parent, output.name, "[train] 3 trials of PPO")
        autoscaler = tmp_path / "logs" / job_id / "autoscaler-rank-0000.jsonl"
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while len(_autoscaler_events(autoscaler, "node_joined")) < 2:  # the cluster's maximum: 1 + 2 worker jobs
            assert time.monotonic() < deadline, output.read_text()[-3000:]
            time.sleep(1)
    finally:
        bed.run(["scancel", job_id], timeout=60)
    result = bed.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    assert result.state in ("CANCELLED", "FAILED", "COMPLETED"), result
    assert wait_until_no_worker_job(bed, job_id, 60) < 60
    jobs.wait_until_gone(job_id)


def _autoscaler_events(path: Path, name: str) -> list[dict]:
    return [record["fields"] for record in read_events(path) if record["event"] == name] if path.exists() else []


@pytest.mark.train
def test_an_elastic_clusters_worker_job_nodes_carry_learners(slurm_testbed, jobs, tmp_path, private_registry):
    """A user's RLlib script asks for more learners than the head job's node holds: Ray's autoscaler adds a
    worker job, its node takes learners, and they train with the head's over gloo on each node's network."""
    bed = slurm_testbed
    plain = ROOT / "tests" / "drivers" / "plain_rllib.py"
    result = bed.run(jobs.srun(tmp_path, 1, "--autoscale", "1:3", "--worker-cpus", "2", "--cooldown", "20",
                               "--", PYTHON, str(plain), "3"), timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seen = driver_report(result.stdout, "PLAIN", result.stderr)
    (job_dir,) = (tmp_path / "logs").glob("*/autoscaler-rank-0000.jsonl")
    cluster = job_dir.parent.name
    jobs.ids.append(cluster)
    joined = _autoscaler_events(job_dir, "node_joined")
    assert joined, "no worker job's node joined"
    head_ip = read_job(job_dir.parent).cluster[0].ip
    learner_ips = {ip for ip, _ in seen["learners"]}
    assert len(seen["learners"]) == 3 and learner_ips - {head_ip}, seen  # a worker job's node holds learners
    assert learner_ips <= set(bed.node_ips) and {interface for _, interface in seen["learners"]} == {"eth0"}
    wait_until_no_worker_job(bed, cluster, 60)
    jobs.wait_until_gone(cluster)
