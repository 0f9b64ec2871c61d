#!/usr/bin/env python3
"""What the pre-flight costs, and the protocol at 64 ranks against a bare mpi4py barrier.

    .venv/bin/bash tests/benchmarks/run bench_preflight [--repeats 3] [--out tests/benchmarks]

1. The pre-flight's own cost, in fresh processes (as a rank pays it: nothing cached yet), median of 20: a
   rank's part (the versions of what it runs, from the dist-info names, and MPI's library version) and a
   host's part (its temp dir: statvfs and /proc/self/mountinfo; the kernel's port range and neighbour table;
   the open-file limit). Goals: <= 5 ms a rank, <= 50 ms a host.
2. `mpirun -np 64 start_ray.py --dry-run` (the whole protocol, pre-flight included, each rank's `ray start`
   planned but not run) against `mpirun -np 64 python -c "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"`,
   interleaved, median of the repeats. Goal: <= 1.5x. mpiray's bytecode is compiled first, as an installed
   package's is. Where the time goes: a third run, the bare barrier after `import mpiray.cli` (what every rank
   imports before MPI_Init), and the CPU seconds of each run (all its processes, from the kernel's accounting of
   the children): on a machine with fewer cores than ranks the wall time follows the CPU seconds, so the report
   splits the dry run's extra CPU per rank into the import and the rest (the protocol, the pre-flight, the logs).
Prints a table and writes preflight_report.md / preflight_report.json in docs/reports/.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPORTS, write_report

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
MPIRUN = str(Path(PYTHON).parent / "mpirun")
START_RAY = str(ROOT / "start_ray.py")
RANKS = 64
# Timed inside a fresh interpreter, after its imports: what the pre-flight adds to a rank's start.
RANK_PART = """
import time
from mpiray.host import findings
from mpi4py import MPI
started = time.perf_counter()
findings.installed_versions()
MPI.Get_library_version()
print((time.perf_counter() - started) * 1000)
"""
HOST_PART = """
import time
from pathlib import Path
from mpiray.host import findings, portblocks
started = time.perf_counter()
findings.dir_findings(Path("/tmp"), "temp", "--temp-dir")
findings.port_range_findings(*portblocks.PORT_RANGE)
findings.neighbour_findings(64)
findings.raise_soft_limits()
findings.open_files_findings(64, head_host=True)
print((time.perf_counter() - started) * 1000)
"""


def part_ms(code: str, repeats: int = 20) -> list[float]:
    return [float(subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                                 timeout=120).stdout.strip()) for _ in range(repeats)]


def seconds(argv: list[str], cwd: Path) -> tuple[float, float]:
    """The wall and CPU seconds (user + system, of every process the run waited for) of one run."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True, timeout=600)
    wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "mpiray"), quiet=1)
    scratch = Path(tempfile.mkdtemp(prefix="bench-preflight-"))
    rank_ms, host_ms = part_ms(RANK_PART), part_ms(HOST_PART)
    barrier = [MPIRUN, "-np", str(RANKS), PYTHON, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]
    imported = [MPIRUN, "-np", str(RANKS), PYTHON, "-c",
                "import mpiray.cli; from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "imported": [], "dry": []}
    try:
        for repeat in range(args.repeats):
            runs["bare"].append(seconds(barrier, scratch))
            runs["imported"].append(seconds(imported, scratch))
            runs["dry"].append(seconds([MPIRUN, "-np", str(RANKS), PYTHON, START_RAY, "--log-dir",
                                        str(scratch / "logs"), "--job-id", f"dry-{repeat}", "--dry-run"], scratch))
            print({name: [round(v, 2) for v in values[-1]] for name, values in runs.items()}, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = {name: statistics.median(w for w, _ in values) for name, values in runs.items()}
    cpu = {name: statistics.median(c for _, c in values) for name, values in runs.items()}
    bare, dry = [w for w, _ in runs["bare"]], [w for w, _ in runs["dry"]]
    ratio = wall["dry"] / wall["bare"]
    import_ms = (cpu["imported"] - cpu["bare"]) / RANKS * 1000
    rest_ms = (cpu["dry"] - cpu["imported"]) / RANKS * 1000
    rows = [("a rank's part (versions, MPI library)", statistics.median(rank_ms), "<= 5 ms"),
            ("a host's part (temp dir, port range, neighbour table, open files)", statistics.median(host_ms),
             "<= 50 ms")]
    lines = [f"# The pre-flight's cost, and the protocol at {RANKS} ranks", "",
             "| measure | median | target | result |", "|---|---|---|---|"]
    for what, value, target in rows:
        limit = float(target.split()[1])
        lines.append(f"| {what} | {value:.2f} ms | {target} | {'MET' if value <= limit else 'MISS'} |")
    lines.append(f"| `mpirun -np {RANKS} start_ray.py --dry-run` / a bare mpi4py barrier | "
                 f"{statistics.median(dry):.2f} s / {statistics.median(bare):.2f} s = {ratio:.2f}x | <= 1.5x | "
                 f"{'MET' if ratio <= 1.5 else 'MISS'} |")
    lines += ["", f"Where the time goes (median CPU seconds of all processes, user + system): bare barrier "
              f"{cpu['bare']:.1f}, after `import mpiray.cli` {cpu['imported']:.1f}, dry run {cpu['dry']:.1f}; "
              f"wall {wall['bare']:.2f} s, {wall['imported']:.2f} s, {wall['dry']:.2f} s on {os.cpu_count()} cores. "
              f"Per rank, above the bare barrier: the import {import_ms:.0f} ms of CPU, the rest of the dry run "
              f"{rest_ms:.0f} ms. At {RANKS} ranks on {os.cpu_count()} cores, every CPU ms a rank adds costs "
              f"{RANKS / os.cpu_count():.0f} ms of wall time."]
    lines += ["", f"Every run: rank part ms {[round(v, 2) for v in rank_ms]}; host part ms "
              f"{[round(v, 2) for v in host_ms]}; dry-run s {[round(v, 2) for v in dry]}; barrier s "
              f"{[round(v, 2) for v in bare]}."]
    text = "\n".join(lines) + "\n"
    print(text)
    write_report(args.out, "preflight", text,
                 {"rank_ms": rank_ms, "host_ms": host_ms, "dry_s": dry, "bare_s": bare, "ratio": ratio,
                  "runs_wall_cpu_s": runs, "import_cpu_ms_per_rank": import_ms, "rest_cpu_ms_per_rank": rest_ms},
                 indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
