"""What a driver program may use of mpiray, beside its environment: the front door for Ray programs that run
under mpiray, the trainer (train/) among them.

A driver's contract with mpiray is its environment, as torchrun's is with a script (docs/options.md, "What the
driver gets": RAY_ADDRESS, MPIRAY_JOB_ID, MPIRAY_LOG_DIR, MPIRAY_RESTART, ...). This module adds what a driver
cannot read from it alone:
- LEARNER_SLOT: the custom resource every node offers, one per GPU, else 1 (--learner-slots): ask one per learner
  (or per training worker) to put them one to a slot, so spread over the nodes;
- role_resource(role), ROLE_SHARE: the custom resource the nodes of a role (--role) offer, 1 per node; an actor that
  asks ROLE_SHARE of it runs on that pool (RLlib places by custom resources, not label selectors);
- job_log(prefix, kinds): an event log of the driver's own in the job's log dir, beside the ranks' (`mpiray logs`
  reads it), of the event kinds the driver declares (event_kinds, with the levels INFO, WARNING, ERROR, and for a
  kind that explains the driver's failure, its cause and fix), or None outside a job;
- private_local_ray(): a local Ray as safe as mpiray's cluster (a fresh token, a private 0700 temp dir) for a
  driver run with no cluster;
- restart(): which start of a requeued or rerun job this is, as the batch system says it (None: the first);
- safe_job_id(): a job id as mpiray names its log dir; ray_version(): the installed Ray's, without importing it.
Nothing else of mpiray is promised to drivers (tests/unit/test_layout.py holds train/ to this module and `mpiray`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import tempfile
from pathlib import Path
from typing import Iterator, Mapping, MutableMapping

from mpiray.batch import environment
from mpiray.batch.environment import safe_job_id
from mpiray.logs.events import DECLARED, DECLARED_KIND, ERROR, INFO, WARNING, Kind, RankLog, declaration, event_kinds
from mpiray.raynode import raycompat
from mpiray.raynode.commands import LEARNER_SLOT, ROLE_RESOURCE, ROLE_SHARE, role_resource
from mpiray.raynode.private import PrivateDir

__all__ = ["ERROR", "INFO", "LEARNER_SLOT", "ROLE_RESOURCE", "ROLE_SHARE", "WARNING", "JobLog", "Kind", "event_kinds",
           "job_log", "private_local_ray", "ray_version", "restart", "role_resource", "safe_job_id"]

JobLog = RankLog  # event(name, **fields): a name of the kinds it was opened with, its fields
ray_version = raycompat.ray_version


def job_log(prefix: str, kinds: Mapping[str, Kind], environ: Mapping[str, str] = os.environ) -> JobLog | None:
    """An open event log PREFIXrank-0000.{jsonl,log} in the job's log dir (MPIRAY_LOG_DIR/MPIRAY_JOB_ID, as the
    launcher exports them to its driver), of the driver's own event kinds (event_kinds(name=(level, text)), each
    text a str.format over its fields); None when this process runs in no launcher's job."""
    log_dir, job_id = environ.get("MPIRAY_LOG_DIR"), environ.get("MPIRAY_JOB_ID")
    job_dir = Path(log_dir) / safe_job_id(job_id) if log_dir and job_id else None
    if job_dir is None or not job_dir.is_dir():
        return None
    log = RankLog(0, socket.gethostname(), {**kinds, DECLARED: DECLARED_KIND})
    log.open(job_dir, prefix=prefix)
    log.event(DECLARED, **declaration(kinds))
    return log


def restart(environ: Mapping[str, str] = os.environ) -> str | None:
    """How the batch system says this job is a restart, e.g. "restart 1 (SLURM_RESTART_COUNT)"; None if not.
    Under the launcher its MPIRAY_RESTART (PBS names no count in the job's environment: the launcher asks qstat)."""
    return environ.get("MPIRAY_RESTART") or environment.detect(environ).restart


@contextlib.contextmanager
def private_local_ray(environ: MutableMapping[str, str], label: str | None = None) -> Iterator[Path]:
    """A local Ray as safe as the launcher's: token auth with a fresh token, a temp dir only this user can
    enter (not the shared /tmp/ray), nothing written to ~/.ray. Yields the dir to give ray.init(_temp_dir=...)."""
    private = PrivateDir.create(Path(environ.get("TMPDIR") or tempfile.gettempdir()), label or f"driver{os.getpid()}")
    tmpdir_before = environ.get("RAY_TMPDIR")
    try:
        # Tune's checkpoint locks go to RAY_TMPDIR/_ray_lockfiles, not /tmp's (docs/security.md)
        environ.setdefault("RAY_TMPDIR", str(private.path))
        environ["RAY_AUTH_MODE"] = "token"
        environ["RAY_AUTH_TOKEN_PATH"] = str(private.write_token(secrets.token_hex(32)))
        environ.pop("RAY_AUTH_TOKEN", None)  # the file is the only source
        if environ is os.environ:
            raycompat.reload_auth_settings()
        yield private.ray_dir
    finally:
        if tmpdir_before is None:
            environ.pop("RAY_TMPDIR", None)
        private.remove()
