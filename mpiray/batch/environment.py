"""What started this rank: batch scheduler and MPI launcher, read from environment tables.

All knowledge of `SLURM_*`, `PBS_*`, `COBALT_*`/`ALPS_*`, `PALS_*`, `OMPI_*` and `PMI_*` lives in the
two tables below; the functions are pure (they take the environment as a mapping), but for read_cray_name, which
reads an HPE Cray node's name from its file.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Scheduler:
    name: str
    marker: str  # set in every job of this scheduler
    job_id: tuple[str, ...]  # first one set wins
    cpus_per_task: tuple[str, ...] = ()
    cpus_per_task_unknown_if: tuple[str, ...] = ()  # when one of these is set, the above is unreliable
    job_id_suffix: str = ""  # cut from this character on: PBS's "1234.server" -> "1234"
    gpus: tuple[str, ...] = ()  # the GPU ids the job step may use, comma-separated (after CUDA_VISIBLE_DEVICES)
    memory_mb: tuple[str, ...] = ()  # the memory (MiB) the job may use on a node
    restart_count: tuple[str, ...] = ()  # how often the batch system started this job again (requeue)
    end_time: tuple[str, ...] = ()  # when the job's walltime ends, seconds since 1970
    partition: tuple[str, ...] = ()  # the partition or queue the job runs in


@dataclass(frozen=True)
class Launcher:
    name: str
    markers: tuple[str, ...]  # all set in every task this launcher starts
    size: tuple[str, ...]  # number of MPI tasks the launcher started, first one set wins
    rank: tuple[str, ...]  # this task's index among them
    mpi_hint: str  # what to tell a user whose MPI saw only one of those tasks


# Order matters: the first whose marker is set is the one reported (for launchers: all markers).
SCHEDULERS = (
    # In a hetjob step Slurm 22.05 gives every task the same SLURM_CPUS_PER_TASK, whichever
    # component it is in (seen on the testbed: the last component's value).
    Scheduler(name="slurm", marker="SLURM_JOB_ID", job_id=("SLURM_JOB_ID",), cpus_per_task=("SLURM_CPUS_PER_TASK",),
              cpus_per_task_unknown_if=("SLURM_HET_SIZE",),
              gpus=("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"), memory_mb=("SLURM_MEM_PER_NODE",),
              restart_count=("SLURM_RESTART_COUNT",), end_time=("SLURM_JOB_END_TIME",),
              partition=("SLURM_JOB_PARTITION",)),
    # NCPUS: the chunk's ncpus. Not OMP_NUM_THREADS, which users set to 1 for PyTorch's sake.
    # PBS keeps PBS_JOBID on qrerun and sets no restart count.
    Scheduler("pbs", "PBS_JOBID", ("PBS_JOBID",), ("NCPUS",), job_id_suffix=".", partition=("PBS_QUEUE",)),
    Scheduler("cobalt", "COBALT_JOBID", ("COBALT_JOBID",), ("ALPS_APP_DEPTH",)),  # aprun -d
    Scheduler("alps", "ALPS_APP_ID", ("ALPS_APP_ID",), ("ALPS_APP_DEPTH",)),
)

# A launcher that starts its tasks through another one comes first: MPICH's or Intel's mpirun
# inside a Slurm job runs its proxies as one srun step, so its ranks carry SLURM_STEP_ID and
# SLURM_STEP_NUM_TASKS counts the proxies (one per node), not the ranks; PMI_SIZE counts the ranks.
# Open MPI's mpirun does the same with its daemons.
LAUNCHERS = (
    Launcher(
        name="pals",
        markers=("PALS_RANKID",),
        size=("PMI_SIZE",),  # PALS has no PALS_SIZE; Cray PMI sets PMI_SIZE
        rank=("PALS_RANKID",),
        mpi_hint="PALS mpiexec started these tasks but the MPI library is not Cray MPICH/PALS-aware: load "
        "the cray-mpich and cray-pals modules and rebuild mpi4py against them",
    ),
    Launcher(
        name="aprun",
        markers=("ALPS_APP_PE",),
        size=("PMI_SIZE",),
        rank=("ALPS_APP_PE",),
        mpi_hint="aprun started these tasks but the MPI library is not Cray MPICH: build mpi4py with the "
        "Cray compiler wrapper (`MPICC=cc pip install --no-binary mpi4py mpi4py`)",
    ),
    Launcher(
        name="openmpi",
        markers=("OMPI_COMM_WORLD_SIZE",),
        size=("OMPI_COMM_WORLD_SIZE",),
        rank=("OMPI_COMM_WORLD_RANK",),
        mpi_hint="Open MPI's mpirun started these tasks but mpi4py uses another MPI library: use the "
        "mpirun that belongs to the MPI mpi4py was built with",
    ),
    Launcher(
        name="hydra",
        markers=("MPI_LOCALNRANKS",),  # set by the hydra proxies of MPICH and Intel MPI, not by srun
        size=("PMI_SIZE",),
        rank=("PMI_RANK",),
        mpi_hint="MPICH's mpiexec started these tasks but mpi4py uses another MPI library: use the "
        "mpiexec that belongs to the MPI mpi4py was built with",
    ),
    Launcher(
        name="srun",
        markers=("SLURM_STEP_ID", "SLURM_MPI_TYPE"),  # srun --mpi=pmi2 (or pmix...): PMI was offered
        size=("PMI_SIZE", "SLURM_STEP_NUM_TASKS"),
        rank=("PMI_RANK", "PMIX_RANK", "SLURM_PROCID"),
        mpi_hint="srun offered its tasks a process manager (SLURM_MPI_TYPE) but the MPI library mpi4py "
        "uses did not take it: pick a plugin that library supports (`srun --mpi=list`; pmi2 for "
        "MPICH, Intel MPI and Cray MPICH, pmix for Open MPI), or rebuild mpi4py against the "
        "site's MPI",
    ),
    Launcher(
        name="srun",
        markers=("SLURM_STEP_ID",),
        size=("PMI_SIZE", "SLURM_STEP_NUM_TASKS"),
        rank=("PMI_RANK", "SLURM_PROCID"),
        mpi_hint="srun started these tasks but the MPI library did not get its process manager: run "
        "`srun --mpi=pmi2 ...` (or --mpi=pmix where your Slurm has it; `srun --mpi=list` shows "
        "them), or set MpiDefault in slurm.conf",
    ),
    Launcher(
        name="pmi",
        markers=("PMI_SIZE",),  # some other PMI process manager (e.g. MPICH's gforker)
        size=("PMI_SIZE",),
        rank=("PMI_RANK",),
        mpi_hint="a PMI process manager started these tasks but mpi4py's MPI library did not join it: use "
        "the mpiexec that belongs to the MPI mpi4py was built with",
    ),
)


@dataclass(frozen=True)
class Environment:
    """What this rank was started by, as far as the environment tells."""

    scheduler: str  # "slurm", "pbs", "cobalt", "alps" or "none"
    launcher: str  # "pals", "aprun", "openmpi", "hydra", "srun", "pmi" or "none"
    job_id: str | None
    launched_tasks: int | None  # tasks the launcher says it started
    task_rank: int | None  # this task's index among them (its MPI rank unless MPI missed them)
    cpus_per_task: int | None
    mpi_hint: str
    gpu_ids: tuple[str, ...] | None = None  # the scheduler's GPU ids for this step, if it names them
    memory: int | None = None  # bytes the job may use on this node, if the scheduler says
    restart: str | None = None  # "restart 1 (SLURM_RESTART_COUNT)" for a job started again, else None
    mpi_type: str | None = None  # the process-manager plugin srun offered (srun --mpi=X)
    netmod: str | None = None  # MPICH's network module, if set (MPIR_CVAR_CH4_NETMOD: ucx, ofi)
    ends_at: float | None = None  # when the job's walltime ends (seconds since 1970), if the scheduler says
    scheduler_job_id: str | None = None  # the job id as the scheduler's commands take it: PBS's "1234.server"
    partition: str | None = None  # the partition (Slurm) or queue (PBS) the job runs in, if the scheduler says
    switch: str | None = None  # the leaf switch of this node, where Slurm's topology plugin names it

    def describe(self) -> str:
        tasks = f", {self.launched_tasks} tasks" if self.launched_tasks else ""
        return f"scheduler {self.scheduler}, launcher {self.launcher}{tasks}"


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _job_id(environ: Mapping[str, str], scheduler: Scheduler) -> str | None:
    job_id = _first(environ, scheduler.job_id)
    if job_id and scheduler.job_id_suffix:
        job_id = job_id.split(scheduler.job_id_suffix, 1)[0] or job_id
    return job_id


def _cpus_per_task(environ: Mapping[str, str], scheduler: Scheduler) -> int | None:
    if any(environ.get(name) for name in scheduler.cpus_per_task_unknown_if):
        return None
    return _positive_int(_first(environ, scheduler.cpus_per_task))


def _index(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


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


def _gpu_ids(environ: Mapping[str, str], scheduler: Scheduler) -> tuple[str, ...] | None:
    name = next((n for n in scheduler.gpus if n in environ), None)
    return None if name is None else tuple(x for x in environ[name].split(",") if x.strip())


def _restart(environ: Mapping[str, str], scheduler: Scheduler) -> str | None:
    for name in scheduler.restart_count:
        count = environ.get(name, "").strip()
        if count.isdigit() and int(count) > 0:
            return f"restart {count} ({name})"
    return None


def leaf_switch(topology_addr: str | None, pattern: str | None) -> str | None:
    """The switch a node hangs from, as Slurm's topology plugin names it: SLURM_TOPOLOGY_ADDR
    ("spine1.leaf3.node17") with SLURM_TOPOLOGY_ADDR_PATTERN ("switch.switch.node"): the part before the node's.
    None where the scheduler gives no switch."""
    if not topology_addr:
        return None
    parts, kinds = topology_addr.split("."), (pattern or "").split(".")
    if len(parts) < 2 or (pattern and (len(kinds) != len(parts) or kinds[-2] != "switch")):
        return None
    return parts[-2] or None


# Where an HPE Cray node keeps its name: the xname on EX (Frontier, Perlmutter, Aurora, Polaris' Apollo aside), the
# cname on XC (Theta).
CRAY_NAME_FILES = ("/etc/cray/xname", "/proc/cray_xt/cname")
_CRAY_CHASSIS = (re.compile(r"^(x\d+c\d+)s\d+b\d+n\d+$"), re.compile(r"^(c\d+-\d+c\d+)s\d+n\d+$"))


def read_cray_name(paths: tuple[str, ...] = CRAY_NAME_FILES) -> str | None:
    """This node's Cray name, from the first of paths that holds one (None: not a Cray node)."""
    for path in paths:
        try:
            with open(path) as file:
                name = file.read().strip()
        except OSError:
            continue
        if name:
            return name
    return None


def cray_switch(name: str | None) -> str | None:
    """The switch group of an HPE Cray node, from its name: the cabinet and chassis, whose nodes hang from the same
    switch blades (EX's xname x1000c3s5b0n1: x1000c3) or Aries backplane (XC's cname c0-0c2s7n1: c0-0c2). None for
    another name."""
    for pattern in _CRAY_CHASSIS:
        match = pattern.match(name or "")
        if match:
            return match[1]
    return None


def detect(environ: Mapping[str, str] | None = None) -> Environment:
    environ = os.environ if environ is None else environ
    scheduler = next((s for s in SCHEDULERS if environ.get(s.marker)), None)
    launcher = next((lc for lc in LAUNCHERS if all(environ.get(m) for m in lc.markers)), None)
    memory_mb = _positive_int(_first(environ, scheduler.memory_mb)) if scheduler else None
    return Environment(
        scheduler=scheduler.name if scheduler else "none",
        launcher=launcher.name if launcher else "none",
        job_id=_job_id(environ, scheduler) if scheduler else None,
        scheduler_job_id=_first(environ, scheduler.job_id) if scheduler else None,
        launched_tasks=_positive_int(_first(environ, launcher.size)) if launcher else None,
        task_rank=_index(_first(environ, launcher.rank)) if launcher else None,
        cpus_per_task=_cpus_per_task(environ, scheduler) if scheduler else None,
        mpi_hint=launcher.mpi_hint if launcher else "",
        gpu_ids=_gpu_ids(environ, scheduler) if scheduler else None,
        memory=memory_mb * 2**20 if memory_mb else None,
        restart=_restart(environ, scheduler) if scheduler else None,
        ends_at=_positive_int(_first(environ, scheduler.end_time)) if scheduler else None,
        mpi_type=environ.get("SLURM_MPI_TYPE") or None,
        netmod=environ.get("MPIR_CVAR_CH4_NETMOD") or None,
        partition=_first(environ, scheduler.partition) if scheduler else None,
        switch=leaf_switch(environ.get("SLURM_TOPOLOGY_ADDR"), environ.get("SLURM_TOPOLOGY_ADDR_PATTERN")),
    )


# The PyPI MPICH wheel's default network module is UCX (MPI.Get_library_version(): "ch4:ucx ofi"): under
# srun --mpi=pmi2 its ~3.5 KB address breaks Slurm's pmi2 plugin now and then (MPI_Init fails on every task;
# docs/compatibility.md). Its libfabric module (ofi) has a short address, and runs on every network here.
WHEEL_NETMOD = "ofi"
# The libfabric provider under that module. MPICH picks libfabric's deprecated `sockets` provider on the
# wheel, which held all 24 tasks of a 3-host srun job in MPI_Init, yielding forever, in 5 of 25 launches on
# a loaded 2-core machine; `tcp` (tcp;ofi_rxm) in 0 of 30 (docs/compatibility.md). Set for MPI_Init only:
# NCCL's libfabric plugin reads FI_PROVIDER too, and a site's recipe may set it for the Ray nodes.
WHEEL_PROVIDER = "tcp"


def wheel_mpi_variables(environ: Mapping[str, str], prefix: str, site_dirs: list[str]) -> dict[str, str]:
    """What to set before MPI_Init where mpi4py will load the PyPI MPICH wheel's library (it looks in the
    environment's lib/ first) and nobody chose a netmod or another library (MPIR_CVAR_CH4_NETMOD,
    MPI4PY_LIBMPI, MPI4PY_MPIABI): the netmod, and the provider unless FI_PROVIDER was chosen. {}: leave
    MPI as it is."""
    if any(environ.get(name) for name in ("MPIR_CVAR_CH4_NETMOD", "MPI4PY_LIBMPI", "MPI4PY_MPIABI")):
        return {}
    if not os.path.exists(os.path.join(prefix, "lib", "libmpi.so.12")):
        return {}
    wheel = any(glob.glob(os.path.join(directory, "mpich-*.dist-info")) for directory in site_dirs
                if directory.endswith("-packages"))
    if not wheel:
        return {}
    chosen = {"MPIR_CVAR_CH4_NETMOD": WHEEL_NETMOD}
    if not environ.get("FI_PROVIDER"):
        chosen["FI_PROVIDER"] = WHEEL_PROVIDER
    return chosen


def default_job_id(env: Environment, now: float | None = None, pid: int | None = None) -> str:
    """The scheduler's job id, else a local timestamp and the pid (unique on one host)."""
    if env.job_id:
        return env.job_id
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{os.getpid() if pid is None else pid}"


def safe_job_id(text: str) -> str:
    """A job id fit to name a directory: at most 100 of A-Z a-z 0-9 . _ + -, never '' '.' or '..'.

    Other characters become '_' (PBS array jobs: '1234[5]' -> '1234_5_'); --job-id must be unchanged by it.
    """
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", text)[:100]
    return safe if safe.strip(".") else "_" * max(len(safe), 1)


def singleton_error(env: Environment, mpi_size: int) -> str | None:
    """The explanation when the launcher started N tasks but MPI sees only this one."""
    if mpi_size != 1 or not env.launched_tasks or env.launched_tasks <= 1:
        return None
    return (
        f"{env.launcher} started {env.launched_tasks} tasks, but MPI reports a world of 1 rank in "
        f"each: every task would start its own separate Ray cluster. {env.mpi_hint}."
    )
