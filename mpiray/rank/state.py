"""What every rank has, below the roles and leaders that use it: the Rank, and the contracts that act on it: a
role's (Role; rank 0's is zero.RankZero), rank 0's leader step's (Leader), and a lost cluster's word (Lost).
What a rank is given is in contracts.py (Comm, OwnNode), the timings its steps share in timings.py."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Protocol

from mpiray.batch import environment
from mpiray.config import Config
from mpiray.deadline import Deadline
from mpiray.errors import Shutdown
from mpiray.host import resources
from mpiray.host.portblocks import PortBlock
from mpiray.logs.events import RankLog
from mpiray.rank.contracts import Comm, OwnNode
from mpiray.rank.messages import CONTROL, MET, Cluster, Report, Session, versions
from mpiray.rank.signals import StopRequest
from mpiray.raynode import labels
from mpiray.raynode.gcs import NodeInfo
from mpiray.raynode.raycompat import ray_version


class Lost(NamedTuple):
    """The cluster's heart stopped (zero.RankZero.lost): the event that says how, its fields, the job's exit code."""

    event: str
    fields: dict[str, Any]
    code: int


@dataclass
class Rank:
    """What every rank has, whatever its role, handed down the protocol and teardown.

    Role-only state lives with the role (head.Head, worker.Worker), the leader's with the leader.
    """

    config: Config
    comm: Comm  # every rank of the job
    host_comm: Comm  # the ranks on this host
    env: environment.Environment
    log: RankLog
    stop: StopRequest
    host: str
    view: resources.HostView  # what this rank sees of its host
    own_node: OwnNode  # this rank's Ray node: real, planned (--dry-run) or none (an idle rank); see OwnNode
    started: float = field(default_factory=time.time)
    session: Session | None = None  # from rank 0
    port_block: PortBlock | None = None  # the host's first rank holds its ranks' ports
    all_met: bool = True  # every rank reached the last barrier (else MPI_Finalize would wait forever)
    gone: set[int] = field(default_factory=set)  # the ranks known gone with their worker host (rank 0's HOST_LOST)
    hosts: int | None = None  # how many hosts the job's ranks are on (every rank counts them, in life.setup), where
    # the autoscaler needs it (--ray-node-per host); None where some rank did not count within --startup-timeout

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def current_session(self) -> Session:
        """The session this rank is in, once rank 0 sent it (every step after the hello has it)."""
        if self.session is None:
            raise RuntimeError("no session yet: rank 0 has not sent it")
        return self.session

    def enter(self, session: Session) -> None:
        """The session this rank is in from now: rank 0's as it made it (head, joiner) or sent it (worker), or a
        spare's again, with the start of its own node (its start-up deadline counts from there)."""
        self.session = session

    def hold(self, block: PortBlock) -> None:
        """The port block the host's first rank holds for its ranks (hostsplit), until the node's end."""
        self.port_block = block

    def go_idle(self) -> None:
        """This rank starts no Ray node (one per host, not its own; a refused host; a spare's idle rank)."""
        self.own_node = self.own_node.idle()

    def meet_last(self, timeout: float) -> bool:
        """The last barrier before MPI_Finalize: whether every rank reached it within timeout (else MPI_Finalize
        would wait forever for the missing: all_met)."""
        self.all_met = self.comm.barrier(timeout)
        return self.all_met

    def peer_gone(self, ranks: Iterable[int] = ()) -> None:
        """A rank is known gone (the head's host; ranks: those of a worker host): no MPI_Finalize, whose closing PMI
        barrier would wait for it forever; the last barrier is not waited for, or only among the others
        (meet_without_gone) where the gone ranks are known."""
        self.all_met = False
        self.gone.update(ranks)

    def meet_without_gone(self, timeout: float) -> bool:
        """The last barrier among the ranks not gone (MPI's own would wait for the gone): each tells rank 0 it is
        there (MET) and rank 0, once all have, tells each of them; whether that happened within timeout. Polled, as
        every wait is."""
        deadline = Deadline.after(timeout)
        others = [rank for rank in range(1, self.comm.size) if rank not in self.gone]
        if self.rank != 0:
            self.comm.send(True, 0, MET)
            return self.comm.receive(0, MET, deadline) is not None
        here = self.comm.receive_each(others, MET, deadline)
        for rank in here:
            self.comm.send(True, rank, MET)
        self.comm.flush(max(deadline.remaining(), 1.0))
        return len(here) == len(others)

    def log_started(self, job_id: str = "") -> None:
        """rank_started: what this rank runs on and under. job_id: the job's, where the session is not made yet."""
        self.log.event("rank_started", size=self.comm.size, launch=self.env.describe(), scheduler=self.env.scheduler,
                       launcher=self.env.launcher, job_id=job_id or (self.current_session.job_id if self.session else ""),
                       mpi=self.comm.library_version(), ray=ray_version(), python=sys.version.split()[0])

    def raise_if_stopped(self) -> None:
        """Between polls: a stop signal, or rank 0's word to stop, ends the wait; rank 0's sends move on."""
        self.stop.raise_if_signalled()
        # A network netmod (MPICH's ofi, UCX) moves a sent message only while its sender calls into MPI:
        # without this, the session reached the workers only once the head was up, and they could
        # not load `ray start` meanwhile (measured on the 3-host testbed: 2.3 s later).
        self.comm.progress()
        if self.rank != 0:
            message = self.comm.poll(0, CONTROL)
            if message is not None:
                raise Shutdown(f"rank 0 ended the job with exit code {message.payload}", message.payload)

    def metrics_port(self) -> int:
        """Where this rank's Ray node exports its metrics (Prometheus's text format), or 0 where it exports none:
        --no-metrics, or a --minimal agent (Ray without its [default] extras)."""
        spec = self.own_node.spec
        return spec.ports.metrics_export if spec is not None and spec.full_agent and self.config.metrics else 0

    def report(self, node: NodeInfo | None = None, error: str = "", exit_code: int = 0, cause: str = "") -> Report:
        """This rank's report to rank 0: its node (raynode.gcs.NodeInfo), or its failure."""
        return Report(
            rank=self.rank,
            host=self.host,
            log=str(self.log.path or ""),
            node_ip=node.ip if node else "",
            node_id=node.node_id if node else "",
            resources=node.resources if node else {},
            seconds=time.time() - (self.session.started if self.session else self.started),
            versions=versions(self.rank),
            error=error,
            metrics_port=self.metrics_port() if node else 0,
            exit_code=exit_code,
            cause=cause,
            labels=labels.started_with(spec.labels, spec.ray_labels) if node and (spec := self.own_node.spec) is not None else {},
            knock_port=spec.ports.node_manager if node and (spec := self.own_node.spec) is not None else 0,
        )


class Leader(Protocol):
    """Rank 0's step once the cluster is up: what a front end supplies (leaders/)."""

    def start(self, me: Rank, cluster: Cluster) -> None:
        """Begin: run the driver command, or hand the cluster to the calling script."""

    def poll(self, timeout: float) -> int | None:
        """Its exit code once it ended (logged by the leader), else None after up to timeout seconds."""

    def stop(self, grace: float, code: int) -> None:
        """Make it end now: SIGTERM, grace seconds, SIGKILL (or what stands for them); code: the job's."""

    def close(self, me: Rank) -> None:
        """After it ended: what is left to do (its output's last lines)."""


class Role(Protocol):
    """A rank's part in the protocol, as teardown.finish drives it at the end (head, worker, joiner)."""

    def announce(self, code: int) -> None:
        """The job's exit code is decided: tell whoever must know (rank 0: every rank)."""

    def before_stopping_node(self, head_stops_last: bool) -> None:
        """Wait for what must happen before this rank's Ray node stops."""

    def after_stopping_node(self, head_stops_last: bool) -> None:
        """Say or undo what must follow this rank's Ray node's stop."""
