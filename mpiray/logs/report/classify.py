"""Why a job failed: each failing rank's failure mapped to a known cause, with the fix beside it.

The evidence, strongest first:
1. the cause a rank's error event names: mpiray knew it when it failed (errors.LaunchError.cause);
2. what the rank's Ray wrote: its `ray start` output (rank-NNNN.ray.log) and the Ray session logs kept
   in ray-rank-NNNN/ (raylet, GCS), and, for the job's leader, driver.log;
3. what is missing: a rank that started before MPI_Init (launched) but never came out of it.
A vaguer cause (the head lost, a start-up timeout, the driver's non-zero code) gives way to a
precise one that the Ray logs show (out of memory, a port in use).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpiray.logs.report.model import FoundCause

if TYPE_CHECKING:
    from mpiray.logs.report.model import RankEntry
    from mpiray.logs.report.parse import RankFacts


@dataclass(frozen=True)
class Cause:
    title: str  # what happened
    fix: str  # what to do about it


CAUSES = {
    "port_in_use": Cause(
        "a port the cluster needs is already in use on its host",
        "free the port, or give another with --port (0 picks a free one); mpiray's own port blocks skip busy "
        "ports by themselves, so this is a fixed --port or a port block range another program fills"),
    "ports_per_host": Cause(
        "a host's Ray nodes need more ports than it has for them: each worker process takes a port of its node's "
        "range, and Ray refuses a worker it has none for (\"No available ports\")",
        "run fewer ranks per host, or one Ray node per host (--ray-node-per host); mpiray sizes each node's ports "
        "by its CPUs and GPUs, so a node that runs out anyway started more worker processes than that: report it"),
    "socket_path_too_long": Cause(
        "Ray's socket paths would pass the 107-byte AF_UNIX limit",
        "give a shorter --temp-dir (or TMPDIR), e.g. /tmp"),
    "temp_dir": Cause(
        "the rank's private temp dir could not be made",
        "point --temp-dir (or TMPDIR) at a writable node-local directory"),
    "dir_unwritable": Cause(
        "the temp or spill dir cannot be written on a host (missing, read-only, another user's)",
        "point --temp-dir (TMPDIR) or --spill-dir at a writable directory of yours on a node-local file system"),
    "dir_full": Cause(
        "the temp or spill dir of a host is 95% full or more (bytes or inodes): Ray refuses to spill there",
        "free space there, or point --temp-dir (TMPDIR) or --spill-dir at another disk"),
    "dir_network": Cause(
        "the temp dir of a host is on a network file system, where Ray's unix sockets and file locks fail",
        "point --temp-dir (or TMPDIR) at a node-local directory: /tmp, $TMPDIR, a local disk"),
    "foreign_gcs": Cause(
        "a node reached a GCS that is not its own cluster's, or that refused its token",
        "check that nothing else listens on the head's address and port, and that every rank of the job runs "
        "the same mpiray (its token reaches every node in the session message)"),
    "slow_link": Cause(
        "the pre-flight's link check found a host whose link sends or receives far below its peers' (below "
        "--slow-link of the median host's), or that no peer reached on its Ray address",
        "leave the host out (the exclude line mpiray printed), and ask the site to check its link; --bad-nodes "
        "exclude (the default) starts without it; --slow-link 0 turns the check off"),
    "too_few_nodes": Cause(
        "the pre-flight refused so many hosts (their temp or spill dir, the image, the port range) that fewer Ray "
        "nodes than --min-nodes would remain",
        "fix or leave out the refused hosts (the message names each and why; sbatch --exclude=), or lower "
        "--min-nodes; --bad-nodes refuse ends the job at the first bad host instead"),
    "version_skew": Cause(
        "the ranks run different Ray or Python versions",
        "start every rank from the same environment: the same venv, module or container on every node"),
    "gcs_overloaded": Cause(
        "the GCS could not register joining nodes in time (Ray gives a raylet 30 s)",
        "lower --join-window, keep a CPU for the GCS on the head's host (--gcs-core on), or run fewer Ray "
        "nodes per host (--ray-node-per host)"),
    "mpi_init": Cause(
        "MPI_Init never returned: the MPI launcher or its process manager (PMI) failed",
        "read the launcher's own output (srun's or mpirun's stderr, slurmd's log; a rank still in MPI_Init after "
        "--startup-timeout printed where it hung there, and exited 1); check `srun --mpi=list` and that mpi4py "
        "was built against the MPI that launched it"),
    "mpi_singletons": Cause(
        "the launcher started several tasks but MPI saw a world of one in each",
        "give srun a process-manager plugin (srun --mpi=pmi2, or pmix), or use the mpirun of the MPI that "
        "mpi4py was built with"),
    "head_lost": Cause(
        "the head's Ray node ended while the job ran (its GCS is the cluster)",
        "read rank-0000.ray.log and ray-rank-0000/ (gcs_server.out, raylet.out); the usual reason is memory"),
    "head_host_lost": Cause(
        "the head's host stopped answering while the job ran (a power loss, a crash, a cut link): the other "
        "ranks ended with 1 once its GCS port had been silent for 10 s",
        "ask the site about the host (`sinfo -R`, its console); resubmit without it (--exclude) and the trainer "
        "continues from its last checkpoint"),
    "time_limit": Cause(
        "the driver ran past --time-limit and was stopped (exit code 124)",
        "raise --time-limit, or checkpoint and go on in the next job"),
    "walltime": Cause(
        "the batch job's walltime was about to end: mpiray stopped the driver --walltime-margin seconds before it "
        "(exit code 124)",
        "ask for more walltime, or let the driver checkpoint and continue in the next job (the trainer does: "
        "resubmit, or qrerun/requeue, and it resumes)"),
    "select_without_ncpus": Cause(
        "PBS's select named no ncpus, so each chunk got 1 CPU and its Ray node offers 1",
        "ask for the CPUs each rank should use: #PBS -l select=N:ncpus=C (and mpiexec --depth C on PALS)"),
    "ranks_outside_job": Cause(
        "the job's mpiexec started ranks on hosts that are not the job's (ssh, or a hostfile of other nodes): PBS "
        "neither counts their CPUs nor ends them with the job",
        "start the ranks through PBS: PALS's mpiexec, or your MPI's with pbs_tmrsh (jobs/pbs_multi_node.sh) and "
        "-f $PBS_NODEFILE"),
    "out_of_memory": Cause(
        "a node ran out of memory: Ray's memory monitor or the kernel killed its processes",
        "give each task less to hold, or each node more memory: fewer Ray nodes per host (--ray-node-per host), "
        "a smaller --object-store-memory, or `num_cpus` per task so that fewer run at once"),
    "startup_timeout": Cause(
        "some nodes did not come up within --startup-timeout",
        "read the missing ranks' logs (the last step each took); on a large or slow job raise --startup-timeout"),
    "signal": Cause(
        "the job was stopped by a signal: scancel, the walltime, Ctrl-C",
        "nothing failed: give the job more time, or checkpoint (the driver gets --stop-grace seconds after SIGTERM)"),
    "driver_failed": Cause(
        "the driver exited with a non-zero code: its own failure",
        "read driver.log (the driver's output)"),
    "driver_not_found": Cause(
        "the driver command could not be started", "check the command after '--' (its path, that it is executable)"),
    "trainer_missing": Cause(
        "the default driver (the trainer) needs packages that are not installed",
        "pip install '.[train]' in the mpiray checkout, or give your own driver after '--'"),
    "no_such_cluster": Cause(
        "the cluster to join or attach to is not running: not in the registry, stale, another user's, or its GCS "
        "does not answer",
        "`mpiray list` shows your running clusters; the joining job must see the same registry (MPIRAY_REGISTRY, "
        "on a file system both jobs see) and reach the head's host; a cluster that ended cannot be joined"),
    "image_failed": Cause(
        "--container: the runtime or the image did not run on a host, or its Ray cannot run a safe cluster "
        "(the pre-flight's look into the image, before any node started)",
        "read the runtime's own words in the message: load the runtime's module on every node, check the image's "
        "path or name (an Apptainer .sif on a file system every node sees, a podman image in every node's "
        "storage), and that the image has Ray 2.52 or later (docs/containers.md)"),
    "ray_refused_node": Cause(
        "Ray itself refused to start a node: its own check of the node's environment failed (quoted above)",
        "do what Ray's message says. mpiray hands each node its GPU vendor's variables as the installed Ray reads "
        "them (docs/sites.md); if you set ROCR_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK or "
        "ONEAPI_DEVICE_SELECTOR for the driver yourself, set them as Ray asks, or give --gpu-vendor (or --site)"),
    "config": Cause("an option or input was not valid", "see the message; `mpiray run --help` lists the options"),
    "unexpected": Cause("an unexpected failure inside mpiray", "please report it with the rank's log"),
}

# Signs in what Ray wrote, most specific first.
RAY_SIGNS = (
    ("out_of_memory", re.compile(r"OutOfMemoryError|killed due to (?:the )?(?:node running low on memory|memory "
                                 r"pressure)|Killing worker.*memory|oom-kill|Out of memory: Killed process")),
    ("port_in_use", re.compile(r"[Aa]ddress already in use|Failed to bind|port \d+ is (?:already )?in use")),
    ("socket_path_too_long", re.compile(r"AF_UNIX path (?:length|too long)")),
    ("ports_per_host", re.compile(r"No available ports")),
    ("foreign_gcs", re.compile(r"UNAUTHENTICATED|Unauthenticated|[Ii]nvalid (?:authentication )?token|"
                               r"[Tt]oken authentication failed|cluster ID mismatch|[Cc]luster ID .* does not match")),
    ("gcs_overloaded", re.compile(r"timed out during startup")),
    # Ray's accelerator managers' checks (ray/_private/accelerators/, resource_and_label_spec.py)
    ("ray_refused_node", re.compile(r"Ray refused to start this node|Please use \w+ instead of \w+|"
                                    r"Attempting to start raylet with .* but \w+ contains|Inconsistent values")),
)
VAGUE = {"", "head_lost", "startup_timeout", "driver_failed", "unexpected", "signal"}

# MPICH over UCX under srun --mpi=pmi2: see docs/troubleshooting.md.
PMI2_UCX = ("under srun --mpi=pmi2, MPICH over UCX can fail in MPI_Init now and then: Slurm's pmi2 plugin reads "
            "a PMI-1 request in one 1024-byte read, while MPICH puts UCX's ~3.5 KB address in values of up to 1024 "
            "characters (slurmstepd: 'value not properly terminated in client request'); export "
            "MPIR_CVAR_CH4_NETMOD=ofi, or use an MPI with PMIx and srun --mpi=pmix")


def classify(ranks: list[RankEntry], facts: Mapping[int, RankFacts], ray_log: Callable[[int], str] | Mapping[int, str],
             exit_code: int | None, *, driver_code: int | None) -> list[FoundCause]:
    """The causes of a job's failure, the first seen first.

    ranks: the report's cluster rows; facts: rank -> parse.RankFacts; ray_log(rank): what its Ray wrote
    (and, for rank 0, driver.log), read only for ranks that failed.
    """
    read = ray_log if callable(ray_log) else (lambda rank: ray_log.get(rank, ""))
    found: dict[str, FoundCause] = {}

    def add(cause: str, rank: int, evidence: str, note: str = "") -> None:
        known = CAUSES.get(cause, CAUSES["unexpected"])
        entry = found.setdefault(cause, FoundCause(cause, known.title, known.fix, note=note))
        if rank not in entry.ranks:
            entry.ranks.append(rank)
            if len(entry.evidence) < 3:
                entry.evidence.append(f"rank {rank}: {evidence}")

    for entry in ranks:
        rank, own = entry.rank, facts.get(entry.rank)
        cause, evidence = entry.cause, entry.error
        if entry.status == "failed" and not cause and entry.error:
            cause = "config" if entry.exit_code == 2 else ""
        if own is not None and own.launched is not None and own.mpi_ready is None:
            launch = own.launch
            pmi2 = launch.get("launcher") == "srun" and launch.get("mpi_type") == "pmi2" and \
                launch.get("netmod") in (None, "", "ucx")
            add("mpi_init", rank, f"started by {launch.get('launcher')} (task {launch.get('task')}), never came "
                f"out of MPI_Init", PMI2_UCX if pmi2 else "")
            continue
        if cause in VAGUE and (entry.status == "failed" or (rank == 0 and exit_code not in (0, None))):
            sign = _ray_sign(read(rank))
            if sign is not None:
                cause, evidence = sign
        if cause:
            add(cause, rank, evidence)
    if exit_code not in (0, None):  # a mistake a rank warned of at start-up may be what failed the job
        for rank, own in facts.items():
            for hint in getattr(own, "hints", ()):
                add(hint.cause, rank, hint.message)
    for rank in getattr(facts.get(0), "missing", ()):  # rank 0 timed out waiting for them
        sign = _ray_sign(read(rank))
        add(*(sign[0], rank, sign[1]) if sign else ("startup_timeout", rank, "did not join within --startup-timeout"))
    if exit_code not in (0, None) and not found:
        sign = _ray_sign(read(0))
        if exit_code >= 128:
            add("signal", 0, f"the job ended with {exit_code} (signal {exit_code - 128})")
        elif sign is not None:
            add(sign[0], 0, sign[1])
        else:
            add("driver_failed" if driver_code == exit_code else "unexpected", 0, f"exit code {exit_code}")
    return list(found.values())


def _ray_sign(text: str) -> tuple[str, str] | None:
    for cause, pattern in RAY_SIGNS:
        match = pattern.search(text)
        if match:
            start, end = text.rfind("\n", 0, match.start()) + 1, text.find("\n", match.end())
            line = text[start:] if end < 0 else text[start:end]
            return cause, f"Ray's log: {line.strip()[:200]}"
    return None
