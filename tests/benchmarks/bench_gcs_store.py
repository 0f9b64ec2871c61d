#!/usr/bin/env python3
"""What the GCS's store on disk costs: a 3-host start and PPO's throughput with it on and off, interleaved.

    bash tests/benchmarks/run bench_gcs_store [--repeats 3] [--out tests/benchmarks]

On the 3-host Slurm testbed (root; brought up if need be), one run at a time, the two modes alternating (which goes
first alternates too): `srun -N3 start_ray.py --gcs-restarts N -- python -m train` (PPO on CartPole, a fixed batch
of 2000 env steps, 5 iterations, no stop reward), N = 3 (the default: the GCS's tables in RocksDB on the head's
node-local disk, a GCS that dies started again) and N = 0 (Ray's in-memory tables, as before). Per run: the
seconds from rank 0's start to a cluster whose every node has joined (rank 0's cluster_ready), and env steps per
second over iterations 2-5 (the first builds the learner). Goal: the store costs nothing measurable (the ratio
within the runs' own spread).
Prints a table and writes gcs_store_report.md / gcs_store_report.json in docs/reports/.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import REPORTS, write_report
from slurm import testbed

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
START_RAY = str(ROOT / "start_ray.py")
ITERATIONS = 5
BATCH = "2000"
TIMEOUT_S = 600
MODES = {"store on (--gcs-restarts 3)": "3", "store off (--gcs-restarts 0)": "0"}


def run(bed: testbed.Testbed, restarts: str, scratch: Path) -> dict:
    """One job: its start seconds, env steps per second after the first iteration, exit code, and the pre-flight's
    word on the store (that the mode is the one asked for)."""
    here = scratch / f"run-{time.monotonic_ns()}"
    here.mkdir()
    result = bed.run(["srun", "-N3", "-n3", "--cpus-per-task=2", "--mpi=pmi2", f"--chdir={here}", PYTHON, START_RAY,
                      "--log-dir", str(here / "logs"), "--gcs-restarts", restarts, "--", PYTHON, "-m", "train",
                      "--train-batch-size", BATCH, "--stop-iters", str(ITERATIONS), "--stop-reward", "none",
                      "--storage-path", str(here / "results")], timeout=TIMEOUT_S)
    said = [line for line in result.stdout.splitlines() if "pre-flight: gcs restarts" in line]
    ready = [json.loads(line)["fields"]["seconds"] for log in here.glob("logs/*/rank-0000.jsonl")
             for line in log.read_text().splitlines() if '"cluster_ready"' in line]
    rows: list[dict] = []
    for progress in here.glob("results/*/*/progress.csv"):
        with open(progress, newline="") as lines:
            rows = list(csv.DictReader(lines))
    steps = None
    if len(rows) > 1:
        sampled = float(rows[-1]["num_env_steps_sampled_lifetime"]) - float(rows[0]["num_env_steps_sampled_lifetime"])
        steps = round(sampled / sum(float(row["time_this_iter_s"]) for row in rows[1:]), 1)
    return {"exit": result.returncode, "start_s": ready[0] if ready else None, "env_steps_per_s": steps,
            "iterations": len(rows), "preflight": said[0].split("pre-flight: ", 1)[1] if said else ""}


def spread(values: list[float]) -> float:
    """The runs' own spread: (max - min) / median; 0 for fewer than two."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def markdown(runs: dict[str, list[dict]]) -> str:
    lines = [f"# The GCS's store on disk: what it costs ({len(next(iter(runs.values())))} runs of each, interleaved, "
             "the 3-host Slurm testbed)", "",
             f"PPO on CartPole, a fixed batch of {BATCH} env steps, {ITERATIONS} iterations, under `srun -N3`. Start: "
             "rank 0's start to every node joined (cluster_ready). Throughput: env steps per second over iterations 2 "
             "on. Each run is one job; the modes alternate.", "",
             "| mode | start s (median) | env steps/s (median) | spread of env steps/s | exits | pre-flight says |",
             "|---|---|---|---|---|---|"]
    medians = {}
    for mode, rows in runs.items():
        starts = [r["start_s"] for r in rows if r["start_s"] is not None]
        rates = [r["env_steps_per_s"] for r in rows if r["env_steps_per_s"] is not None]
        medians[mode] = (statistics.median(starts) if starts else None, statistics.median(rates) if rates else None,
                         spread(rates))
        said = sorted({r["preflight"] for r in rows})
        lines.append(f"| {mode} | {medians[mode][0]} | {medians[mode][1]} | {medians[mode][2]:.0%} | "
                     f"{[r['exit'] for r in rows]} | {'; '.join(said)} |")
    on, off = medians[list(MODES)[0]], medians[list(MODES)[1]]
    if on[1] and off[1] and on[0] and off[0]:
        ratio, noise = on[1] / off[1], max(on[2], off[2])
        verdict = "within noise" if abs(1 - ratio) <= noise else "outside the runs' spread"
        lines += ["", f"On / off: start {on[0] / off[0]:.2f}x, env steps per second {ratio:.2f}x ({verdict}: the "
                      f"larger spread of the two modes is {noise:.0%})."]
    lines += ["", "Every run: " + "; ".join(f"{mode} {[(r['start_s'], r['env_steps_per_s']) for r in rows]}"
                                            for mode, rows in runs.items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-gcs-store-", dir=str(Path.home())))  # the hosts share $HOME
    started_here = not testbed.is_up()
    bed = testbed.up()
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    try:
        for repeat in range(args.repeats):
            order = list(MODES) if repeat % 2 == 0 else list(reversed(MODES))
            for mode in order:
                runs[mode].append(run(bed, MODES[mode], scratch))
                print(mode, runs[mode][-1], flush=True)
    finally:
        if started_here:
            testbed.down()
        shutil.rmtree(scratch, ignore_errors=True)
    text = markdown(runs)
    print(text)
    write_report(args.out, "gcs_store", text, runs, indent=1)
    return 0 if all(r["exit"] == 0 for rows in runs.values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
