"""What a rank's `ray start` writes, read as it comes: the node's output, and the lines of starter.py in it.

starter.py (inside `ray start`) says what the rank waits for by lines that start with these markers;
NodeOutput finds them, and copies the output into the rank's rank-NNNN.ray.log (logs/files.py).
"""

from __future__ import annotations

import collections
import json
import os
import threading
from pathlib import Path
from typing import IO

RAY_STARTUP_TIMEOUT = b"timed out during startup"  # ray/_private/node.py: a raylet not registered within 30 s
RAY_STARTED = b"Ray runtime started."  # `ray start` prints it when done starting, ~0.3-0.9 s after ALIVE
ALIVE = b"mpiray-node-alive "  # starter.py: "ALIVE {the node's GCS record as JSON}", one write
WATCH_FAILED = b"mpiray-watch-failed "  # starter.py: its GCS watch ended without seeing the node
GCS_LOST = b"mpiray-gcs-lost "  # gcsrestart.py, on the head: its gcs_server died ({json})
GCS_BACK = b"mpiray-gcs-back "  # gcsrestart.py: the one started again answers ({json})
COMPAT = b"mpiray-compat "  # starter.py: "KEY note": what this Ray lacks (a raycompat key) and what mpiray does instead


class NodeOutput:
    """What `ray start` (and starter.py, and Ray's processes) write to stdout, read through a pipe.

    A thread of the rank copies it into the per-rank file (LOG_DIR/JOB_ID/rank-NNNN.ray.log) and
    keeps the few facts the rank waits for in memory: no rank polls a file (at 1,000 ranks on a
    shared filesystem that would be 50,000 metadata operations a second). starter.py's own lines
    are found anywhere in a line: another process writing to the same pipe may have left a line
    unfinished just before them.
    """

    def __init__(self, path: Path):
        self.path, self._pending = path, b""
        self.ray_started = False  # `ray start` said "Ray runtime started."
        self.alive: dict | None = None  # the node's GCS record, once starter.py saw it ALIVE
        self.watch_failed: str | None = None  # why starter.py stopped watching, if it did
        self.startup_timed_out = False  # Ray gave up waiting for this node to register (GCS overloaded?)
        self.compat: dict[str, str] = {}  # starter.py's notes on what this Ray lacks, by raycompat key
        self.gcs: collections.deque[tuple[str, dict]] = collections.deque()  # ("gcs_lost"|"gcs_back", fields), unread
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
            for marker, event in ((GCS_LOST, "gcs_lost"), (GCS_BACK, "gcs_back")):
                if marker in line:
                    self.gcs.append((event, json.loads(line[line.index(marker) + len(marker):])))
            if WATCH_FAILED in line and self.watch_failed is None:
                self.watch_failed = line[line.index(WATCH_FAILED) + len(WATCH_FAILED):].decode(errors="replace")
        return lines

    def copy(self, pipe: IO[bytes], out: IO[bytes] | None) -> threading.Thread:
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
