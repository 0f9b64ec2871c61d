"""Where a job's logs are: a job dir found from what the user typed, and its ranks' events read into a report."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from mpiray.errors import NoSuchJob
from mpiray.logs.events import read_events
from mpiray.logs.files import driver_log_path
from mpiray.logs.report.analyse import analyse
from mpiray.logs.report.model import JobReport
from mpiray.logs.report.parse import EPOCH

RANK_EVENTS = re.compile(r"^rank-(\d+)\.jsonl$")
JOIN_EVENTS = re.compile(r"^join-(.+)-rank-(\d+)\.jsonl$")  # a job that joined this cluster (--join)
AUTOSCALER_EVENTS = "autoscaler-rank-0000.jsonl"
# A driver's own log (driver.job_log: PREFIX-rank-0000.jsonl; the trainer's is trainer-): any but mpiray's own.
DRIVER_EVENTS = re.compile(r"^([a-z][\w.-]*?)-rank-0000\.jsonl$")
NOT_DRIVERS = ("join", "autoscaler")
TAIL_BYTES = 256 * 1024  # of each Ray log the classifier reads: the end is where a failure shows
RAY_FILES = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")


def find_job_dir(target: str | None, log_dir: Path) -> Path:
    """A job dir, LOG_DIR/JOB_ID, or a bare JOB_ID under log_dir; None: log_dir's newest job."""
    if target is None:
        jobs = [d for d in _subdirs(log_dir) if _rank_events(d)]
        if not jobs:
            raise NoSuchJob(f"no job logs under {log_dir}/ (give a job id or a job's log dir)")
        return max(jobs, key=lambda d: d.stat().st_mtime)
    for candidate in (Path(target), log_dir / target):
        if candidate.is_dir():
            if not _rank_events(candidate):
                raise NoSuchJob(f"{candidate} has no rank events (rank-NNNN.jsonl): not an mpiray job's log dir")
            return candidate
    raise NoSuchJob(f"no such job: {target!r} (neither a directory nor {log_dir / target})")


def _subdirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def _rank_events(job_dir: Path) -> dict[int, Path]:
    found = {}
    for path in _files(job_dir):
        match = RANK_EVENTS.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def _files(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_file()]
    except OSError:
        return []


def tail(path: Path, size: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(max(0, path.stat().st_size - size))
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def ray_logs(job_dir: Path, rank: int) -> str:
    """The end of what rank's Ray wrote: its `ray start` output and its kept session logs (rank 0: and
    driver.log), for the classifier."""
    paths = [job_dir / f"rank-{rank:04d}.ray.log"]
    for kept in sorted(job_dir.glob(f"ray-rank-{rank:04d}*")):
        paths += [kept / name for name in RAY_FILES]
    if rank == 0:
        paths.append(driver_log_path(job_dir))
    return "\n".join(tail(path) for path in paths)


def read_job(job_dir: Path) -> JobReport:
    logs = {rank: (str(path.with_suffix(".log")), read_events(path)) for rank, path in _rank_events(job_dir).items()}
    joins: dict[str, dict[int, tuple[str, list[dict]]]] = {}
    for path in _files(job_dir):
        if match := JOIN_EVENTS.match(path.name):
            joins.setdefault(match.group(1), {})[int(match.group(2))] = (str(path.with_suffix(".log")),
                                                                         read_events(path))
    autoscaler = read_events(job_dir / AUTOSCALER_EVENTS) if (job_dir / AUTOSCALER_EVENTS).exists() else []
    drivers = {match.group(1): read_events(path) for path in _files(job_dir)
               if (match := DRIVER_EVENTS.match(path.name)) and not match.group(1).startswith(NOT_DRIVERS)}
    # The dir's own mtime moves when a guard keeps a killed rank's Ray logs there (ray-rank-NNNN).
    changed = max([job_dir.stat().st_mtime] + [p.stat().st_mtime for p in _files(job_dir)])
    local = datetime.fromtimestamp(changed)  # the events' times are read as local time, as the human log shows
    return analyse(job_dir.name, str(job_dir), logs, (local - EPOCH).total_seconds(),
                   ray_logs=lambda rank: ray_logs(job_dir, rank), joins=joins, autoscaler=autoscaler, drivers=drivers)
