"""Start children that cannot outlive this rank, and stop exactly the processes this rank started.

Nothing here finds processes by name: a rank stops its own descendants only. Two kernel features
keep that set complete:
- PR_SET_CHILD_SUBREAPER on the rank: when a Ray process dies, its orphans (raylet's agents) are
  re-parented to the rank instead of init, so they stay in the rank's process tree.
- PR_SET_PDEATHSIG on each child: if the rank itself is SIGKILLed (e.g. by mpirun after another
  rank failed), `ray start --block` dies too and Ray's own fate-sharing takes its children down.
Ray's agents are the exception: raylet starts them without fate-sharing, and one that is still
starting when raylet dies hangs for a minute or more. So a GroupGuard, a small process outside the
rank's tree of signals, SIGKILLs the node's process group if the rank dies without releasing it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Mapping, Sequence

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: IO | int | None = None,
    stderr: IO | int | None = None,
    stdin: IO | int | None = subprocess.DEVNULL,
    cwd: str | None = None,
) -> subprocess.Popen:
    """Start argv in a session of its own (our signals are ours to forward) that dies with us."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


# Waits for a line on stdin: "done" means the rank stopped the group itself; end of file means the
# rank died (every copy of the pipe's write end is gone), so the group is killed. While any of the
# group's processes lives, the kernel does not reuse its id.
_GUARD = """# mpiray: SIGKILL this process group if its launcher rank dies
import os, signal, sys
if sys.stdin.readline().strip() != "done":
    try:
        os.killpg(int(sys.argv[1]), signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


class GroupGuard:
    """SIGKILLs the process group of leader if this process dies before release()."""

    def __init__(self, leader: subprocess.Popen):
        # Its own session (mpirun and srun signal the rank's), no PDEATHSIG: it must outlive the rank.
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD, str(leader.pid)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        )

    def release(self, timeout: float = 5.0) -> None:
        """This rank stopped the group itself: the guard exits without killing anything."""
        try:
            self.proc.stdin.write(b"done\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def stop_group(proc: subprocess.Popen, grace: float) -> int:
    """SIGTERM the child's process group, wait up to grace, then SIGKILL. Returns its exit status."""
    if proc.poll() is None:
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
    return proc.wait()


def exit_code(returncode: int) -> int:
    """A child's status as a shell reports it: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class StopReport:
    pids: tuple[int, ...]  # every process this rank still had when teardown began
    killed: int  # processes that needed SIGKILL
    seconds: float


def _descendants(keep: frozenset[int] = frozenset()) -> list[psutil.Process]:
    try:
        return [proc for proc in psutil.Process().children(recursive=True) if proc.pid not in keep]
    except psutil.Error:
        return []


def descendant_pids(keep: frozenset[int] = frozenset()) -> list[int]:
    """This process's living descendants, but for those in keep."""
    return sorted(proc.pid for proc in _alive(_descendants(keep)))


def _reap_zombies() -> None:
    # Orphans re-parented to this subreaper are ours to wait for.
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            pass
    return alive


def _send(procs: list[psutil.Process], signum: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(signum)
        except psutil.Error:
            pass


def stop_descendants(
    roots: Sequence[subprocess.Popen], grace: float, poll: float = 0.05, keep: frozenset[int] = frozenset()
) -> StopReport:
    """End every process below this one but those in keep, roots first, within grace seconds, then SIGKILL.

    Only the roots get SIGTERM at first: `ray start --block` then shuts its node down in order
    (~1 s), whereas raylet hangs for over 15 s once its agents were signalled before it.
    Call only once no child's exit status is still needed (it reaps whatever has exited).
    """
    started = time.monotonic()
    deadline = started + grace
    seen = {proc.pid for proc in _alive(_descendants(keep))}
    signalled = {proc.pid for proc in roots if proc.poll() is None}
    for proc in roots:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    while any(proc.poll() is None for proc in roots) and time.monotonic() < deadline:
        time.sleep(poll)
    # Whatever is left (orphans, stragglers): SIGTERM, then SIGKILL at the deadline.
    while True:
        _reap_zombies()
        alive = _alive(_descendants(keep))
        new = [proc for proc in alive if proc.pid not in signalled]
        _send(new, signal.SIGTERM)
        signalled.update(proc.pid for proc in new)
        seen.update(proc.pid for proc in new)
        if not alive or time.monotonic() >= max(deadline, started + min(grace, 1.0)):
            break
        time.sleep(poll)
    killed = 0
    for _ in range(100):  # processes started while we kill are killed too
        alive = _alive(_descendants(keep))
        if not alive:
            break
        killed += len(alive)
        seen.update(proc.pid for proc in alive)
        _send(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=1)
        _reap_zombies()
    return StopReport(tuple(sorted(seen)), killed, time.monotonic() - started)
