"""Worker jobs under Slurm: sbatch, squeue, scancel."""

from __future__ import annotations

import shlex
from typing import ClassVar

from mpiray.batch.jobs import GONE, PENDING, RUNNING, CommandFailed, WorkerJob, run_command, script_body


def slurm_script(job: WorkerJob, node_id: int) -> str:
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job.name(node_id)}", "#SBATCH --nodes=1", "#SBATCH --ntasks=1",
             f"#SBATCH --cpus-per-task={job.cpus}", f"#SBATCH --output={job.log_dir}/{job.name(node_id)}-%j.out",
             "#SBATCH --export=NONE",
             # The node drains and leaves before its walltime: its tasks move away, the autoscaler replaces it.
             "#SBATCH --signal=TERM@60"]
    if job.gpus:
        lines.append(f"#SBATCH --gpus={job.gpus}")
    lines += [line for line in job.directives if line.startswith("#SBATCH")]
    # --export=ALL: under sbatch --export=NONE, Slurm sets SLURM_EXPORT_ENV=NONE and srun would drop what
    # this script exports (the registry's place) from the task's environment.
    command = job.join_command(node_id, ["srun", "--export=ALL", "--mpi=pmi2", "--ntasks=1",
                                         f"--cpus-per-task={job.cpus}"])
    return "\n".join([*lines, *script_body(job), "exec " + shlex.join(command), ""])


class Slurm:
    """jobs.BatchSystem under Slurm."""

    name: ClassVar[str] = "slurm"

    @staticmethod
    def script(job: WorkerJob, node_id: int) -> str:
        return slurm_script(job, node_id)

    def submit(self, script: str) -> str:
        result = run_command(["sbatch", "--parsable"], script)
        return result.stdout.strip().split(";")[0]

    def states(self, job_ids: list[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        result = run_command(["squeue", "--noheader", "--format=%i %T", f"--jobs={','.join(job_ids)}"], check=False)
        seen = dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)
        if not seen and result.returncode != 0 and "Invalid job id" not in result.stderr:
            raise CommandFailed(f"squeue exited {result.returncode}: {result.stderr.strip()[-500:]}")
        return {job: slurm_state(seen.get(job, "")) for job in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            run_command(["scancel", *job_ids], check=False)


def slurm_state(state: str) -> str:
    if state in ("PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"):
        return PENDING
    if state in ("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED", "RESIZING"):
        return RUNNING
    return GONE
