"""``python -m train plot``: reward curves of runs, vs env steps and vs wall time, in one PNG."""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
from pathlib import Path
from typing import Optional

from train.errors import UsageError
from train.options import ENV_STEPS_METRIC, RETURN_METRIC, PlotOptions

RETURN_MIN_METRIC = "env_runners/episode_return_min"
RETURN_MAX_METRIC = "env_runners/episode_return_max"
WALL_TIME_METRIC = "time_total_s"
PROGRESS_FILE = "progress.csv"


@dataclasses.dataclass(frozen=True)
class Curve:
    """One trial's reward history read from its progress.csv."""

    label: str
    env_steps: list[float]
    wall_time_s: list[float]
    mean_return: list[float]
    min_return: list[float]
    max_return: list[float]


def plot_runs(options: PlotOptions) -> int:
    """Find every progress.csv under ``options.run_dirs`` and draw them into ``options.output``."""
    progress_files = find_progress_files([Path(run_dir) for run_dir in options.run_dirs])
    if options.labels and len(options.labels) != len(progress_files):
        raise UsageError(
            f"--labels has {len(options.labels)} names but {len(progress_files)} runs were found: "
            + ", ".join(str(path.parent) for path in progress_files)
        )
    labels = options.labels or tuple(default_label(path) for path in progress_files)
    curves = [read_curve(path, label) for path, label in zip(progress_files, labels)]
    output = draw_curves(curves, Path(options.output), options.title)
    for curve in curves:
        print(f"[train] {curve.label}: {summarize(curve)}", file=sys.stderr)
    print(f"[train] wrote {output}", file=sys.stderr, flush=True)
    return 0


def find_progress_files(run_dirs: list[Path]) -> list[Path]:
    """progress.csv files named by, or found below, each path (in the order given)."""
    found: list[Path] = []
    for run_dir in run_dirs:
        if run_dir.is_file() and run_dir.name == PROGRESS_FILE:
            found.append(run_dir)
        elif run_dir.is_dir():
            found.extend(sorted(run_dir.rglob(PROGRESS_FILE)))
        else:
            raise UsageError(f"{run_dir} is neither a directory nor a {PROGRESS_FILE}")
    found = [path for path in found if path.stat().st_size > 0]
    if not found:
        raise UsageError(
            f"no non-empty {PROGRESS_FILE} under {', '.join(map(str, run_dirs))}; pass experiment "
            "or trial directories written by python -m train"
        )
    return found


def default_label(progress_file: Path) -> str:
    """'experiment/trial' with Tune's trial suffix (index, date) trimmed."""
    trial_dir = progress_file.parent
    trial = "_".join(trial_dir.name.split("_")[:3])
    return f"{trial_dir.parent.name}/{trial}"


def read_curve(progress_file: Path, label: str) -> Curve:
    """Rows of progress.csv that have a mean return (early iterations may have none)."""
    with open(progress_file, newline="") as csv_file:
        rows = list(csv.DictReader(csv_file))
    if rows and RETURN_METRIC not in rows[0]:
        raise UsageError(f"{progress_file} has no {RETURN_METRIC} column; was it written by RLlib's new API stack?")
    points = [row for row in rows if not math.isnan(_number(row.get(RETURN_METRIC)))]
    return Curve(
        label=label,
        env_steps=[_number(row.get(ENV_STEPS_METRIC)) for row in points],
        wall_time_s=[_number(row.get(WALL_TIME_METRIC)) for row in points],
        mean_return=[_number(row.get(RETURN_METRIC)) for row in points],
        min_return=[_number(row.get(RETURN_MIN_METRIC)) for row in points],
        max_return=[_number(row.get(RETURN_MAX_METRIC)) for row in points],
    )


def draw_curves(curves: list[Curve], output: Path, title: Optional[str]) -> Path:
    """Two panels, return vs env steps and vs wall time; min-max band shaded."""
    import matplotlib

    matplotlib.use("Agg")  # files only; clusters have no display
    import matplotlib.pyplot as plt

    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for curve in curves:
        for axes, x_values in ((by_steps, curve.env_steps), (by_time, curve.wall_time_s)):
            (line,) = axes.plot(x_values, curve.mean_return, label=curve.label)
            if not any(math.isnan(value) for value in curve.min_return + curve.max_return):
                axes.fill_between(x_values, curve.min_return, curve.max_return, alpha=0.15, color=line.get_color())
    by_steps.set_xlabel("env steps sampled")
    by_time.set_xlabel("wall time (s)")
    by_steps.set_ylabel("mean episode return")
    for axes in (by_steps, by_time):
        axes.grid(alpha=0.3)
    by_time.legend(loc="lower right", fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def summarize(curve: Curve) -> str:
    """Best mean return and when it was first reached."""
    if not curve.mean_return:
        return "no finished episodes yet"
    best_index = max(range(len(curve.mean_return)), key=curve.mean_return.__getitem__)
    return (
        f"best mean return {curve.mean_return[best_index]:.3f} at "
        f"{curve.env_steps[best_index]:.0f} env steps, {curve.wall_time_s[best_index]:.1f} s"
    )


def _number(text: Optional[str]) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan
