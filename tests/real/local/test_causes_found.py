"""Why a job failed, provoked for real where this machine can: the evidence each failure leaves is read by
mpiray/logs/report/classify.py, whose pure tests are in tests/unit/logs/report/test_classify.py.

Causes provoked by the failure tests elsewhere, which check `mpiray logs` names them: port_in_use,
startup_timeout (test_launcher.py, test_joblogs.py), socket_path_too_long, temp_dir, config,
head_lost (test_faults.py), version_skew, dir_full (test_preflight.py), time_limit, driver_failed,
signal, driver_not_found (test_launcher.py), mpi_singletons (test_slurm.py), learner_node_lost
(test_learners.py), ports_per_host (tests/unit/rank/test_life.py), trainer_missing (test_launcher.py: said
before MPI starts, so no log holds it). Here: mpi_init, out_of_memory, foreign_gcs, gcs_overloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import BIN, ROOT, Launch, assert_nothing_left, causes, exit_codes, fail_join, launch, new_job_id

PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


# ---- provoked for real ------------------------------------------------------------------------


def causes_and_text(job_dir: Path) -> tuple[dict, str]:
    text = subprocess.run([str(BIN / "mpiray"), "logs", str(job_dir)], capture_output=True, text=True, timeout=60,
                          check=False).stdout
    return causes(job_dir), text


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


def test_a_node_whose_token_the_gcs_refuses(tmp_path):
    # Rank 1's starter overwrites its token file with another token before `ray start`: the
    # head's GCS refuses it, as one of another cluster would.
    wrong = tmp_path / "wrong-token"
    wrong.mkdir()
    (wrong / "sitecustomize.py").write_text(
        "import os\n"
        "if b'mpiray.raynode.starter' in open('/proc/self/cmdline', 'rb').read() and os.environ.get('RAY_AUTH_TOKEN_PATH'):\n"
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


def test_a_join_that_fails_every_time_as_an_overloaded_gcs_makes_it(tmp_path):
    # Ray's 30 s for a raylet to register is fixed and this machine cannot overload a GCS for real
    # within a test's time: the test hook makes every worker's `ray start` exit as Ray's does then.
    run = launch(tmp_path, 2, tag="overloaded", env=fail_join("always"))
    assert run.returncode == 1, run.stderr[-3000:]
    assert [r["fields"]["attempt"] for r in run.events(1) if r["event"] == "join_retry"] == [2, 3]
    found, text = causes_and_text(run.job_dir)
    assert found == {"gcs_overloaded": [1]}, text
    assert_nothing_left(run)
