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


def ignore_from_now_on() -> None:
    """Stop signals no longer matter: the rank's exit code is decided.

    mpi4py's MPI_Finalize runs at the very end of the interpreter's exit, after Python has put the
    default action back for every signal it handled (not for ignored ones). Under srun
    --kill-on-bad-exit the first rank to exit with a non-zero code gets the others SIGTERMed, and
    one still in MPI_Finalize then died of it: the job's code became 143 instead of the driver's.
    """
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_IGN)
