"""A rank's own Ray node over its whole life, as the protocol drives it: start (held), let go, joined and
verified, described, settled, stopped, closed.

raynode/node.py is the node itself (private dir, token, guard, `ray start`, stop); nodeplan.py what it runs (its
spec, `ray start` line, environment, binds); this module is the glue between them and the rank: what the rank
logs, how long it waits, when a failed join is tried again, and the node's manifest (node_manifest event) once
its `ray start` is done starting. RealNode is the rank.contracts.OwnNode that runs (plannednode.py: those that do not).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

from mpiray import package
from mpiray.deadline import Deadline
from mpiray.errors import ConfigError, NodeStartFailed
from mpiray.host import gpus, network, portblocks, processes, sites
from mpiray.host.findings import REFUSE, Finding
from mpiray.logs.files import ray_output_path, ray_session_logs_path
from mpiray.rank import nodeplan, nodestart
from mpiray.rank.messages import Session
from mpiray.rank.plannednode import NodeContext, NoNode
from mpiray.rank.timings import RAY_STOP_GRACE
from mpiray.raynode import commands, labels, raycompat, spill
from mpiray.raynode import container as containers
from mpiray.raynode.gcs import NodeInfo, gcs_answers
from mpiray.raynode.node import RayNode
from mpiray.raynode.raycompat import ray_version

START_ATTEMPTS = 3


class RealNode:
    """rank.contracts.OwnNode for real: the RayNode (raynode/node.py) it owns once prepared, its `ray start` held until
    up(). Before prepare() (a rank that failed first) it has no node, and its end has nothing to do."""

    runs_ray = True

    def __init__(self, context: NodeContext) -> None:
        self.context = context
        self.node: RayNode | None = None  # once prepared
        self.session: Session | None = None  # the job's, once prepared
        self.image: containers.ImageFacts | None = None  # where it runs in the job's container
        self.spill_made: Path | None = None  # the host's spill dir, where this rank made it (make_spill_dir)

    @property
    def spec(self) -> commands.NodeSpec | None:
        return self.node.spec if self.node is not None else None

    @property
    def alive(self) -> bool:
        return self.node is not None and self.node.alive

    def idle(self) -> NoNode:
        """No node here after all (one per host, or a host the pre-flight refused): the spill dir it made for
        the host's nodes goes at this rank's end (NoNode.close)."""
        return NoNode(self.context, spill_dir=self.spill_made)

    @property
    def ray(self) -> RayNode:
        if self.node is None:
            raise RuntimeError("this rank's node is not prepared")
        return self.node

    def port_block(self, job_id: str, units: int, reserved: int) -> portblocks.PortBlock:
        return portblocks.free_block(job_id, units, reserved=reserved)

    def make_spill_dir(self, spill_key: str) -> list[Finding]:
        """The job's spill dir on this host (raynode/spill.py), made by the host's first rank before any node of
        the host can start (a node starts only once rank 0 judged the pre-flight); what keeps it from being made,
        refused."""
        config = self.context.config
        try:
            if config.spill_dir is not None:
                spill.prepare(config.spill_dir)  # this user's killed jobs' (the temp dir's are swept with the private dirs)
            path = nodeplan.job_spill_dir(config, spill_key)
            made = spill.make(path)
            self.spill_made = path if made else None
            self.context.log.event("spill_dir", path=str(spill.ray_spill_dir(path)), made=made)
        except ConfigError as error:
            return [Finding(REFUSE, error.cause or "dir_unwritable", str(error))]
        return []

    def prepare(self, session: Session) -> Path:
        config, log, rank = self.context.config, self.context.log, self.context.rank
        job_dir = session.job_dir(config.log_dir)
        self.session = session
        self.node = node = RayNode.prepare(
            config.temp_dir, f"r{rank}",
            output_path=ray_output_path(job_dir, rank, session.prefix),
            kept_logs=ray_session_logs_path(job_dir, rank, session.prefix),
            token=session.token,
        )
        if node.swept:
            log.event("stale_dirs_removed", count=len(node.swept), paths=[str(p) for p in node.swept])
        return node.ray_dir

    def start(self, spec: commands.NodeSpec, argv: list[str], head: bool, image: containers.ImageFacts | None) -> None:
        config, log, node, session = self.context.config, self.context.log, self.ray, self.session
        assert session is not None  # prepared
        self.image = image
        spill_dir = nodeplan.job_spill_dir(config, session.spill_key)
        log.event("private_dir", path=str(node.private.path))
        log.event("node_starting", role="head" if head else "worker", command=" ".join(argv), argv=argv)
        log.event("node_output", output=str(node.output_path), kept_logs=str(node.kept_logs))
        env = nodeplan.node_env(config, spec, head=head, base=package.helper_env(dict(os.environ)),
                                token_path=str(node.token_path) if node.token_path else None,
                                private_tmp=str(node.private.path), interface=network.interface_holding(spec.node_ip),
                                gpu_variables=nodestart.node_gpu_variables(spec.share),
                                gcs_restarts=nodeplan.gcs_restarts(config.gcs_restarts, image.ray if image else None,
                                                                raycompat.gcs_store())[0] if head else 0)
        box, container = containers.of(config), None
        if box is not None:  # `ray start` inside the image, its dirs and mpiray's code at hand; env is complete
            name = containers.container_name(session.job_id, self.context.rank)
            binds = nodestart.in_image(node.private.path, spill_dir, session.job_dir(config.log_dir))
            env["PYTHONPATH"] = str(node.private.path / containers.CODE_DIR)
            monitor = box.monitor_pidfile(node.private.path, name)
            argv = box.command(argv, binds, env, name, monitor_pidfile=monitor)
            container = (box.remove_command(name) if box.named else [], monitor)
            log.event("container", reference=box.reference, name=name, binds=[bind.spec for bind in binds])
        node.start(argv, env, spec.share.affinity, spec, spill_dir=spill_dir, container=container)
        if head and config.dashboard:
            log.event("dashboard", port=spec.ports.dashboard, listen=spec.dashboard_host)

    def up(self, joins: bool, between: Callable[[], None]) -> NodeInfo:
        """This node ALIVE. A `ray start` that failed as an overloaded host or GCS makes it fail (Ray gives a
        raylet 30 s to register) is started again, at most START_ATTEMPTS times within --startup-timeout: a
        worker's while the head answers (join_retry), the head's at once (head_retry): no worker has met it yet."""
        assert self.session is not None  # prepared
        self.ray.release()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._wait_until_alive(between)
            except NodeStartFailed as failure:
                if attempt == START_ATTEMPTS or not failure.retryable or (
                        joins and not gcs_answers(self.session.gcs_address)):
                    raise
                stopped = self.ray.restart(RAY_STOP_GRACE)
                self.context.log.event("join_retry" if joins else "head_retry", reason=str(failure),
                                       attempt=attempt + 1, attempts=START_ATTEMPTS, stopped=list(stopped.pids))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wait_until_alive(self, between: Callable[[], None]) -> NodeInfo:
        config, session, ray = self.context.config, self.session, self.ray
        assert session is not None  # prepared
        deadline = Deadline.since(session.started, config.startup_timeout)
        node = ray.wait_alive(deadline, between, session.gcs_address, config.startup_timeout)
        for key, note in ray.started_output.compat.items():  # said before the node's ALIVE line, so all here now
            self.context.log.event("compat_note", key=key, note=note)
        return node

    def check_running(self) -> None:
        if self.node is not None:
            self.node.check_running()

    def pids(self) -> list[int]:
        return self.node.pids() if self.node is not None else []

    def ended(self) -> dict[str, Any] | None:
        node = self.node
        if node is None or not node.exited():
            return None
        return {"code": node.exit_code(), "output": str(node.output_path)}

    def gcs_restarts(self) -> list[tuple[str, dict[str, Any]]]:
        said = self.node.output.gcs if self.node is not None and self.node.output is not None else None
        return [said.popleft() for _ in range(len(said))] if said else []

    def stops_last(self) -> bool:
        node = self.node
        return node is not None and node.alive and raycompat.DRAIN_ON_STOP in node.started_output.compat

    def describe_once_started(self) -> bool:
        node = self.node
        if node is None or not node.alive or not node.ray_started():
            return False
        if node.first_description():
            self._write_manifest()
        return True

    def _write_manifest(self) -> None:
        """The node_manifest event: where the node is, every port its processes listen on, its dirs,
        versions, the token's fingerprint, resources, and when each start-up phase ended."""
        import hashlib  # ~10 ms of import (OpenSSL): off every rank's start-up path, only here, after it

        config, view, node, session, image = self.context.config, self.context.view, self.ray, self.session, self.image
        assert session is not None and node.spec is not None  # prepared, and started of it
        spec = node.spec
        token = f"sha256:{hashlib.sha256(session.token.encode()).hexdigest()[:16]}" if session.token else \
            "none (--no-auth)"
        self.context.log.event(
            "node_manifest",
            ip=spec.node_ip, interface=network.interface_holding(spec.node_ip) or "?", node_name=spec.node_name,
            collectives={name: node.environment[name] for name in commands.COLLECTIVE_VARIABLES if name in node.environment},
            listening=processes.listening_ports(node.pids()), planned_ports=vars(spec.ports), temp_dir=spec.temp_dir,
            session_logs=str(node.kept_logs), output=str(node.output_path),
            ray=image.ray if image else ray_version(), python=image.python if image else sys.version.split()[0],
            mpi4py=_mpi4py_version(), mpi=self.context.mpi, token=token,
            cpus=spec.share.cpus, gpus=list(spec.share.gpu_ids), memory=spec.share.memory,
            gpu_vendor=spec.share.gpu_vendor, gpu_source=view.gpu_source,
            gpu_variables={name: node.environment.get(name) for name in gpus.VISIBLE_VARIABLES},
            site=site.applied(config) if (site := sites.of(config)) else None,
            object_store=spec.share.object_store,
            shm={"free_mib": view.shm >> 20, "total_mib": view.shm_total >> 20},
            phases={name: round(at - session.started, 3) for name, at in node.times.items()},
            labels=labels.started_with(spec.labels, spec.ray_labels),
        )

    def settle(self) -> None:
        node = self.node
        if node is not None and node.alive:
            node.settle(Deadline.after(RAY_STOP_GRACE))

    def stop(self, grace: float) -> None:
        if self.node is None:
            return
        report = self.node.stop(grace)
        if report.pids:
            self.context.log.event("processes_stopped", count=len(report.pids), seconds=round(report.seconds, 3),
                                   killed=report.killed, pids=list(report.pids))

    def close(self) -> None:
        node, log = self.node, self.context.log
        if node is None:  # a spare never started (--spares): the spill dir it made, once no node's objects are left
            if self.spill_made is not None:
                spill.remove_node(self.spill_made, None)
            return
        for problem in node.close():
            log.event("teardown_failed", step="close this rank's node", problem=problem)
        if node.spill_dir is not None:  # its node's spilled objects; the dir too, once no node's are left
            spill.remove_node(node.spill_dir, node.node_id)
        if node.kept is not None:
            log.event("logs_kept", path=str(node.kept))

    def remove_container_on_death(self, command: list[str], monitor: Path | None) -> None:
        if self.node is not None:
            self.node.guard.remove_container(command, monitor)

    def access(self) -> tuple[str | None, str | None]:
        node = self.node
        if node is None:
            return None, None
        return (str(node.token_path) if node.token_path else None), str(node.private.path)


def _mpi4py_version() -> str:
    module = sys.modules.get("mpi4py")
    return getattr(module, "__version__", "not loaded")
