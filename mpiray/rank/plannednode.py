"""The OwnNode of a rank whose Ray node never runs: PlannedNode (--dry-run: the node it would start, logged and
reported as planned) and NoNode (an idle rank: its host's first rank holds the host's node). ownnode.RealNode is
the one that runs; the protocol and the teardown call the same methods of all three."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mpiray.config import Config
from mpiray.host import portblocks
from mpiray.host.findings import Finding
from mpiray.host.resources import HostView
from mpiray.logs.events import RankLog
from mpiray.rank.messages import Session
from mpiray.raynode import commands, spill
from mpiray.raynode import container as containers
from mpiray.raynode.gcs import NodeInfo


@dataclass(frozen=True)
class NodeContext:
    """What a rank's node is built with (life.setup), so that none of its methods needs the Rank: the job's options,
    the rank's log, which rank on which host, what it sees of its host, and the MPI library's version (its manifest)."""

    config: Config
    log: RankLog
    rank: int
    host: str
    view: HostView
    mpi: str


class PlannedNode:
    """rank.contracts.OwnNode of --dry-run: the node this rank would start, logged (dry_run_node) and reported as
    if the GCS showed it; nothing of Ray runs, nothing is made on the host, no port is checked or locked."""

    runs_ray = False

    def __init__(self, context: NodeContext) -> None:
        self.context = context
        self.spec: commands.NodeSpec | None = None  # what start() would have started

    @property
    def alive(self) -> bool:
        return False

    def idle(self) -> NoNode:
        return NoNode(self.context)

    def port_block(self, job_id: str, units: int, reserved: int) -> portblocks.PortBlock:
        return portblocks.planned_block(job_id, units, reserved=reserved)

    def make_spill_dir(self, spill_key: str) -> list[Finding]:
        return []

    def prepare(self, session: Session) -> Path:
        return self.context.config.temp_dir / f"mpiray-{os.getuid()}-r{self.context.rank}-XXXXXX" / "ray"  # as named

    def start(self, spec: commands.NodeSpec, argv: list[str], head: bool, image: containers.ImageFacts | None) -> None:
        self.spec = spec
        self.context.log.event("dry_run_node", role="head" if head else "worker", command=" ".join(argv), argv=argv)

    def up(self, joins: bool, between: Callable[[], None]) -> NodeInfo:
        spec = self.spec
        assert spec is not None, "up() before start()"
        share = spec.share
        return NodeInfo(node_id=f"dry-run-{self.context.rank}", ip=spec.node_ip, name=spec.node_name, temp_dir=spec.temp_dir,
                        resources={"CPU": float(share.cpus), "GPU": float(len(share.gpu_ids)), "memory": float(share.memory)})

    def check_running(self) -> None:
        pass

    def pids(self) -> list[int]:
        return []

    def ended(self) -> dict[str, Any] | None:
        return None  # nothing runs, so nothing ends

    def gcs_restarts(self) -> list[tuple[str, dict[str, Any]]]:
        return []

    def stops_last(self) -> bool:
        return False

    def describe_once_started(self) -> bool:
        return False  # nothing starts: its plan was the dry_run_node event

    def settle(self) -> None:
        pass

    def stop(self, grace: float) -> None:
        pass

    def close(self) -> None:
        pass

    def remove_container_on_death(self, command: list[str], monitor: Path | None) -> None:
        pass

    def access(self) -> tuple[str | None, str | None]:
        return None, None


class NoNode(PlannedNode):
    """rank.contracts.OwnNode of an idle rank (one Ray node per host, and this rank is not the host's first; or a
    host the pre-flight refused): it starts nothing and plans nothing; its host's first rank holds the ports. What
    it must never do raises. spill_dir: the job's spill dir this rank made, removed at its end (close) once no
    node's objects are left there, not before: the path can be other hosts' too (a shared /tmp, --spill-dir)."""

    def __init__(self, context: NodeContext, spill_dir: Path | None = None) -> None:
        super().__init__(context)
        self.spill_dir = spill_dir

    def close(self) -> None:
        if self.spill_dir is not None:
            spill.remove_node(self.spill_dir, None)

    def port_block(self, job_id: str, units: int, reserved: int) -> portblocks.PortBlock:
        raise AssertionError("an idle rank holds no port block: its host's first rank does")

    def prepare(self, session: Session) -> Path:
        raise AssertionError("an idle rank starts no node")

    def start(self, spec: commands.NodeSpec, argv: list[str], head: bool, image: containers.ImageFacts | None) -> None:
        raise AssertionError("an idle rank starts no node")
