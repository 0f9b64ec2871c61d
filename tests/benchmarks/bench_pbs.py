#!/usr/bin/env python3
"""PBS: a 3-host cluster's start under qsub, and elastic worker jobs, on the OpenPBS testbed.

    .envs/pbs/bin/bash tests/benchmarks/run bench_pbs [--repeats 3] [--out tests/benchmarks]

Root, the PBS testbed (tests/pbs/; brought up if need be, taken down at the end unless it was up), and
the Python of `bash tests/envs.sh pbs` (jobs run as the testbed's ordinary user). Interleaved, each repeat:
1. start, reference: `qsub` of a 3-host script that only stamps the time -> the script runs (PBS's own);
2. start: `qsub jobs/pbs_multi_node.sh` on 3 hosts whose driver stamps the time -> the driver starts
   (the cluster of 3 Ray nodes is up);
3. elastic, reference: a 1-host head job that waits for a second node, and the worker job script
   (mpiray/batch/pbs.py) given to `qsub` by the benchmark -> the worker's node ALIVE;
4. elastic: `qsub jobs/pbs_elastic.sh --autoscale 1:2`, whose driver asks for a STRICT_SPREAD group of
   2 one-CPU bundles -> the node of the worker job Ray's autoscaler asked for ALIVE.
Prints a table and writes pbs_report.md / pbs_report.json in docs/reports/. Goal (as on Slurm): the
autoscaled path within 1.5x the by-hand one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from mpiray.batch import jobs
from mpiray.batch.pbs import pbs_script
from mpiray.logs.events import read_events
from mpiray.rank.nodeplan import AUTOSCALER_UPDATE_S

from elastic_measures import DEMAND, interleave, node_alive_time, row, series, table
from harness import REPORTS, write_report
from pbs import testbed
from pbs.fixture import PbsJobs
from process_control import wait_for

ROOT = Path(__file__).resolve().parents[2]

PYTHON = sys.executable
JOBS = ROOT / "jobs"
TIMEOUT_S = 300
THREE_HOSTS = ("-l", "select=3:ncpus=2", "-l", "place=scatter", "-l", "walltime=00:05:00", "-k", "doe")
ONE_HOST = ("-l", "select=1:ncpus=2", "-l", "walltime=00:05:00", "-k", "doe")
STAMP = "import time\nprint('BENCH', time.time(), flush=True)\n"  # a file: qsub -v splits values at commas


def stamps(workdir: Path, job_id: str) -> list[str]:
    """The BENCH lines of the job's output file (-k doe: written in the submit dir)."""
    (path,) = workdir.glob(f"*.o{job_id.split('.')[0]}")
    return [line[6:] for line in path.read_text().splitlines() if line.startswith("BENCH ")]


def run_job(bed, tracked: PbsJobs, script: Path, *options: str, variables: dict | None = None) -> tuple[float, str]:
    submitted = time.time()
    job_id = tracked.submit(script, *options, variables=variables)
    record = bed.wait_for_job(job_id, TIMEOUT_S)
    if record["Exit_status"] != 0:
        output = "".join(path.read_text() for path in tracked.workdir.glob(f"*.o{job_id.split('.')[0]}"))
        raise RuntimeError(f"job {job_id} exited {record['Exit_status']}:\n{output[-3000:]}")
    return submitted, job_id


def start_reference(bed, tracked: PbsJobs) -> float:
    script = tracked.workdir / "stamp.sh"
    script.write_text(f"#!/bin/bash\n{PYTHON} {tracked.workdir / 'stamp.py'}\n")
    script.chmod(0o755)
    submitted, job_id = run_job(bed, tracked, script, *THREE_HOSTS)
    return float(stamps(tracked.workdir, job_id)[0]) - submitted


def start_mpiray(bed, tracked: PbsJobs) -> float:
    submitted, job_id = run_job(bed, tracked, JOBS / "pbs_multi_node.sh", *THREE_HOSTS,
                                variables=tracked.variables([PYTHON, str(tracked.workdir / "stamp.py")]))
    return float(stamps(tracked.workdir, job_id)[0]) - submitted


def elastic_reference(bed, tracked: PbsJobs, registry: Path) -> float:
    head = tracked.submit(JOBS / "pbs_multi_node.sh", *ONE_HOST, variables=tracked.variables(
        [PYTHON, str(tracked.workdir / "demand.py"), "wait"], MPIRAY_REGISTRY=str(registry)))
    cluster = head.split(".")[0]
    if not wait_for((registry / f"{cluster}.json").exists, TIMEOUT_S, 0.1):
        raise RuntimeError(f"cluster {cluster} not in the registry within {TIMEOUT_S} s")
    job_dir = tracked.workdir / "logs" / cluster
    variables = tracked.variables()
    worker = jobs.WorkerJob(cluster=cluster, python=PYTHON, log_dir=str(job_dir), cpus=1,
                            setup=variables["ENV_SETUP"],
                            env={"MPIRAY_REGISTRY": str(registry)})
    script = tracked.workdir / f"worker-{cluster}.sh"
    script.write_text(pbs_script(worker, 1))
    submitted = time.time()
    tracked.submit(script)
    if bed.wait_for_job(head, TIMEOUT_S)["Exit_status"] != 0:
        raise RuntimeError(f"head job {head} failed")
    return node_alive_time(job_dir) - submitted


def elastic_autoscaled(bed, tracked: PbsJobs, registry: Path) -> dict[str, float]:
    template = tracked.workdir / "worker-template.sh"
    template.write_text(f"#PBS -l walltime=00:05:00\n{tracked.variables()['ENV_SETUP']}\n")
    _, head = run_job(bed, tracked, JOBS / "pbs_elastic.sh", *ONE_HOST, variables=tracked.variables(
        [PYTHON, str(tracked.workdir / "demand.py"), "spread"], MIN_NODES="1", MAX_NODES="2", WORKER_CPUS="1",
        COOLDOWN="10", WORKER_TEMPLATE=str(template), MPIRAY_REGISTRY=str(registry)))
    asked = json.loads(stamps(tracked.workdir, head)[0])
    job_dir = tracked.workdir / "logs" / head.split(".")[0]
    submitted = next(r["time"] for r in read_events(job_dir / "autoscaler-rank-0000.jsonl") if r["event"] == "job_submitted")
    return {"elastic": node_alive_time(job_dir) - asked["asked"], "group_ready": asked["ready"] - asked["asked"],
            "demand_to_qsub": submitted - asked["asked"]}


def queued(bed) -> list[str]:
    """qstat's lines of the jobs still queued or running (after its two lines of header)."""
    return [line for line in bed.run(["qstat"], timeout=30).stdout.splitlines()[2:] if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPORTS)
    parser.add_argument("--elastic-only", action="store_true", help="only the elastic measures; no report written")
    args = parser.parse_args()
    reason = testbed.unavailable_reason()
    if reason:
        print(f"bench_pbs: {reason}", file=sys.stderr)
        return 2
    was_up = testbed.is_up()
    bed = testbed.up()
    tracked = PbsJobs(bed)
    try:
        (tracked.workdir / "demand.py").write_text(DEMAND)
        registry = tracked.workdir / "registry"
        registry.mkdir(mode=0o700)
        shutil.chown(registry, bed.user)
        (tracked.workdir / "stamp.py").write_text(STAMP)
        measures = {} if args.elastic_only else {
            "start_ref": lambda: {"start_ref": start_reference(bed, tracked)},
            "start": lambda: {"start": start_mpiray(bed, tracked)}}
        measures["elastic_ref"] = lambda: {"elastic_ref": elastic_reference(bed, tracked, registry)}
        measures["elastic"] = lambda: elastic_autoscaled(bed, tracked, registry)
        runs = series(interleave(measures, args.repeats, lambda: queued(bed)))
    finally:
        tracked.delete_all()
        if not was_up:
            testbed.down(bed.state_dir)
    if args.elastic_only:
        return 0
    median = {name: statistics.median(values) for name, values in runs.items()}
    start_ratio = median["start"] / median["start_ref"]
    elastic_ratio = median["elastic"] / median["elastic_ref"]
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "repeats": args.repeats,
              "runs": {k: [round(v, 2) for v in values] for k, values in runs.items()},
              "median_s": {k: round(v, 2) for k, v in median.items()},
              "start_ratio": round(start_ratio, 2), "elastic_ratio": round(elastic_ratio, 2)}
    start_ref, elastic_ref = median["start_ref"], median["elastic_ref"]
    rows = table([
        row("reference: `qsub` of a 3-host script -> the script runs", start_ref, start_ref),
        row("`qsub jobs/pbs_multi_node.sh` on 3 hosts -> the driver starts (3 Ray nodes up)", median["start"], start_ref),
        row("reference: `qsub` of the worker job by hand -> its node ALIVE in the cluster", elastic_ref, elastic_ref),
        row("autoscaled: the driver's demand (a STRICT_SPREAD group) -> the worker job's node ALIVE", median["elastic"],
            elastic_ref, at_most=1.5),
        row("autoscaled: demand -> the worker job's `qsub` (Ray's autoscaler)", median["demand_to_qsub"]),
        row("autoscaled: demand -> the placement group ready", median["group_ready"], elastic_ref),
    ], ratio_to="reference")
    text = "\n".join([
        "# PBS benchmark", "",
        f"{report['date']} on the 3-host OpenPBS testbed (2 CPUs in all), median of {args.repeats} interleaved "
        f"repeats; PBS's scheduler runs on each submit and job end; each worker job is one Ray node of 1 CPU; "
        f"Ray's autoscaler updates every {AUTOSCALER_UPDATE_S} s.", "", *rows, "",
        "Every run: " + "; ".join(f"{k} {report['runs'][k]}" for k in runs), ""])
    print(text)
    write_report(args.out, "pbs", text, report, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
