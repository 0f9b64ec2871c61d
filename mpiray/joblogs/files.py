"""Where a job's logs are: a job dir found from what the user typed, and its rank logs read into a report."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from mpiray.joblogs.analyse import analyse
from mpiray.joblogs.parse import EPOCH

RANK_LOG = re.compile(r"^rank-(\d+)\.log$")


class NoSuchJob(Exception):
    pass


def find_job_dir(target: str | None, log_dir: Path) -> Path:
    """A job dir, LOG_DIR/JOB_ID, or a bare JOB_ID under log_dir; None: log_dir's newest job."""
    if target is None:
        jobs = [d for d in _subdirs(log_dir) if _rank_logs(d)]
        if not jobs:
            raise NoSuchJob(f"no job logs under {log_dir}/ (give a job id or a job's log dir)")
        return max(jobs, key=lambda d: d.stat().st_mtime)
    for candidate in (Path(target), log_dir / target):
        if candidate.is_dir():
            if not _rank_logs(candidate):
                raise NoSuchJob(f"{candidate} has no rank logs (rank-NNNN.log): not an mpiray job's log dir")
            return candidate
    raise NoSuchJob(f"no such job: {target!r} (neither a directory nor {log_dir / target})")


def _subdirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def _rank_logs(job_dir: Path) -> dict[int, Path]:
    found = {}
    for path in _files(job_dir):
        match = RANK_LOG.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def _files(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_file()]
    except OSError:
        return []


def read_job(job_dir: Path) -> dict:
    logs = {rank: (str(path), path.read_text(errors="replace")) for rank, path in _rank_logs(job_dir).items()}
    # The dir's own mtime moves when a guard keeps a killed rank's Ray logs there (ray-rank-NNNN).
    changed = max([job_dir.stat().st_mtime] + [p.stat().st_mtime for p in _files(job_dir)])
    local = datetime.fromtimestamp(changed)  # the logs' stamps are local time
    return analyse(job_dir.name, str(job_dir), logs, (local - EPOCH).total_seconds())
