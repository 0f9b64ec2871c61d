"""A cluster that grew and shrank: the jobs that joined it (join-JOBID-rank-NNNN.jsonl, their own job ids),
the autoscaler's decisions (autoscaler-rank-0000.jsonl) and the cluster's Ray nodes over time, read from
the events as the rest of the report is."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mpiray.logs.events import text
from mpiray.logs.report.model import Decision, JoinedJob, JoinedRank
from mpiray.logs.report.parse import describe, last_run, local_seconds, rank_facts

# Where a node comes and goes in a rank's events.
NODE_UP = ("head_alive", "node_alive")
NODE_DOWN = ("processes_stopped",)


def joined_jobs(joins: Mapping[str, Mapping[int, tuple[str, list[dict]]]], rel: Callable) -> list[JoinedJob]:
    """Each joined job: its ranks with host, IP, resources, when their node joined and left, exit code."""
    jobs = []
    for job_id, logs in sorted(joins.items()):
        ranks = []
        for rank, (path, records) in sorted(logs.items()):
            facts = rank_facts(rank, records, path)
            end = facts.exit_time if facts.exit_time is not None else facts.last
            marks = [(facts.first, "starting"), (facts.joined, "alive"), (facts.stopped and facts.stopped -
                                                                          facts.stopped_seconds, "stopping")]
            marks = [(t, kind) for t, kind in marks if t is not None]
            segments = [[kind, rel(start), rel(stop)] for (start, kind), (stop, _) in zip(marks, marks[1:] + [(end, "")])]
            ranks.append(JoinedRank(rank=rank, host=facts.host, ip=facts.ip, resources=facts.resources,
                                    resources_text=describe(facts.resources),
                                    joined_s=rel(facts.joined), left_s=rel(facts.stopped), exit_code=facts.exit_code,
                                    log=path, error=facts.errors[0].message if facts.errors else "", segments=segments))
        codes = {r.exit_code for r in ranks if r.exit_code is not None}
        jobs.append(JoinedJob(job_id, ranks, codes.pop() if len(codes) == 1 else None))
    return jobs


def decisions(records: list[dict], rel: Callable) -> list[Decision]:
    """The autoscaler's events: what it saw and did, in order."""
    return [Decision(s=rel(local_seconds(r)), event=r["event"], fields=r["fields"], level=r["level"],
                     text=text(r["event"], r["fields"]))
            for r in records]


def nodes_over_time(all_records: list[list[dict]], rel: Callable) -> list[list[float]]:
    """[[s, Ray nodes]]: one step each time a rank's node joined or stopped (every job's ranks)."""
    steps = []
    for records in (last_run(records)[0] for records in all_records):
        up = next((local_seconds(r) for r in records if r["event"] in NODE_UP), None)
        if up is None:
            continue
        steps.append((up, 1))
        down = next((local_seconds(r) for r in records if r["event"] in NODE_DOWN), None)
        if down is not None:
            steps.append((down, -1))
    count, series = 0, []
    for when, change in sorted(steps):
        count += change
        series.append([rel(when), count])
    return series
