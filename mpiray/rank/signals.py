"""SIGTERM/SIGINT/SIGHUP become a flag that the launcher's wait loops check."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any, Callable, Union

from mpiray.errors import Interrupted

Handler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]  # as signal.signal() takes

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequest:
    """Remembers the first stop signal; wait loops call check() between polls."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, Handler] = {}  # the handlers install() replaced

    def install(self) -> None:
        """From the main thread (only it may set signal handlers)."""
        for signum in HANDLED:
            self._before[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def raise_if_signalled(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)

    def release(self, process_ends: bool) -> None:
        """The rank's exit code is decided: ignore stop signals from now on if the process ends now,
        else (the program goes on, e.g. after mpiray.init(exit=False)) put back what was there before."""
        if not self._before:
            return  # installed by someone else (mpiray.init()'s rank 0), or not at all (tests)
        if process_ends:
            ignore_from_now_on()
        else:
            for signum, handler in self._before.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._before.clear()


def ignore_from_now_on() -> None:
    """Stop signals no longer matter: the rank's exit code is decided.

    mpi4py's MPI_Finalize runs at the very end of the interpreter's exit, after Python has put the
    default action back for every signal it handled (not for ignored ones). Under srun
    --kill-on-bad-exit the first rank to exit with a non-zero code gets the others SIGTERMed, and
    one still in MPI_Finalize then died of it: the job's code became 143 instead of the driver's.
    """
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_IGN)
