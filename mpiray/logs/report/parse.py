"""One rank's events (events.py, rank-NNNN.jsonl) read into facts: its last run (a re-used job id
appends; each run is one process), and what each event says (`RankFacts`). Pure functions over the
records, so a log that stops mid-way reads as well as a complete one. Nothing here reads English:
the human log's wording is free to change."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from mpiray.logs.events import ERROR, WARNING, text
from mpiray.logs.report.model import LeftOut

EPOCH = datetime(1970, 1, 1)
# A rank's events before MPI_Init returned (rank/life.py early_log, mpi_world); its first other event marks it.
BEFORE_MPI_INIT = frozenset({"launched", "netmod_chosen"})


def last_run(records: list[dict]) -> tuple[list[dict], int]:
    """The records of the last run in a rank's events, and how many runs came before it."""
    runs: list[list[dict]] = []
    for record in records:
        if not runs or record.get("pid") != runs[-1][-1].get("pid"):
            runs.append([])
        runs[-1].append(record)
    return (runs[-1], len(runs) - 1) if runs else ([], 0)


def local_seconds(record: dict) -> float:
    """An event's time as seconds since 1970 in the rank's local time (as the human log shows it)."""
    return (datetime.fromtimestamp(record["time"]) - EPOCH).total_seconds()


def resources_of(fields: dict) -> dict:
    """{'cpus', 'gpus', 'memory_gib'} of an event about a node ({} if it has none)."""
    return {name: fields[name] for name in ("cpus", "gpus", "memory_gib") if name in fields}


def describe(resources: dict) -> str:
    if not resources:
        return ""
    return f"{resources.get('cpus', 0):g} CPUs, {resources.get('gpus', 0):g} GPUs, {resources.get('memory_gib', 0):.1f} GiB"


@dataclass
class Peer:
    """What rank 0's events say about another rank: all that is known of one whose log is missing."""

    host: str = ""
    ip: str = ""
    resources: dict = field(default_factory=dict)
    joined: float | None = None
    idle: bool = False
    join_slot: float | None = None

    def learn(self, **known) -> None:
        """What another event said of it: each value that says something ("", None, False and {} do not)."""
        for name, value in known.items():
            if value not in ("", None, False, {}):
                setattr(self, name, value)


class RankError(NamedTuple):
    """A rank's own failure, as its error event said it."""

    time: float
    message: str
    cause: str
    event: str


class JobError(NamedTuple):
    """Rank 0's word about another rank: it failed, or did not join in time."""

    time: float
    rank: int
    host: str
    log: str
    message: str
    cause: str


class Hint(NamedTuple):
    """A warning that names a cause: a mistake that may explain a failure later."""

    time: float
    message: str
    cause: str


@dataclass
class RankFacts:
    """What one rank's events say, times in local seconds since 1970 (None: not in the log)."""

    rank: int
    log: str = ""
    host: str = ""
    size: int | None = None  # "rank R of N"
    pid: int | None = None
    earlier_runs: int = 0
    first: float | None = None
    last: float | None = None
    last_event: str = ""
    launched: float | None = None  # before MPI_Init (where the job's log dir was known then)
    mpi_ready: float | None = None  # MPI_Init returned: its first event after launched
    launch: dict = field(default_factory=dict)  # the launched event's fields: launcher, mpi_type, netmod
    starting: float | None = None
    join_attempts: int = 1  # more when a `ray start` failed and was started again
    joined: float | None = None
    ip: str = ""
    resources: dict = field(default_factory=dict)
    idle: float | None = None
    session_sent: float | None = None
    all_running: float | None = None
    driver_started: float | None = None
    driver: str = ""
    driver_exited: float | None = None
    driver_code: int | None = None
    ended: float | None = None  # a worker: rank 0 told it the job's end
    signal: float | None = None
    stopped: float | None = None
    stopped_seconds: float = 0.0
    stopped_count: int = 0
    sigkilled: int = 0
    pids: list[int] = field(default_factory=list)  # every process of its node it logged
    exit_time: float | None = None
    exit_code: int | None = None
    errors: list[RankError] = field(default_factory=list)  # this rank's own failures
    job_errors: list[JobError] = field(default_factory=list)  # rank 0's about other ranks: failed, did not join
    steps: list[tuple[float, str]] = field(default_factory=list)  # every event: (time, its name)
    warnings: list[tuple[float, str]] = field(default_factory=list)
    hints: list[Hint] = field(default_factory=list)  # warnings that name a cause: a mistake that may explain a failure
    batch_job: dict | None = None  # rank 0: the batch job as its scheduler showed it (batch_job's fields)
    left_out: LeftOut | None = None  # rank 0: the hosts the pre-flight left out (nodes_excluded)
    peers: dict[int, Peer] = field(default_factory=dict)  # rank 0: what it heard of the others
    manifest: dict | None = None  # node_manifest's fields
    missing: list[int] = field(default_factory=list)  # rank 0: the ranks that did not join in time
    lost_nodes: list[tuple[float, int, str]] = field(default_factory=list)  # rank 0: (time, rank, why)

    def read(self, record: dict) -> None:
        """One event record (of this rank's last run, in order) into the facts."""
        time, name, f, level = local_seconds(record), record["event"], record.get("fields", {}), record.get("level")
        if not self.steps:
            self.host, self.pid, self.first = record.get("host", ""), record.get("pid"), time
        self.last, self.last_event = time, name
        self.steps.append((time, name))
        if name not in BEFORE_MPI_INIT and self.mpi_ready is None:  # every other event comes after MPI_Init
            self.mpi_ready = time
        if name in _SETS:
            for attribute, value in _SETS[name].items():
                setattr(self, attribute, value(time, f) if callable(value) else value)
        elif name in _READERS:
            _READERS[name](self, time, f)
        elif level == ERROR:  # this rank's own failure (time_limit, head_lost, own_node_exited, ...)
            self.errors.append(RankError(time, f.get("message") or text(name, f), f.get("cause", ""), name))
        if level == WARNING:
            self.warnings.append((time, text(name, f)))
            if f.get("cause"):
                self.hints.append(Hint(time, text(name, f), f["cause"]))

    def peer(self, rank: int, **known) -> None:
        self.peers.setdefault(rank, Peer()).learn(**known)

    def _launched(self, time: float, f: dict) -> None:
        self.launched, self.launch = time, dict(f)

    def _failed(self, time: float, f: dict) -> None:
        self.errors.append(RankError(time, f.get("message", ""), f.get("cause", ""), "failed"))

    def _unexpected(self, time: float, f: dict) -> None:
        last = [line for line in f.get("traceback", "").splitlines() if line.strip()][-1:] or ["?"]
        self.errors.append(RankError(time, f"unexpected failure: {last[0]}", "unexpected", "unexpected"))

    def _worker_failed(self, time: float, f: dict) -> None:
        self.job_errors.append(JobError(time=time, rank=f["peer"], host=f.get("peer_host", ""), log=f.get("log", ""),
                                        message=f.get("message", ""), cause=f.get("cause", "")))

    def _startup_timeout(self, time: float, f: dict) -> None:
        self.job_errors.append(JobError(time=time, rank=self.rank, host=self.host, log=self.log,
                                        message=text("startup_timeout", f), cause="startup_timeout"))
        for missing in f.get("missing", []):
            self.peer(missing["rank"], host=missing.get("host", ""))
            self.missing.append(missing["rank"])

    def _joined(self, time: float, f: dict) -> None:
        self.joined, self.ip, self.resources = time, f.get("ip", ""), resources_of(f)

    def _worker_joined(self, time: float, f: dict) -> None:
        self.peer(f["peer"], host=f.get("peer_host", ""), ip=f.get("ip", ""), resources=resources_of(f), joined=time)

    def _stopped(self, time: float, f: dict) -> None:
        self.stopped, self.stopped_count = time, f.get("count", 0)
        self.stopped_seconds, self.sigkilled = f.get("seconds", 0.0), f.get("killed", 0)
        self.pids += f.get("pids", [])

    def _first_signal(self, time: float, f: dict) -> None:
        if self.signal is None:
            self.signal = time


def rank_facts(rank: int, records: list[dict], log: str = "") -> RankFacts:
    """One rank's event records -> what they say (the last run only, when a job id was re-used)."""
    records, earlier = last_run(records)
    facts = RankFacts(rank=rank, log=log, earlier_runs=earlier)
    for record in records:
        facts.read(record)
    return facts


def _now(time: float, f: dict) -> float:
    return time


# Events that set facts: attribute -> a value, or a function of (time, fields).
_SETS: dict[str, dict] = {
    "rank_started": {"size": lambda t, f: f.get("size")},
    "session_sent": {"session_sent": _now},
    "node_starting": {"starting": _now},
    "join_retry": {"join_attempts": lambda t, f: f.get("attempt", 2)},
    "idle_by_design": {"idle": _now},
    "cluster_ready": {"all_running": _now},
    "driver_started": {"driver_started": _now, "driver": lambda t, f: f.get("command", "")},
    "script_connected": {"driver_started": _now, "driver": "the calling script (mpiray.init)"},
    "driver_exited": {"driver_exited": _now, "driver_code": lambda t, f: f.get("code")},
    "script_ended": {"driver_exited": _now, "driver_code": lambda t, f: f.get("code")},
    "job_ended": {"ended": _now},
    "node_manifest": {"manifest": lambda t, f: dict(f)},
    "batch_job": {"batch_job": lambda t, f: dict(f)},
    "nodes_excluded": {"left_out": lambda t, f: LeftOut(hosts=str(f.get("hosts", "")), nodes=int(f.get("nodes", 0)),
                                                        requested=int(f.get("requested", 0)), why=str(f.get("why", "")),
                                                        exclude=str(f.get("exclude", "")))},
    "exit": {"exit_time": _now, "exit_code": lambda t, f: f.get("code")},
}
# Events that RankFacts reads with a method of its own (or adds to a list).
_READERS = {
    "launched": RankFacts._launched,
    "netmod_chosen": lambda facts, time, f: facts.launch.update(netmod=f.get("netmod")),
    "failed": RankFacts._failed,
    "unexpected": RankFacts._unexpected,
    "worker_failed": RankFacts._worker_failed,
    "startup_timeout": RankFacts._startup_timeout,
    "head_alive": RankFacts._joined,
    "node_alive": RankFacts._joined,
    "node_pids": lambda facts, time, f: facts.pids.extend(f.get("pids", [])),
    "worker_waiting": lambda facts, time, f: facts.peer(f["peer"], host=f.get("peer_host", "")),
    "worker_joined": RankFacts._worker_joined,
    "worker_idle": lambda facts, time, f: facts.peer(f["peer"], host=f.get("peer_host", ""), idle=True, joined=time),
    "join_granted": lambda facts, time, f: facts.peer(f["peer"], join_slot=time),
    "signalled": RankFacts._first_signal,
    "stop_signal": RankFacts._first_signal,
    "node_lost": lambda facts, time, f: facts.lost_nodes.append((time, f.get("peer"), f.get("message", ""))),
    "processes_stopped": RankFacts._stopped,
}
