#!/usr/bin/env python3
"""Learners over the nodes: time per training iteration with 1, 2 and 3 remote learners, and what mpiray costs.

    .venv/bin/bash tests/benchmarks/run bench_learners [--repeats 2] [--out tests/benchmarks]

On the 3-host Slurm testbed (root; brought up if need be), one run at a time:
1. Scaling: `srun -N3 start_ray.py -- python -m train --num-learners K` (PPO on CartPole, a fixed batch of
   2000 env steps, 4 iterations), K = 1, 2, 3: the median of Tune's time_this_iter_s over iterations 2-4.
2. Cost: the same user script (tests/drivers/plain_rllib.py, 3 learners, 4 iterations) on mpiray's cluster
   and on a cluster started by hand on the same three hosts (`ray start --head` / `--address`, each node in
   its host's namespace, with GLOO_SOCKET_IFNAME=eth0 set by hand), interleaved: median seconds per
   iteration (2-4), and the ratio. Goal: mpiray costs nothing (<= 1.05x).
Prints a table and writes learners_report.md / learners_report.json in docs/reports/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPORTS, write_report
from process_control import end_group
from slurm import testbed

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
RAY = str(Path(PYTHON).parent / "ray")
START_RAY = str(ROOT / "start_ray.py")
PLAIN = str(ROOT / "tests" / "drivers" / "plain_rllib.py")
ITERATIONS = 4
BATCH = "2000"
TIMEOUT_S = 900


def srun(bed: testbed.Testbed, scratch: Path, *driver: str) -> subprocess.CompletedProcess:
    return bed.run(["srun", "-N3", "-n3", "--cpus-per-task=2", "--mpi=pmi2", f"--chdir={scratch}", PYTHON, START_RAY,
                    "--log-dir", str(scratch / "logs"), "--", *driver], timeout=TIMEOUT_S)


def scaling_run(bed: testbed.Testbed, learners: int, scratch: Path) -> dict:
    results = scratch / f"results-{learners}-{time.monotonic_ns()}"
    result = srun(bed, scratch, PYTHON, "-m", "train", "--num-learners", str(learners), "--train-batch-size", BATCH,
                  "--stop-iters", str(ITERATIONS), "--stop-reward", "none", "--storage-path", str(results))
    rows = []
    for progress in results.glob("*/*/progress.csv"):
        with open(progress, newline="") as lines:
            rows = list(csv.DictReader(lines))
    times = [float(row["time_this_iter_s"]) for row in rows[1:]]
    return {"learners": learners, "exit": result.returncode, "iteration_s": times,
            "median_s": round(statistics.median(times), 3) if times else None}


def plain(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("PLAIN ")]
    return json.loads(lines[-1][len("PLAIN "):]) if lines else {}


def mpiray_run(bed: testbed.Testbed, scratch: Path) -> dict:
    result = srun(bed, scratch, PYTHON, PLAIN, "3", str(ITERATIONS))
    return {"exit": result.returncode, **plain(result.stdout)}


def by_hand_run(bed: testbed.Testbed, scratch: Path) -> dict:
    """The same script on a cluster started by hand: a `ray start --block` per host, in the host's namespace,
    with GLOO_SOCKET_IFNAME set by hand; the driver on the head's host. Every process stopped by its group."""
    root = Path(tempfile.mkdtemp(prefix="bl", dir="/tmp"))  # short: Ray's socket paths <= 107 bytes
    env = {k: v for k, v in bed.env().items() if not k.startswith(("SLURM_", "RAY_ADDRESS"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", GLOO_SOCKET_IFNAME="eth0")
    head_ip, port = bed.nodes[0].ip, 29999
    started: list[subprocess.Popen] = []
    try:
        for index, node in enumerate(bed.nodes):
            role = ["--head", f"--port={port}", "--include-dashboard=false"] if index == 0 else \
                [f"--address={head_ip}:{port}"]
            argv = [RAY, "start", *role, "--block", f"--node-ip-address={node.ip}", "--num-cpus=2",
                    f"--temp-dir={root / node.name}", "--disable-usage-stats"]
            with open(scratch / f"by-hand-{node.name}.log", "ab") as out:
                started.append(subprocess.Popen(node.command(argv), env=env, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True))
            time.sleep(5 if index == 0 else 0)
        probe = f"import ray; ray.init(address='{head_ip}:{port}'); print(sum(n['Alive'] for n in ray.nodes()))"
        deadline = time.monotonic() + 120
        while True:
            seen = subprocess.run(bed.nodes[0].command([PYTHON, "-c", probe]), env=env, capture_output=True,
                                  text=True, timeout=120)
            if seen.stdout.strip().endswith("3"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster by hand did not come up: {seen.stderr[-500:]}")
            time.sleep(1)
        result = subprocess.run(bed.nodes[0].command([PYTHON, PLAIN, "3", str(ITERATIONS)]),
                                env={**env, "RAY_ADDRESS": f"{head_ip}:{port}"}, capture_output=True, text=True,
                                timeout=TIMEOUT_S)
        return {"exit": result.returncode, **plain(result.stdout)}
    finally:
        for proc in reversed(started):  # the workers first, the head last
            end_group(proc, grace=20)
        subprocess.run(["rm", "-rf", str(root)], timeout=60)


def median_after_first(times: list[float]) -> float | None:
    return round(statistics.median(times[1:]), 3) if len(times) > 1 else None


def markdown(scaling: list[dict], cost: dict[str, list[dict]]) -> str:
    lines = [f"# Learners over the nodes ({time.strftime('%Y-%m-%d %H:%M %z')}, {os.cpu_count()} cores, "
             "the 3-host Slurm testbed, `tests/benchmarks/bench_learners.py`)", "",
             f"PPO on CartPole, a fixed batch of {BATCH} env steps, {ITERATIONS} iterations; seconds per iteration: the "
             "median of iterations 2 on (the first builds the learners' group).", "",
             "| remote learners (one per host) | s per iteration | vs 1 learner | exit |", "|---|---|---|---|"]
    base = scaling[0]["median_s"] if scaling and scaling[0]["median_s"] else None
    for row in scaling:
        ratio = f"{row['median_s'] / base:.2f}x" if base and row["median_s"] else "-"
        lines.append(f"| {row['learners']} | {row['median_s']} | {ratio} | {row['exit']} |")
    ours = [m for run in cost["mpiray"] if (m := median_after_first(run.get("iteration_s", [])))]
    ref = [m for run in cost["by_hand"] if (m := median_after_first(run.get("iteration_s", [])))]
    lines += ["", "The same user script (3 learners, gloo) on mpiray's cluster and on one started by hand with "
              "GLOO_SOCKET_IFNAME set by hand, interleaved:", "",
              "| cluster | s per iteration (median of runs) | ratio | target | result |", "|---|---|---|---|---|"]
    if ours and ref:
        ratio = statistics.median(ours) / statistics.median(ref)
        lines.append(f"| by hand (reference) | {statistics.median(ref):.3f} | 1.00x | | |")
        lines.append(f"| mpiray | {statistics.median(ours):.3f} | {ratio:.2f}x | <= 1.05x | "
                     f"{'MET' if ratio <= 1.05 else 'MISS'} |")
    lines += ["", f"Every run: scaling {[(r['learners'], r['iteration_s']) for r in scaling]}; mpiray "
              f"{[r.get('iteration_s') for r in cost['mpiray']]}; by hand {[r.get('iteration_s') for r in cost['by_hand']]}; "
              f"learners' nodes (mpiray) {[r.get('learners') for r in cost['mpiray']]}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPORTS)
    parser.add_argument("--learners", default="1,2,3", help="remote learner counts of the scaling part ('' skips it)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-learners-"))
    started_here = not testbed.is_up()
    bed = testbed.up()
    try:
        scaling = []
        for learners in (int(n) for n in args.learners.split(",") if n):
            scaling.append(scaling_run(bed, learners, scratch))
            print(scaling[-1], flush=True)
        cost: dict[str, list[dict]] = {"mpiray": [], "by_hand": []}
        for _ in range(args.repeats):
            for name, run in (("by_hand", by_hand_run), ("mpiray", mpiray_run)):
                cost[name].append(run(bed, scratch))
                print(name, cost[name][-1], flush=True)
    finally:
        if started_here:
            testbed.down()
        shutil.rmtree(scratch, ignore_errors=True)
    text = markdown(scaling, cost)
    print(text)
    write_report(args.out, "learners", text, {"scaling": scaling, "cost": cost}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
