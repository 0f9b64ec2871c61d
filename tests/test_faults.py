"""The fault matrix: each failure injected for real ends the job quickly, loudly and cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, Launch, alive_pids, assert_nothing_left, launch, launcher_argv, new_job_id

pytestmark = pytest.mark.slow
PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


def start(tmp_path: Path, ranks: int, args=(), driver=(), env=None):
    job_id = new_job_id("fault")
    argv = launcher_argv(ranks, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id, *args], driver)
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    return proc, tmp_path / "logs" / job_id


def wait_for_line(path: Path, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{path} never said {text!r}")


def finish(proc: subprocess.Popen, job_dir: Path, timeout: float) -> Launch:
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Launch(proc.returncode, out, err, job_dir, time.monotonic() - started)


def logged_pids(log: str) -> list[int]:
    return [int(p) for p in re.search(r"Ray node processes: pids ([\d ]+)", log).group(1).split()]


def test_worker_rank_killed_during_startup(tmp_path):
    """mpirun kills the other ranks; their Ray processes die with them (no rank can tidy up)."""
    proc, job_dir = start(tmp_path, 2)
    log = wait_for_line(job_dir / "rank-0001.log", "will connect to")
    rank_pid = int(re.search(r"\(pid (\d+)\): rank 1 of 2", log).group(1))
    os.kill(rank_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    run = finish(proc, job_dir, timeout=60)
    assert run.returncode != 0
    assert time.monotonic() - killed_at < 30
    assert "rank-0000.log" in os.listdir(job_dir)  # logs kept
    head = (job_dir / "rank-0000.log").read_text()
    pids = logged_pids(head) if "Ray node processes" in head else []
    deadline = time.monotonic() + 30
    while alive_pids(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive_pids(pids)


def test_head_gcs_killed_while_the_driver_runs(tmp_path):
    proc, job_dir = start(tmp_path, 2, driver=[*PROBE, "--sleep", "600"])
    log = wait_for_line(job_dir / "rank-0000.log", "Driver started")
    gcs = [pid for pid in logged_pids(log) if psutil.Process(pid).name() == "gcs_server"]
    assert len(gcs) == 1
    os.kill(gcs[0], signal.SIGKILL)
    killed_at = time.monotonic()
    run = finish(proc, job_dir, timeout=90)
    assert run.returncode == 1
    assert time.monotonic() - killed_at < 30
    assert "the head's Ray node exited" in run.stderr and "rank-0000.ray.log" in run.stderr
    assert_nothing_left(run, wait=10)


def test_driver_exception_exit_7(tmp_path):
    driver = [sys.executable, "-c", "import ray; ray.init(); raise SystemExit(7)"]
    run = launch(tmp_path, 2, driver=driver, tag="exc")
    assert run.returncode == 7
    assert_nothing_left(run)


def test_version_skew_is_refused_with_versions_per_rank(tmp_path):
    run = launch(tmp_path, 2, env={"MPIRAY_FAKE_VERSION": "1:ray=2.59.0"}, tag="skew")
    assert run.returncode == 1
    assert "ranks run different versions" in run.stderr
    assert "rank 1 on" in run.stderr and "ray 2.59.0" in run.stderr and "ray 2.60" in run.stderr
    assert "PROBE" not in run.stdout  # the driver never started
    assert_nothing_left(run)


def test_unwritable_temp_dir(tmp_path):
    run = launch(tmp_path, 2, args=["--temp-dir", "/proc/mpiray"], tag="ro")
    assert run.returncode == 2
    assert "cannot create the temp dir /proc/mpiray/" in run.stderr and "--temp-dir" in run.stderr
    assert_nothing_left(run)


def test_object_store_larger_than_shm_is_refused(tmp_path):
    run = launch(tmp_path, 2, args=["--object-store-memory", "100T"], tag="store")
    assert run.returncode == 2
    assert "--object-store-memory" in run.stderr and "does not fit" in run.stderr
    assert_nothing_left(run)


def test_unknown_option_under_mpirun_ends_every_rank(tmp_path):
    run = launch(tmp_path, 2, args=["--no-such-option"], tag="badopt")
    assert run.returncode == 2
    assert "unrecognized arguments: --no-such-option" in run.stderr
    assert run.seconds < 30


def test_one_ray_node_per_host(tmp_path):
    run = launch(tmp_path, 4, args=["--ray-node-per", "host"], tag="perhost")
    assert run.returncode == 0, run.stderr
    probe = run.probe()
    assert probe["nodes"] == 1
    assert probe["cpus"] == len(os.sched_getaffinity(0))
    assert "idle" in run.rank_log(3)
    assert_nothing_left(run)


def test_no_auth_warns_and_leaves_no_shared_token(tmp_path):
    shared_token = Path.home() / ".ray" / "auth_token"
    existed = shared_token.exists()
    run = launch(tmp_path, 2, args=["--no-auth"], tag="noauth")
    assert run.returncode == 0, run.stderr
    assert "--no-auth: anyone who can reach" in run.stderr
    assert run.probe()["env"]["RAY_AUTH_MODE"] == "disabled"
    assert shared_token.exists() == existed  # never written by the launcher
    assert_nothing_left(run)
