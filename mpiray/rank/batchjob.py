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

from mpiray.batch import pbs
from mpiray.batch.jobs import CommandFailed
from mpiray.config import Config
from mpiray.rank.state import Rank

WALLTIME_TEARDOWN = 30.0  # seconds after the driver's grace: Ray's stop (<= 5 s), the logs, MPI_Finalize


def read_batch_job(me: Rank) -> None:
    """rank 0: the job's end (me.ends_at), whether it is a restart (me.restart) and, under PBS, its facts
    as qstat shows them (events)."""
    env = me.env
    me.ends_at, me.restart = env.ends_at, env.restart
    if env.scheduler != "pbs" or not env.scheduler_job_id:
        return
    try:
        facts = pbs.query(env.scheduler_job_id)
    except CommandFailed as error:  # qstat not on this node, or the server slow: the job goes on without
        me.log.event("batch_job_unknown", scheduler="pbs", job_id=env.scheduler_job_id, problem=str(error))
        return
    me.ends_at = facts.ends_at
    if facts.run_count > 1:  # qrerun, or a node's failure: PBS keeps the job id and names no count in its environment
        me.restart = f"run {facts.run_count} (PBS run_count)"
    me.log.event("batch_job", scheduler="pbs", job_id=facts.job_id, select=facts.select, cpus=facts.cpus,
                 hosts=list(facts.hosts), walltime=facts.walltime, started=facts.started, ends_at=facts.ends_at,
                 run_count=facts.run_count)
    # A site may give chunks whole nodes by default (default_chunk.ncpus): only a 1-CPU chunk is a mistake.
    if any("ncpus" not in fields for _, fields in pbs.select_chunks(facts.select)) and 1 in facts.cpus.values():
        me.log.event("select_without_ncpus", select=facts.select, cause="select_without_ncpus")


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
