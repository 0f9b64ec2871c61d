"""The processes a test or a benchmark started: which are still alive, ending them, and waiting with a deadline.

Shared by the tests (helpers.py, conftest.py) and the benchmarks (tests/benchmarks/), so that both keep
one set of rules: a process is ended by its PID, or by the process group of a child started in a session
of its own (start_new_session=True), never found by name; every wait has a deadline (mpiray.deadline's
one polling loop); a process SIGKILL cannot end within its deadline is an error, not a silent pass.
Only psutil and mpiray.deadline: the benchmarks import it outside pytest, under any of the tests' Pythons.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

import psutil

from mpiray.deadline import Deadline, poll_until

T = TypeVar("T")
KILL_WAIT_S = 10.0  # the most a SIGKILLed process may take to go (one stuck in the kernel may never go)


def wait_for(ready: Callable[[], T], timeout: float, interval: float = 0.2) -> T | None:
    """ready()'s first true value, polled every interval seconds, or None once timeout seconds have passed
    (ready() runs at least once, even with timeout 0). The caller says what it waited for when it fails."""
    return poll_until(ready, Deadline.after(timeout), interval)


def alive(proc: psutil.Process) -> bool:
    """Still running: an exited process that nobody has reaped yet (a zombie) is not."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def alive_pids(pids: Iterable[int]) -> list[str]:
    """Those of pids still alive, each as 'PID command line' (for a message)."""
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if alive(proc):
                found.append(f"{pid} {' '.join(proc.cmdline())[:100]}")
        except psutil.Error:
            pass
    return found


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    """Each process as 'PID command line' (for a message or a report)."""
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            out.append(f"{proc.pid} (gone)")
    return out


def descendants(before: Iterable[int] = ()) -> list[psutil.Process]:
    """This process's live descendants, but those whose PIDs are in before (what was there already)."""
    before = set(before)
    try:
        return [proc for proc in psutil.Process().children(recursive=True) if proc.pid not in before and alive(proc)]
    except psutil.Error:
        return []


@dataclass(frozen=True)
class Stopped:
    """What terminate() did: how many processes it ended, how many needed SIGKILL, in how long."""

    stopped: int
    killed: int
    seconds: float


def terminate(procs: list[psutil.Process], grace: float, interval: float = 0.05) -> Stopped:
    """SIGTERM to each of procs (processes the caller started, by PID), up to grace seconds for them to go,
    then SIGKILL to those left. Raises RuntimeError where one survives SIGKILL for KILL_WAIT_S."""
    started = time.monotonic()
    for proc in procs:
        _signal(proc, signal.SIGTERM)

    def gone() -> bool:
        return not any(alive(proc) for proc in procs)

    left: list[psutil.Process] = []
    if not wait_for(gone, grace, interval):
        left = [proc for proc in procs if alive(proc)]
        for proc in left:
            _signal(proc, signal.SIGKILL)
        if not wait_for(gone, KILL_WAIT_S, interval):
            raise RuntimeError(f"processes survive SIGKILL: {describe(p for p in procs if alive(p))}")
    return Stopped(stopped=len(procs), killed=len(left), seconds=round(time.monotonic() - started, 2))


def end_group(proc: subprocess.Popen, grace: float) -> int | None:
    """End a child started in a session of its own (start_new_session=True) and what it started in its group:
    SIGTERM to the group, up to grace seconds for the child and the group to go, then SIGKILL to the group.
    Returns the child's exit status (None: even SIGKILL did not end it within KILL_WAIT_S)."""
    for signum, within in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT_S)):
        if proc.poll() is not None and not group_alive(proc.pid):
            break
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        if wait_for(lambda: proc.poll() is not None and not group_alive(proc.pid), within):
            break
    try:
        return proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


def group_alive(pgid: int) -> bool:
    """Whether a live process is still in process group pgid (one of ours: its leader was our child)."""
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and alive(proc):
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _signal(proc: psutil.Process, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except psutil.Error:
        pass
