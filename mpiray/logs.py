"""The files of a job's log dir besides the rank logs (events.py): where each lies, opening one safely,
reading what `ray start` writes (NodeOutput), and copying the driver's output (Tee)."""

from __future__ import annotations

import collections
import fcntl
import json
import os
import queue
import stat
import threading
from pathlib import Path
from typing import BinaryIO


def ray_output_path(job_dir: Path, rank: int, prefix: str = "") -> Path:
    """Where the stdout/stderr of this rank's `ray start` go (prefix: a joining job's, see messages.Session)."""
    return job_dir / f"{prefix}rank-{rank:04d}.ray.log"


def ray_session_logs_path(job_dir: Path, rank: int, prefix: str = "") -> Path:
    """Where Ray's own session logs of this rank are kept after teardown."""
    return job_dir / f"{prefix}ray-rank-{rank:04d}"


def open_append(path: Path, text: bool = False):
    """path opened for appending (binary unbuffered, or text line-buffered), never through a symlink nor
    into a FIFO or device (a planted one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_NONBLOCK: opening a FIFO without a reader would block; it is cleared once the file is known regular.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "a", buffering=1) if text else os.fdopen(fd, "ab", buffering=0)


RAY_STARTUP_TIMEOUT = b"timed out during startup"  # ray/_private/node.py: a raylet not registered within 30 s
RAY_STARTED = b"Ray runtime started."  # `ray start` prints it when done starting, ~0.3-0.9 s after ALIVE
ALIVE = b"mpiray-node-alive "  # ray_node.py: "ALIVE {the node's GCS record as JSON}", one write
WATCH_FAILED = b"mpiray-watch-failed "  # ray_node.py: its GCS watch ended without seeing the node
COMPAT = b"mpiray-compat "  # ray_node.py: "KEY note": what this Ray lacks (a raycompat key) and what mpiray does instead


class NodeOutput:
    """What `ray start` (and ray_node.py, and Ray's processes) write to stdout, read through a pipe.

    A thread of the rank copies it into the per-rank file (LOG_DIR/JOB_ID/rank-NNNN.ray.log) and
    keeps the few facts the rank waits for in memory: no rank polls a file (at 1,000 ranks on a
    shared filesystem that would be 50,000 metadata operations a second). ray_node.py's own lines
    are found anywhere in a line: another process writing to the same pipe may have left a line
    unfinished just before them.
    """

    def __init__(self, path: Path):
        self.path, self._pending = path, b""
        self.ray_started = False  # `ray start` said "Ray runtime started."
        self.alive: dict | None = None  # the node's GCS record, once ray_node.py saw it ALIVE
        self.watch_failed: str | None = None  # why ray_node.py stopped watching, if it did
        self.startup_timed_out = False  # Ray gave up waiting for this node to register (GCS overloaded?)
        self.compat: dict[str, str] = {}  # ray_node.py's notes on what this Ray lacks, by raycompat key
        self.closed = threading.Event()  # end of the pipe: every writer is gone
        self.last_lines: collections.deque[str] = collections.deque(maxlen=5)  # for error messages

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next bytes of output; returns the lines they completed."""
        *lines, self._pending = (self._pending + data).split(b"\n")
        for line in lines:
            if line.strip():
                self.last_lines.append(line.decode(errors="replace").strip())
            self.ray_started = self.ray_started or RAY_STARTED in line
            self.startup_timed_out = self.startup_timed_out or RAY_STARTUP_TIMEOUT in line
            if ALIVE in line and self.alive is None:
                self.alive = json.loads(line[line.index(ALIVE) + len(ALIVE):])
            if COMPAT in line:
                key, _, note = line[line.index(COMPAT) + len(COMPAT):].decode(errors="replace").partition(" ")
                self.compat[key] = note
            if WATCH_FAILED in line and self.watch_failed is None:
                self.watch_failed = line[line.index(WATCH_FAILED) + len(WATCH_FAILED):].decode(errors="replace")
        return lines

    def copy(self, pipe: BinaryIO, out: BinaryIO | None) -> threading.Thread:
        """Until the pipe's end: each chunk into out (the per-rank file) and through feed()."""

        def run() -> None:
            nonlocal out
            fd = pipe.fileno()
            while chunk := os.read(fd, 65536):
                if out is not None:
                    try:
                        out.write(chunk)
                    except OSError:  # a full disk costs the file its lines, never the node (it keeps writing)
                        out = None
                self.feed(chunk)
            pipe.close()
            if out is not None:
                out.close()
            self.closed.set()

        thread = threading.Thread(target=run, name="node-output", daemon=True)
        thread.start()
        return thread

    def tail(self, settle: float = 1.0) -> str:
        """The last lines, for a one-line message (waits up to settle s for the writers' last words)."""
        self.closed.wait(settle)
        return " | ".join(self.last_lines) or "(no output)"


class Tee:
    """Copies a child's stdout and stderr to ours and to a log file, line by line.

    The child must never wait on the log: a log write that fails (disk quota) or stalls (a hung
    filesystem) only costs the log its lines. A writer thread takes them from a bounded queue;
    when it is full, lines are dropped from the log (and counted), never from the terminal.
    """

    QUEUE_LINES = 10_000

    def __init__(self, log: BinaryIO | None, name: str, error: str | None = None):
        self.name = name
        self.dropped = 0
        self.error = error
        self._log = log
        self._lines: queue.Queue[bytes | None] = queue.Queue(self.QUEUE_LINES)
        self._pumps: list[threading.Thread] = []
        self._writer = threading.Thread(target=self._write, name="tee-log", daemon=True)
        self._writer.start()

    @classmethod
    def to_file(cls, path: Path) -> Tee:
        try:
            return cls(open_append(path), str(path))
        except OSError as error:
            return cls(None, str(path), f"cannot open {path}: {error}")

    def pump(self, pipe: BinaryIO, target: BinaryIO) -> None:
        thread = threading.Thread(target=self._pump, args=(pipe, target), name="tee-pump", daemon=True)
        thread.start()
        self._pumps.append(thread)

    def _pump(self, pipe: BinaryIO, target: BinaryIO) -> None:
        for line in iter(pipe.readline, b""):
            try:
                self._lines.put_nowait(line)
            except queue.Full:
                self.dropped += 1
            try:
                target.write(line)
                target.flush()
            except OSError:
                pass  # our own stdout is gone (a closed terminal): keep draining the child's pipe
        pipe.close()

    def _write(self) -> None:
        while (line := self._lines.get()) is not None:
            if self._log is None:
                continue
            try:
                self._log.write(line)
            except OSError as error:
                self.error = f"writing {self.name} failed: {error}"
                self._log.close()
                self._log = None

    def close(self, timeout: float) -> None:
        """After the child ended: let the pumps finish, then the writer (each at most timeout s)."""
        for thread in self._pumps:
            thread.join(timeout)
        try:
            self._lines.put(None, timeout=timeout)
        except queue.Full:
            return
        self._writer.join(timeout)
        if self._log is not None and not self._writer.is_alive():
            self._log.close()
