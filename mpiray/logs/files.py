"""The files of a job's log dir, LOG_DIR/JOB_ID/: where each lies, and how a rank opens one safely.

    rank-NNNN.log, rank-NNNN.jsonl     each rank's log, for people and for programs (events.py)
    rank-NNNN.ray.log                  what the rank's `ray start` wrote (raynode/output.py reads it)
    ray-rank-NNNN/                     Ray's session logs of the rank's node, kept at its end
    driver.log                         the driver's output (tee.py)
    join-JOB-rank-NNNN.*               the same, of a job that joined this cluster (--join)
    autoscaler-rank-0000.jsonl         the elastic cluster's node provider's decisions
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path


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


def rank_log_name(rank: int, prefix: str = "") -> str:
    return f"{prefix}rank-{rank:04d}.log"


def rank_events_name(rank: int, prefix: str = "") -> str:
    return f"{prefix}rank-{rank:04d}.jsonl"


def driver_log_path(job_dir: Path) -> Path:
    return job_dir / "driver.log"
