"""The report's shape: what analyse.py makes of a job's events, what render.py and timeline.py read, and
what `mpiray logs --json` prints (JobReport.to_json(): the dataclasses as plain data, keys in field order).
Times are seconds after the job's first event (None: it never happened)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Segment = list  # [kind, start, end]: a stretch of a rank's time line (analyse.SEGMENTS names the kinds)


@dataclass
class Stopped:
    """How a rank's Ray stopped: its processes, how long it took, how many needed SIGKILL."""

    processes: int
    seconds: float
    sigkilled: int


@dataclass
class RankEntry:
    """One rank's row of the cluster table, and its time line."""

    rank: int
    host: str
    pid: int | None
    ip: str
    resources: dict[str, float]
    resources_text: str
    joined_s: float | None  # its node ALIVE (None: never, or an idle rank's)
    status: str  # analyse.OK, FAILED, NEVER_REPORTED, IDLE
    exit_code: int | None
    log: str  # its human log: where it is, or would be
    has_log: bool
    logged_until_s: float | None  # a log without an exit line: its last line (the bar goes on, hatched)
    first_s: float | None
    last_s: float | None
    last_step: str  # its last event's name
    join_slot_s: float | None
    join_attempts: int
    error: str
    error_s: float | None
    cause: str  # its error's cause (classify.CAUSES), "" without one
    launched_s: float | None
    mpi_ready_s: float | None
    stopped: Stopped | None  # how its Ray stopped
    segments: list[Segment] = field(default_factory=list)
    job_error_s: float | None = None  # an error about the job (a start-up timeout) rank 0 named it in

    def failed(self, status: str, error: str, error_s: float | None, cause: str) -> None:
        """Rank 0's word that it failed, where its own log does not say so."""
        self.status, self.error, self.error_s, self.cause = status, error, error_s, cause

    def drawn_until(self, changed_s: float | None) -> None:
        """A log with no exit line: it lived at least until changed_s (the job dir's last change), where later."""
        self.logged_until_s = self.last_s
        if changed_s is not None and self.segments and changed_s > self.segments[-1][2]:
            self.segments[-1][2] = changed_s


@dataclass
class Phase:
    """A moment of the job's start-up or end, as the rank that logged it saw it (the last, where many did)."""

    phase: str
    s: float | None
    rank: int | None
    detail: str


@dataclass
class FoundCause:
    """Why the job failed, once per cause (classify.py): what happened, the fix, the ranks it happened on."""

    cause: str
    title: str
    fix: str
    ranks: list[int] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # at most 3, "rank N: ..."
    note: str = ""


@dataclass
class LeftOut:
    """The worker hosts the pre-flight refused and left out of the cluster (--bad-nodes exclude)."""

    hosts: str  # comma-separated
    nodes: int  # the Ray nodes that started
    requested: int  # of those the job asked for
    why: str  # each host's first refusal
    exclude: str  # the line that leaves them out of the next submission


@dataclass
class FirstError:
    """The job's earliest failure, as the failing rank said it, or rank 0 of it (reported_by)."""

    s: float | None  # seconds since the job's start
    rank: int
    host: str
    log: str  # the failing rank's human log
    message: str
    reported_by: int
    cause: str


@dataclass
class NeverReported:
    """A rank with no join line, and why: "no log", "empty log", "failed", stopped, or a log that just ends."""

    rank: int
    host: str
    log: str
    why: str
    detail: str = ""  # the failure, or its last step
    s: float | None = None  # when


@dataclass
class RankWarning:
    """A WARNING line of a rank's log."""

    rank: int
    s: float | None
    message: str


@dataclass
class LostNode:
    """A rank whose node another rank (rank 0) saw lost, and why."""

    rank: int  # the lost one
    s: float | None
    reported_by: int
    message: str


@dataclass
class DriverEvent:
    """An event of the driver's own log, read by the kinds it declares (analyse.driver_events)."""

    driver: str  # its log's name
    event: str
    level: str
    fields: dict[str, Any]  # as the driver wrote them
    text: str  # its declared text, filled in
    cause: tuple[str, str] | None  # the cause its kind explains: (title, fix)


@dataclass
class JoinedRank:
    """A rank of a job that joined the cluster (--join): its node, when it joined and left, how it ended."""

    rank: int
    host: str
    ip: str
    resources: dict[str, float]
    resources_text: str
    joined_s: float | None
    left_s: float | None
    exit_code: int | None
    log: str
    error: str  # its first failure, "" without one
    segments: list[Segment] = field(default_factory=list)


@dataclass
class JoinedJob:
    """A job that joined the cluster, under its own job id; its exit code where its ranks agree on one."""

    job_id: str
    ranks: list[JoinedRank]
    exit_code: int | None


@dataclass
class Decision:
    """One of the autoscaler's events (autoscaler-rank-0000.jsonl): what it saw or did."""

    s: float | None
    event: str
    fields: dict[str, Any]
    level: str
    text: str


@dataclass
class JobReport:
    """A job read back from its rank logs (analyse.analyse)."""

    job_id: str
    job_dir: str
    ranks: int
    hosts: list[str]
    started: str | None  # the first event's local time
    exit_code: int | None
    driver: str
    driver_exit_code: int | None
    batch_job: dict[str, Any] | None  # the batch_job event's fields, as rank 0 logged them (PBS)
    left_out: LeftOut | None  # hosts the pre-flight left out of the cluster
    earlier_runs: int  # runs of a re-used job id before the one shown
    cluster: list[RankEntry]
    phases: list[Phase]
    first_error: FirstError | None
    never_reported: list[NeverReported]
    unfinished: list[int]  # ranks without an exit line
    job_dir_changed_s: float | None
    warnings: list[RankWarning]
    lost_nodes: list[LostNode]
    causes: list[FoundCause]
    driver_events: list[DriverEvent]  # what the driver's own logs said, but the errors that name a cause
    manifests: dict[str, dict[str, Any]]  # rank -> its node_manifest event's fields, as it logged them
    joined_jobs: list[JoinedJob]
    planned_joins: list[str]
    autoscaler: list[Decision]
    nodes_over_time: list[list[float]]  # [s, Ray nodes]

    def to_json(self) -> dict[str, Any]:
        """As `--json` prints it."""
        return asdict(self)

    def rank(self, rank: int) -> RankEntry:
        return self.cluster[rank]

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.phase == name)
