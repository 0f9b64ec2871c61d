#!/usr/bin/env python3
"""Scale benchmark: real Ray nodes on the 3-host Slurm testbed, and the protocol alone (--dry-run).

    .venv/bin/bash tests/benchmarks/run bench_scale [--runs-24 5] [--out tests/benchmarks]

1. Real nodes: `srun -N3 -n{3,6,12,24} --overcommit --mpi=pmi2 start_ray.py` on the testbed (needs
   root; it is brought up if need be). Per run: seconds from srun to the driver's start (all nodes
   ALIVE), the machine's busy CPU seconds over the same span (/proc/stat: what the start cost, stated, not
   a bound: it is no reference), the exit code, processes left. No reference is measured here, so no
   ratio is claimed: bench_launcher compares a start with the same nodes started by hand.
2. The protocol: `mpirun -np {16,64,256} start_ray.py --dry-run` beside a bare mpi4py barrier at the
   same rank counts (median of 3 each), and rank 0's / a worker's MPI message counts. 256 ranks on
   one host use --ray-node-per host: 256 blocks of 100 ports do not fit one host's port range.
   mpiray's bytecode is compiled first, as an installed package's is.
Prints a table, writes scale_report.md, scale_report.json and scale.png in docs/reports/.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mpiray.logs.events import read_events

from harness import REPORTS, write_report
from slurm import testbed

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
MPIRUN = str(Path(sys.executable).parent / "mpirun")
START_RAY = str(ROOT / "start_ray.py")
# The driver: the time and the machine's CPU counters at the moment every node is ALIVE.
STAMP = [PYTHON, "-S", "-c", "import time; print('STAMP', time.time(), open('/proc/stat').readline(), flush=True)"]


def busy_seconds(stat_line: str) -> float:
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in stat_line.split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def proc_stat() -> str:
    with open("/proc/stat") as stat:
        return stat.readline()


def real_run(bed: testbed.Testbed, per_host: int, scratch: Path) -> dict:
    ranks = 3 * per_host
    log_dir = scratch / f"logs-{ranks}-{time.monotonic_ns()}"
    before_wall, before_cpu = time.time(), busy_seconds(proc_stat())
    result = bed.run(["srun", "-N3", f"-n{ranks}", "--overcommit", "--mpi=pmi2", f"--chdir={scratch}",
                      PYTHON, START_RAY, "--log-dir", str(log_dir), "--", *STAMP], timeout=600)
    stamp = re.search(r"^STAMP (\S+) (cpu .*)$", result.stdout, re.M)
    (job_dir,) = log_dir.iterdir()
    row = {"nodes": ranks, "per_host": per_host, "exit": result.returncode, "job": job_dir.name}
    if stamp:
        ready = float(stamp.group(1)) - before_wall
        cpu = busy_seconds(stamp.group(2)) - before_cpu
        row.update(ready_s=round(ready, 2), cpu_s=round(cpu, 2))
    retries = sum(record["event"] == "join_retry" for p in job_dir.glob("rank-*.jsonl") for record in read_events(p))
    row["retried_joins"] = retries
    deadline = time.monotonic() + 60
    while (left := testbed.job_processes(bed, job_dir.name)) and time.monotonic() < deadline:
        time.sleep(0.5)
    row["left"] = len(left)
    return row


def mpirun_seconds(argv: list[str], cwd: Path) -> float:
    started = time.monotonic()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True, timeout=600)
    return time.monotonic() - started


def protocol_run(ranks: int, scratch: Path, repeats: int = 3) -> dict:
    log_dir = scratch / "dry"
    per = ["--ray-node-per", "host"] if ranks > 100 else []
    barrier = [MPIRUN, "-np", str(ranks), PYTHON, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]
    dry, bare, job = [], [], ""
    for repeat in range(repeats):
        bare.append(mpirun_seconds(barrier, scratch))
        job = f"dry-{ranks}-{repeat}"
        dry.append(mpirun_seconds([MPIRUN, "-np", str(ranks), PYTHON, START_RAY, "--log-dir", str(log_dir),
                                   "--job-id", job, "--dry-run", *per], scratch))
    counts = {}
    for rank in (0, ranks - 1):
        (found,) = [r["fields"] for r in read_events(log_dir / job / f"rank-{rank:04d}.jsonl")
                    if r["event"] == "mpi_messages"]
        counts[rank] = [found["sent"], found["received"]]
    return {"ranks": ranks, "node_per": "host" if per else "rank", "dry_s": round(statistics.median(dry), 2),
            "bare_s": round(statistics.median(bare), 2), "ratio": round(statistics.median(dry) / statistics.median(bare), 2),
            "rank0_sent_received": counts[0], "worker_sent_received": counts[ranks - 1]}


def draw(real: list[dict], protocol: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    by_nodes: dict[int, list[dict]] = {}
    for row in real:
        if "ready_s" in row:
            by_nodes.setdefault(row["nodes"], []).append(row)
    nodes = sorted(by_nodes)
    left.plot(nodes, [statistics.median(r["ready_s"] for r in by_nodes[n]) for n in nodes], "o-", label="ready (median)")
    left.set(title="Real Ray nodes, 3-host testbed", xlabel="Ray nodes", ylabel="seconds from srun")
    left.legend()
    ranks = [row["ranks"] for row in protocol]
    right.plot(ranks, [row["dry_s"] for row in protocol], "o-", label="start_ray.py --dry-run")
    right.plot(ranks, [row["bare_s"] for row in protocol], "s--", label="bare mpi4py barrier")
    right.set(title="The protocol alone, one host (mpirun)", xlabel="MPI ranks", ylabel="seconds", xscale="log")
    right.set_xticks(ranks, [str(n) for n in ranks])
    right.minorticks_off()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(real: list[dict], protocol: list[dict]) -> str:
    lines = ["# Scale benchmark", "",
             "## Real Ray nodes on the 3-host Slurm testbed", "",
             "| nodes | per host | ready s | busy CPU s (all cores) | retried joins | exit | left |",
             "|---|---|---|---|---|---|---|"]
    for r in real:
        lines.append(f"| {r['nodes']} | {r['per_host']} | {r.get('ready_s', '-')} | {r.get('cpu_s', '-')} | "
                     f"{r['retried_joins']} | {r['exit']} | {r['left']} |")
    lines += ["", "## The protocol alone (`--dry-run`) beside a bare mpi4py barrier, one host", "",
              "| ranks | node per | dry-run s | bare barrier s | ratio | rank 0 msgs sent/received | a worker's |",
              "|---|---|---|---|---|---|---|"]
    for r in protocol:
        lines.append(f"| {r['ranks']} | {r['node_per']} | {r['dry_s']} | {r['bare_s']} | {r['ratio']} | "
                     f"{r['rank0_sent_received'][0]}/{r['rank0_sent_received'][1]} | "
                     f"{r['worker_sent_received'][0]}/{r['worker_sent_received'][1]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs-24", type=int, default=5, help="runs of the 24-node case")
    parser.add_argument("--out", type=Path, default=REPORTS)
    parser.add_argument("--skip-real", action="store_true", help="only the --dry-run part (no root needed)")
    parser.add_argument("--per-host", default="1,2,4", help="ranks per host of the single runs (default 1,2,4)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    # An installed mpiray carries its compiled bytecode (pip compiles it). A stale .pyc under
    # PYTHONDONTWRITEBYTECODE would make every rank compile the sources again: 64 ranks x ~20 ms.
    compileall.compile_dir(str(ROOT / "mpiray"), quiet=1)
    protocol = []
    for ranks in (16, 64, 256):
        protocol.append(protocol_run(ranks, scratch))
        print(protocol[-1], flush=True)
    real = []
    if not args.skip_real:
        started_here = not testbed.is_up()
        bed = testbed.up()
        try:
            for per_host in (int(n) for n in args.per_host.split(",")):
                real.append(real_run(bed, per_host, scratch))
                print(real[-1], flush=True)
            for _ in range(args.runs_24):
                real.append(real_run(bed, 8, scratch))
                print(real[-1], flush=True)
        finally:
            if started_here:
                testbed.down()
    text = report(real, protocol)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(args.out, "scale", text + "\n![scale](scale.png)\n", {"real": real, "protocol": protocol}, indent=1)
    draw(real, protocol, args.out / "scale.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
