"""Whether another host is still there, asked with no MPI call: a knock (a TCP connect, closed once answered, never
waited for in the rank's loop) on a port of its Ray every KNOCK_EVERY s. MPI cannot say it: a rank blocked in a call
with a dead host stays blocked, and an MPI that notices aborts the whole job.

Both ends of the job knock. Each worker host's first rank knocks on the head's GCS port (worker.py: the head's host
gone ends every rank with 1); rank 0 knocks on each worker node's raylet port and on each waiting spare host's Beacon
(zero.py: a worker host gone is left out and a spare takes its place; a spare gone is not started).

A knock that is refused is answered: the host's kernel sent it, only the process that listened is gone (a raylet that a
stop signal ended, or one draining; its rank lives and says so, or the launcher sees the rank die). Only a knock that
gets no answer at all counts: none within the knock's time, or the host unreachable (a host powered off, crashed, or
cut off: no packet comes back from it).
"""

from __future__ import annotations

import errno
import select
import socket
import time
from typing import Callable, Protocol

KNOCK_EVERY = 2.0  # seconds between knocks on one port (a knock waits at most this long for its answer)
# Unanswered this long in a row, the host is taken for gone: a host whose kernel runs answers every knock (a GCS
# started again, a raylet that ended: refused), so this is how long its link may drop every packet first.
SILENT_FOR = 10.0
ANSWERS = (0, errno.ECONNREFUSED)  # a connect accepted or refused: the host's kernel sent it


class Answer(Protocol):
    """One knock under way: True once the host answered, False where it cannot be reached, None while neither;
    answered() looks without waiting, wait(timeout) waits up to timeout s."""

    def answered(self) -> bool | None: ...

    def wait(self, timeout: float) -> bool | None: ...

    def close(self) -> None: ...


class Knock:
    """A TCP connect to address ("ip:port") that is never waited for but by wait(): the rank's loop goes on while a
    silent host's SYN goes unanswered (a knock that blocked held rank 0 2 s per dead host, every round). True: the
    host answered (accepted or refused); False: it cannot be reached (no route, host unreachable)."""

    def __init__(self, address: str):
        ip, port = address.rsplit(":", 1)
        family, kind, proto, _, where = socket.getaddrinfo(ip, int(port), type=socket.SOCK_STREAM)[0]
        self._socket = socket.socket(family, kind, proto)
        self._socket.setblocking(False)
        self._error: int | None = self._socket.connect_ex(where)
        if self._error in (errno.EINPROGRESS, errno.EAGAIN):
            self._error = None  # under way

    def answered(self) -> bool | None:
        return self.wait(0)

    def wait(self, timeout: float) -> bool | None:
        if self._error is None and select.select([], [self._socket], [], timeout)[1]:
            self._error = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return None if self._error is None else self._error in ANSWERS

    def close(self) -> None:
        self._socket.close()


class PortWatch:
    """One host's port, knocked on every KNOCK_EVERY s (a Knock, never waited for: silent() only looks); silent() is
    how long it has not answered, once that is SILENT_FOR or more. Judged from its first answer on (accepted or
    refused: a worker's watch on the head), or from the start where its host is known to have been there (armed: a
    raylet whose node was reported ALIVE); a host never heard and not armed is never taken for gone."""

    def __init__(self, address: str, knock: Callable[[str], Answer] = Knock,
                 clock: Callable[[], float] = time.monotonic, *, armed: bool = False):
        self.address = address
        self._knock, self._clock = knock, clock
        self._next = clock()
        self._armed = armed  # it has answered once, or is known to listen
        self._since: float | None = None  # when the unanswered knocks began
        self._out: Answer | None = None  # the knock under way
        self._out_at = 0.0

    def silent(self) -> float | None:
        now = self._clock()
        self._look(now)
        if self._out is None and now >= self._next:
            self._next = now + KNOCK_EVERY
            self._out, self._out_at = self._knock(self.address), now
            self._look(now)  # an answer there at once (a refusal by this host's own kernel)
        if not self._armed or self._since is None:
            return None
        silent = now - self._since
        return silent if silent >= SILENT_FOR else None

    def _look(self, now: float) -> None:
        """The knock under way, judged once answered or KNOCK_EVERY s old (then unanswered); else left to come."""
        if self._out is None:
            return
        answered = self._out.answered()
        if answered is None and now - self._out_at < KNOCK_EVERY:
            return
        self._out.close()
        self._out = None
        if answered:
            self._armed, self._since = True, None
        elif self._armed and self._since is None:
            self._since = self._out_at

    def answers_now(self) -> bool:
        """One knock now, out of turn, waited for (KNOCK_EVERY s at most): False where a port that answered before
        does not (however short its silence), before a message that would go to its host: MPICH's send to a rank
        whose host is gone was seen to spin in MPI_Isend for good."""
        knock = self._knock(self.address)
        try:
            if knock.wait(KNOCK_EVERY):
                return True
        finally:
            knock.close()
        return not self._armed

    def silence(self) -> float:
        """Seconds since the unanswered knocks began (0: none so far)."""
        return 0.0 if self._since is None else self._clock() - self._since

    def close(self) -> None:
        """Close the knock under way, if one is."""
        if self._out is not None:
            self._out.close()
            self._out = None


class Beacon:
    """A port for rank 0 to knock on where a host has no Ray node yet (a spare that waits): a listening socket whose
    knocks are taken off its queue (take()) as the rank's wait loop goes round, so that the queue never fills."""

    def __init__(self, ip: str):
        self._socket = socket.create_server((ip, 0), backlog=64)
        self._socket.setblocking(False)
        self.ip, self.port = ip, self._socket.getsockname()[1]

    def take(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # BlockingIOError: none waiting
                return
            connection.close()

    def close(self) -> None:
        self._socket.close()
