"""What every rank has and agrees to, below the roles and leaders that use it: the Rank, the contracts
of a role (Role; rank 0's is zero.RankZero) and of rank 0's leader step (Leader), and the timings they share."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol

from mpiray.batch import environment
from mpiray.config import Config
from mpiray.deadline import Deadline
from mpiray.errors import Shutdown
from mpiray.host import resources
from mpiray.host.network import PortBlock
from mpiray.logs.events import RankLog
from mpiray.rank.messages import CONTROL, Cluster, Message, Report, Session, versions
from mpiray.rank.signals import StopRequest
from mpiray.raynode import labels
from mpiray.raynode.gcs import NodeInfo
from mpiray.raynode.raycompat import ray_version

if TYPE_CHECKING:
    from pathlib import Path

    from mpiray.host.preflight import Finding
    from mpiray.raynode.commands import NodeSpec
    from mpiray.raynode.container import ImageFacts

DRIVER_POLL = 0.2  # seconds between checks while the leader runs: ~0% CPU for waiting ranks
STARTUP_POLL = 0.02  # seconds between checks while nodes start (a file read or an MPI probe): on the critical path
RAY_STOP_GRACE = 5.0  # the most a Ray node gets to stop in order: healthy ones take ~1 s
TIME_LIMIT_EXIT = 124  # as timeout(1)
HEAD_LOST_EXIT = 1


class Comm(Protocol):
    """What a rank needs of its communicator: rank/mpi.py's Comm over MPI, or tests/support/memory_comm.py's in one
    process. Every wait polls (a blocking MPICH call burns a core) and has a deadline."""

    rank: int
    size: int
    sent: int  # messages, for the log
    received: int

    def send(self, obj: Any, dest: int, tag: int) -> None: ...

    def send_to_others(self, obj: Any, tag: int) -> None: ...

    def progress(self) -> None: ...

    def poll(self, source: int = ..., tag: int = ...) -> Message | None: ...

    def receive(self, source: int, tag: int, deadline: Deadline, between_polls: Callable[[], None] = ...) -> Any: ...

    def receive_each(self, sources: list[int], tag: int, deadline: Deadline,
                     between_polls: Callable[[], None] = ...) -> dict[int, Any]: ...

    def count(self, flag: bool, timeout: float) -> int | None: ...

    def barrier(self, timeout: float) -> bool: ...

    def flush(self, timeout: float) -> None: ...

    def drop_pending(self) -> int: ...

    def split_by_host(self) -> Comm: ...

    def library_version(self) -> str: ...

    def abandon(self, code: int) -> None: ...

    def exit_now(self, code: int) -> None: ...


class OwnNode(Protocol):
    """This rank's own Ray node over its whole life, one handle: chosen once per rank (life.setup) for real
    (ownnode.RealNode, owning a raynode.node.RayNode) or as planned (plannednode.PlannedNode, --dry-run: logged,
    reported as if the GCS showed it, nothing of Ray run); an idle rank's (one Ray node per host) becomes
    plannednode.NoNode at its host's split. The protocol and the teardown call the same methods of all three, none
    of which takes the Rank: what a node needs it was built with (plannednode.NodeContext) or is given."""

    runs_ray: bool  # False: none runs, so rank 0 has no cluster to publish, autoscale or wait for at the end
    @property
    def spec(self) -> NodeSpec | None:
        """What it was started as (None: not started)."""

    @property
    def alive(self) -> bool:
        """It was seen ALIVE in the GCS (a planned node never is)."""

    def idle(self) -> OwnNode:
        """The node of an idle rank of the same job (its host's split gave it none)."""

    def port_block(self, job_id: str, units: int, reserved: int) -> PortBlock:
        """The host's port block (its first rank's): free and locked, or planned (neither checked nor locked)."""

    def make_spill_dir(self, job_id: str) -> list[Finding]:
        """The host's first rank, in the pre-flight: the job's spill dir on this host made, or why it cannot be."""

    def prepare(self, session: Session) -> Path:
        """Before its `ray start` line is built: the dir Ray gets."""

    def start(self, spec: NodeSpec, argv: list[str], head: bool, image: ImageFacts | None) -> None:
        """Start its `ray start` (argv, made of spec; image: where it runs in the job's container), held until
        up(); or say what would run."""

    def up(self, joins: bool, between: Callable[[], None]) -> NodeInfo:
        """Let it go and wait until it is ALIVE (joins: a worker's, whose failed join is tried again; between:
        called between polls, which a stop ends)."""

    def check_running(self) -> None:
        """Raise if its `ray start` already failed (while it waits for its go)."""

    def pids(self) -> list[int]:
        """Its processes, once up."""

    def ended(self) -> dict[str, Any] | None:
        """Once its `ray start` exited: its code and where its output is (an event's fields); else None."""

    def stops_last(self) -> bool:
        """On a normal end: its Ray does not drain a node it stops, so the head's must stop after the others."""

    def describe_once_started(self) -> bool:
        """Once its `ray start` is done starting: its manifest, logged once. True when done starting."""

    def settle(self) -> None:
        """Before it stops: let its `ray start` finish starting (a deadline of RAY_STOP_GRACE)."""

    def stop(self, grace: float) -> None:
        """Stop its processes (SIGTERM, grace seconds, SIGKILL), logged."""

    def close(self) -> None:
        """Keep Ray's logs, remove its private dir and its spilled objects."""

    def remove_container_on_death(self, command: list[str], monitor: Path | None) -> None:
        """If this rank dies: its guard removes the named container the driver runs in."""

    def access(self) -> tuple[str | None, str | None]:
        """Its token's path and its private dir, for a driver (None: it has none)."""


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
            labels=labels.from_text(spec.labels) if node and (spec := self.own_node.spec) is not None else {},
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
