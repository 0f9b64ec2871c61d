"""The report (analyse.py) as the terminal shows it: the header, the cluster table, the phases, the errors."""

from __future__ import annotations

from collections.abc import Sequence

from mpiray.logs.report.model import FoundCause, JobReport, NeverReported


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


def format_report(report: JobReport, never_limit: int = 20, manifest_limit: int = 8) -> str:
    """The report as the terminal shows it."""
    out = _header(report) + [""] + _cluster_table(report) + [""] + _phases(report) + [""]
    out += _first_error(report) + _never_reported(report, never_limit) + _notes(report)
    out += _elastic(report)
    out += _causes(report.causes)
    out += _manifests(report.manifests, manifest_limit)
    return "\n".join(out)


def _header(report: JobReport) -> list[str]:
    """The job, its hosts and exit code; where its logs are; its batch job; what the driver's own log said."""
    out = []
    hosts = report.hosts
    code = report.exit_code
    out.append(
        f"mpiray job {report.job_id}: {report.ranks} ranks on {len(hosts)} host{'s' * (len(hosts) != 1)}"
        + (f" ({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''})" if hosts else "")
        + f", exit code {code if code is not None else 'unknown'}"
    )
    started = f"; first event {report.started} (times below: seconds after it)" if report.started else ""
    out.append(f"logs: {report.job_dir}{started}")
    if report.earlier_runs:
        out.append(f"note: this job id was used before; only the last run is shown ({report.earlier_runs} earlier)")
    batch = report.batch_job
    if batch:
        cpus = ", ".join(f"{host} {n}" for host, n in batch.get("cpus", {}).items())
        walltime = f"walltime {batch['walltime']:g} s" if batch.get("walltime") else "no walltime"
        out.append(f"{batch.get('scheduler')} job {batch.get('job_id')}: select {batch.get('select')}, CPUs {cpus}, "
                   f"{walltime}, run {batch.get('run_count')}")
    for said in report.driver_events:
        out.append(f"{said.driver}: {said.text}")
    return out


def _cluster_table(report: JobReport) -> list[str]:
    """One row per rank: host, address, resources, when it joined, its status and exit code."""
    out = []
    rows = [("rank", "host", "ip", "resources", "joined s", "status", "exit")]
    for e in report.cluster:
        rows.append((str(e.rank), e.host or "?", e.ip or "-", e.resources_text or "-",
                     _seconds(e.joined_s), e.status, "-" if e.exit_code is None else str(e.exit_code)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].rjust(widths[0])] + [c.ljust(w) for c, w in zip(row[1:4], widths[1:4])]
        cells += [row[4].rjust(widths[4]), row[5].ljust(widths[5]), row[6].rjust(widths[6])]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _phases(report: JobReport) -> list[str]:
    out = ["phases (s after the first event; the rank that logged it, last of all where many did):"]
    width = len(f"rank {report.ranks - 1}")
    for p in report.phases:
        line = f"  {p.phase:<13} {_seconds(p.s):>8}"
        if p.s is not None:
            line += f"  {'rank ' + str(p.rank) if p.rank is not None else '':<{width}}  {_short(p.detail, 100)}"
        out.append(line.rstrip())
    return out


def _first_error(report: JobReport) -> list[str]:
    error = report.first_error
    if not error:
        return ["first error: none"]
    via = f", reported by rank {error.reported_by}" if error.reported_by != error.rank else ""
    return [f"first error: rank {error.rank} on {error.host or '?'} at {_seconds(error.s)} s{via} "
            f"(log: {error.log})", f"  {_short(error.message)}"]


def _never_reported(report: JobReport, never_limit: int) -> list[str]:
    """The ranks that never said they joined, grouped by why (at most never_limit groups)."""
    never = report.never_reported
    if not never:
        return ["never reported: none"]
    out = [f"never reported (no join line): {len(never)} rank{'s' * (len(never) != 1)}"]
    groups = _never_groups(never)
    for key, members in groups[:never_limit]:
        ranks = [n.rank for n in members]
        hosts = sorted({n.host for n in members if n.host})
        where = f" on {', '.join(hosts[:3])}{', ...' if len(hosts) > 3 else ''}" if hosts else ""
        example = members[0]
        if example.why in ("no log", "empty log"):
            out.append(f"  rank{'s' * (len(ranks) != 1)} {_ranges(ranks)}{where}: {example.why}")
            continue
        at = f"at {_seconds(example.s)} s"
        if example.why != "failed":
            what = f"{key}; rank {example.rank}'s {example.detail.replace(': ', f' {at}: ', 1)}"
        elif len(members) > 1:
            what = f"{key} (e.g. rank {example.rank} {at})"
        else:
            what = f"failed {at}: {example.detail}"
        out.append(f"  rank{'s' * (len(ranks) != 1)} {_ranges(ranks)}{where}: {_short(what, 220)}")
    if len(groups) > never_limit:
        out.append(f"  ... and {len(groups) - never_limit} more kinds (see --json)")
    return out


def _notes(report: JobReport) -> list[str]:
    """Ranks with no exit line, joins tried again, the first warning, lost nodes."""
    out = []
    unfinished = report.unfinished
    if unfinished:
        out.append(f"no exit line (killed, or still running): rank{'s' * (len(unfinished) != 1)} {_ranges(unfinished)}"
                   + (f"; the job dir last changed at {report.job_dir_changed_s:.2f} s"
                      if report.job_dir_changed_s is not None else ""))
    retried = [e for e in report.cluster if e.join_attempts > 1]
    if retried:
        out.append("joins tried again: " + ", ".join(f"rank {e.rank} ({e.join_attempts} attempts)" for e in retried[:20])
                   + (f" and {len(retried) - 20} more" if len(retried) > 20 else ""))
    if report.left_out is not None:
        left = report.left_out
        out.append(f"left out by the pre-flight: {left.hosts} ({left.nodes} of {left.requested} Ray nodes started): "
                   f"{_short(left.why, 200)}; next submission: {left.exclude}")
    warnings = report.warnings
    if warnings:
        first = warnings[0]
        out.append(f"warnings: {len(warnings)}; first: rank {first.rank} at {_seconds(first.s)} s: "
                   f"{_short(first.message, 160)}")
    for lost in report.lost_nodes[:10]:
        out.append(f"lost node: rank {lost.rank} at {_seconds(lost.s)} s: {_short(lost.message, 160)}")
    return out


def _elastic(report: JobReport, decisions_limit: int = 40) -> list[str]:
    """The jobs that joined the cluster, the autoscaler's decisions, and its nodes over time."""
    out = []
    for job in report.joined_jobs:
        code = "-" if job.exit_code is None else job.exit_code
        out += ["", f"joined job {job.job_id} ({len(job.ranks)} rank{'s' * (len(job.ranks) != 1)}, exit {code}):"]
        for r in job.ranks:
            out.append(f"  rank {r.rank}  {r.host or '?'}  {r.ip or '-'}  {r.resources_text or '-'}  "
                       f"joined {_seconds(r.joined_s)} s, left {_seconds(r.left_s)} s"
                       + (f"  error: {_short(r.error, 120)}" if r.error else ""))
    if report.planned_joins:
        out += ["", f"planned joins (--dry-run --join: no node joined): {', '.join(report.planned_joins)}"]
    decisions = report.autoscaler
    if decisions:
        out += ["", f"autoscaler ({len(decisions)} decisions):"]
        for d in decisions[:decisions_limit]:
            out.append(f"  {_seconds(d.s):>8}  {d.event:<16} {_short(d.text, 140)}")
        if len(decisions) > decisions_limit:
            out.append(f"  ... and {len(decisions) - decisions_limit} more (see --json)")
    series = report.nodes_over_time
    if series:
        peak = max(series, key=lambda step: step[1])
        out.append(f"Ray nodes over time: {series[0][1]} at {_seconds(series[0][0])} s, at most {peak[1]} "
                   f"(from {_seconds(peak[0])} s), {series[-1][1]} at the end ({_seconds(series[-1][0])} s)")
    return out


def _causes(causes: list[FoundCause]) -> list[str]:
    if not causes:
        return []
    out = ["", "why it failed:"]
    for c in causes:
        out.append(f"  {c.cause} (rank{'s' * (len(c.ranks) != 1)} {_ranges(c.ranks)}): {c.title}")
        for evidence in c.evidence:
            out.append(f"    seen: {_short(evidence, 200)}")
        out.append(f"    fix: {c.fix}")
        if c.note:
            out.append(f"    note: {c.note}")
    return out


def _manifests(manifests: dict, limit: int) -> list[str]:
    if not manifests:
        return []
    out = ["", "nodes (manifests; all fields with --json):"]
    for rank, m in list(manifests.items())[:limit]:
        ports = "; ".join(f"{name} {','.join(map(str, ports))}" for name, ports in m.get("listening", {}).items())
        out.append(f"  rank {rank}: {m.get('ip')} ({m.get('interface')}), Ray {m.get('ray')}, Python {m.get('python')}, "
                   f"mpi4py {m.get('mpi4py')}, token {m.get('token')}")
        out.append(f"    listening: {ports or 'none seen'}")
        if m.get("labels"):
            out.append("    labels: " + ", ".join(f"{key}={value}" for key, value in m["labels"].items()))
        collectives = ", ".join(f"{name}={value}" for name, value in m.get("collectives", {}).items())
        if collectives:
            out.append(f"    collectives' network: {collectives}")
        phases = ", ".join(f"{name} {seconds:.2f}" for name, seconds in m.get("phases", {}).items())
        out.append(f"    {m.get('cpus')} CPUs, GPUs {m.get('gpus')}, start-up (s after rank 0 began): {phases}")
    if len(manifests) > limit:
        out.append(f"  ... and {len(manifests) - limit} more (see --json)")
    return out


def _never_groups(never: list[NeverReported]) -> list[tuple[str, list[NeverReported]]]:
    """Never-reported ranks grouped by what happened (a failure's text up to its details)."""
    groups: dict[str, list[NeverReported]] = {}
    for n in never:
        key = n.why if n.why != "failed" else "failed: " + n.detail.splitlines()[0].split(" (")[0]
        groups.setdefault(key, []).append(n)
    return list(groups.items())
