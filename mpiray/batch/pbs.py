"""Worker jobs under PBS Pro and OpenPBS: qsub, qstat, qdel."""

from __future__ import annotations

import json
import shlex

from mpiray.batch.jobs import GONE, PENDING, RUNNING, WorkerJob, run_command, script_body

# qstat's one-letter job_state: queued, held, waiting, in transit, running, exiting, array job begun.
STATES = {"Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "R": RUNNING, "E": RUNNING, "B": RUNNING}


def pbs_script(job: WorkerJob, node_id: int) -> str:
    select = f"select=1:ncpus={job.cpus}" + (f":ngpus={job.gpus}" if job.gpus else "")
    lines = ["#!/bin/bash", f"#PBS -N {job.name(node_id)}", f"#PBS -l {select}", "#PBS -j oe",
             f"#PBS -o {job.log_dir}/{job.name(node_id)}.out"]
    lines += [line for line in job.directives if line.startswith("#PBS")]
    command = job.join_command(node_id, ["mpiexec", "-n", "1"])
    return "\n".join([*lines, *script_body(job), "exec " + shlex.join(command), ""])


class Pbs:
    """jobs.BatchSystem under PBS (qsub from the head's node: some sites allow it only from login nodes)."""

    name = "pbs"
    script = staticmethod(pbs_script)

    def submit(self, script: str) -> str:
        return run_command(["qsub", "-"], script).stdout.strip()

    def states(self, job_ids: list[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        result = run_command(["qstat", "-f", "-F", "json", *job_ids], check=False)
        try:
            jobs = json.loads(result.stdout or "{}").get("Jobs", {})
        except ValueError:
            jobs = {}
        return {job: STATES.get(jobs.get(job, {}).get("job_state", ""), GONE) for job in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            run_command(["qdel", *job_ids], check=False)
