"""A rank's whole life, one function for every front end: run(config, leader).

    setup -> the protocol (rank 0 leads, the others follow) -> rank 0's leader step, watched ->
    exit_code_of -> teardown -> leave (abandon when a peer died; ignore stop signals in MPI_Finalize; its deadline)

A front end supplies only the leader step (state.Leader, one of leaders/): the command line runs the
driver command as a subprocess, the library hands the cluster to the calling script. Whatever the leader
is, rank 0 watches the same things while it runs: a stop signal, --time-limit, the head's own node, the
workers' lost nodes. Every rank returns the same exit code: the leader's, or the one
its failure maps to.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from typing import Any, Callable, NamedTuple

from mpiray.batch import environment
from mpiray.config import Config
from mpiray.deadline import Deadline
from mpiray.errors import Interrupted, LaunchError, MpiSingletons, Shutdown
from mpiray.host import processes, resources
from mpiray.logs.events import RankLog
from mpiray.rank import preflight, teardown
from mpiray.rank.batchjob import BatchJob, walltime_stop
from mpiray.rank.contracts import Comm, OwnNode
from mpiray.rank.head import DRAIN_NOTICE, Head
from mpiray.rank.messages import LOCAL, REPORT
from mpiray.rank.ownnode import RealNode
from mpiray.rank.plannednode import NodeContext, PlannedNode
from mpiray.rank.signals import StopRequest
from mpiray.rank.state import Leader, Rank, Role
from mpiray.rank.timings import DRIVER_POLL, RAY_STOP_GRACE, TIME_LIMIT_EXIT
from mpiray.rank.worker import Worker
from mpiray.rank.zero import RankZero


class Limit(NamedTuple):
    """A time by which rank 0 stops the leader (--time-limit, the walltime's end), and the event that says why."""

    deadline: Deadline
    event: str
    fields: dict[str, Any]


def run(config: Config, leader: Leader | None, comm: Comm | None = None, stop: StopRequest | None = None,
        *, process_ends: bool = True, log: RankLog | None = None, finalize_limit: float | None = None) -> int:
    """This rank's whole job; every rank returns the same exit code.

    leader: rank 0's step (unused elsewhere). comm: the communicator (default: MPI's world, whose
    MPI_Init happens here). stop: how this process hears stop signals (default: installed here).
    process_ends: the process exits right after (else, e.g. mpiray.init(exit=False), signals are
    put back as they were, for the program that goes on). log: this rank's log, if made before
    MPI_Init (early_log). finalize_limit: MPI_Finalize here, with that deadline, where every rank finalizes right
    after the last barrier (the command line); None: mpi4py's at the interpreter's end (mpiray.init(): rank 0's
    comes when its script's process ends, which no deadline here can know).
    """
    me = setup(config, comm, stop, log)
    role: Role
    if me.rank == 0:
        assert leader is not None, "rank 0 runs a leader step (leaders/)"
        if config.join:
            from mpiray.rank.joiner import Joiner  # a joining job's rank 0 alone: off every other rank's start

            zero: RankZero = Joiner(me)
        else:
            zero = Head(me)
        role = zero
        code = exit_code_of(me, lambda: drive(me, zero, leader))
    else:
        worker = Worker(me)
        role = worker
        code = exit_code_of(me, worker.serve)
    code = teardown.finish(me, role, leader if me.rank == 0 else None, code)
    leave(me, code, process_ends, finalize_limit)
    return code


def setup(config: Config, comm: Comm | None = None, stop: StopRequest | None = None,
          log: RankLog | None = None) -> Rank:
    """This rank's state, before any rank waits on another: stop signals, MPI, its host's ranks."""
    if stop is None:
        stop = StopRequest()
        stop.install()
    processes.become_subreaper()
    preflight.raise_limits()  # before this rank starts anything: its `ray start` inherits the open-file limit
    env = environment.detect()
    host = socket.gethostname()
    if log is None:
        log = early_log(config) if comm is None else RankLog(0, host)
    if comm is None:
        comm = mpi_world(config.startup_timeout, log)
    log.ranked(comm.rank)
    # A collective: every rank calls it first thing, before any rank can wait on another.
    host_comm = comm.split_by_host()
    view = resources.probe_host(gpu_vendor=config.gpu_vendor)
    # The one place a dry run is chosen for the node (the leader's: cli.leader_for); all else is the same code.
    context = NodeContext(config=config, log=log, rank=comm.rank, host=host, view=view, mpi=comm.library_version())
    own_node: OwnNode = PlannedNode(context) if config.dry_run else RealNode(context)
    hosts = None
    if config.autoscale and config.ray_node_per == "host":  # the autoscaler counts the job's own Ray nodes
        hosts = comm.count(host_comm.rank == 0, config.startup_timeout)
    me = Rank(config=config, comm=comm, host_comm=host_comm, env=env, log=log, stop=stop, host=host, view=view,
              own_node=own_node, hosts=hosts)
    # What a rank sees of its host does not depend on the session: send it before waiting for one.
    if host_comm.rank != 0:
        host_comm.send(me.view, 0, LOCAL)
    return me


def mpi_world(timeout: float, log: RankLog) -> Comm:
    """MPI's world: the import of mpi4py, which is MPI_Init, only here, when it is time.

    On the PyPI MPICH wheel, MPI_Init first gets the netmod and libfabric provider it needs, where nobody chose
    them (environment.wheel_mpi_variables); the netmod stays for the rank's nodes and driver, the provider
    does not.

    A process manager that never lets MPI_Init return (a node whose tasks never start, a PMI server that does
    not answer) would hold every rank until the walltime: MPI_Init holds the GIL, so neither a stop signal's
    handler nor a Python thread runs meanwhile. faulthandler's watchdog is a C thread: past timeout
    (--startup-timeout) it prints where this rank hangs on stderr, and the rank exits with 1."""
    import faulthandler

    chosen = environment.wheel_mpi_variables(os.environ, sys.prefix, sys.path)
    os.environ.update(chosen)
    if chosen:
        log.event("netmod_chosen", netmod=chosen["MPIR_CVAR_CH4_NETMOD"], provider=os.environ["FI_PROVIDER"])
    faulthandler.dump_traceback_later(timeout, exit=True, file=sys.stderr)
    try:
        from mpiray.rank import mpi

        return mpi.Comm()
    finally:
        faulthandler.cancel_dump_traceback_later()
        if "FI_PROVIDER" in chosen:
            del os.environ["FI_PROVIDER"]


def early_log(config: Config) -> RankLog:
    """This rank's log, made before MPI_Init (of MPI's world). Where the job's log dir is already known
    (a scheduler's job, or --job-id) it opens, and says the rank was launched: a rank whose MPI_Init
    never returns (PMI, the launcher) still leaves a trace. Otherwise its events wait for the job id."""
    env = environment.detect()
    log = RankLog(env.task_rank or 0, socket.gethostname())
    job_id = config.job_id or env.job_id
    if job_id is None or env.task_rank is None:
        return log
    try:
        log.open(config.log_dir / environment.safe_job_id(job_id), provisional=True)
    except OSError:
        return log  # said again, with the reason, once the rank knows more
    log.event("launched", launcher=env.launcher, task=env.task_rank, scheduler=env.scheduler,
              mpi_type=env.mpi_type, netmod=env.netmod)
    return log


def exit_code_of(me: Rank, step: Callable[[], int]) -> int:
    """step()'s exit code, or the one its failure maps to (logged; a worker tells rank 0 too)."""
    comm = me.comm
    try:
        problem = environment.singleton_error(me.env, comm.size)
        if problem:
            raise MpiSingletons(problem)
        return step()
    except Shutdown as shutdown:
        me.log.event("job_ended", code=shutdown.exit_code)
        return shutdown.exit_code
    except Interrupted as interrupted:
        me.log.event("signalled", signum=interrupted.signum)
        return interrupted.exit_code
    except LaunchError as error:
        name, fields = error.event()
        me.log.event(name, **fields)
        if me.rank != 0:  # tell rank 0 now rather than let it wait for the startup timeout
            comm.send(me.report(error=str(error), exit_code=error.exit_code, cause=error.cause), 0, REPORT)
        return error.exit_code
    except Exception:
        me.log.event("unexpected", traceback=traceback.format_exc())
        if me.rank != 0:
            comm.send(me.report(error="unexpected failure, see its log", exit_code=1), 0, REPORT)
        return 1


def drive(me: Rank, head: RankZero, leader: Leader) -> int:
    """Rank 0: bring the cluster up, then run the leader step and watch it; its exit code is the job's."""
    cluster = head.lead()
    leader.start(me, cluster)
    try:
        return watch(me, head, leader)
    finally:
        leader.close(me)


def watch(me: Rank, head: RankZero, leader: Leader) -> int:
    """While the leader runs: its end, a stop signal, --time-limit, the batch job's walltime, the cluster's
    heart (head.lost()), lost worker nodes and hosts; head (head.Head, or joiner.Joiner) keeps the registry's
    heartbeat meanwhile."""
    config = me.config
    limits = time_limits(config, me.env.scheduler, head.batch_job, me.log)
    while True:
        code = leader.poll(DRIVER_POLL)
        if code is not None:
            return code
        me.own_node.describe_once_started()
        head.tick()
        if me.stop.signum is not None:
            me.log.event("stop_signal", signum=me.stop.signum, grace=config.stop_grace)
            leader.stop(config.stop_grace, 128 + me.stop.signum)
            return 128 + me.stop.signum
        passed = next((limit for limit in limits if limit.deadline.expired()), None)
        if passed is not None:
            me.log.event(passed.event, **passed.fields, grace=config.stop_grace)
            # mpiray picked the moment (the margin leaves room): Ray's libraries get DRAIN_NOTICE to see the drain
            # (Ray Train looks every 5 s) while the driver runs on; then the driver its SIGTERM and whole grace.
            if head.drain(DRAIN_NOTICE + config.stop_grace + RAY_STOP_GRACE, f"the batch job ends ({passed.event})"):
                leader.poll(DRAIN_NOTICE)
            leader.stop(config.stop_grace, TIME_LIMIT_EXIT)
            return TIME_LIMIT_EXIT
        lost = head.lost()
        if lost is not None:
            me.log.event(lost.event, **lost.fields)
            # Without its GCS the driver cannot checkpoint through Ray, and ray.shutdown() hangs.
            leader.stop(min(config.stop_grace, RAY_STOP_GRACE), lost.code)
            return lost.code
        head.hear_events()
        head.spare_reports()
        head.hosts_lost()


def time_limits(config: Config, scheduler: str, job: BatchJob, log: RankLog) -> list[Limit]:
    """When the leader must be stopped, and the event that says why: --time-limit, and the walltime's end
    where rank 0 keeps that deadline itself (batchjob.walltime_stop; job: what rank 0 read of its batch job)."""
    limits: list[Limit] = []
    if config.time_limit:
        limits.append(Limit(Deadline.after(config.time_limit), "time_limit", {"limit": config.time_limit,
                                                                               "cause": "time_limit"}))
    stop = walltime_stop(config, scheduler, job.ends_at)
    if stop is not None:
        at, margin = stop
        limits.append(Limit(Deadline.after(at - time.time()), "walltime_near",
                            {"ends_at": job.ends_at, "margin": margin, "cause": "walltime"}))
        log.event("walltime_watched", ends_at=job.ends_at, margin=margin, seconds=round(at - time.time(), 1))
    return limits


def leave(me: Rank, code: int, process_ends: bool, finalize_limit: float | None = None) -> None:
    """The exit code is decided: no MPI_Finalize if a peer died (its closing barrier would never end);
    else no stop signal may change the code during MPI_Finalize (or, if the program goes on, the
    signals are handled as before mpiray), and MPI_Finalize runs now, within finalize_limit s, where one is given."""
    if not me.all_met:
        me.comm.abandon(code)
    me.stop.release(process_ends)
    if process_ends and finalize_limit is not None:
        me.comm.finalize_within(finalize_limit, code)
