#!/usr/bin/env python3
"""A real node's size: one Ray node declared with 104 CPUs (a Kestrel node) runs 104 one-CPU actors.

    .venv/bin/bash tests/benchmarks/run bench_big_node [--repeats 2] [--cpus 104] [--out tests/benchmarks]

Each repeat runs, one after the other, the same driver (tests/drivers/many_actors.py: start the actors
at once, wait until every one answers) on
- the reference: `ray start --head --block --num-cpus 104` by hand, with Ray's own port ranges (10,000
  worker ports), a private temp dir, and the driver with RAY_ADDRESS;
- mpiray: `python start_ray.py --num-cpus 104 -- driver` (its port block sized by the node's CPUs).
Measured: seconds from the start to the driver's start (the node up), seconds from the driver's first
actor to the last one answering, the actors' memory (USS: each one's own pages; RSS counts the shared
ones once per actor), how many became ready. Prints a table with mpiray's ratios to the reference,
writes big_node_report.md and big_node_report.json in docs/reports/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPORTS, write_report
from process_control import end_group

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
RAY = str(Path(PYTHON).parent / "ray")
DRIVER = ROOT / "tests" / "drivers" / "many_actors.py"
RUN_TIMEOUT_S = 900
# The driver prints the wall time it starts at (the node is up by then), then its ACTORS report.
STAMPED = ("import runpy, sys, time; print('STARTED', time.time(), flush=True); "
           "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def driver_argv(cpus: int) -> list[str]:
    return [PYTHON, "-c", STAMPED, str(DRIVER), str(cpus), "600"]


def parse(output: str, started_wall: float) -> dict:
    stamp = re.search(r"^STARTED (\S+)$", output, re.M)
    report = re.search(r"^ACTORS (\{.*\})$", output, re.M)
    row = json.loads(report.group(1)) if report else {"ready": 0}
    row["up_s"] = round(float(stamp.group(1)) - started_wall, 2) if stamp else None
    return row


REFERENCE_STOP_GRACE_S = 10.0  # the by-hand head's: then SIGKILL to its group


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def by_hand(cpus: int, scratch: Path) -> dict:
    temp = Path(tempfile.mkdtemp(prefix="bb", dir="/tmp"))  # short: Ray's socket paths <= 107 bytes
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    started = time.time()
    with open(scratch / "by-hand-head.log", "ab") as out:
        head = subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
                                 f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while subprocess.run([RAY, "status", f"--address={address}"], env=env, capture_output=True,
                             timeout=60).returncode != 0:
            if time.monotonic() > deadline or head.poll() is not None:
                raise RuntimeError(f"the head by hand did not come up: read {scratch / 'by-hand-head.log'}")
            time.sleep(0.5)
        result = subprocess.run(driver_argv(cpus), env={**env, "RAY_ADDRESS": address}, capture_output=True,
                                text=True, timeout=RUN_TIMEOUT_S)
        row = parse(result.stdout, started)
        row["exit"] = result.returncode
    finally:
        # SIGTERM: `ray start --block` stops its node, or (it may take 30 s here) the group's SIGKILL does: its stop
        # is not measured
        end_group(head, grace=REFERENCE_STOP_GRACE_S)
        subprocess.run(["rm", "-rf", str(temp)], timeout=60)
    return row


def with_mpiray(cpus: int, scratch: Path) -> dict:
    started = time.time()
    env = {**os.environ, "MPIRAY_REGISTRY": str(scratch / "registry")}  # not the user's ~/.mpiray
    result = subprocess.run([PYTHON, str(ROOT / "start_ray.py"), "--num-cpus", str(cpus), "--log-dir",
                             str(scratch / "logs"), "--", *driver_argv(cpus)],
                            cwd=scratch, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    row = parse(result.stdout, started)
    row["exit"] = result.returncode
    return row


MEASURES = (("up_s", "start -> the driver starts (the node up), s"),
            ("ready_s", "first actor -> the last one answers, s"),
            ("uss_mib", "the actors' own memory (USS), MiB"),
            ("rss_mib", "the actors' RSS (shared pages counted per actor), MiB"))


def markdown(rows: dict[str, list[dict]], cpus: int) -> str:
    lines = [f"# A real node's size: {cpus} one-CPU actors on one Ray node",
             "", f"{time.strftime('%Y-%m-%d %H:%M:%S %z')}, {os.cpu_count()} cores, median of {len(rows['mpiray'])} "
             "repeats, one run at a time (`tests/benchmarks/bench_big_node.py`).", "",
             "| measure | by hand (`ray start --head`) | mpiray | ratio |", "|---|---|---|---|"]
    for key, title in MEASURES:
        ref = [row[key] for row in rows["by_hand"] if row.get(key) is not None]
        ours = [row[key] for row in rows["mpiray"] if row.get(key) is not None]
        if ref and ours:
            a, b = statistics.median(ref), statistics.median(ours)
            lines.append(f"| {title} | {a:g} | {b:g} | {b / a:.2f}x |")
    ready = {name: [row.get("ready") for row in found] for name, found in rows.items()}
    lines += ["", f"Actors ready per run: by hand {ready['by_hand']}, mpiray {ready['mpiray']} (of {cpus}); "
              f"exit codes: by hand {[r['exit'] for r in rows['by_hand']]}, mpiray {[r['exit'] for r in rows['mpiray']]}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=104)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-big-node-"))
    rows: dict[str, list[dict]] = {"by_hand": [], "mpiray": []}
    for _ in range(args.repeats):  # interleaved: a slow moment hits both
        for name, run in (("by_hand", by_hand), ("mpiray", with_mpiray)):
            rows[name].append(run(args.cpus, scratch))
            print(name, rows[name][-1], flush=True)
    text = markdown(rows, args.cpus)
    print(text)
    write_report(args.out, "big_node", text, rows, indent=1)
    if all(row["exit"] == 0 for found in rows.values() for row in found):
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"logs kept in {scratch}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
