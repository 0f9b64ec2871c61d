"""One rank log's text read into facts: its timestamped lines (`Line`), its last run (a re-used job id
appends), and what each step it logged says (`RankFacts`). Pure functions over the text, so a log that
stops mid-way reads as well as a complete one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

# ---- the rank log's lines -------------------------------------------------------------------------

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) rank (\d+) \(([^)]*)\): ?(.*)$")
EPOCH = datetime(1970, 1, 1)

# What RankLog.step writes (lifecycle.py, driver.py, library.py), one pattern per step that matters here.
_CONTEXT = re.compile(r"^mpiray on (\S+) \(pid (\d+)\): rank (\d+) of (\d+)")
_WAITING = "Waiting for broadcast..."
_SESSION_SENT = re.compile(r"^Session sent to (\d+) workers")
_STARTING = re.compile(r"^Starting Ray (head|worker) node:")
_HEAD_STARTED = re.compile(r"^Head started at: (\S+):(\d+) \(node (\w+), (.*)\)$")
_CONNECTED = re.compile(r"^Worker on rank (\d+) with ip (\S+) is connected! \((.*)\)$")
_PEER_HOST = re.compile(r"^Worker on rank (\d+) with host (\S+) is waiting for its node")
_PEER_IDLE = re.compile(r"^Worker on rank (\d+) with idle:")
_JOIN_SLOT = re.compile(r"^Join slot for rank (\d+)")
_IDLE = "Ray node per host:"
_ALL_RUNNING = re.compile(r"^Workers are all running!")
_DRIVER_STARTED = re.compile(r"^Driver started \(pid \d+\): (.*?)(?:; output also in .*)?$")
_SCRIPT_CONNECTED = "Connected this script to the cluster"  # mpiray.init(): the calling script is the driver
_DRIVER_EXITED = re.compile(r"^Driver exited with code (-?\d+)")
_ENDED = re.compile(r"^[Rr]ank 0 ended the job with exit code (-?\d+)")
_STOPPED = re.compile(r"^Stopped (\d+) processes this rank started in ([\d.]+) s \((\d+) needed SIGKILL\)")
_EXIT = re.compile(r"^Exit code (-?\d+)")
_RETRY = re.compile(r"starting this rank's node again \(attempt (\d+) of")  # a join that failed as an overloaded GCS
_SIGNAL = re.compile(r"^WARNING: (?:stopping on signal|signal \d+: SIGTERM to the driver)")
# Rank 0's errors about other ranks: the job failed, rank 0's own node did not.
_RELAYED = re.compile(r"^rank (\d+) on (\S+) failed: (.*) \(log: ([^)]*)\)$", re.DOTALL)
_TIMED_OUT = re.compile(r"^\d+ worker\(s\) did not join within")
_MISSING_PEER = re.compile(r"rank (\d+) on (\S+) \(log: ")
_RESOURCES = re.compile(r"([\d.]+) CPUs, ([\d.]+) GPUs, ([\d.]+) GiB")


@dataclass(frozen=True)
class Line:
    time: float  # seconds since 1970 on the rank's wall clock (its local time, as written)
    rank: int
    host: str
    message: str  # with any continuation lines (a traceback) joined by newlines


def parse_lines(text: str) -> list[Line]:
    """A rank log's text -> its lines; a line without a timestamp continues the one before."""
    lines: list[Line] = []
    for raw in text.splitlines():
        match = _LINE.match(raw)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f")
            lines.append(Line((stamp - EPOCH).total_seconds(), int(match.group(2)), match.group(3), match.group(4)))
        elif lines and raw.strip():
            last = lines[-1]
            lines[-1] = Line(last.time, last.rank, last.host, f"{last.message}\n{raw}")
    return lines


def last_run(lines: list[Line]) -> tuple[list[Line], int]:
    """The lines of the last run in a log, and how many runs came before it (a re-used job id appends)."""
    starts = []
    has_context = False
    for index, line in enumerate(lines):
        if line.message == _WAITING or (_CONTEXT.match(line.message) and has_context):
            starts.append(index)
            has_context = bool(_CONTEXT.match(line.message))
        elif _CONTEXT.match(line.message):
            has_context = True
    starts = [s for s in starts if s > 0]
    return (lines[starts[-1]:], len(starts)) if starts else (lines, 0)


def parse_resources(text: str) -> dict:
    """'1 CPUs, 0 GPUs, 4.1 GiB' -> {'cpus': 1.0, 'gpus': 0.0, 'memory_gib': 4.1}; {} if absent."""
    match = _RESOURCES.search(text)
    if not match:
        return {}
    return {"cpus": float(match.group(1)), "gpus": float(match.group(2)), "memory_gib": float(match.group(3))}


# ---- one rank's facts ---------------------------------------------------------------------------


@dataclass
class Peer:
    """What rank 0's log says about another rank: all that is known of one whose log is missing."""

    host: str = ""
    ip: str = ""
    resources: str = ""
    joined: float | None = None
    idle: bool = False
    join_slot: float | None = None


@dataclass
class RankFacts:
    """What one rank's log says, times in seconds since 1970 (None: not in the log)."""

    rank: int
    log: str = ""
    host: str = ""
    size: int | None = None  # "rank R of N"
    pid: int | None = None
    earlier_runs: int = 0
    first: float | None = None
    last: float | None = None
    last_message: str = ""
    starting: float | None = None
    join_attempts: int = 1  # more when a `ray start` failed and was started again
    joined: float | None = None
    ip: str = ""
    resources: str = ""
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
    exit_time: float | None = None
    exit_code: int | None = None
    errors: list[tuple[float, str]] = field(default_factory=list)  # this rank's own failures
    # Rank 0's errors about other ranks (one failed, some did not join): (time, rank, host, log, message).
    job_errors: list[tuple[float, int, str, str, str]] = field(default_factory=list)
    steps: list[tuple[float, str]] = field(default_factory=list)  # every line: (time, its first line)
    warnings: list[tuple[float, str]] = field(default_factory=list)
    peers: dict[int, Peer] = field(default_factory=dict)  # rank 0: what it heard of the others


def rank_facts(rank: int, text: str, log: str = "") -> RankFacts:
    """One rank log's text -> what it says (the last run only, when a job id was re-used)."""
    lines, earlier = last_run(parse_lines(text))
    facts = RankFacts(rank=rank, log=log, earlier_runs=earlier)
    if not lines:
        return facts
    facts.host, facts.first, facts.last = lines[0].host, lines[0].time, lines[-1].time
    facts.last_message = lines[-1].message.splitlines()[0]
    for line in lines:
        facts.steps.append((line.time, line.message.splitlines()[0]))
        _read_line(facts, line.time, line.message)
    return facts


def _read_line(facts: RankFacts, time: float, message: str) -> None:
    if match := _CONTEXT.match(message):
        facts.pid, facts.size = int(match.group(2)), int(match.group(4))
    elif message.startswith("ERROR: "):
        error = message[len("ERROR: "):]
        if relayed := _RELAYED.match(error):
            facts.job_errors.append((time, int(relayed.group(1)), relayed.group(2), relayed.group(4), relayed.group(3)))
        elif _TIMED_OUT.match(error):
            facts.job_errors.append((time, facts.rank, facts.host, facts.log, error))
            for peer in _MISSING_PEER.finditer(error):
                _peer(facts, int(peer.group(1)), host=peer.group(2))
        else:
            facts.errors.append((time, error))
    elif message.startswith("WARNING: "):
        facts.warnings.append((time, message[len("WARNING: "):]))
        if _SIGNAL.match(message) and facts.signal is None:
            facts.signal = time
        if retry := _RETRY.search(message):
            facts.join_attempts = int(retry.group(1))
    elif _SESSION_SENT.match(message):
        facts.session_sent = time
    elif _STARTING.match(message):
        facts.starting = time
    elif match := _HEAD_STARTED.match(message):
        facts.joined, facts.ip, facts.resources = time, match.group(1), _plain_resources(match.group(4))
    elif match := _CONNECTED.match(message):
        if int(match.group(1)) == facts.rank:
            facts.joined, facts.ip, facts.resources = time, match.group(2), _plain_resources(match.group(3))
        else:
            _peer(facts, int(match.group(1)), ip=match.group(2), resources=_plain_resources(match.group(3)), joined=time)
    elif match := _PEER_HOST.match(message):
        _peer(facts, int(match.group(1)), host=match.group(2))
    elif match := _PEER_IDLE.match(message):
        _peer(facts, int(match.group(1)), idle=True, joined=time)
    elif match := _JOIN_SLOT.match(message):
        _peer(facts, int(match.group(1)), join_slot=time)
    elif message.startswith(_IDLE):
        facts.idle = time
    elif _ALL_RUNNING.match(message):
        facts.all_running = time
    elif match := _DRIVER_STARTED.match(message):
        facts.driver_started, facts.driver = time, match.group(1)
    elif message.startswith(_SCRIPT_CONNECTED):
        facts.driver_started, facts.driver = time, "the calling script (mpiray.init)"
    elif match := _DRIVER_EXITED.match(message):
        facts.driver_exited, facts.driver_code = time, int(match.group(1))
    elif _ENDED.match(message):
        facts.ended = time
    elif match := _STOPPED.match(message):
        facts.stopped, facts.stopped_count = time, int(match.group(1))
        facts.stopped_seconds, facts.sigkilled = float(match.group(2)), int(match.group(3))
    elif match := _EXIT.match(message):
        facts.exit_time, facts.exit_code = time, int(match.group(1))


def _plain_resources(text: str) -> str:
    """'node 54e0afa1b13c, 1 CPUs, 0 GPUs, 4.1 GiB' or '1 CPUs, 0 GPUs, 4.1 GiB, 2.9 s' -> '1 CPUs, 0 GPUs, 4.1 GiB'."""
    match = _RESOURCES.search(text)
    return match.group(0) if match else text


def _peer(facts: RankFacts, rank: int, **known) -> None:
    peer = facts.peers.setdefault(rank, Peer())
    for name, value in known.items():
        if value not in ("", None, False):
            setattr(peer, name, value)
