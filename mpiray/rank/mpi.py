"""MPI messaging that never spins a core.

A rank blocked in an MPICH collective burns a whole CPU (measured: 4.1 s of CPU in a 4 s wait), which
the Ray nodes on the same host need. So every wait here polls a non-blocking request or probe and
sleeps between polls.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from array import array
from typing import Any, Callable, Container

from mpi4py import MPI

from mpiray.batch import pmi
from mpiray.deadline import Deadline, poll_until
from mpiray.rank.messages import Message


class Comm:
    """A communicator with polled, non-blocking point-to-point helpers."""

    def __init__(self, comm: MPI.Comm | None = None, poll_interval: float = 0.05):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.poll_interval = poll_interval
        self._pending: list[MPI.Request] = []
        self.sent = self.received = 0  # messages, for the log: O(N) at rank 0, O(1) at a worker
        self._pmi = pmi.hydra_socket(os.environ)  # MPICH's PMI connection to Hydra, as after MPI_Init

    def send(self, obj: Any, dest: int, tag: int) -> None:
        self.sent += 1
        self._pending.append(self.comm.isend(obj, dest=dest, tag=tag))
        self._pending = [req for req in self._pending if not req.Test()]

    def progress(self) -> None:
        """Let MPI move what this rank sent: waits call it between polls. A send whose request already
        completed may still sit in the netmod's queue (MPICH over ofi), so a probe drives the progress
        engine too; it receives nothing."""
        self._pending = [req for req in self._pending if not req.Test()]
        self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)

    def send_to_others(self, obj: Any, tag: int, skip: Container[int] = ()) -> None:
        """obj to every other rank, but those in skip (known gone)."""
        for dest in range(self.size):
            if dest != self.rank and dest not in skip:
                self.send(obj, dest, tag)

    def poll(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> Message | None:
        """One message if one is waiting; else None. Never blocks."""
        status = MPI.Status()
        if not self.comm.iprobe(source=source, tag=tag, status=status):
            return None
        obj = self.comm.recv(source=status.Get_source(), tag=status.Get_tag())
        self.received += 1
        return Message(status.Get_source(), status.Get_tag(), obj)

    def receive(self, source: int, tag: int, deadline: Deadline, between_polls: Callable[[], None] = lambda: None) -> Any | None:
        """The next message from source with tag, or None at the deadline."""
        message = poll_until(lambda: self.poll(source, tag), deadline, self.poll_interval, between_polls)
        return None if message is None else message.payload

    def receive_each(self, sources: list[int], tag: int, deadline: Deadline,
                     between_polls: Callable[[], None] = lambda: None) -> dict[int, Any]:
        """One message with tag from each source, in whatever order they come; those missing at the
        deadline are left out.

        Not one receive() per source in turn: MPICH moves only a few messages out of its shared-memory
        queue per probe, so a probe for one source often misses although its message was sent, and
        each miss would cost a sleep (63 of them took rank 0 2.4 s at 64 ranks on one host).
        """
        wanted, got = set(sources), {}

        def take_all() -> bool:
            while (message := self.poll(tag=tag)) is not None:
                if message.source in wanted:
                    got[message.source] = message.payload
            return wanted <= got.keys()

        poll_until(take_all, deadline, self.poll_interval, between_polls)
        return got

    def count(self, flag: bool, timeout: float) -> int | None:
        """How many ranks passed flag=True (a collective: every rank calls it); None past the timeout."""
        mine, total = array("i", [int(flag)]), array("i", [0])
        request = self.comm.Iallreduce(mine, total, op=MPI.SUM)
        if not poll_until(request.Test, Deadline.after(timeout), self.poll_interval / 5):
            return None
        return total[0]

    def barrier(self, timeout: float) -> bool:
        """True when every rank arrived within timeout seconds."""
        request = self.comm.Ibarrier()
        # Each of its log2(N) rounds waits for the ranks' next Test: polled more often than messages.
        return bool(poll_until(request.Test, Deadline.after(timeout), self.poll_interval / 5))

    def flush(self, timeout: float) -> None:
        """Wait (polling) until every message this rank sent has left, or the timeout."""

        def sent() -> bool:
            self._pending = [req for req in self._pending if not req.Test()]
            return not self._pending

        poll_until(sent, Deadline.after(timeout), self.poll_interval / 5)

    def drop_pending(self) -> int:
        """Receive and drop the messages that are here now (none waited for); how many. teardown.drain calls it
        after the last barrier, right before finalize(): a rank that stopped on its own error never reads some
        messages meant for it (rank 0's JOIN and CONTROL), and MPICH's MPI_Finalize then fails on MPI_COMM_WORLD
        ("being freed has N unmatched message(s)") before its closing PMI barrier, which every other rank enters
        and never leaves: srun would never return."""
        dropped = 0
        status = MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            size = status.Get_count(MPI.BYTE)  # raw bytes: nothing is unpickled
            self.comm.Recv([bytearray(max(size, 1)), size, MPI.BYTE], status.Get_source(), status.Get_tag())
            dropped += 1
        return dropped

    def split_by_host(self) -> Comm:
        """The ranks sharing this host (MPI shared-memory domain), as a Comm of their own."""
        return Comm(self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank), self.poll_interval)

    @staticmethod
    def library_version() -> str:
        return " ".join(MPI.Get_library_version().strip().splitlines()[0].split())

    @staticmethod
    def abandon(code: int) -> None:
        """Exit with code without MPI_Finalize: after a rank died, its closing PMI barrier would never end.

        Otherwise mpi4py's own MPI_Finalize runs at the very end of the interpreter's exit, as it should:
        a rank then leaves at once (srun --kill-on-bad-exit SIGTERMs those still running when the
        first exits non-zero), and the MPI library's exit handlers run (it unlinks its shared memory).
        """
        _flush()
        os._exit(code)

    def finalize_within(self, seconds: float, code: int) -> None:
        """MPI_Finalize, and Python's exit after it (its threads, its exit handlers), within seconds; else this
        process exits with code from a watchdog thread, past whatever still waits (an MPI_Finalize that never
        returned kept srun from ending: Debian's MPICH over UCX, 3 of 5 full CI runs). Called where the process
        ends, every rank met at the last barrier (else abandon). MPI_Finalize through ctypes: mpi4py's keeps the
        GIL, the watchdog could never run; mpi4py's own at the interpreter's end then finds MPI finalized."""
        _flush()
        threading.Thread(target=_exit_after, args=(seconds, code, self.rank), name="exit-watchdog",
                         daemon=True).start()
        if not MPI.Is_finalized():
            ctypes.CDLL(MPI.__file__).MPI_Finalize()  # the symbol of the MPI library mpi4py's module is linked to

    def exit_now(self, code: int) -> None:
        """MPI_Finalize, then exit with code, from a thread of mpiray.init()'s rank 0 whose main thread (the user's
        script) is stuck, or from its exit hook where Ray's own would hang: os._exit, past every exit handler, so
        first the PMI finalize that MPICH would send from one (batch/pmi.py), else Hydra takes this exit for a crash
        and SIGKILLs the ranks of the host still on their way out. Without MPI_Finalize, mpirun would report this
        rank as killed."""
        _flush()
        if not MPI.Is_finalized():
            MPI.Finalize()
        pmi.finalize(self._pmi)
        os._exit(code)


def _exit_after(seconds: float, code: int, rank: int) -> None:
    time.sleep(seconds)
    print(f"mpiray: rank {rank}: MPI_Finalize and this process's exit did not end within {seconds:g} s: "
          f"exiting with the job's code {code} without waiting for them", file=sys.stderr)
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass

