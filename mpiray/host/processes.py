"""Start children that cannot outlive this rank, and stop exactly the processes this rank started.

Nothing here finds processes by name: a rank stops its own descendants only. Two kernel features
keep that set complete:
- PR_SET_CHILD_SUBREAPER on the rank: when a Ray process dies, its orphans (raylet's agents) are
  re-parented to the rank instead of init, so they stay in the rank's process tree.
- PR_SET_PDEATHSIG on each child: if the rank itself is SIGKILLed (e.g. by mpirun after another
  rank failed), `ray start --block` dies too and Ray's own fate-sharing takes its children down.
Ray's agents are the exception: raylet starts them without fate-sharing, and one that is still
starting when raylet dies hangs for a minute or more. So a Guard (guard.py), a small process outside
the rank's tree of signals, SIGKILLs the node's process group if the rank dies without releasing it,
and removes the rank's private dir.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Mapping, Sequence

from mpiray.deadline import Deadline, poll_until
from mpiray.host import guard

if TYPE_CHECKING:
    import psutil

KILL_WAIT = 10.0  # the most teardown waits for SIGKILLed processes to be gone
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _in_child(affinity: Sequence[int]) -> Callable[[], None]:
    """What runs in the child between fork and exec: die with us; keep to these CPUs, if any."""
    def setup() -> None:
        _die_with_parent()
        if affinity:
            try:
                os.sched_setaffinity(0, affinity)  # inherited by everything the child starts
            except OSError:  # e.g. a cpuset narrower than the rank's mask: run where the rank may
                pass
    return setup


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: IO | int | None = None,
    stderr: IO | int | None = None,
    stdin: IO | int | None = subprocess.DEVNULL,
    cwd: str | None = None,
    affinity: Sequence[int] = (),
) -> subprocess.Popen:
    """Start argv in a session of its own (our signals are ours to forward) that dies with us,
    on the CPUs in affinity if given."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_in_child(affinity),
    )


# Run by its path, isolated (-I -S): no package can be found by name there (package.py).
GUARD_SCRIPT = str(Path(__file__).with_name("guard.py"))


class Guard:
    """Runs guard.py: if this rank dies before release(), the node's process group is SIGKILLed and
    the rank's private dir removed (after keeping Ray's logs)."""

    def __init__(self, private_dir: Path, kept_logs: Path):
        # Its own session, no PDEATHSIG: it must outlive the rank. Its output goes nowhere: a
        # process still writing to srun's pipes would hold the job step open.
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", GUARD_SCRIPT, str(private_dir), str(kept_logs)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def watch_group(self, leader: subprocess.Popen) -> None:
        """The group to kill if the rank dies: leader's, named with its start time (ids are recycled)."""
        self._say(f"group {leader.pid} {guard.start_time(leader.pid)}")

    def spill_dir(self, path: Path, node_id: str | None) -> None:
        """The job's spill dir on this host and this rank's node's id in it (None before it is known): if the
        rank dies, the node's spilled objects go, and the dir once no node's are left (guard.remove_spilled)."""
        self._say(f"spill {node_id or '-'} {path}")

    def remove_container(self, argv: list[str], monitor_pidfile: Path | None = None) -> None:
        """If the rank dies: argv removes a container by name (podman's outlives a killed client), and what is
        left of its monitor (guard.kill_monitor) goes by the PID in monitor_pidfile."""
        self._say(f"remove {monitor_pidfile or '-'} {shlex.join(argv)}")

    def release(self, timeout: float = 5.0) -> None:
        """This rank tidied up itself: the guard exits without touching anything."""
        self._say("done")
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def _say(self, line: str) -> None:
        if self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(f"{line}\n".encode())
            self.proc.stdin.flush()
        except OSError:  # it died: nothing to tell it any more
            pass


def signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def stop_group(proc: subprocess.Popen, grace: float, killed_within: float = KILL_WAIT) -> int | None:
    """SIGTERM the child's process group, wait up to grace, then SIGKILL. Returns its exit status
    (None if even SIGKILL did not end it within killed_within s: stuck in the kernel, e.g. on NFS)."""
    if proc.poll() is None:
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
    try:
        return proc.wait(timeout=killed_within)
    except subprocess.TimeoutExpired:
        return None


def exit_code(returncode: int) -> int:
    """A child's status as a shell reports it: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class StopReport:
    pids: tuple[int, ...]  # every process this rank still had when teardown began
    killed: int  # processes that needed SIGKILL
    seconds: float


def _descendants(keep: frozenset[int] = frozenset()) -> list[psutil.Process]:
    import psutil  # at its first use: a rank's start (a dry run's) needs none of it

    try:
        return [proc for proc in psutil.Process().children(recursive=True) if proc.pid not in keep]
    except psutil.Error:
        return []


def descendant_pids(keep: frozenset[int] = frozenset()) -> list[int]:
    """This process's living descendants, but for those in keep."""
    return sorted(proc.pid for proc in _alive(_descendants(keep)))


def listening_ports(pids) -> dict[str, list[int]]:
    """The TCP ports these processes listen on, by process name ('raylet': [25201, 25202], ...)."""
    import psutil

    found: dict[str, set[int]] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            ports = {c.laddr.port for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
            if ports:
                found.setdefault(proc.name(), set()).update(ports)
        except psutil.Error:  # gone meanwhile
            continue
    return {name: sorted(ports) for name, ports in sorted(found.items())}


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
    import psutil

    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            pass
    return alive


def _send(procs: list[psutil.Process], signum: int) -> None:
    import psutil

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
    import psutil

    started = time.monotonic()
    deadline = Deadline.after(grace)
    seen = {proc.pid for proc in _alive(_descendants(keep))}
    signalled = {proc.pid for proc in roots if proc.poll() is None}
    for proc in roots:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    poll_until(lambda: all(proc.poll() is not None for proc in roots), deadline, poll)
    # Whatever is left (orphans, stragglers): SIGTERM, then SIGKILL at the deadline.
    while True:
        _reap_zombies()
        alive = _alive(_descendants(keep))
        new = [proc for proc in alive if proc.pid not in signalled]
        _send(new, signal.SIGTERM)
        signalled.update(proc.pid for proc in new)
        seen.update(proc.pid for proc in new)
        if not alive or deadline.expired():
            break
        time.sleep(poll)
    killed = 0
    killing = Deadline.after(KILL_WAIT)  # a process stuck in the kernel (D state) may never go: move on
    while not killing.expired():  # processes started while we kill are killed too
        alive = _alive(_descendants(keep))
        if not alive:
            break
        killed += len(alive)
        seen.update(proc.pid for proc in alive)
        _send(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=min(1.0, killing.remaining()))
        _reap_zombies()
    return StopReport(tuple(sorted(seen)), killed, time.monotonic() - started)
