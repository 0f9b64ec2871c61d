#!/usr/bin/env python3
"""mpiray beside what users would run instead, on the 3-host Slurm testbed: each starts one Ray node on each of the
3 hosts from a batch job, runs the same driver on the first, and ends with it.

    bash tests/benchmarks/run bench_peers [--repeats 3] [--out tests/benchmarks]

The three, each a batch script submitted with `sbatch -N3 --ntasks-per-node=1 --cpus-per-task=2`, as printed in
the report:
- mpiray: `srun --mpi=pmi2 python start_ray.py -- python driver.py` (jobs/slurm_multi_node.sh's line);
- the Ray docs' Slurm script (docs.ray.io, "Deploying on Slurm"): `srun -w HEAD ray start --head --block &`,
  `sleep 10`, then per worker `srun -w NODE ray start --address --block &` and `sleep 5`, then the driver in the
  batch step;
- Ray's own `ray symmetric-run` (2.49+): `srun ray symmetric-run --address HEAD:PORT --min-nodes 3 -- python
  driver.py` on every node. It ends with `ray stop`, which ends every Ray process of the user on its host.
Each runs as its users run it on a cluster: every testbed host has its own process table and /tmp (so `ray stop`
ends only its own host's Ray), and each job its node-local TMPDIR, in which Ray makes its default temp dir (its
docs' /tmp/ray, where TMPDIR is unset). Each run waits until the test bed is idle and no Ray process runs on the
machine (the previous run's, or anyone's: run this benchmark alone), at most 2 minutes, else it stops.
Each in three cases: the driver ends with 0 (ok), with 3 (fails), or is still running when the job is cancelled
(`scancel`, as at a user's Ctrl-C or an admin's); the repeats interleaved, so that a busy minute hits all alike.
Measures, per run:
- ready s: the batch script's first line to the driver's line (it prints the time and the nodes it sees ALIVE);
- job s: sbatch to the job's end in Slurm's completion log (polled); nodes: the nodes the driver saw (3 asked);
- end s: the driver's line (or the cancel) to the job's end; a job not ended END_DEADLINE_S after its driver's
  line (or JOB_TIMEOUT_S after sbatch) is killed, and counted as hung: no end s, and its exit code is the kill's,
  not the driver's. END_DEADLINE_S is well above Ray's own 60 s wait for a lost GCS (a worker whose head ended
  gives up after it), so a peer that ends by itself is not scored as hung;
- exit: the job's exit code as Slurm records it (of the jobs that ended themselves), and whether it is the driver's
  (3 when it failed); a hung job's report lists what of it still ran at the kill;
- left: the job's processes still alive LEFT_WAIT_S after Slurm says it ended (the testbed's view: slurmstepds and
  whatever carries the job's id);
- why, from the peer's own words: the last lines of the job's output (its `ray start`s' and srun's messages) of
  every run that hung or lost the driver's exit code.
Ratios: each peer's median ready s over mpiray's in the same run. The targets are stated below; the report
computes the verdicts. Writes peers_report.md and .json to --out (default: in docs/reports/).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from harness import PYTHON, REPORTS, ROOT, clean_env, log, write_report
from slurm import testbed

START_RAY = ROOT / "start_ray.py"
RAY = Path(PYTHON).parent / "ray"
JOB_TIMEOUT_S = 300.0  # submit to the end: a job still running then hangs (mpiray's and the docs' take ~25 s)
# After the driver's line: a job still running then hangs. Ray's workers wait 60 s for a GCS that went away
# (gcs_rpc_server_reconnect_timeout_s) and Slurm's KillWait is 10 s: 150 s leaves a peer that ends by itself time.
END_DEADLINE_S = 150.0
TAIL_LINES = 8  # of a failed run's job output, in the report
LEFT_WAIT_S = 15.0  # after the job's end, what is still alive of it (Slurm's KillWait and a margin)
PORT = 6379  # the Ray docs' script's and symmetric-run's default GCS port
TARGETS = {"ready_ratio_docs": ("ge", 1.0), "ready_ratio_symmetric": ("ge", 1.0)}  # mpiray no slower than either

DRIVER = """\
import sys
import time
import ray

ray.init()
alive = sum(1 for node in ray.nodes() if node["Alive"])
print(f"BENCH-HELLO {time.time():.3f} {alive}", flush=True)
if sys.argv[1] == "cancel":
    time.sleep(600)
sys.exit(3 if sys.argv[1] == "fails" else 0)
"""
CASES = ("ok", "fails", "cancel")
DRIVER_CODE = {"ok": 0, "fails": 3}

HEADER = """#!/bin/bash
echo "BENCH-START $(date +%s.%N)"
set -u
export PATH={bin}:$PATH  # the venv, as a user's job activates it
cd {scratch}
"""

SCRIPTS = {
    "mpiray": HEADER + """\
srun --mpi=pmi2 --ntasks-per-node=1 --cpus-per-task=$SLURM_CPUS_PER_TASK \\
     {python} {start_ray} --log-dir {scratch}/logs -- {python} {driver} $CASE
""",
    # docs.ray.io/en/latest/cluster/vms/user-guides/community/slurm.html (slurm-basic.sh), with this venv's ray.
    "ray_docs": HEADER + """\
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
nodes_array=($nodes)
head_node=${{nodes_array[0]}}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
port={port}
ip_head=$head_node_ip:$port
export ip_head RAY_ADDRESS=$ip_head
srun --nodes=1 --ntasks=1 -w "$head_node" {ray} start --head --node-ip-address="$head_node_ip" --port=$port \\
     --num-cpus "$SLURM_CPUS_PER_TASK" --block &
sleep 10
worker_num=$((SLURM_JOB_NUM_NODES - 1))
for ((i = 1; i <= worker_num; i++)); do
    node_i=${{nodes_array[$i]}}
    srun --nodes=1 --ntasks=1 -w "$node_i" {ray} start --address "$ip_head" --num-cpus "$SLURM_CPUS_PER_TASK" --block &
    sleep 5
done
{python} -u {driver} $CASE
""",
    # Ray's own: every node runs the same line; the node whose address is --address starts the head and the driver.
    "symmetric_run": HEADER + """\
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
srun --ntasks-per-node=1 {ray} symmetric-run --address "$head_node_ip:{port}" --min-nodes "$SLURM_JOB_NUM_NODES" \\
     --num-cpus "$SLURM_CPUS_PER_TASK" -- {python} -u {driver} $CASE
""",
}


def write_scripts(scratch: Path) -> dict[str, Path]:
    driver = scratch / "driver.py"
    driver.write_text(DRIVER)
    paths = {}
    for name, text in SCRIPTS.items():
        path = scratch / f"{name}.sh"
        path.write_text(text.format(scratch=scratch, python=PYTHON, start_ray=START_RAY, driver=driver, ray=RAY,
                                    port=PORT, bin=RAY.parent))
        paths[name] = path
    return paths


def tagged(output: str, tag: str) -> list[str]:
    return [line.split()[1:] for line in output.splitlines() if line.startswith(tag + " ")]


def short_command(command: str) -> str:
    """A process's command line as the report names it: its program and first 3 arguments, paths to their names."""
    words = command.split()
    return " ".join([Path(words[0]).name] + [Path(w).name if w.startswith("/") else w for w in words[1:4]])


def others_ray() -> list[int]:
    """Ray processes on this machine (the testbed's nodes share its process table)."""
    return [proc.pid for proc in psutil.process_iter(["name"]) if proc.info["name"] in ("raylet", "gcs_server")]


def wait_until_idle(bed: testbed.Testbed, timeout: float = 120.0) -> None:
    """Every test bed node idle (the last job's processes gone, its nodes released): each run starts alike."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = bed.run(["sinfo", "--noheader", "--Node", "--format=%T"], timeout=60).stdout.split()
        if states and all(state == "idle" for state in states) and not others_ray():
            return
        time.sleep(0.5)
    raise RuntimeError(f"the test bed's nodes were not idle within {timeout:g} s")


def one_run(bed: testbed.Testbed, name: str, case: str, script: Path, scratch: Path) -> dict:
    """Submit the script as a 3-node job whose driver does what case says; its timings and what it left.
    symmetric-run ends with `ray stop`, which ends every Ray process of this user on the host (here: the
    machine): it is skipped while any other Ray runs."""
    wait_until_idle(bed)
    out = scratch / f"{name}-{case}-{time.monotonic_ns()}.out"
    submitted_wall = time.time()
    submitted = bed.login(["sbatch", "--parsable", "-N3", "--ntasks-per-node=1", "--cpus-per-task=2",
                           f"--partition={bed.partition}", "--job-name=mpiray-bench-peers", f"--output={out}",
                           str(script)], timeout=60, cwd=scratch, env={**clean_env(local=False), "CASE": case})
    if submitted.returncode != 0:
        raise RuntimeError(f"sbatch {script.name}: {submitted.stderr.strip()}")
    job_id = submitted.stdout.strip().split(";")[0]
    row: dict = {"peer": name, "case": case, "job": job_id, "hung": False}
    deadline = time.monotonic() + JOB_TIMEOUT_S
    hello_at = None
    while (result := bed.job_result(job_id)) is None:
        now = time.monotonic()
        if hello_at is None and out.exists() and tagged(out.read_text(errors="replace"), "BENCH-HELLO"):
            hello_at, row["hello_wall"] = now, time.time()
            if case == "cancel":
                bed.run(["scancel", job_id], timeout=60)
        if now > deadline or (hello_at is not None and now - hello_at > END_DEADLINE_S):
            row["hung"] = True
            row["alive_at_kill"] = sorted({short_command(line) for line in testbed.job_processes(bed, job_id).values()})
            bed.run(["scancel", "--signal=KILL", job_id], timeout=60)
            result = bed.wait_for_job(job_id, timeout=120)
            break
        time.sleep(0.2)
    ended_wall = time.time()
    text = out.read_text(errors="replace") if out.exists() else ""
    start, hello = tagged(text, "BENCH-START"), tagged(text, "BENCH-HELLO")
    # A job that had to be killed did not end with its driver's code but with the kill's.
    kept = (not row["hung"] and result.exit_code == DRIVER_CODE[case]) if case in DRIVER_CODE else None
    row.update(state=result.state, exit=result.exit_code, job_s=round(ended_wall - submitted_wall, 2),
               driver_code_kept=kept)
    if row["hung"] or kept is False:
        row["output_tail"] = [line[:200] for line in text.splitlines()[-TAIL_LINES:]]
    if start and hello:
        started, seen = float(start[0][0]), float(hello[0][0])
        row.update(ready_s=round(seen - started, 2), nodes=int(hello[0][1]))
        if not row["hung"]:
            row["end_s"] = round(ended_wall - row.pop("hello_wall", seen), 2)
    time.sleep(LEFT_WAIT_S)
    row["left"] = len(testbed.job_processes(bed, job_id))
    if row["left"]:
        bed.run(["scancel", "--signal=KILL", job_id], timeout=60)
    return row


def summary(rows: list[dict]) -> dict[str, dict]:
    """peer/case -> its runs' medians (min-max of ready), hangs, exit codes, what was left."""
    table: dict[str, dict] = {}
    for name in SCRIPTS:
        for case in CASES:
            mine = [r for r in rows if r["peer"] == name and r["case"] == case and "skipped" not in r]
            ready = [r["ready_s"] for r in mine if "ready_s" in r]
            ends = [r["end_s"] for r in mine if "end_s" in r]
            failed = [r for r in mine if "output_tail" in r]
            jobs = [r["job_s"] for r in mine if not r["hung"]]
            kept = [r["driver_code_kept"] for r in mine if r["driver_code_kept"] is not None]
            table[f"{name}/{case}"] = {
                "runs": len(mine), "ready_median_s": round(statistics.median(ready), 2) if ready else None,
                "ready_min_max_s": [min(ready), max(ready)] if ready else None,
                "nodes_seen": sorted({r.get("nodes") for r in mine if "nodes" in r}),
                "job_median_s": round(statistics.median(jobs), 2) if jobs else None,
                "end_median_s": round(statistics.median(ends), 2) if ends else None,
                "end_min_max_s": [min(ends), max(ends)] if ends else None,
                "why": failed[0]["output_tail"] if failed else None,
                "hung": sum(r["hung"] for r in mine), "left_max": max((r["left"] for r in mine), default=0),
                "exit_codes": sorted({r["exit"] for r in mine if not r["hung"]}),
                "alive_at_kill": sorted({c for r in mine for c in r.get("alive_at_kill", [])}),
                "driver_code_kept": f"{sum(kept)}/{len(kept)}" if kept else "-",
            }
    return table


def verdict(value: float | None, key: str) -> str:
    if value is None:
        return "n/a"
    how, bound = TARGETS[key]
    return "PASS" if (value >= bound if how == "ge" else value <= bound) else "MISS"


def report(table: dict[str, dict], ratios: dict[str, float | None]) -> str:
    lines = ["# mpiray beside its peers, on the 3-host Slurm testbed", "",
             "Each a batch job of 3 nodes (`sbatch -N3 --ntasks-per-node=1 --cpus-per-task=2`), one Ray node per "
             "host, the same driver; the scripts are in bench_peers.py as submitted.", "",
             "| peer / driver | runs | ready s median (min-max) | nodes seen | job s median | end s median (min-max) | "
             "hung | left | exit codes | driver's code kept |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in table.items():
        spread = "-" if row["ready_min_max_s"] is None else f"{row['ready_min_max_s'][0]}-{row['ready_min_max_s'][1]}"
        ends = "-" if row["end_min_max_s"] is None else f"{row['end_min_max_s'][0]}-{row['end_min_max_s'][1]}"
        lines.append(f"| {name} | {row['runs']} | {row['ready_median_s']} ({spread}) | {row['nodes_seen']} | "
                     f"{row['job_median_s']} | {row['end_median_s']} ({ends}) | {row['hung']} | {row['left_max']} | "
                     f"{row['exit_codes']} | {row['driver_code_kept']} |")
    hung = [(name, row["alive_at_kill"]) for name, row in table.items() if row["hung"]]
    if hung:
        lines += ["", "What still ran when a hung job was killed (the job's processes, by command):", ""]
        lines += [f"- {name}: " + "; ".join(f"`{c}`" for c in alive) for name, alive in hung]
    why = [(name, row["why"]) for name, row in table.items() if row["why"]]
    if why:
        lines += ["", "Why, in the peer's own words: the last lines of the job's output, of its first run that hung or "
                  "lost the driver's exit code:", ""]
        for name, tail in why:
            lines += [f"- {name}:", "", "  ```", *(f"  {line}" for line in tail), "  ```"]
    lines += ["", "| ratio (peer's ready s / mpiray's, same run) | value | target | verdict |", "|---|---|---|---|"]
    for key, value in ratios.items():
        how, bound = TARGETS[key]
        lines.append(f"| {key} | {value if value is not None else 'n/a'} | {'>=' if how == 'ge' else '<='} {bound} | "
                     f"{verdict(value, key)} |")
    lines += ["", f"ready s: the batch script's first line to the driver's; job s: sbatch to the job's end in Slurm's "
              f"completion log; end s: the driver's line (cancel: the scancel) to that end; hung: jobs still running "
              f"{END_DEADLINE_S:g} s after the driver's line, then killed (exit codes: of the jobs that ended themselves); "
              f"left: the job's processes alive "
              f"{LEFT_WAIT_S:g} s after its end. Ratios from the ok case."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args()
    started_here = not testbed.is_up()
    bed = testbed.up()
    scratch = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=testbed.SHARED_DIR))  # the hosts' shared file system
    scratch.chmod(0o755)
    rows = []
    try:
        scripts = write_scripts(scratch)
        for repeat in range(args.repeats):
            for case in CASES:
                for name, script in scripts.items():
                    rows.append(one_run(bed, name, case, script, scratch))
                    log(f"repeat {repeat + 1}: {rows[-1]}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the jobs' output and logs: the report keeps what it needs
        if started_here:
            testbed.down()
    table = summary(rows)
    mine = table["mpiray/ok"]["ready_median_s"]
    ratios = {f"ready_ratio_{short}": (round(table[f"{name}/ok"]["ready_median_s"] / mine, 2)
                                       if mine and table[f"{name}/ok"]["ready_median_s"] else None)
              for short, name in (("docs", "ray_docs"), ("symmetric", "symmetric_run"))}
    text = report(table, ratios)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(args.out, "peers", text, {"runs": rows, "summary": table, "ratios": ratios,
                                           "scripts": {name: SCRIPTS[name] for name in SCRIPTS}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
