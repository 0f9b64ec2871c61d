"""The trainer's own events, where `mpiray logs` reads them: LOG_DIR/JOB/trainer-rank-0000.jsonl beside the
ranks' logs, when it runs as the launcher's driver (MPIRAY_LOG_DIR and MPIRAY_JOB_ID name the job's dir);
nowhere otherwise. Programs read the events' names and fields (mpiray/logs/events.py KINDS), never the text."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Mapping, Optional

from mpiray.batch.environment import safe_job_id
from mpiray.logs.events import RankLog

PREFIX = "trainer-"
_log: Optional[RankLog] = None


def trainer_log(environ: Mapping[str, str] = os.environ) -> Optional[RankLog]:
    """The job's trainer log, opened once (None: no launcher's job dir to write it in)."""
    global _log
    if _log is None:
        log_dir, job_id = environ.get("MPIRAY_LOG_DIR"), environ.get("MPIRAY_JOB_ID")
        job_dir = Path(log_dir) / safe_job_id(job_id) if log_dir and job_id else None
        if job_dir is None or not job_dir.is_dir():
            return None
        _log = RankLog(0, socket.gethostname())
        _log.open(job_dir, prefix=PREFIX)
    return _log


def event(name: str, /, **fields) -> None:
    """Log one of the trainer's events, if it runs under the launcher; an unwritable log costs nothing else."""
    try:
        log = trainer_log()
        if log is not None:
            log.event(name, **fields)
    except OSError:
        pass
