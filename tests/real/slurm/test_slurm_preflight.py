"""The pre-flight across the 3 hosts of the Slurm testbed: a log dir per host is a warning; spilling leaves nothing."""

from __future__ import annotations

import pytest

from helpers import (
    JOB_TIMEOUT_S,
    OLDEST,
    PYTHON,
    SPILLER,
    START_RAY,
    driver_report,
    rank_events,
)

STORE = 80 * 2**20  # the object store of each node: Ray's least is 75 MiB


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
