"""`mpiray list [--json]`: the user's running clusters, from the registry (registry.py): nodes, CPUs, GPUs
(joined jobs' too), age, time left. No MPI."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from mpiray.elastic.registry import Registry


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="mpiray list", description="The running clusters of yours, from the "
                                     "registry: nodes, CPUs and GPUs (joined jobs' too), age, time left.")
    parser.add_argument("--registry", type=Path, default=None, help="the registry (default: MPIRAY_REGISTRY or "
                        "~/.mpiray/clusters)")
    parser.add_argument("--json", action="store_true", help="print them as JSON, for scripts")
    args = parser.parse_args(list(argv))
    registry = Registry(args.registry)
    clusters = []
    for entry in registry.running():
        joins = [j for j in registry.joins(entry.job_id) if j.fresh()]
        clusters.append({**vars(entry), "joins": [vars(j) for j in joins],
                         "total_nodes": entry.nodes + sum(j.nodes for j in joins),
                         "total_cpus": entry.cpus + sum(j.cpus for j in joins),
                         "total_gpus": entry.gpus + sum(j.gpus for j in joins)})
    if args.json:
        print(json.dumps(clusters, indent=2))
        return 0
    if not clusters:
        print(f"no running cluster in {registry.root}")
        return 0
    rows = [("job", "head", "nodes", "CPUs", "GPUs", "age", "ends in", "joined jobs")]
    now = time.time()
    for c in clusters:
        joined = ", ".join(f"{j['job_id']} ({j['nodes']} nodes)" for j in c["joins"]) or "-"
        ends = _duration(c["ends_at"] - now) if c["ends_at"] else "-"
        rows.append((c["job_id"], c["gcs_address"], str(c["total_nodes"]), f"{c['total_cpus']:g}",
                     f"{c['total_gpus']:g}", _duration(now - c["started"]), ends, joined))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"
