"""What started this rank: batch scheduler and MPI launcher, read from environment tables.

All knowledge of `SLURM_*`, `PBS_*`, `COBALT_*`/`ALPS_*`, `PALS_*`, `OMPI_*` and `PMI_*` lives in the
two tables below; the functions are pure (they take the environment as a mapping).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Scheduler:
    name: str
    marker: str  # set in every job of this scheduler
    job_id: tuple[str, ...]  # first one set wins
    cpus_per_task: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launcher:
    name: str
    marker: str  # set in every task this launcher starts
    size: tuple[str, ...]  # number of tasks the launcher started, first one set wins
    mpi_hint: str  # what to tell a user whose MPI saw only one of those tasks


# Order matters: the first whose marker is set is the one reported.
SCHEDULERS = (
    Scheduler("slurm", "SLURM_JOB_ID", ("SLURM_JOB_ID",), ("SLURM_CPUS_PER_TASK",)),
    Scheduler("pbs", "PBS_JOBID", ("PBS_JOBID",), ("NCPUS", "OMP_NUM_THREADS")),
    Scheduler("cobalt", "COBALT_JOBID", ("COBALT_JOBID",)),
    Scheduler("alps", "ALPS_APP_ID", ("ALPS_APP_ID",), ("ALPS_APP_DEPTH",)),
)

LAUNCHERS = (
    Launcher(
        "srun",
        "SLURM_STEP_ID",
        ("SLURM_STEP_NUM_TASKS",),
        "srun started these tasks but the MPI library did not get its process manager: run "
        "`srun --mpi=pmi2 ...` (or --mpi=pmix where your Slurm has it; `srun --mpi=list` shows "
        "them), or set MpiDefault in slurm.conf",
    ),
    Launcher(
        "pals",
        "PALS_RANKID",
        ("PALS_SIZE", "PMI_SIZE"),
        "PALS mpiexec started these tasks but the MPI library is not Cray MPICH/PALS-aware: load "
        "the cray-mpich and cray-pals modules and rebuild mpi4py against them",
    ),
    Launcher(
        "aprun",
        "ALPS_APP_PE",
        ("PMI_SIZE",),
        "aprun started these tasks but the MPI library is not Cray MPICH: build mpi4py with the "
        "Cray compiler wrapper (`MPICC=cc pip install --no-binary mpi4py mpi4py`)",
    ),
    Launcher(
        "openmpi",
        "OMPI_COMM_WORLD_SIZE",
        ("OMPI_COMM_WORLD_SIZE",),
        "Open MPI's mpirun started these tasks but mpi4py uses another MPI library: use the "
        "mpirun that belongs to the MPI mpi4py was built with",
    ),
    Launcher(
        "hydra",
        "PMI_SIZE",
        ("PMI_SIZE",),
        "MPICH's mpiexec started these tasks but mpi4py uses another MPI library: use the "
        "mpiexec that belongs to the MPI mpi4py was built with",
    ),
)


@dataclass(frozen=True)
class Environment:
    """What this rank was started by, as far as the environment tells."""

    scheduler: str  # "slurm", "pbs", "cobalt", "alps" or "none"
    launcher: str  # "srun", "pals", "aprun", "openmpi", "hydra" or "none"
    job_id: str | None
    launched_tasks: int | None  # tasks the launcher says it started
    cpus_per_task: int | None
    mpi_hint: str

    def describe(self) -> str:
        tasks = f", {self.launched_tasks} tasks" if self.launched_tasks else ""
        return f"scheduler {self.scheduler}, launcher {self.launcher}{tasks}"


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _positive_int(text: str | None) -> int | None:
    # Slurm writes e.g. "4(x2)" in some count variables; the leading number is what we need.
    if not text:
        return None
    digits = ""
    for char in text:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits and int(digits) > 0 else None


def detect(environ: Mapping[str, str] | None = None) -> Environment:
    environ = os.environ if environ is None else environ
    scheduler = next((s for s in SCHEDULERS if environ.get(s.marker)), None)
    launcher = next((l for l in LAUNCHERS if environ.get(l.marker)), None)
    return Environment(
        scheduler=scheduler.name if scheduler else "none",
        launcher=launcher.name if launcher else "none",
        job_id=_first(environ, scheduler.job_id) if scheduler else None,
        launched_tasks=_positive_int(_first(environ, launcher.size)) if launcher else None,
        cpus_per_task=_positive_int(_first(environ, scheduler.cpus_per_task)) if scheduler else None,
        mpi_hint=launcher.mpi_hint if launcher else "",
    )


def default_job_id(env: Environment, now: float | None = None, pid: int | None = None) -> str:
    """The scheduler's job id, else a local timestamp and the pid (unique on one host)."""
    if env.job_id:
        return env.job_id
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{os.getpid() if pid is None else pid}"


def singleton_error(env: Environment, mpi_size: int) -> str | None:
    """The explanation when the launcher started N tasks but MPI sees only this one."""
    if mpi_size != 1 or not env.launched_tasks or env.launched_tasks <= 1:
        return None
    return (
        f"{env.launcher} started {env.launched_tasks} tasks, but MPI reports a world of 1 rank in "
        f"each: every task would start its own separate Ray cluster. {env.mpi_hint}."
    )
