"""Benchmark the three acceptance trainings: wall time and env steps to reach each target.

Runs each task under the launcher (``mpirun -np N python start_ray.py -- python -m
train ...``), or with ``--standalone`` on a local Ray, and a single-process
reference (``--num-env-runners 0`` on a local Ray) in the same invocation, then
prints a markdown table and draws one-core-vs-all-cores reward curves per task.

    bash tests/benchmarks/run bench_train                      # launcher, np=4
    bash tests/benchmarks/run bench_train --standalone --tasks ppo
    bash tests/benchmarks/run bench_train --no-reference --np 2

Run it from the repository root with the project's venv Python.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
RETURN_METRIC = "env_runners/episode_return_mean"
ENV_STEPS_METRIC = "num_env_steps_sampled_lifetime"


@dataclasses.dataclass(frozen=True)
class Task:
    """One acceptance training: trainer flags and the mean return that counts as reached."""

    title: str
    target: float
    trainer_args: tuple[str, ...]


TASKS = {
    "ppo": Task("PPO CartPole-v1 to 450", 450.0,
                ("--run", "PPO", "--env", "CartPole-v1", "--stop-reward", "450", "--stop-timesteps", "300000")),
    # "Improves": from ~22 (random policy) to 150. RLlib's DQN default does one update per
    # sampled step through a remote call each; bigger fragments and batches are ~8x faster here.
    "dqn": Task("DQN CartPole-v1 to 150", 150.0,
                ("--run", "DQN", "--env", "CartPole-v1", "--stop-reward", "150", "--stop-timesteps", "50000",
                 "--fcnet-hiddens", "64,64", "--train-batch-size", "64", "--algo-config",
                 '{"rollout_fragment_length": 16, "training_intensity": 8, "epsilon": [[0, 1.0], [5000, 0.05]]}')),
    "basic": Task("PPO BasicEnv to 1.0", 1.0,
                  ("--run", "PPO", "--env", "BasicEnv", "--stop-reward", "1.0", "--lr", "0.001",
                   "--train-batch-size", "1000", "--stop-timesteps", "200000")),
}


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one run of one task achieved."""

    task: str
    mode: str
    exit_code: int
    wall_time_s: float
    time_to_target_s: Optional[float]
    env_steps_to_target: Optional[float]
    final_return: float
    experiment_dir: Path


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the selected tasks in each mode; print the table; 0 if every run reached its target."""
    args = build_parser().parse_args(argv)
    storage = Path(args.storage_path or tempfile.mkdtemp(prefix="bench-train-")).resolve()
    modes = ["standalone" if args.standalone else f"launcher np={args.np}"]
    if not args.no_reference:
        modes.append("single process")
    measurements = []
    for task_name in args.tasks.split(","):
        for mode in modes:
            measurements.append(run_task(task_name, TASKS[task_name], mode, args, storage))
            print(format_measurement(measurements[-1]), file=sys.stderr, flush=True)
        draw_comparison(task_name, [m for m in measurements if m.task == task_name], storage)
    print(markdown_table(measurements))
    print(f"\nresults and curves: {storage}")
    return 0 if all(m.time_to_target_s is not None for m in measurements) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--standalone", action="store_true", help="local Ray instead of the launcher")
    parser.add_argument("--np", type=int, default=4, help="MPI ranks for the launcher (default: %(default)s)")
    parser.add_argument("--tasks", default="ppo,dqn,basic", help="comma-separated subset of: " + ", ".join(TASKS))
    parser.add_argument("--no-reference", action="store_true", help="skip the single-process reference runs")
    parser.add_argument("--storage-path", default=None, help="where results go (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (default: %(default)s)")
    return parser


def run_task(task_name: str, task: Task, mode: str, args, storage: Path) -> Measurement:
    """Run one task in one mode; read progress.csv for when the target was first reached."""
    mode_slug = mode.split()[0].replace(" ", "_")
    storage_path = storage / mode_slug
    trainer = [sys.executable, "-m", "train", *task.trainer_args, "--storage-path", str(storage_path),
               "--name", task_name, "--checkpoint-frequency", "0"]
    if mode == "single process":
        command = [*trainer, "--num-env-runners", "0"]
    elif mode == "standalone":
        command = trainer
    else:
        command = [mpirun(), "-np", str(args.np), sys.executable, "start_ray.py",
                   "--log-dir", str(storage / "logs"), "--", *trainer]
    print(f"[bench] {task.title} / {mode}: {' '.join(command)}", file=sys.stderr, flush=True)
    log_path = storage / f"{task_name}-{mode_slug}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    exit_code = run_logged(command, log_path, args.timeout)
    wall_time_s = time.monotonic() - started
    experiment_dir = storage_path / task_name
    rows = read_progress(experiment_dir)
    reached = next((row for row in rows if number(row.get(RETURN_METRIC)) >= task.target), None)
    return Measurement(
        task=task_name,
        mode=mode,
        exit_code=exit_code,
        wall_time_s=wall_time_s,
        time_to_target_s=number(reached["time_total_s"]) if reached else None,
        env_steps_to_target=number(reached[ENV_STEPS_METRIC]) if reached else None,
        final_return=number(rows[-1].get(RETURN_METRIC)) if rows else math.nan,
        experiment_dir=experiment_dir,
    )


def run_logged(command: list[str], log_path: Path, timeout: float) -> int:
    """Run ``command`` into ``log_path``; on timeout SIGTERM (checkpoint), then SIGKILL its group."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   env=clean_environment(), start_new_session=True)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                return process.wait()


def clean_environment() -> dict[str, str]:
    """This environment without a cluster address, so every run starts its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "MPIRAY_"))}


def mpirun() -> str:
    """mpirun beside this Python (the mpich wheel puts it in the venv), else on PATH."""
    beside_python = Path(sys.executable).parent / "mpirun"
    return str(beside_python) if beside_python.exists() else (shutil.which("mpirun") or "mpirun")


def read_progress(experiment_dir: Path) -> list[dict]:
    files = sorted(experiment_dir.glob("*/progress.csv"))
    if not files:
        return []
    with open(files[0], newline="") as csv_file:
        return list(csv.DictReader(csv_file))


def draw_comparison(task_name: str, measurements: list[Measurement], storage: Path) -> None:
    """The tutorial's comparison figure: one PNG per task, one curve per mode."""
    from train.options import PlotOptions
    from train.plot import plot_runs

    runs = [m for m in measurements if read_progress(m.experiment_dir)]
    if not runs:
        return
    plot_runs(PlotOptions(run_dirs=tuple(str(m.experiment_dir) for m in runs), output=str(storage / f"{task_name}.png"),
                          labels=tuple(m.mode for m in runs), title=TASKS[task_name].title))


def markdown_table(measurements: list[Measurement]) -> str:
    """Time/steps to target per task and mode, with the speed-up over the single-process run."""
    reference = {m.task: m for m in measurements if m.mode == "single process"}
    lines = [
        "| task | mode | exit | reached | training time to target (s) | env steps to target | "
        "command wall time (s) | final mean return | speed-up vs single process |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in measurements:
        base = reference.get(m.task)
        speedup = (f"{base.time_to_target_s / m.time_to_target_s:.2f}x"
                   if base and base.time_to_target_s and m.time_to_target_s else "-")
        lines.append(
            f"| {TASKS[m.task].title} | {m.mode} | {m.exit_code} | {'yes' if m.time_to_target_s is not None else 'no'} | "
            f"{fmt(m.time_to_target_s, '.1f')} | {fmt(m.env_steps_to_target, '.0f')} | {m.wall_time_s:.1f} | "
            f"{m.final_return:.2f} | {speedup} |"
        )
    return "\n".join(lines)


def format_measurement(m: Measurement) -> str:
    return (f"[bench] {m.task} / {m.mode}: exit {m.exit_code}, wall {m.wall_time_s:.1f} s, "
            f"to target {fmt(m.time_to_target_s, '.1f')} s / {fmt(m.env_steps_to_target, '.0f')} steps, "
            f"final return {m.final_return:.2f}")


def fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def number(text) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except (TypeError, ValueError):
        return math.nan


if __name__ == "__main__":
    sys.exit(main())
