"""A rank's whole life, one function for every front end: run(config, leader).

    setup -> the protocol (rank 0 leads, the others follow) -> rank 0's leader step, watched ->
    outcome -> teardown -> leave (abandon when a peer died; ignore stop signals in MPI_Finalize)

A front end supplies only the leader step (Leader): the command line runs the driver command as a
subprocess (driver.py), the library hands the cluster to the calling script (library.py). Whatever
the leader is, rank 0 watches the same things while it runs: a stop signal, --time-limit, the head's
own node, the workers' lost nodes. Every rank returns the same exit code: the leader's, or the one
its failure maps to.
"""

from __future__ import annotations

import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Protocol

from mpiray import processes, resources, scheduler
from mpiray.config import Config
from mpiray.deadline import Deadline
from mpiray.errors import Interrupted, LaunchError
from mpiray.events import RankLog
from mpiray.messages import EVENT, LOCAL, REPORT, Cluster, Session
from mpiray.signals import StopRequest

DRIVER_POLL = 0.2  # seconds between checks while the leader runs: ~0% CPU for waiting ranks
STARTUP_POLL = 0.02  # seconds between checks while nodes start (a file read or an MPI probe): on the critical path
RAY_STOP_GRACE = 5.0  # the most a Ray node gets to stop in order: healthy ones take ~1 s
TIME_LIMIT_EXIT = 124  # as timeout(1)
HEAD_LOST_EXIT = 1


class Shutdown(LaunchError):
    """Rank 0 told this rank to stop (the reason is in rank 0's log)."""


@dataclass
class Rank:
    """What every rank has, whatever its role, handed down the protocol and teardown.

    Role-only state lives with the role (protocol.Head, protocol.Worker), the leader's with the leader.
    """

    config: Config
    comm: object  # mpi.Comm, or any communicator with its methods
    host_comm: object  # the ranks on this host
    env: scheduler.Environment
    log: RankLog
    stop: StopRequest
    host: str
    view: resources.HostView  # what this rank sees of its host
    started: float = field(default_factory=time.time)
    session: Session | None = None  # from rank 0
    node: object | None = None  # node.RayNode: this rank's Ray node, once prepared
    port_block: object | None = None  # network.PortBlock: the host's first rank holds its ranks' ports
    all_met: bool = True  # every rank reached the last barrier (else MPI_Finalize would wait forever)

    @property
    def rank(self) -> int:
        return self.comm.rank

    def check(self) -> None:
        """Between polls: a stop signal, or rank 0's word to stop, ends the wait; rank 0's sends move on."""
        from mpiray.messages import CONTROL

        self.stop.check()
        # A network netmod (MPICH's ofi, UCX) moves a sent message only while its sender calls into MPI:
        # without this, the session reached the workers only once the head was up, and they could
        # not load `ray start` meanwhile (measured on the 3-host testbed: 2.3 s later).
        self.comm.progress()
        if self.rank != 0:
            message = self.comm.poll(0, CONTROL)
            if message is not None:
                raise Shutdown(f"rank 0 ended the job with exit code {message[2]}", message[2])


class Leader(Protocol):
    """Rank 0's step once the cluster is up: what a front end supplies."""

    def start(self, me: Rank, cluster: Cluster) -> None:
        """Begin: run the driver command, or hand the cluster to the calling script."""

    def poll(self, timeout: float) -> int | None:
        """Its exit code once it ended (logged by the leader), else None after up to timeout seconds."""

    def stop(self, grace: float, code: int) -> None:
        """Make it end now: SIGTERM, grace seconds, SIGKILL (or what stands for them); code: the job's."""

    def close(self, me: Rank) -> None:
        """After it ended: what is left to do (its output's last lines)."""


def run(config: Config, leader: Leader | None, comm=None, stop: StopRequest | None = None,
        process_ends: bool = True, log: RankLog | None = None) -> int:
    """This rank's whole job; every rank returns the same exit code.

    leader: rank 0's step (unused elsewhere). comm: the communicator (default: MPI's world, whose
    MPI_Init happens here). stop: how this process hears stop signals (default: installed here).
    process_ends: the process exits right after (else, e.g. mpiray.init(exit=False), signals are
    put back as they were, for the program that goes on). log: this rank's log, if made before
    MPI_Init (early_log).
    """
    from mpiray import join, protocol, teardown

    me = setup(config, comm, stop, log)
    role = protocol.Worker(me) if me.rank else join.Joiner(me) if config.join else protocol.Head(me)
    code = outcome(me, lambda: drive(me, role, leader) if me.rank == 0 else role.serve())
    code = teardown.finish(me, role, leader if me.rank == 0 else None, code)
    leave(me, code, process_ends)
    return code


def setup(config: Config, comm=None, stop: StopRequest | None = None, log: RankLog | None = None) -> Rank:
    """This rank's state, before any rank waits on another: stop signals, MPI, its host's ranks."""
    if stop is None:
        stop = StopRequest()
        stop.install()
    processes.become_subreaper()
    env = scheduler.detect()
    host = socket.gethostname()
    if log is None:
        log = early_log(config) if comm is None else RankLog(0, host)
    if comm is None:
        from mpiray.mpi import Comm  # imports mpi4py: MPI_Init

        comm = Comm()
    log.rank = comm.rank
    # A collective: every rank calls it first thing, before any rank can wait on another.
    host_comm = comm.split_by_host()
    me = Rank(config, comm, host_comm, env, log, stop, host, resources.probe_host())
    # What a rank sees of its host does not depend on the session: send it before waiting for one.
    if host_comm.rank != 0:
        host_comm.send(me.view, 0, LOCAL)
    return me


def early_log(config: Config) -> RankLog:
    """This rank's log, made before MPI_Init (of MPI's world). Where the job's log dir is already known
    (a scheduler's job, or --job-id) it opens, and says the rank was launched: a rank whose MPI_Init
    never returns (PMI, the launcher) still leaves a trace. Otherwise its events wait for the job id."""
    env = scheduler.detect()
    log = RankLog(env.task_rank or 0, socket.gethostname())
    job_id = config.job_id or env.job_id
    if job_id is None or env.task_rank is None:
        return log
    try:
        log.open(config.log_dir / scheduler.safe_job_id(job_id), provisional=True)
    except OSError:
        return log  # said again, with the reason, once the rank knows more
    log.event("launched", launcher=env.launcher, task=env.task_rank, scheduler=env.scheduler,
              mpi_type=env.mpi_type, netmod=env.netmod)
    return log


def outcome(me: Rank, step: Callable[[], int]) -> int:
    """step()'s exit code, or the one its failure maps to (logged; a worker tells rank 0 too)."""
    comm = me.comm
    try:
        problem = scheduler.singleton_error(me.env, comm.size)
        if problem:
            raise LaunchError(problem, cause="mpi_singletons")
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
            comm.send(report(me, error=str(error), exit_code=error.exit_code, cause=error.cause), 0, REPORT)
        return error.exit_code
    except Exception:
        me.log.event("unexpected", traceback=traceback.format_exc())
        if me.rank != 0:
            comm.send(report(me, error="unexpected failure, see its log", exit_code=1), 0, REPORT)
        return 1


def drive(me: Rank, head, leader: Leader) -> int:
    """Rank 0: bring the cluster up, then run the leader step and watch it; its exit code is the job's."""
    cluster = head.lead()
    leader.start(me, cluster)
    try:
        return watch(me, head, leader)
    finally:
        leader.close(me)


def watch(me: Rank, head, leader: Leader) -> int:
    """While the leader runs: its end, a stop signal, --time-limit, the cluster's heart (head.lost()), lost
    worker nodes; head (protocol.Head, or join.Joiner) keeps the registry's heartbeat meanwhile."""
    from mpiray.ranknode import describe_when_started

    config = me.config
    limit = Deadline.after(config.time_limit) if config.time_limit else None
    while True:
        code = leader.poll(DRIVER_POLL)
        if code is not None:
            return code
        describe_when_started(me)
        head.tick()
        if me.stop.signum is not None:
            me.log.event("stop_signal", signum=me.stop.signum, grace=config.stop_grace)
            leader.stop(config.stop_grace, 128 + me.stop.signum)
            return 128 + me.stop.signum
        if limit is not None and limit.expired():
            me.log.event("time_limit", limit=config.time_limit, grace=config.stop_grace, cause="time_limit")
            leader.stop(config.stop_grace, TIME_LIMIT_EXIT)
            return TIME_LIMIT_EXIT
        lost = head.lost()
        if lost is not None:
            name, fields, code = lost
            me.log.event(name, **fields)
            # Without its GCS the driver cannot checkpoint through Ray, and ray.shutdown() hangs.
            leader.stop(min(config.stop_grace, RAY_STOP_GRACE), code)
            return code
        while (event := me.comm.poll(tag=EVENT)) is not None:
            me.log.event("node_lost", peer=event[0], message=event[2])


def leave(me: Rank, code: int, process_ends: bool) -> None:
    """The exit code is decided: no MPI_Finalize if a peer died (its closing barrier would never end);
    else no stop signal may change the code during MPI_Finalize (or, if the program goes on, the
    signals are handled as before mpiray)."""
    if not me.all_met:
        me.comm.abandon(code)
    me.stop.release(process_ends)


def report(me: Rank, node=None, error: str = "", exit_code: int = 0, cause: str = ""):
    """This rank's report to rank 0: its node (gcs.NodeInfo), or its failure."""
    from mpiray.messages import Report, versions

    return Report(
        rank=me.rank,
        host=me.host,
        log=str(me.log.path or ""),
        node_ip=node.ip if node else "",
        node_id=node.node_id if node else "",
        resources=node.resources if node else {},
        seconds=time.time() - (me.session.started if me.session else me.started),
        versions=versions(me.rank),
        error=error,
        exit_code=exit_code,
        cause=cause,
    )
