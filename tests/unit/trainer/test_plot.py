"""python -m train plot (train/plot.py) on progress.csv files written here: no Ray, a real PNG."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from train import cli
from train.errors import UsageError
from train.plot import find_progress_files, plot_runs, read_curve

from trainer_args import PNG_MAGIC


def write_progress(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True)
    with open(path / "progress.csv", "w", newline="") as csv_file:
        writer = csv.DictWriter(csv_file, fieldnames=list(rows[-1]))
        writer.writeheader()
        writer.writerows(rows)
    return path / "progress.csv"


def progress_rows(returns):
    """progress.csv rows; "" stands for an iteration without finished episodes."""
    return [
        {"training_iteration": i + 1, "num_env_steps_sampled_lifetime": 100 * (i + 1), "time_total_s": 2.0 * (i + 1),
         "env_runners/episode_return_mean": value,
         "env_runners/episode_return_min": "" if value == "" else value - 1,
         "env_runners/episode_return_max": "" if value == "" else value + 1}
        for i, value in enumerate(returns)
    ]


def test_plot_draws_runs_into_a_real_png(tmp_path):
    write_progress(tmp_path / "one_core" / "PPO_x_00000_0", progress_rows([1, 2, 3]))
    write_progress(tmp_path / "all_cores" / "PPO_x_00000_0", progress_rows(["", 5, 9]))
    output = tmp_path / "out" / "curves.png"
    options = cli.plot_options(cli.build_plot_parser({}).parse_args(
        [str(tmp_path / "one_core"), str(tmp_path / "all_cores"), "-o", str(output), "--labels", "1 core,all cores"]))
    assert plot_runs(options) == 0
    assert output.read_bytes()[:8] == PNG_MAGIC
    import matplotlib.image

    assert matplotlib.image.imread(output).shape[:2] == (450, 1200)


def test_plot_skips_iterations_without_episodes(tmp_path):
    curve = read_curve(write_progress(tmp_path / "run", progress_rows(["", 2.0])), "run")
    assert (curve.env_steps, curve.mean_return) == ([200.0], [2.0])


def test_plot_without_progress_files_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["plot", str(tmp_path), "-o", str(tmp_path / "x.png")]) == cli.EXIT_USAGE
    assert "no non-empty progress.csv" in capsys.readouterr().err
    with pytest.raises(UsageError):
        find_progress_files([tmp_path / "missing"])
