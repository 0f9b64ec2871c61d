"""Where a user's running clusters say how to reach them: a private registry that other batch jobs of
the same user (and `mpiray attach`, `mpiray list`) read.

    ~/.mpiray/clusters/            0700, the user's (MPIRAY_REGISTRY, or --registry, elsewhere)
        JOB_ID.json                0600: GCS address, versions, host, end time, log dir, heartbeat
        JOB_ID.token               0600: the cluster's token (never in the .json, never in ~/.ray)
        JOB_ID.joins/OTHER.json    0600: a job whose ranks joined JOB_ID's cluster, and its nodes

Home directories are on the shared file system that every batch job sees, and nobody else may
enter the directory: another user can neither read a token nor plant an entry. Each file is
written to a temporary name in the same directory, then renamed: a reader never sees half a file.

An entry is stale when its job ended without removing it (SIGKILL of the whole job): its heartbeat,
renewed every HEARTBEAT_S by the head's rank 0, is older than STALE_AFTER_S, or its job's end time
(the walltime) passed STALE_AFTER_S ago. Readers skip stale entries and remove them, with its joins
(an elastic head's JOB.autoscale/ stays: its worker jobs read it to cancel each other).
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from mpiray.errors import ConfigError, LaunchError, NoSuchCluster
from mpiray.logs.events import RankLog

HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0  # the worker jobs of a SIGKILLed head notice within this (the bound: 60 s)


@dataclass
class Entry:
    """What a running cluster publishes (no secret: the token lies beside it, in JOB_ID.token)."""

    job_id: str
    gcs_address: str
    head_ip: str
    host: str  # the head's host
    pid: int  # the head's rank 0
    uid: int
    ray: str
    python: str
    log_dir: str  # this job's logs: LOG_DIR/JOB_ID, absolute
    started: float
    heartbeat: float
    ends_at: float | None = None  # the batch job's end (walltime), if the scheduler says
    scheduler: str = "none"
    nodes: int = 0
    cpus: float = 0.0
    gpus: float = 0.0
    autoscale: dict = field(default_factory=dict)  # the autoscaler's bounds and worker jobs, if it runs
    dashboard_port: int | None = None  # the head's dashboard (and Jobs API), with --dashboard
    dashboard_host: str = "127.0.0.1"  # where it listens: the head's address with token auth (commands.dashboard_host)
    client_port: int | None = None  # the head's Ray Client server (ray://head_ip:PORT), where ray[default] runs it
    auth: bool = True  # token auth on (not --no-auth)
    run: str = ""  # the head's tag of this run (messages.Session.run): a joining job's nodes spill where the cluster's do

    def stale(self, now: float | None = None) -> str | None:
        """Why this entry no longer describes a running cluster (None: it does)."""
        now = time.time() if now is None else now
        if self.ends_at is not None and now > self.ends_at + STALE_AFTER_S:
            return f"its job's end time passed {now - self.ends_at:.0f} s ago"
        if now - self.heartbeat > STALE_AFTER_S:
            return f"no heartbeat for {now - self.heartbeat:.0f} s (the job ended without saying so)"
        return None


@dataclass
class Join:
    """A job whose ranks joined a cluster (`--join`), written by its rank 0 beside the cluster's entry
    (JOB_ID.joins/ITS_ID.json): `mpiray list` adds its nodes to the cluster's, and the elastic provider finds
    its worker jobs' nodes by provider_node."""

    job_id: str
    host: str
    pid: int
    nodes: int
    cpus: float
    gpus: float
    node_ids: list[str]
    started: float
    heartbeat: float  # renewed every HEARTBEAT_S while the job runs
    provider_node: str | None = None  # the elastic provider's id for the worker job that this job is

    def fresh(self, now: float | None = None) -> bool:
        """Whether its job still renews it (a SIGKILLed job's record stays until its cluster's does)."""
        return (time.time() if now is None else now) - self.heartbeat < STALE_AFTER_S


def default_root(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    given = environ.get("MPIRAY_REGISTRY", "").strip()
    return Path(given) if given else Path(environ.get("HOME") or Path.home()) / ".mpiray" / "clusters"


def private_root(root: Path, create: bool = True) -> Path:
    """root, a directory of this user's that nobody else may enter (made so if missing)."""
    if create:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        raise NoSuchCluster(f"no registry at {root}: no cluster of yours has run with it") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError(f"the cluster registry {root} is not a directory of yours: set MPIRAY_REGISTRY "
                          f"to a private directory on a file system every batch job sees")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(root, 0o700)  # ours: make it private again rather than refuse
    return root


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def _read(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd) as src:
        return src.read()


class Registry:
    def __init__(self, root: Path | None = None):
        self.root = default_root() if root is None else root

    def entry_path(self, job_id: str) -> Path:
        return self.root / f"{job_id}.json"

    def token_path(self, job_id: str) -> Path:
        return self.root / f"{job_id}.token"

    def publish(self, entry: Entry, token: str | None) -> None:
        root = private_root(self.root)
        if token is not None:
            _write(self.token_path(entry.job_id), token)
        _write(root / f"{entry.job_id}.json", json.dumps(asdict(entry)))

    def heartbeat(self, entry: Entry) -> Entry:
        """entry with its heartbeat now, written over the one it renews."""
        beat = replace(entry, heartbeat=time.time())
        _write(self.entry_path(entry.job_id), json.dumps(asdict(beat)))
        return beat

    def remove(self, job_id: str) -> None:
        for path in (self.entry_path(job_id), self.token_path(job_id)):
            path.unlink(missing_ok=True)
        joins = self.root / f"{job_id}.joins"
        if joins.is_dir():
            for path in joins.iterdir():
                path.unlink(missing_ok=True)
            joins.rmdir()

    def read(self, job_id: str) -> Entry:
        """The running cluster job_id's entry; NoSuchCluster (with the reason) if there is none."""
        private_root(self.root, create=False)
        try:
            entry = Entry(**json.loads(_read(self.entry_path(job_id))))
        except FileNotFoundError:
            running = ", ".join(e.job_id for e in self.running()) or "none"
            raise NoSuchCluster(f"no running cluster {job_id!r} in {self.root} (running: {running})") from None
        except (ValueError, TypeError) as error:
            raise NoSuchCluster(f"the registry entry {self.entry_path(job_id)} is not one: {error}") from None
        if entry.uid != os.getuid():
            raise NoSuchCluster(f"cluster {job_id!r} belongs to uid {entry.uid}, not to you: join only your own")
        why = entry.stale()
        if why:
            self.remove(job_id)
            raise NoSuchCluster(f"cluster {job_id!r} is gone: {why}; its entry is removed")
        return entry

    def token(self, job_id: str) -> str | None:
        try:
            return _read(self.token_path(job_id)).strip() or None
        except FileNotFoundError:
            return None  # a cluster started with --no-auth

    def running(self) -> list[Entry]:
        """Every running cluster of this user; stale entries are removed on the way."""
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob("*.json")):
            try:
                entry = Entry(**json.loads(_read(path)))
            except (OSError, ValueError, TypeError):
                continue
            if entry.uid == os.getuid() and entry.stale() is None:
                found.append(entry)
            elif entry.uid == os.getuid():
                self.remove(entry.job_id)
        return found

    def add_join(self, job_id: str, joined: Join) -> None:
        joins = self.root / f"{job_id}.joins"
        joins.mkdir(mode=0o700, exist_ok=True)
        _write(joins / f"{joined.job_id}.json", json.dumps(asdict(joined)))

    def remove_join(self, job_id: str, joined_job: str) -> None:
        (self.root / f"{job_id}.joins" / f"{joined_job}.json").unlink(missing_ok=True)

    def joins(self, job_id: str) -> list[Join]:
        joins = self.root / f"{job_id}.joins"
        found = []
        for path in sorted(joins.glob("*.json")) if joins.is_dir() else []:
            try:
                found.append(Join(**json.loads(_read(path))))
            except (OSError, ValueError, TypeError):
                continue
        return found


class Published:
    """A cluster's own entry while it runs: written once it is up (publish), its heartbeat renewed, withdrawn at
    its end. A registry that cannot be written (a read-only home) costs only --join and attach: said in log."""

    heartbeat_s = HEARTBEAT_S

    def __init__(self, registry: Registry, entry: Entry, log: RankLog):
        self.registry, self.entry, self.log = registry, entry, log

    def beat(self) -> None:
        try:
            self.entry = self.registry.heartbeat(self.entry)
        except OSError as error:
            self.log.event("registry_failed", root=str(self.registry.root), problem=str(error))

    def withdraw(self) -> None:
        try:
            self.registry.remove(self.entry.job_id)
        except OSError as error:
            self.log.event("registry_failed", root=str(self.registry.root), problem=str(error))


def publish(registry: Registry, entry: Entry, token: str | None, log: RankLog) -> Published | None:
    """A running cluster's entry (its head's rank 0 built it) and token, in registry; None where the registry
    cannot be written (said once, in log)."""
    try:
        registry.publish(entry, token)
    except (OSError, LaunchError) as error:
        log.event("registry_failed", root=str(registry.root), problem=str(error))
        return None
    log.event("published", root=str(registry.root), job_id=entry.job_id)
    return Published(registry, entry, log)
