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


def rank_facts(rank: int, records: list[dict], log: str = "") -> RankFacts:
    """One rank's event records -> what they say (the last run only, when a job id was re-used)."""
    records, earlier = last_run(records)
    facts = RankFacts(rank=rank, log=log, earlier_runs=earlier)
    if not records:
        return facts
    facts.host, facts.pid = records[0].get("host", ""), records[0].get("pid")
    facts.first, facts.last = local_seconds(records[0]), local_seconds(records[-1])
    facts.last_event = records[-1]["event"]
    for record in records:
        time = local_seconds(record)
        facts.steps.append((time, record["event"]))
        _read(facts, time, record["event"], record.get("fields", {}), level=record.get("level"))
    return facts


def _read(facts: RankFacts, time: float, name: str, f: dict, *, level: str | None) -> None:
    if name != "launched" and facts.mpi_ready is None:  # every other event comes after MPI_Init
        facts.mpi_ready = time
    reader = _READERS.get(name)
    if reader is not None:
        reader(facts, time, f)
    elif level == ERROR:  # this rank's own failure (time_limit, head_lost, own_node_exited, ...)
        facts.errors.append(RankError(time, f.get("message") or text(name, f), f.get("cause", ""), name))
    if level == WARNING:
        facts.warnings.append((time, text(name, f)))
        if f.get("cause"):
            facts.hints.append(Hint(time, text(name, f), f["cause"]))


def _peer(facts: RankFacts, rank: int, **known) -> None:
    peer = facts.peers.setdefault(rank, Peer())
    for name, value in known.items():
        if value not in ("", None, False, {}):
            setattr(peer, name, value)


def _context(facts, time, f):
    facts.size = f.get("size")


def _launched(facts, time, f):
    facts.launched, facts.launch = time, dict(f)


def _failed(facts, time, f):
    facts.errors.append(RankError(time, f.get("message", ""), f.get("cause", ""), "failed"))


def _unexpected(facts, time, f):
    last = [line for line in f.get("traceback", "").splitlines() if line.strip()][-1:] or ["?"]
    facts.errors.append(RankError(time, f"unexpected failure: {last[0]}", "unexpected", "unexpected"))


def _worker_failed(facts, time, f):
    facts.job_errors.append(JobError(time, f["peer"], f.get("peer_host", ""), f.get("log", ""), f.get("message", ""),
                             f.get("cause", "")))


def _startup_timeout(facts, time, f):
    facts.job_errors.append(JobError(time, facts.rank, facts.host, facts.log, text("startup_timeout", f),
                                     "startup_timeout"))
    for missing in f.get("missing", []):
        _peer(facts, missing["rank"], host=missing.get("host", ""))
        facts.missing.append(missing["rank"])


def _joined(facts, time, f):
    facts.joined, facts.ip, facts.resources = time, f.get("ip", ""), resources_of(f)


def _worker_joined(facts, time, f):
    _peer(facts, f["peer"], host=f.get("peer_host", ""), ip=f.get("ip", ""), resources=resources_of(f), joined=time)


def _stopped(facts, time, f):
    facts.stopped, facts.stopped_count = time, f.get("count", 0)
    facts.stopped_seconds, facts.sigkilled = f.get("seconds", 0.0), f.get("killed", 0)
    facts.pids += f.get("pids", [])


def _first_signal(facts, time, f):
    if facts.signal is None:
        facts.signal = time


def _set(**values):
    """A reader that sets facts' attributes: a value, or a function of (time, fields)."""
    def read(facts, time, f):
        for name, value in values.items():
            setattr(facts, name, value(time, f) if callable(value) else value)
    return read


_READERS = {
    "rank_started": _context,
    "launched": _launched,
    "failed": _failed,
    "unexpected": _unexpected,
    "worker_failed": _worker_failed,
    "startup_timeout": _startup_timeout,
    "session_sent": _set(session_sent=lambda t, f: t),
    "node_starting": _set(starting=lambda t, f: t),
    "head_alive": _joined,
    "node_alive": _joined,
    "node_pids": lambda facts, time, f: facts.pids.extend(f.get("pids", [])),
    "worker_waiting": lambda facts, time, f: _peer(facts, f["peer"], host=f.get("peer_host", "")),
    "worker_joined": _worker_joined,
    "worker_idle": lambda facts, time, f: _peer(facts, f["peer"], host=f.get("peer_host", ""), idle=True, joined=time),
    "join_granted": lambda facts, time, f: _peer(facts, f["peer"], join_slot=time),
    "join_retry": _set(join_attempts=lambda t, f: f.get("attempt", 2)),
    "idle_by_design": _set(idle=lambda t, f: t),
    "cluster_ready": _set(all_running=lambda t, f: t),
    "driver_started": _set(driver_started=lambda t, f: t, driver=lambda t, f: f.get("command", "")),
    "script_connected": _set(driver_started=lambda t, f: t, driver="the calling script (mpiray.init)"),
    "driver_exited": _set(driver_exited=lambda t, f: t, driver_code=lambda t, f: f.get("code")),
    "script_ended": _set(driver_exited=lambda t, f: t, driver_code=lambda t, f: f.get("code")),
    "job_ended": _set(ended=lambda t, f: t),
    "signalled": _first_signal,
    "stop_signal": _first_signal,
    "node_lost": lambda facts, time, f: facts.lost_nodes.append((time, f.get("peer"), f.get("message", ""))),
    "processes_stopped": _stopped,
    "node_manifest": _set(manifest=lambda t, f: dict(f)),
    "batch_job": _set(batch_job=lambda t, f: dict(f)),
    "nodes_excluded": _set(left_out=lambda t, f: LeftOut(str(f.get("hosts", "")), int(f.get("nodes", 0)),
                                                         int(f.get("requested", 0)), str(f.get("why", "")),
                                                         str(f.get("exclude", "")))),
    "exit": _set(exit_time=lambda t, f: t, exit_code=lambda t, f: f.get("code")),
}
