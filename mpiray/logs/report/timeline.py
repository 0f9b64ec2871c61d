"""The report (analyse.py) drawn as a time line image: one bar per rank, its segments in colour (`--png`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mpiray.errors import NoMatplotlib
from mpiray.logs.report.analyse import FAILED, NEVER_REPORTED, SEGMENTS
from mpiray.logs.report.model import Decision, JobReport, Phase, RankEntry, Segment

COLOURS = {
    "waiting": "#c7c7c7",
    "starting": "#f5a623",
    "alive": "#2ca02c",
    "idle": "#aec7e8",
    "driver": "#1f4e9e",
    "stopping": "#9467bd",
}
ERROR_COLOUR = "#d62728"


@dataclass
class Row:
    """One bar of the chart: a rank of the job, or of a job that joined its cluster."""

    y: int
    label: str
    host: str
    status: str
    segments: list[Segment]
    exit_code: int | None
    logged_until_s: float | None = None
    error_s: float | None = None
    job_error_s: float | None = None
    has_log: bool = True

    @classmethod
    def of(cls, e: RankEntry) -> Row:
        return cls(e.rank, f"rank {e.rank}", e.host, e.status, e.segments, e.exit_code, e.logged_until_s, e.error_s,
                   e.job_error_s, e.has_log)


def draw_timeline(report: JobReport, path: Path) -> tuple[int, int]:
    """One horizontal bar per rank (segments in COLOURS), the phases as dotted lines; returns (width, height) in pixels."""
    try:
        # A Figure without pyplot: drawn by Agg into the file, no window, no global backend switch.
        from matplotlib.figure import Figure
    except ImportError as error:
        raise NoMatplotlib(f"--png needs matplotlib ({error}): pip install matplotlib") from None

    ranks = [Row.of(e) for e in report.cluster] + joined_rows(report, len(report.cluster))
    count = max(len(ranks), 1)
    many = count > 60
    row = 0.3 if not many else max(0.02, 16.0 / count)  # inches per rank; large jobs fit in ~16 in
    labels = {e.y: e.label + (f" ({e.host})" if e.host and not many else "") for e in ranks}
    series = report.nodes_over_time
    top, bottom, panel = 1.0, 1.0, 1.6 if series else 0.0  # inches: title and phase names; axis label and legend
    width, height = 12.0, top + bottom + panel + max(row * count, 1.2)
    left = (0.3 + 0.065 * max(map(len, labels.values()), default=6)) / width
    fig = Figure(figsize=(width, height), dpi=100)
    fig.subplots_adjust(left=left, right=0.98, top=1 - top / height, bottom=bottom / height, hspace=0.35)
    grid = fig.add_gridspec(2 if series else 1, 1, height_ratios=[max(row * count, 1.2), panel] if series else [1])
    ax = fig.add_subplot(grid[0])
    times = [s[2] for e in ranks for s in e.segments] + [p.s for p in report.phases if p.s is not None]
    end = max(times + [1.0])
    used: set[str] = set()
    for e in ranks:
        _draw_rank(ax, e, end, many, used=used)
    _draw_phases(ax, report.phases)
    ax.set_ylim(count - 0.5, -0.5)
    ticks = [e.y for e in ranks][:: max(1, count // 40)]
    ax.set_yticks(ticks)
    ax.set_yticklabels([labels[r] for r in ticks], fontsize=6 if many else 8)
    ax.set_xlim(0, end * 1.08)
    ax.grid(axis="x", color="#e6e6e6")
    ax.set_axisbelow(True)
    if series:
        ax = _nodes_panel(fig.add_subplot(grid[1], sharex=ax), series, report.autoscaler, end)
    ax.set_xlabel(f"seconds after the job's first event ({report.started or 'none'})", fontsize=9)
    code = report.exit_code
    hosts = len(report.hosts)
    fig.suptitle(
        f"mpiray job {report.job_id}: start-up timeline, {report.ranks} ranks on {hosts} host{'s' * (hosts != 1)}, "
        f"exit code {code if code is not None else 'unknown (no exit line)'}",
        y=1 - 0.15 / height, va="top", fontsize=11,
    )
    _legend(fig, report, ranks, used, height=height)
    fig.savefig(path)
    return round(width * 100), round(height * 100)


def _draw_rank(ax, e: Row, end: float, many: bool, *, used: set[str]) -> None:
    """One rank's row: its segments (hatched after its last line), its errors, and a note where it has no log or
    no exit line."""
    y = e.y
    if e.status in (FAILED, NEVER_REPORTED):  # a light red row: found at a glance among 1000
        ax.axhspan(y - 0.5, y + 0.5, color=ERROR_COLOUR, alpha=0.12, linewidth=0, zorder=0)
    for kind, start, stop in e.segments:
        used.add(kind)
        logged = stop if e.logged_until_s is None else min(stop, max(start, e.logged_until_s))
        ax.barh(y, max(logged - start, end * 0.002), left=start, height=0.72, color=COLOURS[kind], linewidth=0)
        if stop > logged:  # no line after its last one: it was killed somewhen up to here
            ax.barh(y, stop - logged, left=logged, height=0.72, color=COLOURS[kind], alpha=0.35,
                    hatch="///", edgecolor="white", linewidth=0)
    for failed_at in (e.error_s, e.job_error_s):
        if failed_at is not None:
            ax.plot([failed_at], [y], marker="X", markersize=4 if many else 10, color=ERROR_COLOUR,
                    markeredgecolor="white", markeredgewidth=0.8, linestyle="none", zorder=5)
    if not many and not e.has_log:
        ax.text(end * 0.01, y, "no log", va="center", fontsize=8, color=ERROR_COLOUR)
    elif not many and e.exit_code is None and e.segments:
        ax.text(e.segments[-1][2] + end * 0.006, y, "no exit line", va="center", fontsize=8, color="#333333")


def _draw_phases(ax, phases: list[Phase]) -> None:
    """Each start-up phase as a dotted line, named above the chart."""
    seen = [(p.s, p.phase) for p in phases if p.s is not None]
    for index, (s, name) in enumerate(sorted(seen, key=lambda seen: seen[0])):
        ax.axvline(s, color="#444444", linestyle=":", linewidth=1, zorder=4)
        ax.annotate(f"{name} {s:.1f}s", (s, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 3 + 11 * (index % 3)), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7.5, color="#222222")


def _legend(fig, report: JobReport, ranks: list[Row], used: set[str], *, height: float) -> None:
    """The segments' colours, and the marks only where the chart has them."""
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Artist] = [Patch(color=COLOURS[k], label=k) for k in SEGMENTS if k in used or k != "idle"]
    if any(e.error_s is not None or e.job_error_s is not None for e in ranks):
        handles.append(Line2D([], [], marker="X", color=ERROR_COLOUR, linestyle="none", markersize=8, label="error"))
    if report.job_dir_changed_s is not None:
        handles.append(Patch(facecolor="#999999", alpha=0.35, hatch="///", edgecolor="white",
                             label="after its last line (killed?)"))
    if any(e.status in (FAILED, NEVER_REPORTED) for e in ranks):
        handles.append(Patch(color=ERROR_COLOUR, alpha=0.12, label="failed / never reported"))
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.04 / height), ncol=len(handles),
               frameon=False, fontsize=9)


def joined_rows(report: JobReport, first: int) -> list[Row]:
    """The ranks of the jobs that joined the cluster, as more rows of the chart."""
    rows: list[Row] = []
    for job in report.joined_jobs:
        for r in job.ranks:
            rows.append(Row(y=first + len(rows), label=f"job {job.job_id} rank {r.rank}", host=r.host,
                            status="failed" if r.error else "ok", segments=r.segments, exit_code=r.exit_code))
    return rows


def _nodes_panel(ax, series: list, decisions: list[Decision], end: float):
    """The cluster's Ray nodes over time (a step line), with the autoscaler's submits and cancels."""
    times = [s for s, _ in series] + [end]
    counts = [n for _, n in series]
    ax.step(times, counts + counts[-1:], where="post", color=COLOURS["alive"], linewidth=2)
    top = max(counts + [1])
    for name, marker, colour in (("job_submitted", "^", "#1f4e9e"), ("job_cancelled", "v", "#9467bd")):
        when = [d.s for d in decisions if d.event == name]
        if when:
            ax.plot(when, [top + 0.4] * len(when), marker=marker, linestyle="none", color=colour,
                    label=name.replace("_", " "))
    ax.set_ylim(0, top + 1)
    ax.set_ylabel("Ray nodes", fontsize=9)
    ax.grid(color="#e6e6e6")
    if decisions:
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    return ax
