"""Whether another host is still there, asked with no MPI call: a knock (a TCP connect, closed at once) on a port of its
Ray every KNOCK_EVERY s. MPI cannot say it: a rank blocked in a call with a dead host stays blocked, and an MPI
that notices aborts the whole job.

Both ends of the job knock. Each worker host's first rank knocks on the head's GCS port (worker.py: the head's host
gone ends every rank with 1); rank 0 knocks on each worker node's raylet port and on each waiting spare host's Beacon
(zero.py: a worker host gone is left out and a spare takes its place; a spare gone is not started).

A knock that is refused is answered: the host's kernel sent it, only the process that listened is gone (a raylet that a
stop signal ended, or one draining; its rank lives and says so, or the launcher sees the rank die). Only a knock that
gets no answer at all counts: none within the knock's time, or the host unreachable (a host powered off, crashed, or
cut off: no packet comes back from it).
"""

from __future__ import annotations

import socket
import time
from typing import Callable

from mpiray.host.network import connects

KNOCK_EVERY = 2.0  # seconds between knocks on one port (a knock waits at most this long for its answer)
# Unanswered this long in a row, the host is taken for gone: a host whose kernel runs answers every knock (a GCS
# started again, a raylet that ended: refused), so this is how long its link may drop every packet first.
SILENT_FOR = 10.0


def host_answers(address: str, timeout: float) -> bool:
    """Whether the host at address ("ip:port") answers a connect within timeout s: it accepts, or refuses (its
    kernel is there). A timeout, or no route to it, is no answer."""
    return connects(address, timeout, refused=True)


class PortWatch:
    """One host's port, knocked on every KNOCK_EVERY s; silent() is how long it has not answered, once that is
    SILENT_FOR or more. Judged from its first answer on (accepted or refused: a worker's watch on the head), or from
    the start where its host is known to have been there (armed: a raylet whose node was reported ALIVE); a host
    never heard and not armed is never taken for gone."""

    def __init__(self, address: str, answers: Callable[[str, float], bool] = host_answers,
                 clock: Callable[[], float] = time.monotonic, *, armed: bool = False):
        self.address = address
        self._answers, self._clock = answers, clock
        self._next = clock()
        self._armed = armed  # it has answered once, or is known to listen
        self._since: float | None = None  # when the unanswered knocks began

    def silent(self) -> float | None:
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + KNOCK_EVERY
        if self._answers(self.address, KNOCK_EVERY):
            self._armed, self._since = True, None
            return None
        if not self._armed:
            return None
        self._since = now if self._since is None else self._since
        silent = self._clock() - self._since
        return silent if silent >= SILENT_FOR else None

    def answers_now(self) -> bool:
        """One knock now, out of turn: False where a port that answered before does not (however short its
        silence), before a message that would go to its host: MPICH's send to a rank whose host is gone was seen
        to spin in MPI_Isend for good."""
        if self._answers(self.address, KNOCK_EVERY):
            return True
        return not self._armed

    def silence(self) -> float:
        """Seconds since the unanswered knocks began (0: none so far)."""
        return 0.0 if self._since is None else self._clock() - self._since


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
