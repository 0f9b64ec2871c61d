"""What the elastic benchmarks on the batch testbeds share (bench_elastic.py: Slurm, bench_pbs.py: PBS): the demand
driver, when a joined node was ALIVE, and one wait-and-measure loop: repeats that interleave the measures, each
alone in the queue, and a table of medians with ratios to a reference measured in the same run. Both run through
tests/benchmarks/run, with tests/support/ on their path (process_control)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mpiray.logs.events import read_events

from process_control import wait_for

# The driver of both: "spread" asks for one node more than the head (a STRICT_SPREAD group of 2 one-CPU bundles)
# and stamps when it asked and when the group was ready; "wait" (by hand) waits for a second node to join.
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
QUEUE_TIMEOUT_S = 180

Measure = Callable[[], dict]  # one run of a measure: its named values (seconds, an exit code)


def node_alive_time(job_dir: Path) -> float:
    """When a joined worker job's node was ALIVE (its rank 0's node_alive event)."""
    for path in sorted(job_dir.glob("join-*-rank-0000.jsonl")):
        for record in read_events(path):
            if record["event"] == "node_alive":
                return record["time"]
    raise RuntimeError(f"no joined node in {job_dir}")


def wait_for_an_empty_queue(queued: Callable[[], list[str]], timeout: float = QUEUE_TIMEOUT_S) -> None:
    """Each measure starts alone, and a scratch dir goes only once no job can write to it. queued(): the
    scheduler's jobs still queued or running (squeue's, qstat's lines)."""
    if not wait_for(lambda: not queued(), timeout, interval=1):
        raise RuntimeError(f"jobs still queued or running after {timeout} s")


def interleave(measures: dict[str, Measure], repeats: int, queued: Callable[[], list[str]]) -> dict[str, list[dict]]:
    """Each repeat runs every measure once, in turn, each once the queue is empty again (so a busy minute hits them
    alike, and none waits behind another's jobs); prints what each measured; returns each measure's runs."""
    runs: dict[str, list[dict]] = {name: [] for name in measures}
    for repeat in range(repeats):
        for name, measure in measures.items():
            runs[name].append(measure())
            wait_for_an_empty_queue(queued)
        print(f"repeat {repeat + 1}: " + "; ".join(
            f"{name} " + ", ".join(f"{key} {_shown(value)}" for key, value in runs[name][-1].items()) for name in runs),
            flush=True)
    return runs


def series(runs: dict[str, list[dict]]) -> dict[str, list]:
    """Each named value over the repeats, whichever measure gave it ({"start": [1.2, 1.3, 1.1], ...})."""
    return {key: [run[key] for run in results] for results in runs.values() if results for key in results[0]}


def row(measure: str, seconds: float, reference: float | None = None, at_most: float | None = None) -> str:
    """A table row: the median, its ratio to the reference measured in the same run, the target (a ratio) and
    whether it is met."""
    ratio = seconds / reference if reference else None
    cells = [measure, f"{seconds:.2f} s", f"{ratio:.2f}x" if ratio is not None else "",
             f"<= {at_most:g}x" if at_most is not None else "",
             ("PASS" if ratio is not None and ratio <= at_most else "MISS") if at_most is not None else ""]
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def table(rows: list[str], ratio_to: str) -> list[str]:
    return [f"| measure | median | ratio to {ratio_to} | target | result |", "|---|---|---|---|---|", *rows]


def _shown(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)
