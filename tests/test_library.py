"""mpiray.init() in the user's own script, under the real mpirun and as a plain process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import BIN, ROOT, Launch, assert_nothing_left
from mpiray.cli import library_config
from mpiray.errors import ConfigError

SCRIPT = ROOT / "tests" / "drivers" / "library_script.py"


def run_script(tmp_path: Path, mode: str, ranks: int = 2, timeout: float = 180) -> tuple[subprocess.CompletedProcess, Path]:
    mpirun = [str(BIN / "mpirun"), "-np", str(ranks)] if ranks else []
    result = subprocess.run([*mpirun, sys.executable, str(SCRIPT), mode, str(tmp_path / "logs")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    (job_dir,) = (tmp_path / "logs").iterdir()
    return result, job_dir


def connected(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("CONNECTED ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len("CONNECTED "):])


def assert_every_rank_ended_with(job_dir: Path, ranks: int, code: int) -> None:
    for rank in range(ranks):
        assert (job_dir / f"rank-{rank:04d}.log").read_text().rstrip().endswith(f"Exit code {code}")
    assert_nothing_left(Launch(code, "", "", job_dir, 0), wait=5)


# ---- options, as fast unit tests ------------------------------------------------------------


def test_options_are_the_command_lines_checked_the_same_way():
    config = library_config({"startup_timeout": 60, "auth": False, "log_dir": "/tmp/x", "num_cpus": None}, {})
    assert (config.startup_timeout, config.auth, str(config.log_dir), config.num_cpus) == (60.0, False, "/tmp/x", None)
    assert config.driver == ()
    assert library_config({}, {"MPIRAY_STARTUP_TIMEOUT": "30"}).startup_timeout == 30.0
    with pytest.raises(ConfigError, match="no option 'startup_timeot' .did you mean startup_timeout"):
        library_config({"startup_timeot": 6}, {})
    with pytest.raises(ConfigError, match="--startup-timeout: must be a finite number"):
        library_config({"startup_timeout": float("nan")}, {})
    with pytest.raises(ConfigError, match="invalid choice"):
        library_config({"ray_node_per": "node"}, {})


# ---- real runs ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.smoke
def test_rank_0_is_connected_to_every_node_and_the_others_never_return(tmp_path):
    result, job_dir = run_script(tmp_path, "ok")
    assert result.returncode == 0, result.stderr
    seen = connected(result.stdout)
    assert seen["initialized"] and seen["nodes"] == 2 and seen["ran_on"] == 2 and seen["ranks"] == [0, 1]
    assert "RANK 0: init returned info" in result.stdout
    assert "RANK 1:" not in result.stdout  # rank 1 served as a Ray node and exited inside init()
    assert not os.path.exists(seen["token"])  # the private dir went with the cluster
    assert_every_rank_ended_with(job_dir, 2, 0)


@pytest.mark.slow
@pytest.mark.parametrize("mode, code", [("exit3", 3), ("raise", 1)])
def test_rank_0s_exit_code_is_every_ranks(tmp_path, mode, code):
    result, job_dir = run_script(tmp_path, mode)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("Traceback (most recent call last)") == (1 if mode == "raise" else 0)
    assert "RuntimeError: the user's script failed" in result.stderr or mode != "raise"
    assert_every_rank_ended_with(job_dir, 2, code)


@pytest.mark.slow
def test_sigterm_ends_every_rank_with_143(tmp_path):
    proc = subprocess.Popen([str(BIN / "mpirun"), "-np", "2", sys.executable, str(SCRIPT), "sigterm",
                             str(tmp_path / "logs")], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("WAITING"):
                break
        proc.send_signal(signal.SIGTERM)  # hydra forwards it to the ranks, as scancel signals every task
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 143
    (job_dir,) = (tmp_path / "logs").iterdir()
    assert_every_rank_ended_with(job_dir, 2, 143)


@pytest.mark.slow
def test_exit_false_returns_none_after_the_cluster_stopped_and_mpi_goes_on(tmp_path):
    result, job_dir = run_script(tmp_path, "exit-false")
    assert result.returncode == 0, result.stderr
    assert "RANK 1: init returned None" in result.stdout
    # An allreduce over both ranks after rank 0's mpiray.shutdown(): MPI is still usable.
    assert result.stdout.count("MPI after the cluster, allreduce 1") == 2
    assert "pending" not in result.stderr  # no MPICH complaint about leaked communicators
    assert_every_rank_ended_with(job_dir, 2, 0)


@pytest.mark.slow
def test_the_context_manager_stops_the_cluster_when_the_block_ends(tmp_path):
    result, job_dir = run_script(tmp_path, "context")
    assert result.returncode == 0, result.stderr
    assert connected(result.stdout)["ran_on"] == 2
    for rank, info in ((0, "set"), (1, "None")):
        assert f"RANK {rank}: in the block, info {info}" in result.stdout
        assert f"RANK {rank}: after the block" in result.stdout
    assert_every_rank_ended_with(job_dir, 2, 0)


@pytest.mark.slow
def test_without_an_mpi_launcher_it_is_a_safe_one_node_cluster(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    result = subprocess.run([sys.executable, str(SCRIPT), "ok", str(tmp_path / "logs")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(home)})
    assert result.returncode == 0, result.stderr
    seen = connected(result.stdout)
    assert seen["nodes"] == 1 and seen["initialized"]
    assert re.search(r"/mpiray-\d+-r0-\w{6}/auth_token$", seen["token"])  # a private dir, gone now
    assert not os.path.exists(seen["token"]) and not (home / ".ray").exists()
    (job_dir,) = (tmp_path / "logs").iterdir()
    assert_every_rank_ended_with(job_dir, 1, 0)


@pytest.mark.slow
def test_waiting_ranks_sleep_while_the_users_code_runs(tmp_path):
    proc = subprocess.Popen([str(BIN / "mpirun"), "-np", "2", sys.executable, str(SCRIPT), "sigterm",
                             str(tmp_path / "logs")], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("WAITING"):
                break
        (job_dir,) = (tmp_path / "logs").iterdir()
        pid = int(re.search(r"\(pid (\d+)\): rank 1 of 2", (job_dir / "rank-0001.log").read_text()).group(1))
        rank1 = psutil.Process(pid)
        before = sum(rank1.cpu_times()[:2])
        time.sleep(3)
        used = sum(rank1.cpu_times()[:2]) - before
        assert used < 0.3, f"rank 1 used {used:.2f} s of CPU in 3 s while rank 0's script ran"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
