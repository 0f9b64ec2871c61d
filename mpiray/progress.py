"""Rank 0's live start-up line on a terminal: `mpiray: 12/24 ranks ready, 8 joining (6.1 s)`.

One line redrawn in place (carriage return, erase to end of line) while the workers join, erased
before the cluster table. Only on a terminal: a batch job's output stays line-oriented.

It goes to stdout, where the cluster table follows it (on stderr, the launcher could interleave the
two streams). Under mpirun a rank's stdout is a pipe that the launcher copies to its own stdout, so
rank 0 looks for a terminal there: its own stdout, or the stdout of the launcher (mpirun, mpiexec,
prterun) among its ancestors on this host. srun keeps ranks away from its terminal unless `srun --pty`
gives them one.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

# The launchers whose stdout a rank's stdout is copied to (MPICH's Hydra, Open MPI's PRRTE, Intel MPI).
LAUNCHERS = {"mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "prte", "mpiexec.prte"}
ANCESTORS = 5  # rank -> hydra_pmi_proxy -> mpiexec: a few levels are enough
REDRAW = 0.5  # seconds between redraws when nothing changed but the clock


def _is_terminal(path: str) -> bool:
    return path.startswith(("/dev/pts/", "/dev/tty")) and path != "/dev/tty"


def launcher_terminal(pid: int | None = None) -> bool:
    """Whether a launcher among this process's ancestors writes its stdout to a terminal."""
    try:
        import psutil  # rank 0 only: not on every rank's import path
    except ImportError:
        return False
    try:
        process = psutil.Process(pid)
        for _ in range(ANCESTORS):
            process = process.parent()
            if process is None:
                return False
            if process.name() in LAUNCHERS:
                return _is_terminal(os.readlink(f"/proc/{process.pid}/fd/1"))
    except (OSError, psutil.Error):  # another user's process, or gone
        return False
    return False


def terminal(setting: str, stream: TextIO | None = None) -> TextIO | None:
    """Where the live line goes (None: nowhere), for --progress auto|on|off."""
    stream = sys.stdout if stream is None else stream
    if setting == "off":
        return None
    if setting == "on":
        return stream
    if os.environ.get("TERM") == "dumb":  # a terminal that cannot go back to the line's start
        return None
    try:
        if stream.isatty() or launcher_terminal():
            return stream
    except (AttributeError, ValueError):  # a closed or odd stream
        return None
    return None


class Progress:
    """The live line: update() as nodes join, close() erases it (both do nothing without a terminal)."""

    def __init__(self, stream: TextIO | None, total: int, started: float):
        self.stream, self.total, self.started = stream, total, started
        self.shown: tuple | None = None
        self.drawn_at = 0.0

    def update(self, ready: int, joining: int) -> None:
        """ready: ranks whose node is ALIVE (or that are idle by design); joining: ranks in `ray start`."""
        if self.stream is None:
            return
        now = time.time()
        if (ready, joining) == self.shown and now - self.drawn_at < REDRAW:
            return
        line = f"mpiray: {ready}/{self.total} ranks ready"
        if joining:
            line += f", {joining} joining"
        self._write(f"\r{line} ({now - self.started:.1f} s)\x1b[K")
        self.shown, self.drawn_at = (ready, joining), now

    def close(self) -> None:
        if self.stream is not None and self.shown is not None:
            self._write("\r\x1b[K")
        self.shown = None

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the job goes on without the line
            self.stream = None
