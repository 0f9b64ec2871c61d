"""All ranks' facts (parse.py) joined into the job's report (model.JobReport, which `--json` prints): the
cluster table's rows, each rank's time line, the start-up phases, the first error, why each rank
that never reported did not, each node's manifest, and why the job failed (classify.py). Times are
seconds after the job's first event, on the ranks' clocks."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta

from mpiray.logs.events import DECLARED, ERROR, INFO
from mpiray.logs.report import elastic
from mpiray.logs.report.classify import classify
from mpiray.logs.report.model import (
    DriverEvent,
    FirstError,
    FoundCause,
    JobReport,
    LostNode,
    NeverReported,
    Phase,
    RankEntry,
    RankWarning,
    Stopped,
)
from mpiray.logs.report.parse import EPOCH, JobError, Peer, RankFacts, describe, rank_facts

OK, FAILED, NEVER_REPORTED, IDLE = "ok", "failed", "never reported", "idle"
SEGMENTS = ("waiting", "starting", "alive", "idle", "driver", "stopping")


def analyse(job_id: str, job_dir: str, logs: Mapping[int, tuple[str, list[dict]]], changed: float | None = None,
            *, ray_logs: Callable[[int], str] | Mapping[int, str] | None = None,
            joins: Mapping[str, Mapping[int, tuple[str, list[dict]]]] | None = None,
            autoscaler: list[dict] | None = None, drivers: Mapping[str, list[dict]] | None = None) -> JobReport:
    """Every rank's events (rank -> (its human log's path, its records)) -> the job's report.
    ray_logs: rank -> the text of what its Ray wrote (classify.py reads it); joins: the jobs that joined this
    cluster, job id -> their ranks' events; autoscaler: its events; drivers: the driver's own event logs (driver.job_log:
    its name -> its records), read by the kinds each declares (the trainer's: where its learners ran, a learner's
    node lost).

    Ranks without a log are those up to rank 0's "rank 0 of N" (or the highest rank seen). changed:
    when the job dir last changed (local time, as the logs' stamps): a killed job's ranks lived at
    least until their last line, and its guards wrote there when they died, so their last state is
    drawn on until then, hatched.
    """
    facts = _this_runs_facts(logs)
    head = facts.get(0)
    size = _size(facts, head)
    peers = head.peers if head else {}
    t0 = min((f.first for f in facts.values() if f.first is not None), default=None)
    said = [event for name, records in sorted((drivers or {}).items()) for event in driver_events(name, records)]

    def rel(time: float | None) -> float | None:
        return None if time is None or t0 is None else round(time - t0, 3)

    head_alive = head.joined if head else None
    ranks = [_rank_entry(rank, facts.get(rank), peers.get(rank), head_alive, job_dir=job_dir, rel=rel) for rank in range(size)]
    unfinished = [entry for entry in ranks if entry.has_log and entry.exit_code is None]
    changed_s = _drawn_until(unfinished, rel(changed)) if unfinished else None
    _relay_job_errors(head, ranks, size, rel)
    first_error = _first_error(facts, rel)
    if first_error is not None and first_error.rank < size:  # rank 0 names a log relative to its own cwd
        first_error = dataclasses.replace(first_error, log=ranks[first_error.rank].log)
    exit_code = _exit_code(head, ranks)
    return JobReport(
        job_id=job_id,
        job_dir=job_dir,
        ranks=size,
        hosts=sorted({entry.host for entry in ranks if entry.host}, key=_natural),
        started=None if t0 is None else _stamp(t0),
        exit_code=exit_code,
        driver=head.driver if head else "",
        driver_exit_code=head.driver_code if head else None,
        batch_job=head.batch_job if head else None,
        left_out=head.left_out if head else None,
        earlier_runs=max((f.earlier_runs for f in facts.values()), default=0),
        cluster=ranks,
        phases=_phases(head, ranks, facts, rel),
        first_error=first_error,
        never_reported=[_never_reported(entry, facts.get(entry.rank), rel) for entry in ranks
                        if entry.status in (NEVER_REPORTED, FAILED) and entry.joined_s is None],
        unfinished=[entry.rank for entry in unfinished],
        job_dir_changed_s=changed_s,
        **_notices(facts, rel),
        causes=_job_causes(ranks, facts, ray_logs or {}, exit_code, head=head, said=said),
        driver_events=[event for event in said if event.level != ERROR or event.cause is None],
        manifests={str(rank): f.manifest for rank, f in sorted(facts.items()) if f.manifest is not None},
        **_elastic_report(logs, joins or {}, autoscaler or [], rel),
    )


def _this_runs_facts(logs: Mapping[int, tuple[str, list[dict]]]) -> dict[int, RankFacts]:
    """Each rank's facts; a worker's log whose last line is older than rank 0's first is an earlier run's (a
    re-used job id): that rank has none."""
    facts = {rank: rank_facts(rank, records, path) for rank, (path, records) in logs.items()}
    head = facts.get(0)
    if head is not None and head.first is not None:
        stale = [r for r, f in facts.items() if r and f.last is not None and f.last < head.first]
        for rank in stale:
            facts[rank] = RankFacts(rank=rank, log=facts[rank].log)
    return facts


def _size(facts: Mapping[int, RankFacts], head: RankFacts | None) -> int:
    """The job's ranks: rank 0's "rank 0 of N", else the largest any rank said, and never fewer than the logs."""
    sizes = [f.size for f in facts.values() if f.size]
    size = (head.size if head and head.size else max(sizes, default=0)) or (max(facts, default=-1) + 1)
    return max(size, max(facts, default=-1) + 1)


def _drawn_until(unfinished: list[RankEntry], changed_s: float | None) -> float | None:
    """Ranks with no exit line lived at least until the job dir last changed: their last segment goes on to
    then; returns that time."""
    for entry in unfinished:
        entry.drawn_until(changed_s)
    return changed_s


def _relay_job_errors(head: RankFacts | None, ranks: list[RankEntry], size: int, rel: Callable) -> None:
    """A worker whose own log does not say it failed, where rank 0's does: rank 0's word."""
    for error in head.job_errors if head else ():
        time, rank, message, cause = error.time, error.rank, error.message, error.cause
        if rank != 0 and rank < size and not ranks[rank].error:
            ranks[rank].failed(FAILED, message, rel(time), cause)


def _exit_code(head: RankFacts | None, ranks: list[RankEntry]) -> int | None:
    """Rank 0's exit code, else the one code every rank that exited gave, else unknown."""
    if head and head.exit_code is not None:
        return head.exit_code
    codes = {entry.exit_code for entry in ranks if entry.exit_code is not None}
    return next(iter(codes)) if len(codes) == 1 else None


def _job_causes(ranks: list[RankEntry], facts: Mapping[int, RankFacts],
                ray_logs: Callable[[int], str] | Mapping[int, str], exit_code: int | None, *, head: RankFacts | None,
                said: list[DriverEvent]) -> list[FoundCause]:
    """classify.py's causes; a failed driver that logged an event of a kind it declares a cause failed of that."""
    causes = classify(ranks, facts, ray_logs, exit_code, driver_code=head.driver_code if head else None)
    if exit_code in (0, None):
        return causes
    by_kind: dict[str, list[DriverEvent]] = {}
    for event in said:
        if event.cause is not None:
            by_kind.setdefault(event.event, []).append(event)
    found = []
    for kind, events in by_kind.items():
        title, fix = events[0].cause or ("", "")
        found.append(FoundCause(cause=kind, title=title, fix=fix, ranks=[0],
                                evidence=[f"{event.driver}: {event.text[:200]}" for event in events[:3]]))
    return found + [c for c in causes if not (found and c.cause == "driver_failed")]


def driver_events(name: str, records: list[dict]) -> list[DriverEvent]:
    """A driver's log's events as its own declaration (events.DECLARED) reads them: each with its level, its text
    and the cause its kind explains (None: it explains none). A log that declares nothing is listed as written."""
    kinds: dict[str, dict] = {}
    out: list[DriverEvent] = []
    for record in records:
        if record["event"] == DECLARED:
            kinds = dict(record["fields"].get("kinds") or {})
            continue
        kind, fields = kinds.get(record["event"], {}), record.get("fields", {})
        try:
            text = str(kind["text"]).format(**fields)
        except (KeyError, IndexError, ValueError):
            text = f"{record['event']} {fields}"
        cause = kind.get("cause")
        out.append(DriverEvent(driver=name, event=record["event"], level=record.get("level", INFO), fields=fields, text=text,
                               cause=(cause[0], cause[1]) if cause else None))
    return out


def _notices(facts: Mapping[int, RankFacts], rel: Callable) -> dict:
    """Every rank's warnings and the nodes they saw lost, in time order."""
    return {
        "warnings": sorted((RankWarning(f.rank, rel(time), message) for f in facts.values()
                            for time, message in f.warnings), key=lambda w: w.s or 0.0),
        "lost_nodes": sorted((LostNode(rank, rel(time), f.rank, message) for f in facts.values()
                              for time, rank, message in f.lost_nodes), key=lambda n: n.s or 0.0),
    }


def _elastic_report(logs: Mapping[int, tuple[str, list[dict]]], joins: Mapping[str, Mapping[int, tuple[str, list[dict]]]],
                    autoscaler: list[dict], rel: Callable) -> dict:
    """The jobs that joined (a --dry-run --join's only planned: its nodes never ran), the autoscaler's
    decisions, and the cluster's nodes over time where either grew it."""
    planned = sorted(job for job, ranks in joins.items()
                     if any(r["event"] == "dry_run_node" for _, records in ranks.values() for r in records))
    joins = {job: ranks for job, ranks in joins.items() if job not in planned}
    return {
        "joined_jobs": elastic.joined_jobs(joins, rel),
        "planned_joins": planned,
        "autoscaler": elastic.decisions(autoscaler, rel),
        "nodes_over_time": elastic.nodes_over_time(
            [records for _, records in logs.values()] + [records for job in joins.values() for _, records in job.values()],
            rel) if joins or autoscaler else [],
    }


def _natural(name: str) -> list:
    """'node10' after 'node9'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _stamp(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _rank_entry(rank: int, facts: RankFacts | None, peer: Peer | None, head_alive: float | None, *, job_dir: str,
                rel) -> RankEntry:
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
    # A worker's `ray start` may go once rank 0 lets it (its head ALIVE, or a join slot): before that it waits.
    release = peer.join_slot if peer.join_slot is not None else (head_alive if rank else None)
    # An error about the job (a startup timeout), not about this rank's node: marked, not "failed".
    own = [error.time for error in facts.job_errors if error.rank == rank]
    return RankEntry(
        rank=rank,
        host=facts.host or peer.host,
        pid=facts.pid,
        ip=facts.ip or peer.ip,
        resources=resources,
        resources_text=describe(resources),
        joined_s=None if idle else rel(joined),
        status=status,
        exit_code=facts.exit_code,
        log=facts.log or os.path.join(job_dir, f"rank-{rank:04d}.log"),
        has_log=facts.first is not None,
        logged_until_s=None,
        first_s=rel(facts.first),
        last_s=rel(facts.last),
        last_step=facts.last_event,
        join_slot_s=rel(peer.join_slot),
        join_attempts=facts.join_attempts,
        error=facts.errors[0].message if facts.errors else "",
        error_s=rel(facts.errors[0].time) if facts.errors else None,
        cause=facts.errors[0].cause if facts.errors else "",
        launched_s=rel(facts.launched),
        mpi_ready_s=rel(facts.mpi_ready),
        stopped=Stopped(facts.stopped_count, facts.stopped_seconds, facts.sigkilled)
        if facts.stopped is not None else None,
        segments=_segments(facts, release, rel),
        job_error_s=rel(own[0]) if own else None,
    )


def stopping_start(facts: RankFacts) -> float | None:
    """When the rank began to stop: the driver's end, rank 0's word, a signal, a failure, or its Ray's stop."""
    starts = [t for t in (facts.driver_exited, facts.ended, facts.signal,
                          facts.errors[0].time if facts.errors else None,
                          facts.job_errors[0].time if facts.job_errors else None,
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


def _phases(head: RankFacts | None, ranks: list[RankEntry], facts: Mapping[int, RankFacts], rel) -> list[Phase]:
    head = head or RankFacts(rank=0)
    joined = [e for e in ranks if e.rank != 0 and e.joined_s is not None]
    last_join = max(joined, key=lambda e: e.joined_s or 0.0, default=None)
    peers = head.peers
    stopped = [f for f in facts.values() if f.stopped is not None]
    last_stop = max(stopped, key=lambda f: f.stopped or 0.0, default=None)
    slowest = max(stopped, key=lambda f: f.stopped_seconds, default=None)
    exits = [f for f in facts.values() if f.exit_time is not None]
    last_exit = max(exits, key=lambda f: f.exit_time or 0.0, default=None)

    def phase(name, time, rank=None, detail=""):
        return Phase(name, rel(time), rank, detail)

    def joined_at(rank: int) -> float | None:
        own = facts.get(rank)
        return own.joined if own is not None and own.joined is not None else peers[rank].joined

    return [
        phase("session sent", head.session_sent, 0),
        phase("head alive", head.joined, 0, head.ip),
        phase("last join", joined_at(last_join.rank) if last_join else None, last_join.rank if last_join else None,
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


def _first_error(facts: Mapping[int, RankFacts], rel) -> FirstError | None:
    """The earliest ERROR line of any rank; one rank 0 relays is the failing rank's own."""
    # (the error as rank 0 would relay it, who reported it): a rank's own wins over a relay of it at the same time
    candidates = [(JobError(time=e.time, rank=f.rank, host=f.host, log=f.log, message=e.message, cause=e.cause), f.rank)
                  for f in facts.values() for e in f.errors]
    candidates += [(error, f.rank) for f in facts.values() for error in f.job_errors]
    if not candidates:
        return None
    error, reported_by = min(candidates, key=lambda c: (c[0].time, c[1] != c[0].rank))
    return FirstError(s=rel(error.time), rank=error.rank, host=error.host, log=error.log, message=error.message,
                      reported_by=reported_by, cause=error.cause)


def _never_reported(entry: RankEntry, facts: RankFacts | None, rel) -> NeverReported:
    """Why a rank has no join line: no log, its own failure, rank 0 stopping it, or a log that just ends."""
    never = NeverReported(entry.rank, entry.host, entry.log, "no log")
    if entry.status == FAILED:
        return dataclasses.replace(never, why="failed", detail=entry.error, s=entry.error_s)
    if facts is None:
        return never
    if facts.first is None:
        return dataclasses.replace(never, why="empty log")
    stop = stopping_start(facts)
    progress = [step for step in facts.steps if stop is None or step[0] < stop] or facts.steps
    time, step = progress[-1]  # an event's name: the human log's words may change
    if facts.ended is not None:
        why = "stopped by rank 0 before joining"
    elif facts.exit_code is None:
        why = "log ends before joining (killed, or still running)"
    else:
        why = f"exited with code {facts.exit_code} before joining"
    return dataclasses.replace(never, why=why, detail=f"last step: {step}", s=rel(time))
