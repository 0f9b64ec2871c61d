#!/usr/bin/env python3
"""The launcher's start and exit, today's code against an earlier commit's, like for like.

    bash tests/benchmarks/run bench_before_after [--base REV] [--repeats 10] [--ranks 1 2 4]

A refactor must not make the launcher slower. The earlier commit is checked out in a git worktree of its own (made
and removed here), and both run the same job in the same repeat, in turns, on this host: `mpirun -np N
start_ray.py -- python hello.py` with the same venv, Ray and MPI. Measured, as bench_launcher.py measures them:
start to the driver's first line, and the driver's last line to the job's exit. Each row gives both medians
(min-max), today's over the base's, and the two-sided Mann-Whitney p of the difference (exact at these sizes):
"no difference shown" when p >= 0.05. The base's runs go first in even repeats and second in odd ones, so that a
machine that slows down during the run does not favour either side.

The default base is the code before #52's refactor (f01c957, the node's plan apart from its life, came next).
Prints a table and writes before_after_report.md / before_after_report.json in docs/reports/ (--out).
"""

from __future__ import annotations

import argparse
import compileall
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from mpiray.host.processes import become_subreaper

from harness import (
    JOB_REGISTRY,
    PYTHON,
    REPORTS,
    ROOT,
    Interrupted,
    descendant_pids,
    log,
    median,
    stop_what_we_started,
    write_report,
)
from launcher_timing import HELLO_DRIVER, START_RAY, Where, time_launch

HERE = Path(__file__).resolve().parent
BASE = "d88aa0e"  # the code before #52's refactor
MEASURES = (("seconds", "start → driver's first line"), ("exit_after_last_line_s", "driver's last line → job exit"))
ALPHA = 0.05


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of the Mann-Whitney U test of a against b (exact for these small samples without ties)."""
    from scipy.stats import mannwhitneyu  # SciPy comes with Ray's RLlib extra

    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def verdict(base: list[float], today: list[float], p: float) -> str:
    if p >= ALPHA:
        return "no difference shown"
    return "slower" if (median(today) or 0.0) > (median(base) or 0.0) else "faster"


def worktree(base: str, into: Path) -> Path:
    """The base commit's checkout, in a worktree of this repository (removed by drop_worktree)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(into), base], cwd=ROOT, check=True,
                   capture_output=True, text=True, timeout=120)
    return into


def drop_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False,
                   capture_output=True, timeout=120)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False, capture_output=True, timeout=120)


def imported_from(start_ray: Path) -> Path:
    """The mpiray package that start_ray.py imports (python -v names the file each import reads)."""
    result = subprocess.run([PYTHON, "-v", str(start_ray), "--help"], capture_output=True, text=True, timeout=120)
    found = re.search(r"^# (\S+)/mpiray/__pycache__/__init__\S* matches", result.stderr, flags=re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{start_ray} --help imported no mpiray package: {result.stderr[-1000:]}")
    return Path(found.group(1))


def measure(args, scratch: Path, base_tree: Path) -> dict:
    (scratch / "hello.py").write_text(HELLO_DRIVER)
    for tree in (ROOT, base_tree):  # as an installed package is: bytecode compiled before any run
        compileall.compile_dir(str(tree / "mpiray"), quiet=1)
    sides = {"base": base_tree / START_RAY.name, "today": START_RAY}
    for start_ray in sides.values():  # each side runs its own checkout's mpiray, not the venv's
        if (found := imported_from(start_ray)) != start_ray.parent:
            raise RuntimeError(f"{start_ray} runs the mpiray of {found}, not its own checkout's")
    runs: dict = {f"n{n}": {side: [] for side in sides} for n in args.ranks}
    for repeat in range(args.repeats):
        order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        for n in args.ranks:
            for side in order:
                log(f"repeat {repeat + 1}/{args.repeats}: -np {n}, {side}")
                result = time_launch(Where(f"{side}-n{n}", n, start_ray=sides[side]), scratch)
                log(f"  {result['seconds']:.2f} s; exit {result['exit_after_last_line_s']:.2f} s")
                runs[f"n{n}"][side].append(result)
    return runs


def markdown(base: str, base_commit: str, runs: dict, repeats: int) -> tuple[str, dict]:
    lines = [f"# The launcher before and after: today's code against {base_commit}", "",
             f"`mpirun -np N start_ray.py -- python hello.py` on this host, {repeats} repeats of each side in turns "
             f"(base: `{base}` = {base_commit}, checked out in a worktree; same venv, Ray and MPI). Times are the "
             "median (min-max); p is the two-sided Mann-Whitney p of the difference (exact at these sizes).", "",
             "| ranks | measure | base | today | today / base | p | result |", "|---|---|---|---|---|---|---|"]
    summary: dict = {}
    for name, sides in runs.items():
        for key, label in MEASURES:
            before = [r[key] for r in sides["base"]]
            today = [r[key] for r in sides["today"]]
            p = mann_whitney_p(before, today)
            ratio = (median(today) or 0.0) / (median(before) or 1.0)
            result = verdict(before, today, p)
            summary[f"{name} {key}"] = {"base": before, "today": today, "ratio": ratio, "p": p, "result": result}
            lines.append(f"| {name.removeprefix('n')} | {label} | {median(before):.2f} s ({min(before):.2f}-"
                         f"{max(before):.2f}) | {median(today):.2f} s ({min(today):.2f}-{max(today):.2f}) | "
                         f"{ratio:.2f}× | {p:.3f} | {result} |")
    left = sum(len(r["left"]) for sides in runs.values() for side in sides.values() for r in side)
    lines += ["", f"Processes left after all {sum(len(s) for v in runs.values() for s in v.values())} jobs: {left}."]
    return "\n".join(lines) + "\n", summary


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=BASE, help="the earlier commit (default %(default)s: before #52's refactor)")
    parser.add_argument("--repeats", type=int, default=10, help="runs of each side per rank count (default 10)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4], help="rank counts (default 1 2 4)")
    parser.add_argument("--out", type=Path, default=REPORTS, help="where the reports go (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or min(args.ranks) < 1:
        parser.error("--repeats and --ranks must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    resolved = subprocess.run(["git", "rev-parse", "--short=12", "--verify", f"{args.base}^{{commit}}"], cwd=ROOT,
                              capture_output=True, text=True, timeout=30)
    if resolved.returncode != 0:
        print(f"bench_before_after: error: --base {args.base!r} names no commit of this repository "
              "(give a commit, tag or branch that `git log` shows)", file=sys.stderr)
        return 2
    become_subreaper()
    signal.signal(signal.SIGTERM, _interrupt)
    scratch = Path(tempfile.mkdtemp(prefix="mpiray-before-after-"))
    JOB_REGISTRY.append(scratch / "registry")
    before = descendant_pids()
    base_tree = scratch / "base"
    try:
        runs = measure(args, scratch, worktree(args.base, base_tree))
    except (KeyboardInterrupt, Interrupted):
        log("interrupted: stopping what this benchmark started")
        return 130
    finally:
        stop_what_we_started(before)
        drop_worktree(base_tree)
        shutil.rmtree(scratch, ignore_errors=True)
    text, summary = markdown(args.base, resolved.stdout.strip(), runs, args.repeats)
    write_report(args.out, "before_after", text, {"base": args.base, "base_commit": resolved.stdout.strip(),
                                                   "summary": summary, "runs": runs})
    print(text)
    return 0


def _interrupt(signum, frame):
    raise Interrupted(signum)


if __name__ == "__main__":
    sys.exit(main())
