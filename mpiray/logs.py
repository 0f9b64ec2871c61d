"""The per-rank log (one timestamped line per startup step, in LOG_DIR/JOB_ID/rank-NNNN.log) and reading what `ray start` writes beside it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO


def job_log_dir(log_dir: Path, job_id: str) -> Path:
    return log_dir / job_id


def rank_log_path(log_dir: Path, job_id: str, rank: int) -> Path:
    return job_log_dir(log_dir, job_id) / f"rank-{rank:04d}.log"


def ray_output_path(log_dir: Path, job_id: str, rank: int) -> Path:
    """Where the stdout/stderr of this rank's `ray start` go."""
    return job_log_dir(log_dir, job_id) / f"rank-{rank:04d}.ray.log"


def ray_session_logs_path(log_dir: Path, job_id: str, rank: int) -> Path:
    """Where Ray's own session logs of this rank are kept after teardown."""
    return job_log_dir(log_dir, job_id) / f"ray-rank-{rank:04d}"


RAY_STARTED = b"Ray runtime started."  # `ray start` prints it when done starting, ~0.3-0.9 s after ALIVE
ALIVE = b"mpiray-node-alive "  # ray_node.py: "ALIVE {the node's GCS record as JSON}", one write
WATCH_FAILED = b"mpiray-watch-failed "  # ray_node.py: its GCS watch ended without seeing the node


class NodeOutput:
    """The lines `ray start` (and ray_node.py) wrote since this run began: the file is per job and
    rank, so a rerun with the same --job-id appends to an earlier run's output.

    ray_node.py's own lines are found anywhere in a line: another process writing to the same file
    may have left a line unfinished just before them.
    """

    def __init__(self, path: Path, offset: int):
        self.path, self._offset, self._pending = path, offset, b""
        self.ray_started = False  # `ray start` said "Ray runtime started."
        self.alive: dict | None = None  # the node's GCS record, once ray_node.py saw it ALIVE
        self.watch_failed: str | None = None  # why ray_node.py stopped watching, if it did

    def new_lines(self) -> list[bytes]:
        with open(self.path, "rb") as out:
            out.seek(self._offset)
            data = out.read()
        self._offset += len(data)
        *lines, self._pending = (self._pending + data).split(b"\n")
        for line in lines:
            self.ray_started = self.ray_started or RAY_STARTED in line
            if ALIVE in line and self.alive is None:
                self.alive = json.loads(line[line.index(ALIVE) + len(ALIVE):])
            if WATCH_FAILED in line and self.watch_failed is None:
                self.watch_failed = line[line.index(WATCH_FAILED) + len(WATCH_FAILED):].decode(errors="replace")
        return lines


class RankLog:
    """Lines written before the job id is known (workers learn it from rank 0) wait in memory."""

    def __init__(self, rank: int, host: str):
        self.rank = rank
        self.host = host
        self.path: Path | None = None
        self._file: TextIO | None = None
        self._pending: list[str] = []

    def open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", buffering=1)
        for line in self._pending:
            self._file.write(line)
        self._pending.clear()

    def step(self, message: str) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
        line = f"{stamp} rank {self.rank} ({self.host}): {message}\n"
        if self._file:
            self._file.write(line)
        else:
            self._pending.append(line)

    def warning(self, message: str) -> None:
        self.step(f"WARNING: {message}")
        print(f"mpiray: rank {self.rank} ({self.host}): warning: {message}", file=sys.stderr, flush=True)

    def error(self, message: str) -> None:
        self.step(f"ERROR: {message}")
        where = f" (log: {self.path})" if self.path else ""
        print(f"mpiray: rank {self.rank} ({self.host}): error: {message}{where}", file=sys.stderr, flush=True)

    def close(self, fallback: Path | None = None) -> None:
        if self._file is None and self._pending and fallback is not None:
            self.open(fallback)  # never learned the job id: keep what happened anyway
        if self._file:
            self._file.close()
            self._file = None
