#!/usr/bin/env python3
"""The head lost as a user loses it, many times in a row: does every rank's process end with 1, every time?

    bash tests/benchmarks/run repeat_head_loss [--repeats 20] [--no-slurm] [--out tests/benchmarks]

Each run is tests/drivers/head_loss.py (its script SIGKILLs the head's gcs_server, then calls a remote function
defined after it) with 3 ranks, in each shape users run it, the shapes interleaved:
- script: `mpirun -np 3 python head_loss.py init LOGS` (mpiray.init(), plain python), on this host;
- python -m mpiray: the same under `python -m mpiray`;
- command line: `mpirun -np 3 python start_ray.py -- python head_loss.py driver`;
- srun -N3: the script shape under `srun -N3 --ntasks-per-node=1 --mpi=pmi2` on the Slurm testbed's 3 hosts.
A run counts as exit 1 only when the launcher returned 1, every rank's process ended with 1 as the launcher saw it
(Hydra's -print-all-exitcodes, srun's per-task lines: not killed, not a status Hydra set to 0 for a rank it killed)
and every rank logged exit code 1. Not a timing: the seconds are there to show what a run costs (this is not part of
CI's time). Writes head_loss_report.md and .json to --out (default: in docs/reports/).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import harness
import head_loss

HERE = Path(__file__).resolve().parent


def one(shape: str, bed, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="mpiray-head-loss-") as work:
        if shape == "srun -N3":
            outcome = head_loss.under_srun(bed, f"head-loss-{repeat}", Path(work))
        else:
            outcome = head_loss.under_hydra(shape, Path(work))
    return {"shape": shape, "repeat": repeat, "ok": outcome.every_rank_exited_with(1),
            "launcher": outcome.returncode, "statuses": outcome.statuses, "logged": outcome.logged,
            "answered": "ANSWERED" in outcome.stdout, "seconds": round(outcome.seconds, 1)}


def table(runs: list[dict], shapes: list[str]) -> str:
    lines = ["| shape | runs | every rank's process exit 1 | outcomes (launcher; ranks' statuses) | median s |",
             "|---|---|---|---|---|"]
    for shape in shapes:
        mine = [run for run in runs if run["shape"] == shape]
        outcomes = Counter(f"{run['launcher']}; {run['statuses']}" for run in mine)
        seen = ", ".join(f"{what} x{count}" for what, count in outcomes.most_common())
        lines.append(f"| {shape} | {len(mine)} | {sum(run['ok'] for run in mine)} of {len(mine)} | {seen} | "
                     f"{harness.median([run['seconds'] for run in mine]):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="runs of each shape (default: 20)")
    parser.add_argument("--no-slurm", action="store_true", help="leave out the srun shape (no Slurm testbed)")
    parser.add_argument("--out", type=Path, default=harness.REPORTS, help="where the report goes (default: %(default)s)")
    args = parser.parse_args(argv)
    shapes, bed = list(head_loss.SHAPES), None
    if not args.no_slurm:
        from slurm import testbed

        reason = testbed.unavailable_reason()
        if reason is not None:
            print(f"repeat_head_loss: no Slurm testbed ({reason}): use --no-slurm", file=sys.stderr)
            return 2
        bed = testbed.up()
        shapes.append("srun -N3")
    runs = []
    before = harness.descendant_pids()
    try:
        for repeat in range(args.repeats):
            for shape in shapes:
                runs.append(one(shape, bed, repeat))
                harness.log(f"{shape} #{repeat + 1}: {'ok' if runs[-1]['ok'] else 'NOT ok'} {runs[-1]}")
    finally:
        harness.stop_what_we_started(before)
    text = "\n".join([
        "# The head lost as a user loses it: every rank's process ends with 1",
        "",
        f"{args.repeats} runs of each shape, interleaved; each run's script SIGKILLs its head's gcs_server, then "
        "calls a remote function defined after it (tests/drivers/head_loss.py). A run counts when the launcher "
        "returned 1 and every rank's process ended with 1 as the launcher saw it, and logged it.",
        "",
        table(runs, shapes),
        "",
    ])
    print(text)
    harness.write_report(args.out, "head_loss", text, runs)
    return 0 if all(run["ok"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
