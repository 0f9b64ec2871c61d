"""SIGTERM/SIGINT/SIGHUP become a flag that the launcher's wait loops check."""

from __future__ import annotations

import signal

from mpiray.errors import Interrupted

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequest:
    """Remembers the first stop signal; wait loops call check() between polls."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> None:
        for signum in HANDLED:
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)
