"""The report's shape: what analyse.py makes of a job's events, what render.py and timeline.py read, and
what `mpiray logs --json` prints (JobReport.to_json(): the dataclasses as plain data, keys in field order).
Times are seconds after the job's first event (None: it never happened)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Segment = list  # [kind, start, end]: a stretch of a rank's time line (analyse.SEGMENTS names the kinds)


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
    stopped: dict[str, Any] | None  # {processes, seconds, sigkilled}: how its Ray stopped
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
    batch_job: dict[str, Any] | None
    left_out: LeftOut | None  # hosts the pre-flight left out of the cluster
    earlier_runs: int  # runs of a re-used job id before the one shown
    cluster: list[RankEntry]
    phases: list[Phase]
    first_error: FirstError | None
    never_reported: list[NeverReported]
    unfinished: list[int]  # ranks without an exit line
    job_dir_changed_s: float | None
    warnings: list[dict[str, Any]]
    lost_nodes: list[dict[str, Any]]
    causes: list[FoundCause]
    driver_events: list[dict[str, Any]]  # what the driver's own logs said (analyse.driver_events), but its causes
    manifests: dict[str, dict[str, Any]]
    joined_jobs: list[dict[str, Any]]
    planned_joins: list[str]
    autoscaler: list[dict[str, Any]]
    nodes_over_time: list[list]

    def to_json(self) -> dict[str, Any]:
        """As `--json` prints it."""
        return asdict(self)

    def rank(self, rank: int) -> RankEntry:
        return self.cluster[rank]

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.phase == name)
