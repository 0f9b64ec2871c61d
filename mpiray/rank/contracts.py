"""What a rank is given to work with, as contracts: its communicator (Comm: rank/mpi.py's over MPI, or the tests'
in one process) and its own Ray node (OwnNode: ownnode.RealNode, plannednode.PlannedNode or NoNode). Neither
takes the Rank: what they need they were built with or are given."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Container, Protocol

from mpiray.deadline import Deadline
from mpiray.host.portblocks import PortBlock
from mpiray.rank.messages import Message, Session
from mpiray.raynode.gcs import NodeInfo

if TYPE_CHECKING:
    from pathlib import Path

    from mpiray.host.findings import Finding
    from mpiray.raynode.commands import NodeSpec
    from mpiray.raynode.container import ImageFacts


class Comm(Protocol):
    """What a rank needs of its communicator: rank/mpi.py's Comm over MPI, or tests/support/memory_comm.py's in one
    process. Every wait polls (a blocking MPICH call burns a core) and has a deadline."""

    rank: int
    size: int
    sent: int  # messages, for the log
    received: int

    def send(self, obj: Any, dest: int, tag: int) -> None: ...

    def send_to_others(self, obj: Any, tag: int, skip: Container[int] = ...) -> None: ...

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

    def finalize_within(self, seconds: float, code: int) -> None: ...

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

    def make_spill_dir(self, spill_key: str) -> list[Finding]:
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

    def gcs_restarts(self) -> list[tuple[str, dict[str, Any]]]:
        """What its starter said since the last call of its GCS dying and coming back (a head's: gcs_lost, gcs_back
        events' names and fields); [] where nothing was said."""

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
