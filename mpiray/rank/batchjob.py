"""What rank 0 learns of its batch job from the scheduler itself once the cluster is up, and when it stops
the driver before the job's walltime.

Slurm names the job's end in its environment (SLURM_JOB_END_TIME) and warns a job before it
(--signal=TERM@N). PBS does neither: a job's environment names no walltime, and at the walltime PBS
sends SIGTERM and, kill_delay later, SIGKILL, with no notice. So under PBS rank 0 asks qstat (once)
for the job's select, where its chunks went, its walltime and start, and stops the driver
--walltime-margin seconds before the end (by default --stop-grace plus WALLTIME_TEARDOWN): the driver
gets SIGTERM and its whole grace to checkpoint, and the job ends by itself (exit code 124) before PBS
would kill it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from mpiray.batch.environment import Environment
from mpiray.config import Config
from mpiray.errors import CommandFailed
from mpiray.logs.events import RankLog

if TYPE_CHECKING:
    from mpiray.batch import pbs

WALLTIME_TEARDOWN = 30.0  # seconds after the driver's grace: Ray's stop (<= 5 s), the logs, MPI_Finalize
QDEL_TEARDOWN = 5.0  # after a qdel'ed driver's grace: Ray's stop, before PBS's SIGKILL


class BatchJob(NamedTuple):
    """What rank 0 knows of its batch job once the cluster is up (read_batch_job): what the head keeps, for the
    walltime stop (life.time_limits), the driver (Cluster.restart) and the registry's entry (its end time)."""

    ends_at: float | None = None  # when its walltime ends, seconds since 1970, where the scheduler says
    restart: str | None = None  # "restart 1 (SLURM_RESTART_COUNT)", where the batch system started it again


def read_batch_job(env: Environment, log: RankLog, stop_grace: float,
                   rank_hosts: dict[int, str] | None = None) -> BatchJob:
    """rank 0: the job's end, whether it is a restart and, under PBS, its facts as qstat shows them (events).
    stop_grace: the driver's (--stop-grace); rank_hosts: each rank's host, to find ranks the job's hosts do not hold."""
    job = BatchJob(env.ends_at, env.restart)
    if env.scheduler != "pbs" or not env.scheduler_job_id:
        return job
    from mpiray.batch import pbs  # a PBS job's alone: off every other rank's start

    try:
        facts = pbs.query(env.scheduler_job_id)
    except CommandFailed as error:  # qstat not on this node, or the server slow: the job goes on without
        log.event("batch_job_unknown", scheduler="pbs", job_id=env.scheduler_job_id, problem=str(error))
        return job
    job = job._replace(ends_at=facts.ends_at)
    if facts.run_count > 1:  # qrerun, or a node's failure: PBS keeps the job id and names no count in its environment
        job = job._replace(restart=f"run {facts.run_count} (PBS run_count)")
    log.event("batch_job", scheduler="pbs", job_id=facts.job_id, select=facts.select, cpus=facts.cpus,
              hosts=list(facts.hosts), walltime=facts.walltime, started=facts.started, ends_at=facts.ends_at,
              run_count=facts.run_count)
    check_kill_delay(facts, stop_grace, log)
    # A site may give chunks whole nodes by default (default_chunk.ncpus): only a 1-CPU chunk is a mistake.
    if any("ncpus" not in fields for _, fields in pbs.select_chunks(facts.select)) and 1 in facts.cpus.values():
        log.event("select_without_ncpus", select=facts.select, cause="select_without_ncpus")
    outside = ranks_outside(rank_hosts or {}, facts.hosts)
    if outside:
        log.event("ranks_outside_job", ranks=sorted(outside), hosts=sorted(set(outside.values())),
                  job_hosts=list(facts.hosts), cause="ranks_outside_job")
    return job


def check_kill_delay(facts: "pbs.JobFacts", stop_grace: float, log: RankLog) -> None:
    """One rule for the driver's grace under PBS: the walltime stop gives it all of --stop-grace (mpiray
    keeps that deadline itself); a qdel gives it only the queue's kill_delay, which mpiray cannot change,
    so a grace longer than that is said once, at the start, with what it means."""
    if not facts.queue:
        return
    from mpiray.batch import pbs

    try:
        delay = pbs.kill_delay(facts.queue)
    except CommandFailed as error:
        log.event("batch_job_unknown", scheduler="pbs", job_id=facts.job_id, problem=str(error))
        return
    if stop_grace + QDEL_TEARDOWN > delay:
        log.event("qdel_cuts_grace", queue=facts.queue, kill_delay=delay, grace=stop_grace)


def ranks_outside(rank_hosts: dict[int, str], job_hosts: tuple[str, ...]) -> dict[int, str]:
    """The ranks (rank -> host) on hosts that are not the job's: an mpiexec that reached them by ssh, not
    through PBS (pbs_tmrsh, PALS), or a hostfile of other nodes. PBS neither counts nor ends them. Names are
    compared without their domain; where rank 0's host (always the job's first) is not among the job's
    vnode names either, the site names its vnodes otherwise and nothing can be told."""
    short = {host.split(".")[0] for host in job_hosts}
    if not short or rank_hosts.get(0, "").split(".")[0] not in short:
        return {}
    return {rank: host for rank, host in rank_hosts.items() if host.split(".")[0] not in short}


def walltime_stop(config: Config, scheduler: str, ends_at: float | None) -> tuple[float, float] | None:
    """(when rank 0 stops the driver, seconds since 1970; the margin before the walltime's end), or None:
    --walltime-margin, by default --stop-grace + WALLTIME_TEARDOWN under PBS only (Slurm warns by itself)."""
    if ends_at is None or config.walltime_margin == 0:
        return None
    if config.walltime_margin is not None:
        margin = config.walltime_margin
    elif scheduler == "pbs":
        margin = config.stop_grace + WALLTIME_TEARDOWN
    else:
        return None
    return ends_at - margin, margin
