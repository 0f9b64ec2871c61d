"""Worker jobs on a batch scheduler: the script that joins a running cluster, submitted, watched, cancelled.

    Slurm: sbatch / squeue / scancel        PBS Pro: qsub / qstat / qdel

Scripts and command lines are built by pure functions (tested as text and lists); the few calls that
run the scheduler's commands are thin, each with a timeout. Every worker job of a cluster carries its
name (mpiray-CLUSTER-wN), so that a job, and a human with squeue, can tell them apart.

A worker job runs one rank, hence one Ray node (Ray's autoscaler matches one of its nodes to one Ray
node), that joins the cluster with `start_ray.py --join CLUSTER` and the integer resource the
autoscaler identifies it by. Its environment is not the head job's (--export=NONE): the token comes
from the user's registry (0600), never through the environment or a command line.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

COMMAND_TIMEOUT = 30.0
PENDING, RUNNING, GONE = "pending", "running", "gone"


@dataclass(frozen=True)
class WorkerJob:
    """What every worker job of a cluster is: its shape, where it runs, how its node joins."""

    cluster: str  # the head job's id (the cluster's, in the registry)
    mpiray_dir: str  # the checkout or install that has start_ray.py, as every node sees it
    python: str  # the interpreter of the head's environment, as every node sees it
    log_dir: str  # where its own output goes (beside the cluster's logs)
    cpus: int = 1
    gpus: int = 0
    directives: tuple[str, ...] = ()  # #SBATCH / #PBS lines of the template: partition, account, qos, walltime
    setup: str = ""  # the template's shell lines, run before the node starts (module loads, a venv's activate)
    env: dict = field(default_factory=dict)  # MPIRAY_* settings the node needs (the registry's place, ...)

    def name(self, node_id: int) -> str:
        return f"mpiray-{self.cluster}-w{node_id}"

    def join_command(self, node_id: int, launcher: list[str]) -> list[str]:
        """The command the job runs: one rank that joins the cluster, known to the autoscaler as node_id."""
        resources = json.dumps({"NODE_ID_AS_RESOURCE": node_id})
        return [*launcher, self.python, str(Path(self.mpiray_dir) / "start_ray.py"), "--join", self.cluster,
                "--num-cpus", str(self.cpus), "--num-gpus", str(self.gpus), "--resources", resources,
                "--log-dir", str(Path(self.log_dir).parent)]


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
    return "\n".join([*lines, *_body(job), "exec " + shlex.join(command), ""])


def pbs_script(job: WorkerJob, node_id: int) -> str:
    select = f"select=1:ncpus={job.cpus}" + (f":ngpus={job.gpus}" if job.gpus else "")
    lines = ["#!/bin/bash", f"#PBS -N {job.name(node_id)}", f"#PBS -l {select}", "#PBS -j oe",
             f"#PBS -o {job.log_dir}/{job.name(node_id)}.out"]
    lines += [line for line in job.directives if line.startswith("#PBS")]
    command = job.join_command(node_id, ["mpiexec", "-n", "1"])
    return "\n".join([*lines, *_body(job), "exec " + shlex.join(command), ""])


def _body(job: WorkerJob) -> list[str]:
    body = ["set -u"]
    body += [f"export {name}={shlex.quote(str(value))}" for name, value in sorted(job.env.items())]
    if job.setup:
        body.append(job.setup)
    return body


class Slurm:
    """Worker jobs under Slurm."""

    name = "slurm"
    script = staticmethod(slurm_script)

    def submit(self, script: str) -> str:
        """The new job's id; raises SubmitFailed with sbatch's own words."""
        result = _run(["sbatch", "--parsable"], script)
        return result.stdout.strip().split(";")[0]

    def states(self, job_ids: list[str]) -> dict[str, str]:
        """Each job's state: pending, running, or gone (ended, cancelled, unknown to the scheduler now)."""
        if not job_ids:
            return {}
        result = _run(["squeue", "--noheader", "--format=%i %T", f"--jobs={','.join(job_ids)}"], check=False)
        seen = dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)
        return {job: _slurm_state(seen.get(job, "")) for job in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            _run(["scancel", *job_ids], check=False)


def _slurm_state(state: str) -> str:
    if state in ("PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"):
        return PENDING
    if state in ("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED", "RESIZING"):
        return RUNNING
    return GONE


class Pbs:
    """Worker jobs under PBS Pro (qsub from the head's node: some sites allow it only from login nodes)."""

    name = "pbs"
    script = staticmethod(pbs_script)

    def submit(self, script: str) -> str:
        return _run(["qsub", "-"], script).stdout.strip()

    def states(self, job_ids: list[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        result = _run(["qstat", "-f", "-F", "json", *job_ids], check=False)
        try:
            jobs = json.loads(result.stdout or "{}").get("Jobs", {})
        except ValueError:
            jobs = {}
        states = {"Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "R": RUNNING, "E": RUNNING, "B": RUNNING}
        return {job: states.get(jobs.get(job, {}).get("job_state", ""), GONE) for job in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            _run(["qdel", *job_ids], check=False)


SCHEDULERS = {"slurm": Slurm, "pbs": Pbs}


class SubmitFailed(Exception):
    pass


def _run(argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SubmitFailed(f"{argv[0]}: {error}") from None
    if check and result.returncode != 0:
        raise SubmitFailed(f"{' '.join(argv[:2])} exited {result.returncode}: {result.stderr.strip()[-500:]}")
    return result


def default_python() -> str:
    return sys.executable
