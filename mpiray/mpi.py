"""MPI messaging that never spins a core.

A rank blocked in an MPICH collective burns a whole CPU (measured: 4.1 s of CPU in a 4 s wait), which
the Ray nodes on the same host need. So every wait here polls a non-blocking request or probe and
sleeps between polls.
"""

from __future__ import annotations

from typing import Any, Callable

from mpi4py import MPI

from mpiray.deadline import Deadline, poll_until

# Message tags of the launcher's protocol (see lifecycle.py).
SESSION = 1  # rank 0 -> all: where the head is, the job id, the token
HELLO = 2  # all -> rank 0: "rank r on host h is alive, its log is at ..."
REPORT = 3  # all -> rank 0: node started and registered (or the error that prevented it)
CONTROL = 4  # rank 0 -> all: "stop now with exit code N"
EVENT = 5  # all -> rank 0: something happened after startup (e.g. this rank's Ray node died)
LOCAL = 6  # within one host: resource and port split
HEAD_UP = 7  # rank 0 -> all: the head is ALIVE, workers may let their `ray start` go
SETTLED = 8  # all -> rank 0: this rank's `ray start` is done starting (the head may stop now)


class Comm:
    """A communicator with polled, non-blocking point-to-point helpers."""

    def __init__(self, comm: MPI.Comm | None = None, poll_interval: float = 0.05):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.poll_interval = poll_interval
        self._pending: list[MPI.Request] = []

    def send(self, obj: Any, dest: int, tag: int) -> None:
        self._pending.append(self.comm.isend(obj, dest=dest, tag=tag))
        self._pending = [req for req in self._pending if not req.Test()]

    def send_to_others(self, obj: Any, tag: int) -> None:
        for dest in range(self.size):
            if dest != self.rank:
                self.send(obj, dest, tag)

    def poll(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> tuple[int, int, Any] | None:
        """One message if one is waiting: (source, tag, obj); else None. Never blocks."""
        status = MPI.Status()
        if not self.comm.iprobe(source=source, tag=tag, status=status):
            return None
        obj = self.comm.recv(source=status.Get_source(), tag=status.Get_tag())
        return status.Get_source(), status.Get_tag(), obj

    def receive(self, source: int, tag: int, deadline: Deadline, between_polls: Callable[[], None] = lambda: None) -> Any | None:
        """The next message from source with tag, or None at the deadline."""
        message = poll_until(lambda: self.poll(source, tag), deadline, self.poll_interval, between_polls)
        return None if message is None else message[2]

    def barrier(self, timeout: float) -> bool:
        """True when every rank arrived within timeout seconds."""
        request = self.comm.Ibarrier()
        return bool(poll_until(request.Test, Deadline.after(timeout), self.poll_interval))

    def flush(self, timeout: float) -> None:
        """Wait (polling) until every message this rank sent has left, or the timeout."""

        def sent() -> bool:
            self._pending = [req for req in self._pending if not req.Test()]
            return not self._pending

        poll_until(sent, Deadline.after(timeout), self.poll_interval / 5)

    def split_by_host(self) -> Comm:
        """The ranks sharing this host (MPI shared-memory domain), as a Comm of their own."""
        return Comm(self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank), self.poll_interval)


def library_version() -> str:
    return MPI.Get_library_version().strip().splitlines()[0].strip()

