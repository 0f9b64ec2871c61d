#!/usr/bin/env python3
"""Elastic clusters: from Ray's demand to a joined worker node, against the same worker job by hand.

    .venv/bin/python tests/benchmarks/bench_elastic.py [--repeats 3] [--out tests/benchmarks]

On the 3-host Slurm testbed (root; brought up if need be), interleaved, each repeat:
1. autoscaled: `srun -N1 start_ray.py --autoscale 1:2 -- driver`, whose driver asks for a STRICT_SPREAD
   placement group of 2 one-CPU bundles (one more node than the head) and stamps the moment it asked;
   measured: demand -> the worker job's node ALIVE (its node_alive event) and -> the group ready.
2. by hand (the reference): the same head job with a driver that waits for a second node, and the
   same worker job script (mpiray/batch/slurm.py) given to `sbatch` by the benchmark; measured: sbatch ->
   the worker's node ALIVE.
Prints a table and writes elastic_report.md / elastic_report.json beside this file. Goal: the
autoscaled path within 1.5x the by-hand one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from mpiray.batch import jobs, slurm  # noqa: E402
from mpiray.elastic.registry import Registry  # noqa: E402
from mpiray.logs.events import read_events  # noqa: E402
from mpiray.rank.ownnode import AUTOSCALER_UPDATE_S  # noqa: E402

from slurm import testbed  # noqa: E402

PYTHON = sys.executable
START_RAY = str(ROOT / "start_ray.py")
DEMAND = """
import json, sys, time, ray
from ray.util.placement_group import placement_group
ray.init()
mode = sys.argv[1]
if mode == "spread":
    asked = time.time()
    group = placement_group([{"CPU": 1}] * 2, strategy="STRICT_SPREAD")
    ready = group.wait(timeout_seconds=300)
    print("BENCH " + json.dumps({"asked": asked, "ready": time.time(), "ok": ready}), flush=True)
else:
    print("BENCH " + json.dumps({"waiting": time.time()}), flush=True)
    deadline = time.time() + 300
    while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
        time.sleep(0.1)
    print("BENCH " + json.dumps({"two_nodes": time.time()}), flush=True)
"""


def node_alive_time(job_dir: Path) -> float:
    """When a joined worker job's node was ALIVE (its rank 0's node_alive event)."""
    for path in sorted(job_dir.glob("join-*-rank-0000.jsonl")):
        for record in read_events(path):
            if record["event"] == "node_alive":
                return record["time"]
    raise RuntimeError(f"no joined node in {job_dir}")


def autoscaled(bed, scratch: Path, registry: Path) -> dict:
    driver = scratch / "demand.py"
    log_dir = scratch / f"logs-auto-{time.monotonic_ns()}"
    result = bed.run(["srun", "-N1", "-n1", "--cpus-per-task=2", "--mpi=pmi2", f"--chdir={scratch}", PYTHON, START_RAY,
                      "--log-dir", str(log_dir), "--autoscale", "1:2", "--worker-cpus", "1", "--cooldown", "10",
                      "--", PYTHON, str(driver), "spread"], env=bed.env({**os.environ, "MPIRAY_REGISTRY": str(registry)}),
                     timeout=400)
    stamps = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("BENCH "))[6:])
    (job_dir,) = [path.parent for path in log_dir.glob("*/autoscaler-rank-0000.jsonl")]
    alive = node_alive_time(job_dir)
    return {"demand_to_node_alive_s": round(alive - stamps["asked"], 2),
            "demand_to_group_ready_s": round(stamps["ready"] - stamps["asked"], 2), "exit": result.returncode}


def by_hand(bed, scratch: Path, registry: Path) -> dict:
    driver = scratch / "demand.py"
    log_dir = scratch / f"logs-hand-{time.monotonic_ns()}"
    env = bed.env({**os.environ, "MPIRAY_REGISTRY": str(registry)})
    head = subprocess.Popen(["srun", "-N1", "-n1", "--cpus-per-task=2", "--mpi=pmi2", f"--chdir={scratch}", PYTHON,
                             START_RAY, "--log-dir", str(log_dir), "--", PYTHON, str(driver), "wait"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in head.stdout:
            if line.startswith("BENCH "):
                break
        (cluster,) = [entry.job_id for entry in Registry(registry).running()]
        job = jobs.WorkerJob(cluster=cluster, python=PYTHON, log_dir=str(log_dir / cluster),
                              cpus=1, env={"MPIRAY_REGISTRY": str(registry)})
        submitted = time.time()
        bed.run(["sbatch", "--parsable"], input=slurm.slurm_script(job, 1), env=env, timeout=60, check=True)
        head.communicate(timeout=300)
    finally:
        if head.poll() is None:
            head.kill()
            head.wait(timeout=30)
    alive = node_alive_time(log_dir / cluster)
    return {"sbatch_to_node_alive_s": round(alive - submitted, 2), "exit": head.returncode}


def wait_for_an_empty_queue(bed, timeout: float = 180) -> None:
    """Each repeat starts alone, and the scratch dir goes only once no worker job can write to it."""
    deadline = time.monotonic() + timeout
    while bed.run(["squeue", "-h", "-o", "%i"], timeout=30).stdout.strip():
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker jobs still queued or running after {timeout} s")
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    bed = testbed.up()
    auto, hand = [], []
    with tempfile.TemporaryDirectory(prefix="mpiray-bench-elastic-", dir="/tmp") as tmp:
        scratch = Path(tmp)
        (scratch / "demand.py").write_text(DEMAND)
        registry = scratch / "registry"
        for repeat in range(args.repeats):
            hand.append(by_hand(bed, scratch, registry))
            wait_for_an_empty_queue(bed)
            auto.append(autoscaled(bed, scratch, registry))
            wait_for_an_empty_queue(bed)
            print(f"repeat {repeat + 1}: by hand {hand[-1]}, autoscaled {auto[-1]}", flush=True)
    reference = statistics.median(r["sbatch_to_node_alive_s"] for r in hand)
    demand = statistics.median(r["demand_to_node_alive_s"] for r in auto)
    ready = statistics.median(r["demand_to_group_ready_s"] for r in auto)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "repeats": args.repeats, "by_hand": hand,
              "autoscaled": auto, "reference_s": reference, "demand_to_node_alive_s": demand,
              "demand_to_group_ready_s": ready, "ratio": round(demand / reference, 2)}
    rows = [
        "| measure | median | ratio to by hand | target | result |", "|---|---|---|---|---|",
        f"| by hand: `sbatch` of the worker job -> its node ALIVE in the cluster | {reference:.2f} s | 1.00x | | |",
        f"| autoscaled: the driver's demand (a STRICT_SPREAD group) -> the node ALIVE | {demand:.2f} s | "
        f"{demand / reference:.2f}x | <= 1.5x | {'PASS' if demand / reference <= 1.5 else 'MISS'} |",
        f"| autoscaled: demand -> the placement group ready | {ready:.2f} s | {ready / reference:.2f}x | | |",
    ]
    text = "\n".join([
        "# Elastic cluster benchmark", "",
        f"{report['date']} on the 3-host Slurm testbed (2 CPUs in all), median of {args.repeats} interleaved "
        f"repeats; each worker job is one Ray node of 1 CPU; Ray's autoscaler updates every "
        f"{AUTOSCALER_UPDATE_S} s (mpiray's setting; Ray's default is 5 s).", "", *rows, "",
        "Every run: " + "; ".join(f"by hand {h['sbatch_to_node_alive_s']} s, autoscaled "
                                  f"{a['demand_to_node_alive_s']} s" for h, a in zip(hand, auto)), ""])
    print(text)
    (args.out / "elastic_report.md").write_text(text)
    (args.out / "elastic_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
