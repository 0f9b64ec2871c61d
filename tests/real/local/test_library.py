"""mpiray.init() in the user's own script, under the real mpirun and as a plain process: every promise of
the command line holds here too (exit codes, --time-limit, a lost head or worker node, SIGTERM)."""

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

import head_loss
from helpers import (
    BIN,
    ROOT,
    Launch,
    alive_pids,
    assert_nothing_left,
    driver_report,
    exit_codes,
    last_event,
    rank_pid,
    tagged_lines,
    wait_for_events,
)
from process_control import wait_for

SCRIPT = ROOT / "tests" / "drivers" / "library_script.py"
STOP_GRACE_S = 30  # --stop-grace's default, as docs/options.md gives it


WRAPPER = ("-m", "mpiray")  # docs/library.md's way: the script inside a wrapper that sees how it ends


def run_script(tmp_path: Path, mode: str, ranks: int = 2, timeout: float = 180,
               wrapper: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, Path]:
    mpirun = [str(BIN / "mpirun"), "-np", str(ranks)] if ranks else []
    result = subprocess.run([*mpirun, sys.executable, *wrapper, str(SCRIPT), mode, str(tmp_path / "logs")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    (job_dir,) = (tmp_path / "logs").iterdir()
    return result, job_dir


def start_script(tmp_path: Path, mode: str, *extra: str, ranks: int = 2, env=None) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "mpirun"), "-np", str(ranks), sys.executable, str(SCRIPT), mode,
                             str(tmp_path / "logs"), *extra], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def read_until(proc: subprocess.Popen, prefix: str) -> None:
    for line in proc.stdout:
        if line.startswith(prefix):
            return
    raise AssertionError(f"the script ended without printing {prefix!r}: {proc.stderr.read()[-3000:]}")


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def job_dir_of(tmp_path: Path) -> Path:
    (job_dir,) = (tmp_path / "logs").iterdir()
    return job_dir


def connected(stdout: str) -> dict:
    """The script connected once, and said what it saw."""
    reports = tagged_lines(stdout, "CONNECTED")
    assert len(reports) == 1, stdout
    return reports[0]


def assert_every_rank_ended_with(job_dir: Path, ranks: int, code: int) -> None:
    assert exit_codes(job_dir, ranks) == [code] * ranks
    assert_nothing_left(Launch(code, "", "", job_dir, 0), wait=5)


# ---- options, as fast unit tests ------------------------------------------------------------












# ---- real runs ------------------------------------------------------------------------------


@pytest.mark.smoke_ray
def test_rank_0_is_connected_to_every_node_and_the_others_never_return(tmp_path):
    result, job_dir = run_script(tmp_path, "ok")
    assert result.returncode == 0, result.stderr
    seen = connected(result.stdout)
    assert seen["initialized"] and seen["nodes"] == 2 and seen["ran_on"] == 2 and seen["ranks"] == [0, 1]
    assert "RANK 0: init returned info" in result.stdout
    assert "RANK 1:" not in result.stdout  # rank 1 served as a Ray node and exited inside init()
    assert not os.path.exists(seen["token"])  # the private dir went with the cluster
    assert last_event(job_dir, 0, "script_ended") == {"code": 0, "how": "the end of the script"}
    assert_every_rank_ended_with(job_dir, 2, 0)


@pytest.mark.parametrize("mode, code, wrapper", [
    pytest.param("exit3", 3, (), marks=pytest.mark.smoke_mpi), ("raise-exit3", 3, ()), ("raise", 1, ()),
    ("swallowed", 0, ()), ("exit3", 3, WRAPPER), ("raise", 1, WRAPPER), ("swallowed", 0, WRAPPER)])
def test_rank_0s_exit_code_is_every_ranks_however_the_script_ends(tmp_path, mode, code, wrapper):
    result, job_dir = run_script(tmp_path, mode, wrapper=wrapper)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("Traceback (most recent call last)") == (1 if mode == "raise" else 0)
    assert "RuntimeError: the user's script failed" in result.stderr or mode != "raise"
    assert last_event(job_dir, 0, "script_ended")["code"] == code
    assert_every_rank_ended_with(job_dir, 2, code)


def test_under_the_wrapper_a_script_that_bound_sys_exit_before_init_keeps_its_own_except_and_code(tmp_path):
    # `from sys import exit` before init(), `except SystemExit:` in the script: python -m mpiray replaces
    # no builtin, so the script catches its own exit(4), and its exit(3) is every rank's code.
    result, job_dir = run_script(tmp_path, "bound-exit", wrapper=WRAPPER)
    assert result.returncode == 3, result.stderr
    assert tagged_lines(result.stdout, "CAUGHT") == [4], result.stdout
    assert last_event(job_dir, 0, "script_ended") == {"code": 3, "how": "SystemExit"}
    assert_every_rank_ended_with(job_dir, 2, 3)


def test_the_wrapper_refuses_a_missing_script_in_one_line_before_mpi(tmp_path):
    result = subprocess.run([sys.executable, *WRAPPER, str(tmp_path / "no_such.py")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"mpiray: error: no script {str(tmp_path / 'no_such.py')!r} to run: "
                                                  "give the path of a Python file (or -m MODULE)"]


@pytest.mark.parametrize("wrapper", [(), WRAPPER], ids=["plain", "wrapped"])
def test_time_limit_stops_the_script_with_124_on_every_rank(tmp_path, wrapper):
    started = time.monotonic()
    # init(time_limit=4, stop_grace=3), then sleep(60)
    result, job_dir = run_script(tmp_path, "time-limit", wrapper=wrapper)
    took = time.monotonic() - started
    assert result.returncode == 124, result.stderr[-3000:]
    assert "SLEEPING" in result.stdout and "SLEPT TO THE END" not in result.stdout
    assert last_event(job_dir, 0, "time_limit") == {"limit": 4.0, "grace": 3.0, "cause": "time_limit"}
    assert last_event(job_dir, 0, "script_ended")["code"] == 124  # it ended when told to (SIGTERM)
    assert took < 60
    assert_every_rank_ended_with(job_dir, 2, 124)


def test_a_script_that_cannot_end_when_told_is_ended_without_it(tmp_path):
    # SIGTERM is blocked in the main thread, as a thread stuck in C code never sees it: after the
    # grace the agent tears down, finalizes MPI and ends the process with 124 itself.
    result, job_dir = run_script(tmp_path, "time-limit-stuck")
    assert result.returncode == 124, result.stderr[-3000:]
    assert "BAD TERMINATION" not in result.stdout + result.stderr
    assert "SLEPT TO THE END" not in result.stdout
    assert last_event(job_dir, 0, "script_stuck") == {"grace": 3.0}
    assert_every_rank_ended_with(job_dir, 2, 124)


def lose_the_head(tmp_path: Path, mode: str, line: str, *extra: str, then=lambda: None):
    """Start the script in MODE, wait for LINE, SIGKILL the head's GCS, call then(), wait for the end:
    (stdout, stderr, the job dir, seconds from the kill to the end, the exit code). The GCS is not started again
    (MPIRAY_GCS_RESTARTS=0): its death is then the head's loss, as where Ray keeps no GCS store or the restarts
    are spent."""
    proc = start_script(tmp_path, mode, *extra, env={"MPIRAY_GCS_RESTARTS": "0"})
    try:
        read_until(proc, line)
        job_dir = job_dir_of(tmp_path)
        gcs = [pid for pid in last_event(job_dir, 0, "node_pids")["pids"] if psutil.Process(pid).name() == "gcs_server"]
        os.kill(gcs[0], signal.SIGKILL)
        killed = time.monotonic()
        then()
        out, err = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return out, err, job_dir, time.monotonic() - killed, proc.returncode


def test_losing_the_head_ends_every_rank_with_1_and_a_clear_message(tmp_path, pace):
    """The script then submits the first task of a new remote function, whose export waits for the gone GCS inside
    Ray's C++ client: exit code 1 on every rank all the same, as the README promises (not rank 0 SIGKILLed, 9)."""
    marker = tmp_path / "go"
    out, err, job_dir, took, code = lose_the_head(tmp_path, "wait-then-ray", "WAITING", str(marker), then=marker.touch)
    print(f"head's GCS killed -> every rank ended: {took:.1f} s")
    assert code == 1, err[-3000:]
    # The stop grace (30 s by default) and a teardown at this machine's pace; Ray's own core worker would take 60 s.
    assert took < STOP_GRACE_S + pace.deadline(), took
    assert "RAY ANSWERED" not in out
    assert last_event(job_dir, 0, "head_lost")["cause"] == "head_lost"
    assert "the head's Ray node exited" in err  # said at once, on stderr
    assert_every_rank_ended_with(job_dir, 2, 1)


@pytest.mark.parametrize("shape", list(head_loss.SHAPES))
def test_a_head_lost_as_users_lose_it_ends_every_ranks_process_with_1(tmp_path, shape):
    """The user's shape: 3 ranks on one host, the default stop grace, a script (or a command line's driver) that
    SIGKILLs its head's GCS, then calls a remote function defined after it: its export waits for the GCS in Ray's
    C++ client, so mpiray.init()'s rank 0 ends the process without the script. Every rank's process exits with 1 as
    Hydra saw it, not only in its log: rank 0 once left by os._exit before the others, and Hydra's proxy SIGKILLed
    them (mpirun returned 9, or 1 with their statuses set to 0)."""
    outcome = head_loss.under_hydra(shape, tmp_path)
    assert outcome.every_rank_exited_with(1), outcome.describe() + "\n" + outcome.stderr[-3000:]
    assert "KILLED" in outcome.stdout and "ANSWERED" not in outcome.stdout
    assert last_event(outcome.job_dir, 0, "head_lost")["cause"] == "head_lost"
    if shape != "command line":  # the script was stuck, and its process ended without it
        assert last_event(outcome.job_dir, 0, "script_stuck") is not None
    assert_nothing_left(Launch(1, "", "", outcome.job_dir, 0), wait=5)


@pytest.mark.parametrize("mode, line", [("blocked-in-ray", "BLOCKED"), ("blocked-in-c", "SLEEPING")])
def test_losing_the_head_while_the_script_is_blocked_ends_every_rank_with_1(tmp_path, mode, line, pace):
    """The head's GCS killed while the script waits in ray.get(timeout=60), or in code that never returns to
    Python (SIGTERM blocked): exit code 1 on every rank, as the README promises for the loss of the head,
    within the stop grace (here 6-7 s and 11 s), not a SIGKILLed rank 0 (exit 9) or Ray's own 60 s."""
    out, err, job_dir, took, code = lose_the_head(tmp_path, mode, line)
    print(f"{mode}: head's GCS killed -> every rank ended: {took:.1f} s")
    assert code == 1, err[-3000:]
    assert took < STOP_GRACE_S + pace.deadline(), took  # the stop grace and a teardown at this machine's pace
    assert "RAY ANSWERED" not in out and "SLEPT TO THE END" not in out
    assert last_event(job_dir, 0, "head_lost")["cause"] == "head_lost"
    assert_every_rank_ended_with(job_dir, 2, 1)


def test_a_lost_worker_node_is_logged_and_the_script_goes_on(tmp_path):
    marker = tmp_path / "go"
    proc = start_script(tmp_path, "wait-then-ray", str(marker), ranks=3)
    try:
        read_until(proc, "WAITING")
        job_dir = job_dir_of(tmp_path)
        raylet = [pid for pid in last_event(job_dir, 2, "node_pids")["pids"] if psutil.Process(pid).name() == "raylet"]
        os.kill(raylet[0], signal.SIGKILL)
        assert wait_for_events(job_dir / "rank-0000.jsonl", "node_lost", timeout=60)[-1]["peer"] == 2
        marker.touch()
        out, err = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err[-3000:]
    assert "RAY ANSWERED 42" in out  # the cluster's other nodes carried on
    assert_every_rank_ended_with(job_dir, 3, 0)


def test_sigterm_ends_every_rank_with_143(tmp_path):
    proc = start_script(tmp_path, "sigterm")
    try:
        read_until(proc, "WAITING")
        proc.send_signal(signal.SIGTERM)  # hydra forwards it to the ranks, as scancel signals every task
        finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 143
    assert_every_rank_ended_with(job_dir_of(tmp_path), 2, 143)


def paused(pid: int) -> bool:
    """pid's main thread waits in pause() (the kernel's wait channel: x86-64's pause, else rt_sigsuspend)."""
    try:
        channel = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    return "pause" in channel or "sigsuspend" in channel


def sigterm_pending(pid: int) -> bool:
    masks = [int(line.split()[1], 16) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
             if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask & (1 << (signal.SIGTERM - 1)) for mask in masks)


def test_a_stop_signal_during_mpi_finalize_changes_no_ranks_exit_code(tmp_path):
    # srun --kill-on-bad-exit SIGTERMs the other tasks once one exits non-zero; those still in
    # MPI_Finalize then died of it (143 instead of the job's 3). Each rank here pauses right before
    # MPI_Finalize, and gets SIGTERM there: it must live on.
    proc = start_script(tmp_path, "finalize-pause")
    try:
        read_until(proc, "EXITING")
        job_dir = job_dir_of(tmp_path)
        for rank in (0, 1):
            wait_for_events(job_dir / f"rank-{rank:04d}.jsonl", "exit", timeout=60)[-1]
        ranks = [rank_pid(job_dir, rank) for rank in (0, 1)]
        assert wait_for(lambda: all(map(paused, ranks)), 60), "the ranks did not reach their exit functions' pause"
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        # Each rank took the signal (no longer pending) and is back in its pause: a SIGTERM that killed it never
        # would be.
        assert wait_for(lambda: all(paused(pid) and not sigterm_pending(pid) for pid in ranks), 30), \
            "a rank died of SIGTERM while in its exit functions"
        assert len(alive_pids(ranks)) == 2
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert exit_codes(job_dir, 2) == [3, 3]


def test_exit_false_returns_none_after_the_cluster_stopped_and_mpi_goes_on(tmp_path):
    result, job_dir = run_script(tmp_path, "exit-false")
    assert result.returncode == 0, result.stderr
    assert "RANK 1: init returned None" in result.stdout
    # An allreduce over both ranks after rank 0's mpiray.shutdown(): MPI is still usable.
    assert result.stdout.count("MPI after the cluster, allreduce 1") == 2
    assert "pending" not in result.stderr  # no MPICH complaint about leaked communicators
    assert_every_rank_ended_with(job_dir, 2, 0)


@pytest.mark.parametrize("wrapper", [(), WRAPPER], ids=["plain", "wrapped"])
def test_a_cluster_that_did_not_start_is_a_launch_error_with_rank_0s_reason_and_cause(tmp_path, wrapper):
    # The script catches the LaunchError and exits 0: its code, not the launch's, under the wrapper too.
    result, job_dir = run_script(tmp_path, "port-in-use", ranks=0, wrapper=wrapper)
    assert result.returncode == 0, result.stderr
    refused = driver_report(result.stdout, "REFUSED", result.stderr)
    assert (refused["code"], refused["cause"]) == (2, "port_in_use")
    assert refused["message"].startswith("the Ray cluster did not start: --port ")
    assert "is already in use" in refused["message"]
    assert_every_rank_ended_with(job_dir, 1, 2)


def test_the_context_manager_stops_the_cluster_when_the_block_ends(tmp_path):
    result, job_dir = run_script(tmp_path, "context")
    assert result.returncode == 0, result.stderr
    assert connected(result.stdout)["ran_on"] == 2
    for rank, info in ((0, "set"), (1, "None")):
        assert f"RANK {rank}: in the block, info {info}" in result.stdout
        assert f"RANK {rank}: after the block" in result.stdout
    assert_every_rank_ended_with(job_dir, 2, 0)


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
    assert_every_rank_ended_with(job_dir_of(tmp_path), 1, 0)


def test_waiting_ranks_sleep_while_the_users_code_runs(tmp_path):
    proc = start_script(tmp_path, "sigterm")
    try:
        read_until(proc, "WAITING")
        job_dir = job_dir_of(tmp_path)
        ranks = [psutil.Process(rank_pid(job_dir, rank)) for rank in (0, 1)]
        before = [sum(rank.cpu_times()[:2]) for rank in ranks]
        time.sleep(3)
        used = [sum(rank.cpu_times()[:2]) - first for rank, first in zip(ranks, before)]
        # Rank 1 serves; rank 0's agent thread watches beside the script (which sleeps here).
        assert all(seconds < 0.3 for seconds in used), f"CPU used in 3 s while rank 0's script ran: {used}"
        proc.send_signal(signal.SIGTERM)
        finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
