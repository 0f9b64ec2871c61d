"""Worker jobs on a batch scheduler: the script that joins a running cluster, submitted, watched, cancelled.

Every back end (slurm.py: sbatch / squeue / scancel; pbs.py: qsub / qstat / qdel) is a BatchSystem.
Scripts and command lines are built by pure functions (tested as text and lists); the few calls that
run the scheduler's commands are thin, each with a timeout. Every worker job of a cluster carries its
name (mpiray-CLUSTER-wN), so that a job, and a human with squeue, can tell them apart.

A worker job runs one rank, hence one Ray node (Ray's autoscaler matches one of its nodes to one Ray
node), that joins the cluster with `mpiray run --join CLUSTER` and the integer resource the
autoscaler identifies it by. Its environment is not the head job's (--export=NONE): the token comes
from the user's registry (0600), never through the environment or a command line.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from mpiray.errors import CommandFailed
from mpiray.package import module_command

COMMAND_TIMEOUT = 30.0
PENDING, RUNNING, GONE = "pending", "running", "gone"


@dataclass(frozen=True)
class WorkerJob:
    """What every worker job of a cluster is: its shape, where it runs, how its node joins."""

    cluster: str  # the head job's id (the cluster's, in the registry)
    python: str  # the interpreter of the head's environment, as every node sees it: it runs `-m mpiray run`
    log_dir: str  # where its own output goes (beside the cluster's logs)
    cpus: int = 1
    gpus: int = 0
    directives: tuple[str, ...] = ()  # #SBATCH / #PBS lines of the template: partition, account, qos, walltime
    setup: str = ""  # the template's shell lines, run before the node starts (module loads, a venv's activate)
    env: dict = field(default_factory=dict)  # what the node needs: the registry's place, PYTHONPATH if mpiray needs it
    stop_grace: float | None = None  # the head job's --stop-grace: a worker job drains as long before its walltime

    def name(self, node_id: int) -> str:
        return f"mpiray-{self.cluster}-w{node_id}"

    def join_command(self, node_id: int, launcher: list[str]) -> list[str]:
        """The command the job runs: one rank that joins the cluster, known to the autoscaler as node_id."""
        resources = json.dumps({"NODE_ID_AS_RESOURCE": node_id})
        return [*launcher, *module_command("mpiray", self.python), "run", "--join", self.cluster,
                "--num-cpus", str(self.cpus), "--num-gpus", str(self.gpus), "--resources", resources,
                "--market-type", "spot",
                "--log-dir", str(Path(self.log_dir).parent),
                *(["--stop-grace", f"{self.stop_grace:g}"] if self.stop_grace is not None else [])]


class BatchSystem(Protocol):
    """What an elastic cluster needs of a batch scheduler (the node provider and rank 0 call these)."""

    name: ClassVar[str]  # as environment.Environment.scheduler names it

    @staticmethod
    def script(job: WorkerJob, node_id: int) -> str:
        """The worker job's batch script, its directives first."""

    def submit(self, script: str) -> str:
        """The new job's id; raises CommandFailed with the scheduler's own words."""

    def states(self, job_ids: list[str]) -> dict[str, str]:
        """Each job's state: PENDING, RUNNING, or GONE (ended, cancelled, unknown to the scheduler now);
        raises CommandFailed when the scheduler did not answer (busy, down), which says nothing of the jobs."""

    def cancel(self, job_ids: list[str]) -> None:
        """Cancel these jobs, pending or running; an unknown one is no error."""


def script_body(job: WorkerJob) -> list[str]:
    body = ["set -u"]
    body += [f"export {name}={shlex.quote(str(value))}" for name, value in sorted(job.env.items())]
    if job.setup:
        body.append(job.setup)
    return body


def run_command(argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CommandFailed(f"{argv[0]}: {error}") from None
    if check and result.returncode != 0:
        raise CommandFailed(f"{' '.join(argv[:2])} exited {result.returncode}: {result.stderr.strip()[-500:]}")
    return result

