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
        process: psutil.Process | None = psutil.Process(pid)
        for _ in range(ANCESTORS):
            process = process.parent() if process is not None else None
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
    """The live line, drawn from rank 0's start-up events (RankLog listener); close() erases it. Nothing
    is drawn without a terminal."""

    def __init__(self, stream: TextIO | None, total: int, started: float, ready: int = 1):
        self.stream, self.total, self.started = stream, total, started
        self.ready = ready  # ranks whose node is ALIVE (the head, when this starts) or that idle by design
        self.joining: set[int] = set()  # ranks holding a join slot
        self.shown: tuple | None = None
        self.drawn_at = 0.0

    def on_event(self, record: dict) -> None:
        name, peer = record["event"], record["fields"].get("peer")
        if name == "join_granted":
            self.joining.add(peer)
        elif name in ("worker_joined", "worker_idle"):
            self.ready += 1
            self.joining.discard(peer)
        else:
            return
        self.tick()

    def tick(self) -> None:
        """Redraw if anything changed, or the clock every REDRAW seconds."""
        if self.stream is None:
            return
        now = time.time()
        state = (self.ready, len(self.joining))
        if state == self.shown and now - self.drawn_at < REDRAW:
            return
        line = f"mpiray: {self.ready}/{self.total} ranks ready"
        if self.joining:
            line += f", {len(self.joining)} joining"
        self._write(f"\r{line} ({now - self.started:.1f} s)\x1b[K")
        self.shown, self.drawn_at = state, now

    def close(self) -> None:
        if self.stream is not None and self.shown is not None:
            self._write("\r\x1b[K")
        self.shown = None

    def _write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: the job goes on without the line
            self.stream = None
