"""`mpiray logs [LOG_DIR/]JOB_ID`: a job's rank logs read for the user, at a glance.

Each rank writes LOG_DIR/JOB_ID/rank-NNNN.log, one timestamped line per start-up step (logs.RankLog).
This module reads them back: the cluster table (rank, host, IP, resources, joined after, status),
the start-up phases, the first error and the ranks that never reported, as text, as JSON
(`--json`) or as a timeline image (`--png`). Parsing is pure functions over the logs' text, so a
failed or killed job's partial logs (a log that stops mid-way, ranks without a log) read as well as
a clean one's. Times are seconds after the job's first log line, on the ranks' own clocks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

# ---- the rank log's lines -------------------------------------------------------------------------

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) rank (\d+) \(([^)]*)\): ?(.*)$")
_EPOCH = datetime(1970, 1, 1)

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
            lines.append(Line((stamp - _EPOCH).total_seconds(), int(match.group(2)), match.group(3), match.group(4)))
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


# ---- the whole job ------------------------------------------------------------------------------

OK, FAILED, NEVER_REPORTED, IDLE = "ok", "failed", "never reported", "idle"
SEGMENTS = ("waiting", "starting", "alive", "idle", "driver", "stopping")


def analyse(job_id: str, job_dir: str, logs: Mapping[int, tuple[str, str]], changed: float | None = None) -> dict:
    """Every rank's log (rank -> (path, text)) -> the job's report: plain data, as `--json` prints it.

    Ranks without a log are those up to rank 0's "rank 0 of N" (or the highest rank seen). changed:
    when the job dir last changed (local time, as the logs' stamps): a killed job's ranks lived at
    least until their last line, and its guards wrote there when they died, so their last state is
    drawn on until then, hatched.
    """
    facts = {rank: rank_facts(rank, text, path) for rank, (path, text) in logs.items()}
    head = facts.get(0)
    # A worker's log whose last line is older than rank 0's first is an earlier run's (a re-used job id).
    if head is not None and head.first is not None:
        stale = [r for r, f in facts.items() if r and f.last is not None and f.last < head.first]
        for rank in stale:
            facts[rank] = RankFacts(rank=rank, log=facts[rank].log)
    sizes = [f.size for f in facts.values() if f.size]
    size = (head.size if head and head.size else max(sizes, default=0)) or (max(facts, default=-1) + 1)
    size = max(size, max(facts, default=-1) + 1)
    peers = head.peers if head else {}
    known = [f for f in facts.values() if f.first is not None]
    t0 = min((f.first for f in known), default=None)

    def rel(time: float | None) -> float | None:
        return None if time is None or t0 is None else round(time - t0, 3)

    head_alive = head.joined if head else None
    ranks = [_rank_entry(rank, facts.get(rank), peers.get(rank), head_alive, job_dir, rel) for rank in range(size)]
    unfinished = [entry for entry in ranks if entry["has_log"] and entry["exit_code"] is None]
    changed_s = rel(changed) if unfinished else None
    for entry in unfinished:
        entry["logged_until_s"] = entry["last_s"]
        if changed_s is not None and entry["segments"] and changed_s > entry["segments"][-1][2]:
            entry["segments"][-1][2] = changed_s
    for time, rank, _, _, message in head.job_errors if head else ():
        if rank != 0 and rank < size and not ranks[rank]["error"]:  # its own log does not say: rank 0's word
            ranks[rank].update(status=FAILED, error=message, error_s=rel(time))
    phases = _phases(head, ranks, facts, rel)
    first_error = _first_error(facts, rel)
    if first_error is not None and first_error["rank"] < size:  # rank 0 names a log relative to its own cwd
        first_error["log"] = ranks[first_error["rank"]]["log"]
    never = [_never_reported(entry, facts.get(entry["rank"]), rel) for entry in ranks
             if entry["status"] in (NEVER_REPORTED, FAILED) and entry["joined_s"] is None]
    exit_codes = {entry["exit_code"] for entry in ranks if entry["exit_code"] is not None}
    hosts = sorted({entry["host"] for entry in ranks if entry["host"]}, key=_natural)
    return {
        "job_id": job_id,
        "job_dir": job_dir,
        "ranks": size,
        "hosts": hosts,
        "started": None if t0 is None else _stamp(t0),
        "exit_code": head.exit_code if head and head.exit_code is not None else (exit_codes.pop() if len(exit_codes) == 1 else None),
        "driver": head.driver if head else "",
        "driver_exit_code": head.driver_code if head else None,
        "earlier_runs": max((f.earlier_runs for f in facts.values()), default=0),
        "cluster": ranks,
        "phases": phases,
        "first_error": first_error,
        "never_reported": never,
        "unfinished": [entry["rank"] for entry in unfinished],
        "job_dir_changed_s": changed_s,
        "warnings": sorted(
            ({"rank": f.rank, "s": rel(time), "message": message} for f in facts.values() for time, message in f.warnings),
            key=lambda w: w["s"],
        ),
    }


def _natural(name: str) -> list:
    """'node10' after 'node9'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _stamp(seconds: float) -> str:
    return (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _rank_entry(rank: int, facts: RankFacts | None, peer: Peer | None, head_alive: float | None, job_dir: str, rel) -> dict:
    facts = facts or RankFacts(rank=rank)
    peer = peer or Peer()
    joined = facts.joined if facts.joined is not None else peer.joined
    idle = facts.idle is not None or peer.idle
    if facts.errors:
        status = FAILED
    elif idle:
        status = IDLE
    elif joined is not None:
        status = OK
    else:
        status = NEVER_REPORTED
    resources = facts.resources or peer.resources
    entry = {
        "rank": rank,
        "host": facts.host or peer.host,
        "pid": facts.pid,
        "ip": facts.ip or peer.ip,
        "resources": parse_resources(resources),
        "resources_text": resources,
        "joined_s": None if idle else rel(joined),
        "status": status,
        "exit_code": facts.exit_code,
        "log": facts.log or os.path.join(job_dir, f"rank-{rank:04d}.log"),  # where it is, or would be
        "has_log": facts.first is not None,
        "logged_until_s": None,  # a log without an exit line: its last line (the bar goes on, hatched)
        "first_s": rel(facts.first),
        "last_s": rel(facts.last),
        "last_step": facts.last_message,
        "join_slot_s": rel(peer.join_slot),
        "join_attempts": facts.join_attempts,
        "error": facts.errors[0][1] if facts.errors else "",
        "error_s": rel(facts.errors[0][0]) if facts.errors else None,
        "stopped": {"processes": facts.stopped_count, "seconds": facts.stopped_seconds, "sigkilled": facts.sigkilled}
        if facts.stopped is not None else None,
    }
    # A worker's `ray start` may go once rank 0 lets it (its head ALIVE, or a join slot): before that it waits.
    release = peer.join_slot if peer.join_slot is not None else (head_alive if rank else None)
    entry["segments"] = _segments(facts, release, rel)
    # An error about the job (a startup timeout), not about this rank's node: marked, not "failed".
    own = [time for time, failed, *_ in facts.job_errors if failed == rank]
    entry["job_error_s"] = rel(own[0]) if own else None
    return entry


def stopping_start(facts: RankFacts) -> float | None:
    """When the rank began to stop: the driver's end, rank 0's word, a signal, a failure, or its Ray's stop."""
    starts = [t for t in (facts.driver_exited, facts.ended, facts.signal,
                          facts.errors[0][0] if facts.errors else None,
                          facts.job_errors[0][0] if facts.job_errors else None,
                          facts.stopped - facts.stopped_seconds if facts.stopped is not None else None) if t is not None]
    return min(starts) if starts else None


def _segments(facts: RankFacts, release: float | None, rel) -> list[list]:
    """The rank's time line: [kind, start, end] in seconds, kinds from SEGMENTS, in order.

    waiting: for the session, its host's plan, its go (release); starting: its `ray start` until the
    node is ALIVE; alive; idle (one Ray node per host); driver (rank 0); stopping: until its exit line.
    """
    if facts.first is None:
        return []
    stopping = stopping_start(facts)
    starting = facts.starting
    if starting is not None and release is not None and (facts.joined is None or release < facts.joined):
        starting = max(starting, release)
    if stopping is not None and starting is not None and starting > stopping:
        starting = None  # stopped before it was let go
    marks = [(facts.first, "waiting"), (starting, "starting"), (facts.joined, "alive"), (facts.idle, "idle"),
             (facts.driver_started, "driver"), (stopping, "stopping")]
    marks = sorted(((t, kind) for t, kind in marks if t is not None), key=lambda m: (m[0], SEGMENTS.index(m[1])))
    end = facts.exit_time if facts.exit_time is not None else facts.last
    segments = []
    for index, ((start, kind), (stop, _)) in enumerate(zip(marks, marks[1:] + [(end, "")])):
        start, stop = rel(start), rel(max(stop, start))
        if stop > start or index == len(marks) - 1:  # the last one even if the log stops right there
            segments.append([kind, start, stop])
    return segments


def _phases(head: RankFacts | None, ranks: list[dict], facts: Mapping[int, RankFacts], rel) -> list[dict]:
    head = head or RankFacts(rank=0)
    joined = [e for e in ranks if e["rank"] != 0 and e["joined_s"] is not None]
    last_join = max(joined, key=lambda e: e["joined_s"], default=None)
    peers = head.peers
    stopped = [f for f in facts.values() if f.stopped is not None]
    last_stop = max(stopped, key=lambda f: f.stopped, default=None)
    slowest = max(stopped, key=lambda f: f.stopped_seconds, default=None)
    exits = [f for f in facts.values() if f.exit_time is not None]
    last_exit = max(exits, key=lambda f: f.exit_time, default=None)

    def phase(name, time, rank=None, detail=""):
        return {"phase": name, "s": rel(time), "rank": rank, "detail": detail}

    def joined_at(rank: int) -> float | None:
        own = facts.get(rank)
        return own.joined if own is not None and own.joined is not None else peers[rank].joined

    return [
        phase("session sent", head.session_sent, 0),
        phase("head alive", head.joined, 0, head.ip),
        phase("last join", joined_at(last_join["rank"]) if last_join else None, last_join["rank"] if last_join else None,
              f"{len(joined)} of {_count(len(ranks) - 1, 'worker')} joined" if len(ranks) > 1 else ""),
        phase("driver start", head.driver_started, 0, head.driver),
        phase("driver end", head.driver_exited, 0, "" if head.driver_code is None else f"code {head.driver_code}"),
        phase("teardown", last_stop.stopped if last_stop else None, last_stop.rank if last_stop else None,
              f"{_count(len(stopped), 'rank')} stopped their Ray; slowest: rank {slowest.rank}, {slowest.stopped_seconds:g} s"
              + (f" ({slowest.sigkilled} needed SIGKILL)" if slowest.sigkilled else "") if slowest else ""),
        phase("exit", last_exit.exit_time if last_exit else None, last_exit.rank if last_exit else None,
              f"{len(exits)} of {_count(len(ranks), 'rank')} logged an exit code"),
    ]


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'s' * (number != 1)}"


def _first_error(facts: Mapping[int, RankFacts], rel) -> dict | None:
    """The earliest ERROR line of any rank; one rank 0 relays is the failing rank's own."""
    candidates = []
    for f in facts.values():
        for time, message in f.errors:
            candidates.append((time, f.rank, f.host, f.log, message, f.rank))
        for time, rank, host, log, message in f.job_errors:
            candidates.append((time, rank, host, log, message, f.rank))
    if not candidates:
        return None
    time, rank, host, log, message, reported_by = min(candidates, key=lambda c: (c[0], c[5] != c[1]))
    return {"s": rel(time), "rank": rank, "host": host, "log": log, "message": message, "reported_by": reported_by}


def _never_reported(entry: dict, facts: RankFacts | None, rel) -> dict:
    """Why a rank has no join line: no log, its own failure, rank 0 stopping it, or a log that just ends."""
    never = {"rank": entry["rank"], "host": entry["host"], "log": entry["log"], "why": "no log", "detail": "", "s": None}
    if entry["status"] == FAILED:
        return {**never, "why": "failed", "detail": entry["error"], "s": entry["error_s"]}
    if facts is None:
        return never
    if facts.first is None:
        return {**never, "why": "empty log"}
    stop = stopping_start(facts)
    progress = [step for step in facts.steps if stop is None or step[0] < stop] or facts.steps
    time, step = progress[-1]
    if facts.ended is not None:
        why = "stopped by rank 0 before joining"
    elif facts.exit_code is None:
        why = "log ends before joining (killed, or still running)"
    else:
        why = f"exited with code {facts.exit_code} before joining"
    return {**never, "why": why, "detail": f"last step: {step}", "s": rel(time)}


def _never_groups(never: list[dict]) -> list[tuple[str, list[dict]]]:
    """Never-reported ranks grouped by what happened (a failure's text up to its details)."""
    groups: dict[str, list[dict]] = {}
    for n in never:
        key = n["why"] if n["why"] != "failed" else "failed: " + n["detail"].splitlines()[0].split(" (")[0]
        groups.setdefault(key, []).append(n)
    return list(groups.items())


# ---- where a job's logs are ---------------------------------------------------------------------

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
    return analyse(job_dir.name, str(job_dir), logs, (local - _EPOCH).total_seconds())


# ---- text --------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _short(text: str, width: int = 400) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    text = lines[0] if len(lines) < 2 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= width else text[: width - 1] + "…"


def _ranges(ranks: Sequence[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def format_report(report: dict, never_limit: int = 20) -> str:
    """The report as the terminal shows it."""
    out = []
    hosts = report["hosts"]
    code = report["exit_code"]
    out.append(
        f"mpiray job {report['job_id']}: {report['ranks']} ranks on {len(hosts)} host{'s' * (len(hosts) != 1)}"
        + (f" ({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''})" if hosts else "")
        + f", exit code {code if code is not None else 'unknown'}"
    )
    out.append(f"logs: {report['job_dir']}" + (f"; first line {report['started']} (times below: seconds after it)" if report["started"] else ""))
    if report["earlier_runs"]:
        out.append(f"note: this job id was used before; only the last run is shown ({report['earlier_runs']} earlier)")
    out.append("")
    rows = [("rank", "host", "ip", "resources", "joined s", "status", "exit")]
    for e in report["cluster"]:
        rows.append((str(e["rank"]), e["host"] or "?", e["ip"] or "-", e["resources_text"] or "-",
                     _seconds(e["joined_s"]), e["status"], "-" if e["exit_code"] is None else str(e["exit_code"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].rjust(widths[0])] + [c.ljust(w) for c, w in zip(row[1:4], widths[1:4])]
        cells += [row[4].rjust(widths[4]), row[5].ljust(widths[5]), row[6].rjust(widths[6])]
        out.append("  " + "  ".join(cells).rstrip())
    out.append("")
    out.append("phases (s after the first line; the rank that logged it, last of all where many did):")
    width = len(f"rank {report['ranks'] - 1}")
    for p in report["phases"]:
        line = f"  {p['phase']:<13} {_seconds(p['s']):>8}"
        if p["s"] is not None:
            line += f"  {'rank ' + str(p['rank']) if p['rank'] is not None else '':<{width}}  {_short(p['detail'], 100)}"
        out.append(line.rstrip())
    out.append("")
    error = report["first_error"]
    if error:
        via = f", reported by rank {error['reported_by']}" if error["reported_by"] != error["rank"] else ""
        out.append(f"first error: rank {error['rank']} on {error['host'] or '?'} at {_seconds(error['s'])} s{via} (log: {error['log']})")
        out.append(f"  {_short(error['message'])}")
    else:
        out.append("first error: none")
    never = report["never_reported"]
    if never:
        out.append(f"never reported (no join line): {len(never)} rank{'s' * (len(never) != 1)}")
        groups = _never_groups(never)
        for key, members in groups[:never_limit]:
            ranks = [n["rank"] for n in members]
            hosts = sorted({n["host"] for n in members if n["host"]})
            where = f" on {', '.join(hosts[:3])}{', ...' if len(hosts) > 3 else ''}" if hosts else ""
            example = members[0]
            if example["why"] in ("no log", "empty log"):
                out.append(f"  rank{'s' * (len(ranks) != 1)} {_ranges(ranks)}{where}: {example['why']}")
                continue
            at = f"at {_seconds(example['s'])} s"
            if example["why"] != "failed":
                what = f"{key}; rank {example['rank']}'s {example['detail'].replace(': ', f' {at}: ', 1)}"
            elif len(members) > 1:
                what = f"{key} (e.g. rank {example['rank']} {at})"
            else:
                what = f"failed {at}: {example['detail']}"
            out.append(f"  rank{'s' * (len(ranks) != 1)} {_ranges(ranks)}{where}: {_short(what, 220)}")
        if len(groups) > never_limit:
            out.append(f"  ... and {len(groups) - never_limit} more kinds (see --json)")
    else:
        out.append("never reported: none")
    unfinished = report["unfinished"]
    if unfinished:
        out.append(f"no exit line (killed, or still running): rank{'s' * (len(unfinished) != 1)} {_ranges(unfinished)}"
                   + (f"; the job dir last changed at {report['job_dir_changed_s']:.2f} s"
                      if report["job_dir_changed_s"] is not None else ""))
    retried = [e for e in report["cluster"] if e["join_attempts"] > 1]
    if retried:
        out.append("joins tried again: " + ", ".join(f"rank {e['rank']} ({e['join_attempts']} attempts)" for e in retried[:20])
                   + (f" and {len(retried) - 20} more" if len(retried) > 20 else ""))
    warnings = report["warnings"]
    if warnings:
        first = warnings[0]
        out.append(f"warnings: {len(warnings)}; first: rank {first['rank']} at {_seconds(first['s'])} s: {_short(first['message'], 160)}")
    return "\n".join(out)


# ---- the time line image ------------------------------------------------------------------------

COLOURS = {
    "waiting": "#c7c7c7",
    "starting": "#f5a623",
    "alive": "#2ca02c",
    "idle": "#aec7e8",
    "driver": "#1f4e9e",
    "stopping": "#9467bd",
}
ERROR_COLOUR = "#d62728"


class NoMatplotlib(Exception):
    pass


def draw_timeline(report: dict, path: Path) -> tuple[int, int]:
    """One horizontal bar per rank (segments in COLOURS), the phases as dotted lines; returns (width, height) in pixels."""
    try:
        # A Figure without pyplot: drawn by Agg into the file, no window, no global backend switch.
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as error:
        raise NoMatplotlib(f"--png needs matplotlib ({error}): pip install matplotlib") from None

    ranks = report["cluster"]
    count = max(len(ranks), 1)
    many = count > 60
    row = 0.3 if not many else max(0.02, 16.0 / count)  # inches per rank; large jobs fit in ~16 in
    labels = {e["rank"]: f"rank {e['rank']}" + (f" ({e['host']})" if e["host"] and not many else "") for e in ranks}
    top, bottom = 1.0, 1.0  # inches: title and phase names; axis label and legend
    width, height = 12.0, top + bottom + max(row * count, 1.2)
    left = (0.3 + 0.065 * max(map(len, labels.values()), default=6)) / width
    fig = Figure(figsize=(width, height), dpi=100)
    fig.subplots_adjust(left=left, right=0.98, top=1 - top / height, bottom=bottom / height)
    ax = fig.add_subplot()
    times = [s[2] for e in ranks for s in e["segments"]] + [p["s"] for p in report["phases"] if p["s"] is not None]
    end = max(times + [1.0])
    used = set()
    for e in ranks:
        y = e["rank"]
        if e["status"] in (FAILED, NEVER_REPORTED):  # a light red row: found at a glance among 1000
            ax.axhspan(y - 0.5, y + 0.5, color=ERROR_COLOUR, alpha=0.12, linewidth=0, zorder=0)
        for kind, start, stop in e["segments"]:
            used.add(kind)
            logged = stop if e["logged_until_s"] is None else min(stop, max(start, e["logged_until_s"]))
            ax.barh(y, max(logged - start, end * 0.002), left=start, height=0.72, color=COLOURS[kind], linewidth=0)
            if stop > logged:  # no line after its last one: it was killed somewhen up to here
                ax.barh(y, stop - logged, left=logged, height=0.72, color=COLOURS[kind], alpha=0.35,
                        hatch="///", edgecolor="white", linewidth=0)
        for error in (e["error_s"], e["job_error_s"]):
            if error is not None:
                ax.plot([error], [y], marker="X", markersize=4 if many else 10, color=ERROR_COLOUR,
                        markeredgecolor="white", markeredgewidth=0.8, linestyle="none", zorder=5)
        if not many and not e["has_log"]:
            ax.text(end * 0.01, y, "no log", va="center", fontsize=8, color=ERROR_COLOUR)
        elif not many and e["exit_code"] is None and e["segments"]:
            ax.text(e["segments"][-1][2] + end * 0.006, y, "no exit line", va="center", fontsize=8, color="#333333")
    phases = [p for p in report["phases"] if p["s"] is not None]
    for index, p in enumerate(sorted(phases, key=lambda p: p["s"])):
        ax.axvline(p["s"], color="#444444", linestyle=":", linewidth=1, zorder=4)
        ax.annotate(f"{p['phase']} {p['s']:.1f}s", (p["s"], 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 3 + 11 * (index % 3)), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7.5, color="#222222")
    ax.set_ylim(count - 0.5, -0.5)
    ticks = [e["rank"] for e in ranks][:: max(1, count // 40)]
    ax.set_yticks(ticks)
    ax.set_yticklabels([labels[r] for r in ticks], fontsize=6 if many else 8)
    ax.set_xlim(0, end * 1.08)
    ax.set_xlabel(f"seconds after the job's first log line ({report['started'] or 'none'})", fontsize=9)
    ax.grid(axis="x", color="#e6e6e6")
    ax.set_axisbelow(True)
    code = report["exit_code"]
    hosts = len(report["hosts"])
    fig.suptitle(
        f"mpiray job {report['job_id']}: start-up timeline, {report['ranks']} ranks on {hosts} host{'s' * (hosts != 1)}, "
        f"exit code {code if code is not None else 'unknown (no exit line)'}",
        y=1 - 0.15 / height, va="top", fontsize=11,
    )
    handles = [Patch(color=COLOURS[k], label=k) for k in SEGMENTS if k in used or k != "idle"]
    if any(e["error_s"] is not None or e["job_error_s"] is not None for e in ranks):
        handles.append(Line2D([], [], marker="X", color=ERROR_COLOUR, linestyle="none", markersize=8, label="error"))
    if report["job_dir_changed_s"] is not None:
        handles.append(Patch(facecolor="#999999", alpha=0.35, hatch="///", edgecolor="white",
                             label="after its last line (killed?)"))
    if any(e["status"] in (FAILED, NEVER_REPORTED) for e in ranks):
        handles.append(Patch(color=ERROR_COLOUR, alpha=0.12, label="failed / never reported"))
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.04 / height), ncol=len(handles),
               frameon=False, fontsize=9)
    fig.savefig(path)
    return round(width * 100), round(height * 100)


# ---- the command ------------------------------------------------------------------------------


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpiray logs",
        description="Explain a job from its rank logs: the cluster table, the start-up phases, the first "
        "error and the ranks that never reported. Works on a failed or killed job's partial logs.",
    )
    parser.add_argument("job", nargs="?", default=None,
                        help="a job's log dir, LOG_DIR/JOB_ID, or a JOB_ID under --log-dir "
                        "(default: the newest job there)")
    parser.add_argument("--log-dir", type=Path, default=Path(environ.get("MPIRAY_LOG_DIR") or "logs"),
                        help="where bare job ids are looked up (default: logs) [env MPIRAY_LOG_DIR]")
    parser.add_argument("--json", action="store_true", help="print the report as JSON, for scripts")
    parser.add_argument("--png", type=Path, metavar="FILE",
                        help="also draw the start-up timeline (one bar per rank) into FILE (needs matplotlib)")
    return parser


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """`mpiray logs ...`: 0 once the report is printed (whatever the job's own outcome); 2 for bad input."""
    args = build_parser(os.environ if environ is None else environ).parse_args(list(argv))
    try:
        job_dir = find_job_dir(args.job, args.log_dir)
        report = read_job(job_dir)
    except NoSuchJob as error:
        print(f"mpiray logs: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"mpiray logs: cannot read the job's logs: {error}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(report, indent=2) if args.json else format_report(report), flush=True)
    except BrokenPipeError:  # `mpiray logs JOB | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.png:
        try:
            width, height = draw_timeline(report, args.png)
        except NoMatplotlib as error:
            print(f"mpiray logs: {error}", file=sys.stderr)
            return 1
        except OSError as error:
            print(f"mpiray logs: cannot write {args.png}: {error}", file=sys.stderr)
            return 1
        if not args.json:
            print(f"timeline: {args.png} ({width}x{height})")
    return 0
