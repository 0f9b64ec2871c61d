"""Why a job failed (mpiray/joblogs/classify.py): each cause from the evidence a real failure leaves
(fast, on literal events and Ray log lines), and provoked for real where this machine can (slow).

Causes provoked by the failure tests elsewhere, which check `mpiray logs` names them: port_in_use,
startup_timeout (test_launcher.py, test_joblogs.py), socket_path_too_long, temp_dir, config,
version_skew, head_lost (test_faults.py), time_limit, driver_failed, signal, driver_not_found
(test_launcher.py), mpi_singletons (test_slurm.py), trainer_missing (test_launcher.py: said before
MPI starts, so no log holds it). Here: mpi_init, out_of_memory, foreign_gcs, gcs_overloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpiray.joblogs import render
from mpiray.joblogs.classify import CAUSES, PMI2_UCX, classify
from mpiray.joblogs.parse import RankFacts

from conftest import BIN, ROOT, Launch, assert_nothing_left, causes, exit_codes, launch, new_job_id

PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


def entry(rank: int, status: str = "ok", cause: str = "", error: str = "", exit_code: int | None = 1) -> dict:
    return {"rank": rank, "status": status, "cause": cause, "error": error, "exit_code": exit_code}


def found(ranks, facts=None, ray_logs=None, exit_code=1, driver_code=None) -> dict[str, list[int]]:
    result = classify(ranks, facts or {}, ray_logs or {}, exit_code, driver_code)
    for cause in result:
        assert cause["title"] and cause["fix"] and cause["evidence"], cause
    return {cause["cause"]: cause["ranks"] for cause in result}


# ---- from literal evidence ------------------------------------------------------------------------


def test_a_cause_mpiray_named_wins_and_a_vague_one_gives_way_to_what_ray_logged():
    ranks = [entry(0), entry(1, "failed", "temp_dir", "cannot create the temp dir /x"), entry(2, "failed", "head_lost")]
    oom = "[2026-11-24 10:00:00,000 E 1 1] ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory"
    assert found(ranks, ray_logs={2: oom}) == {"temp_dir": [1], "out_of_memory": [2]}


@pytest.mark.parametrize("line, cause", [
    ("ray.exceptions.OutOfMemoryError: Task was killed", "out_of_memory"),
    ("[raylet] Out of memory: Killed process 4242 (ray::IDLE)", "out_of_memory"),
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    ("Failed to bind to 0.0.0.0:6379", "port_in_use"),
    ("Failed to get cluster ID from GCS server: Unauthenticated: RPC error: InvalidAuthToken", "foreign_gcs"),
    ("AF_UNIX path length cannot exceed 107 bytes", "socket_path_too_long"),
    ("Exception: The current node timed out during startup.", "gcs_overloaded"),
])
def test_each_sign_in_rays_logs_names_its_cause(line, cause):
    assert found([entry(0), entry(1, "failed", "", "`ray start` exited with code 1")], ray_logs={1: f"...\n{line}\n..."}) == \
        {cause: [1]}


def test_a_rank_that_never_came_out_of_mpi_init_is_named_and_pmi2_over_ucx_gets_its_note():
    stuck = RankFacts(rank=1, launched=1.0, launch={"launcher": "srun", "task": 1, "mpi_type": "pmi2", "netmod": None})
    result = classify([entry(0, "never reported"), entry(1, "never reported")], {1: stuck}, {}, None, None)
    assert [(c["cause"], c["ranks"], c["note"]) for c in result] == [("mpi_init", [1], PMI2_UCX)]
    ofi = RankFacts(rank=1, launched=1.0, launch={"launcher": "srun", "task": 1, "mpi_type": "pmi2", "netmod": "ofi"})
    assert classify([entry(1, "never reported")], {1: ofi}, {}, None, None)[0]["note"] == ""


def test_workers_rank_0_waited_for_in_vain_are_named_by_their_own_logs_first():
    head = RankFacts(rank=0, missing=[1, 2])
    result = found([entry(0), entry(1, "never reported"), entry(2, "never reported")], {0: head},
                   {2: "Failed to bind to 10.0.0.2:20001"})
    assert result == {"startup_timeout": [1], "port_in_use": [2]}


def test_a_job_that_failed_without_an_error_event_is_the_drivers_or_a_signals_doing():
    assert found([entry(0)], exit_code=3, driver_code=3) == {"driver_failed": [0]}
    assert found([entry(0)], exit_code=143, driver_code=143) == {"signal": [0]}
    assert found([entry(0)], ray_logs={0: "ray.exceptions.OutOfMemoryError"}, exit_code=1, driver_code=1) == \
        {"out_of_memory": [0]}
    assert found([entry(0, exit_code=0)], exit_code=0, driver_code=0) == {}


def test_the_report_says_why_with_the_fix():
    report = {"job_id": "j", "job_dir": "/j", "ranks": 1, "hosts": ["n1"], "started": None, "exit_code": 1,
              "earlier_runs": 0, "cluster": [], "phases": [], "first_error": None, "never_reported": [],
              "unfinished": [], "job_dir_changed_s": None, "warnings": [], "lost_nodes": [], "manifests": {},
              "joined_jobs": [], "autoscaler": [], "nodes_over_time": [],
              "causes": classify([entry(0, "failed", "time_limit", "ran past --time-limit")], {}, {}, 124, 124)}
    text = render.format_report(report)
    assert "why it failed:\n  time_limit (rank 0): " + CAUSES["time_limit"].title in text
    assert "    fix: " + CAUSES["time_limit"].fix in text


# ---- provoked for real ------------------------------------------------------------------------


def causes_and_text(job_dir: Path) -> tuple[dict, str]:
    text = subprocess.run([str(BIN / "mpiray"), "logs", str(job_dir)], capture_output=True, text=True, timeout=60,
                          check=False).stdout
    return causes(job_dir), text


@pytest.mark.slow
def test_mpi_init_that_never_returns(tmp_path):
    # MPICH's libfabric netmod with a provider that does not exist: MPI_Init fails on every rank. The
    # job id is known before MPI_Init (--job-id), so each rank said it was launched.
    job_id = new_job_id("mpiinit")
    argv = [str(BIN / "mpirun"), "-np", "2", sys.executable, str(ROOT / "start_ray.py"), "--log-dir",
            str(tmp_path / "logs"), "--job-id", job_id, "--", *PROBE]
    env = {**os.environ, "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "no-such-provider"}
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode != 0
    found, text = causes_and_text(tmp_path / "logs" / job_id)
    # The first rank whose MPI_Init fails ends the job: the launcher may kill the other before it
    # wrote anything. Every rank that said it was launched is named.
    assert list(found) == ["mpi_init"] and found["mpi_init"], text
    assert "never came out of MPI_Init" in text


@pytest.mark.slow
def test_a_node_out_of_memory(tmp_path):
    # Ray's own memory monitor, told that 2% of the host's memory is the most it may use: it kills the
    # worker of a task that holds 300 MiB, and the driver's ray.get fails with OutOfMemoryError.
    driver = [sys.executable, "-c",
              "import ray, time\nray.init()\n@ray.remote(max_retries=0)\ndef hog():\n    x = bytearray(300 << 20)\n"
              "    time.sleep(5)\n    return len(x)\nprint(ray.get(hog.remote()))"]
    run = launch(tmp_path, 1, driver=driver, tag="oom", env={
        "RAY_memory_usage_threshold": "0.02", "RAY_memory_monitor_refresh_ms": "100", "RAY_task_oom_retries": "0"})
    assert run.returncode == 1, run.stderr[-3000:]
    found, text = causes_and_text(run.job_dir)
    assert found == {"out_of_memory": [0]}, text
    assert_nothing_left(run)


@pytest.mark.slow
def test_a_node_whose_token_the_gcs_refuses(tmp_path):
    # Rank 1's ray_node.py overwrites its token file with another token before `ray start`: the
    # head's GCS refuses it, as one of another cluster would.
    wrong = tmp_path / "wrong-token"
    wrong.mkdir()
    (wrong / "sitecustomize.py").write_text(
        "import os\n"
        "if b'ray_node.py' in open('/proc/self/cmdline', 'rb').read() and os.environ.get('RAY_AUTH_TOKEN_PATH'):\n"
        "    open(os.environ['RAY_AUTH_TOKEN_PATH'], 'w').write('0' * 64)\n")
    job_id = new_job_id("token")
    common = [sys.executable, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path / "logs"), "--job-id", job_id,
              "--", *PROBE]
    argv = [str(BIN / "mpirun"), "-np", "1", *common, ":", "-np", "1", "-env", "PYTHONPATH", str(wrong), *common]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    job_dir = tmp_path / "logs" / job_id
    assert result.returncode == 1, result.stderr[-3000:]
    found, text = causes_and_text(job_dir)
    assert found == {"foreign_gcs": [1]}, text
    assert exit_codes(job_dir, 2) == [1, 1]
    assert_nothing_left(Launch(result.returncode, "", "", job_dir, 0), wait=10)


@pytest.mark.slow
def test_a_join_that_fails_every_time_as_an_overloaded_gcs_makes_it(tmp_path):
    # Ray's 30 s for a raylet to register is fixed and this machine cannot overload a GCS for real
    # within a test's time: the test hook makes every worker's `ray start` exit as Ray's does then.
    run = launch(tmp_path, 2, tag="overloaded", env={"MPIRAY_TEST_FAIL_JOIN": "always"})
    assert run.returncode == 1, run.stderr[-3000:]
    assert [r["fields"]["attempt"] for r in run.events(1) if r["event"] == "join_retry"] == [2, 3]
    found, text = causes_and_text(run.job_dir)
    assert found == {"gcs_overloaded": [1]}, text
    assert_nothing_left(run)
