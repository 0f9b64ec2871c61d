#!/usr/bin/env python3
"""Elastic clusters: from Ray's demand to a joined worker node, against the same worker job by hand.

    .venv/bin/bash tests/benchmarks/run bench_elastic [--repeats 3] [--out tests/benchmarks]

On the 3-host Slurm testbed (root; brought up if need be), interleaved, each repeat:
1. autoscaled: `srun -N1 start_ray.py --autoscale 1:2 -- driver`, whose driver asks for a STRICT_SPREAD
   placement group of 2 one-CPU bundles (one more node than the head) and stamps the moment it asked;
   measured: demand -> the worker job's node ALIVE (its node_alive event) and -> the group ready.
2. by hand (the reference): the same head job with a driver that waits for a second node, and the
   same worker job script (mpiray/batch/slurm.py) given to `sbatch` by the benchmark; measured: sbatch ->
   the worker's node ALIVE.
Prints a table and writes elastic_report.md / elastic_report.json in docs/reports/. Goal: the
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
import threading
import time
from pathlib import Path

from mpiray.batch import jobs, slurm
from mpiray.elastic.provider import SCHEDULER_POLL_S
from mpiray.elastic.registry import Registry
from mpiray.rank.nodeplan import AUTOSCALER_UPDATE_S

from elastic_measures import DEMAND, interleave, node_alive_time, row, table
from harness import REPORTS, write_report
from slurm import testbed

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
START_RAY = str(ROOT / "start_ray.py")
HEAD_TIMEOUT_S = 300


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
    # Reading its output has a deadline too: at it, the head is killed, which ends its output.
    watchdog = threading.Timer(HEAD_TIMEOUT_S, head.kill)
    watchdog.start()
    try:
        for line in head.stdout:
            if line.startswith("BENCH "):
                break
        else:
            raise RuntimeError(f"the head job ended, exit {head.wait(timeout=30)}, without its driver's BENCH line "
                               f"(killed after {HEAD_TIMEOUT_S} s if it ran that long)")
        watchdog.cancel()
        (cluster,) = [entry.job_id for entry in Registry(registry).running()]
        job = jobs.WorkerJob(cluster=cluster, python=PYTHON, log_dir=str(log_dir / cluster),
                              cpus=1, env={"MPIRAY_REGISTRY": str(registry)})
        submitted = time.time()
        bed.run(["sbatch", "--parsable"], input=slurm.slurm_script(job, 1), env=env, timeout=60, check=True)
        head.communicate(timeout=HEAD_TIMEOUT_S)
    finally:
        watchdog.cancel()
        if head.poll() is None:
            head.kill()
            head.wait(timeout=30)
    alive = node_alive_time(log_dir / cluster)
    return {"sbatch_to_node_alive_s": round(alive - submitted, 2), "exit": head.returncode}


def queued(bed) -> list[str]:
    """The ids of the jobs still queued or running."""
    return bed.run(["squeue", "-h", "-o", "%i"], timeout=30).stdout.split()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    bed = testbed.up()
    with tempfile.TemporaryDirectory(prefix="mpiray-bench-elastic-", dir=testbed.SHARED_DIR) as tmp:
        scratch = Path(tmp)
        (scratch / "demand.py").write_text(DEMAND)
        registry = scratch / "registry"
        runs = interleave({"by hand": lambda: by_hand(bed, scratch, registry),
                           "autoscaled": lambda: autoscaled(bed, scratch, registry)}, args.repeats, lambda: queued(bed))
    hand, auto = runs["by hand"], runs["autoscaled"]
    reference = statistics.median(r["sbatch_to_node_alive_s"] for r in hand)
    demand = statistics.median(r["demand_to_node_alive_s"] for r in auto)
    ready = statistics.median(r["demand_to_group_ready_s"] for r in auto)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "repeats": args.repeats, "by_hand": hand,
              "autoscaled": auto, "reference_s": reference, "demand_to_node_alive_s": demand,
              "demand_to_group_ready_s": ready, "ratio": round(demand / reference, 2)}
    rows = table([
        row("by hand: `sbatch` of the worker job -> its node ALIVE in the cluster", reference, reference),
        row("autoscaled: the driver's demand (a STRICT_SPREAD group) -> the node ALIVE", demand, reference, at_most=1.5),
        row("autoscaled: demand -> the placement group ready", ready, reference),
    ], ratio_to="by hand")
    text = "\n".join([
        "# Elastic cluster benchmark", "",
        f"{report['date']} on the 3-host Slurm testbed (2 CPUs in all), median of {args.repeats} interleaved "
        f"repeats; each worker job is one Ray node of 1 CPU; Ray's autoscaler updates every "
        f"{AUTOSCALER_UPDATE_S} s (mpiray's setting; Ray's default is 5 s); the provider asks Slurm at most every "
        f"{SCHEDULER_POLL_S:g} s (--scheduler-poll's default).", "", *rows, "",
        "Every run: " + "; ".join(f"by hand {h['sbatch_to_node_alive_s']} s, autoscaled "
                                  f"{a['demand_to_node_alive_s']} s" for h, a in zip(hand, auto)), ""])
    print(text)
    write_report(args.out, "elastic", text, report, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
