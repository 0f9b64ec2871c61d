"""A rank's own Ray node over its whole life, as the protocol drives it: start (held), let go, joined and
verified, described, settled, stopped, closed.

raynode/node.py is the node itself (private dir, token, guard, `ray start`, stop); this module is the glue
between it and the rank: what the rank logs, how long it waits, when a failed join is tried again,
and the node's manifest (node_manifest event) once its `ray start` is done starting.

The node is a rank.state.OwnNode, built once in life.setup of named values (NodeContext): RealNode (owning a
RayNode) or, with --dry-run, PlannedNode (its `ray start` line logged, reported as planned); an idle rank's is a
NoNode. The steps around it, the teardown's too, are the same code for all three.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mpiray import package
from mpiray.config import Config
from mpiray.deadline import Deadline, poll_until
from mpiray.errors import ConfigError, ImageFailed, NodeStartFailed, StartupTimeout
from mpiray.host import gpus, network, processes, resources, sites
from mpiray.host.preflight import REFUSE, Finding
from mpiray.host.resources import HostView, Share
from mpiray.logs.events import RankLog
from mpiray.logs.files import ray_output_path, ray_session_logs_path
from mpiray.rank import preflight
from mpiray.rank.messages import JOIN, Session
from mpiray.rank.state import RAY_STOP_GRACE, STARTUP_POLL, Rank
from mpiray.raynode import commands, labels, raycompat, spill
from mpiray.raynode import container as containers
from mpiray.raynode.gcs import NodeInfo, gcs_answers
from mpiray.raynode.node import RayNode
from mpiray.raynode.raycompat import ray_version

JOIN_ATTEMPTS = 3
RESULTS_DIR = "results"  # beside the log root: the default trainer's storage path (train/storage.py)
# seconds between Ray's autoscaler updates (the provider asks the scheduler at most every --scheduler-poll)
AUTOSCALER_UPDATE_S = 1


def log_context(me: Rank, job_id: str = "") -> None:
    """rank_started: what this rank runs on and under. job_id: the job's, where the session is not made yet."""
    me.log.event("rank_started", size=me.comm.size, launch=me.env.describe(), scheduler=me.env.scheduler,
                 launcher=me.env.launcher, job_id=job_id or (me.current_session.job_id if me.session else ""),
                 mpi=me.comm.library_version(), ray=ray_version(), python=sys.version.split()[0])


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


class RealNode:
    """rank.state.OwnNode for real: the RayNode (raynode/node.py) it owns once prepared, its `ray start` held until
    up(). Before prepare() (a rank that failed first) it has no node, and its end has nothing to do."""

    runs_ray = True

    def __init__(self, context: NodeContext) -> None:
        self.context = context
        self.node: RayNode | None = None  # once prepared
        self.session: Session | None = None  # the job's, once prepared
        self.image: containers.ImageFacts | None = None  # where it runs in the job's container

    @property
    def spec(self) -> commands.NodeSpec | None:
        return self.node.spec if self.node is not None else None

    @property
    def alive(self) -> bool:
        return self.node is not None and self.node.alive

    def idle(self) -> NoNode:
        return NoNode(self.context)

    @property
    def ray(self) -> RayNode:
        if self.node is None:
            raise RuntimeError("this rank's node is not prepared")
        return self.node

    def port_block(self, job_id: str, units: int, reserved: int) -> network.PortBlock:
        return network.free_block(job_id, units, reserved=reserved)

    def make_spill_dir(self, job_id: str) -> list[Finding]:
        """The job's spill dir on this host (raynode/spill.py), made by the host's first rank before any node of
        the host can start (a node starts only once rank 0 judged the pre-flight); what keeps it from being made,
        refused."""
        config = self.context.config
        try:
            if config.spill_dir is not None:
                spill.prepare(config.spill_dir)  # this user's killed jobs' (the temp dir's are swept with the private dirs)
            path = job_spill_dir(config, job_id)
            self.context.log.event("spill_dir", path=str(spill.ray_spill_dir(path)), made=spill.make(path))
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
        node.spill_dir = job_spill_dir(config, session.job_id)
        node.guard.spill_dir(node.spill_dir, None)
        log.event("private_dir", path=str(node.private.path))
        log.event("node_starting", role="head" if head else "worker", command=" ".join(argv), argv=argv)
        log.event("node_output", output=str(node.output_path), kept_logs=str(node.kept_logs))
        env = node_env(config, spec, node, head)
        box = containers.of(config)
        if box is not None:  # `ray start` inside the image, its dirs and mpiray's code at hand; env is complete
            name = containers.container_name(session.job_id, self.context.rank)
            binds = in_image(node.private.path, node.spill_dir, session.job_dir(config.log_dir))
            env["PYTHONPATH"] = str(node.private.path / containers.CODE_DIR)
            node.container_monitor = box.monitor_pidfile(node.private.path, name)
            argv = box.command(argv, binds, env, name, node.container_monitor)
            node.remove_container = box.remove_command(name) if box.named else []
            log.event("container", reference=box.reference, name=name, binds=[bind.spec for bind in binds])
        node.start(argv, env, spec.share.affinity, spec)
        if head and config.dashboard:
            log.event("dashboard", port=spec.ports.dashboard, listen=spec.dashboard_host)

    def up(self, joins: bool, between: Callable[[], None]) -> NodeInfo:
        self.ray.release()
        return self._join(between) if joins else self._wait_until_alive(between)

    def _join(self, between: Callable[[], None]) -> NodeInfo:
        """This worker's node ALIVE: a `ray start` that failed as an overloaded GCS makes it fail (Ray gives a
        raylet 30 s to register) is started again while the head is up, at most JOIN_ATTEMPTS times."""
        assert self.session is not None  # prepared
        for attempt in range(1, JOIN_ATTEMPTS + 1):
            try:
                return self._wait_until_alive(between)
            except NodeStartFailed as failure:
                if attempt == JOIN_ATTEMPTS or not failure.retryable or not gcs_answers(self.session.gcs_address):
                    raise
                self.context.log.event("join_retry", reason=str(failure), attempt=attempt + 1, attempts=JOIN_ATTEMPTS)
                self.ray.restart(RAY_STOP_GRACE)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wait_until_alive(self, between: Callable[[], None]) -> NodeInfo:
        config, session, ray = self.context.config, self.session, self.ray
        assert session is not None  # prepared
        deadline = Deadline.since(session.started, config.startup_timeout)
        node = ray.wait_alive(deadline, between, session.gcs_address, config.startup_timeout)
        ray.node_id = node.node_id  # its spilled objects' dir is named by it (spill.py)
        if ray.spill_dir is not None:
            ray.guard.spill_dir(ray.spill_dir, node.node_id)
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

    def stops_last(self) -> bool:
        node = self.node
        return node is not None and node.alive and raycompat.DRAIN_ON_STOP in node.started_output.compat

    def describe_once_started(self) -> bool:
        node = self.node
        if node is None or not node.alive or not node.ray_started():
            return False
        if not node.described:
            node.described = True
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
        if node is None:
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


class PlannedNode:
    """rank.state.OwnNode of --dry-run: the node this rank would start, logged (dry_run_node) and reported as
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

    def port_block(self, job_id: str, units: int, reserved: int) -> network.PortBlock:
        return network.planned_block(job_id, units, reserved=reserved)

    def make_spill_dir(self, job_id: str) -> list[Finding]:
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
        return NodeInfo(f"dry-run-{self.context.rank}", spec.node_ip, spec.node_name, spec.temp_dir,
                        {"CPU": float(share.cpus), "GPU": float(len(share.gpu_ids)), "memory": float(share.memory)})

    def check_running(self) -> None:
        pass

    def pids(self) -> list[int]:
        return []

    def ended(self) -> dict[str, Any] | None:
        return None  # nothing runs, so nothing ends

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
    """rank.state.OwnNode of an idle rank (one Ray node per host, and this rank is not the host's first): it starts
    nothing and plans nothing; its host's first rank holds the ports. What it must never do raises."""

    def port_block(self, job_id: str, units: int, reserved: int) -> network.PortBlock:
        raise AssertionError("an idle rank holds no port block: its host's first rank does")

    def prepare(self, session: Session) -> Path:
        raise AssertionError("an idle rank starts no node")

    def start(self, spec: commands.NodeSpec, argv: list[str], head: bool, image: containers.ImageFacts | None) -> None:
        raise AssertionError("an idle rank starts no node")


def node_env(config: Config, spec: commands.NodeSpec, node: RayNode, head: bool) -> dict[str, str]:
    """The environment of a node's `ray start`: its GPUs, token and private temp dir; the site's and the
    collectives' network variables (a value already set wins); the join retries and the autoscaler's timing."""
    env = commands.node_env(
        package.helper_env(dict(os.environ)), spec.share.gpu_ids, str(node.token_path) if node.token_path else None,
        dashboard_metrics_port=commands.head_ports(spec).dashboard_metrics if head else None,
        private_tmp=str(node.private.path), gpu_variables=node_gpu_variables(spec.share),
    )
    site = sites.of(config)
    for name, value in site.node_env if site else ():  # the site's fabric wants them; a value already set wins
        env.setdefault(name, value)
    chosen = bool(config.interface or config.address_rule)
    env.update(commands.collective_env(env, network.interface_holding(spec.node_ip), chosen, spec.share.gpu_vendor))
    # A joining `ray start` gives up after this many ~1-2 s retries (default 20): let it wait as long
    # as --startup-timeout says instead.
    env["RAY_NUM_REDIS_GET_RETRIES"] = str(max(20, int(config.startup_timeout / 2) + 1))
    if spec.autoscaling_config:  # its monitor imports mpiray's node provider, and serves metrics in the block
        env["AUTOSCALER_METRIC_PORT"] = str(commands.head_ports(spec).autoscaler_metrics)
        # Ray looks at the demand every 5 s by default: 2.5 s on average before a job is even asked for,
        # more than the whole by-hand sbatch-to-ALIVE path on an idle queue (tests/benchmarks/bench_elastic.py).
        env.setdefault("AUTOSCALER_UPDATE_INTERVAL_S", str(AUTOSCALER_UPDATE_S))
    return env


def in_image(private: Path, spill_dir: Path | None, job_dir: Path) -> list[containers.Bind]:
    """What a node's (and the driver's) container binds: the rank's private dir (Ray's temp dir, the token), the
    job's spill dir, the log root above job_dir (LOG_DIR/JOB_ID) and results/ beside it (the default trainer's
    storage path, train/storage.py: its checkpoints outlive the container) at their own paths, and mpiray's code
    (the trainer's too, beside it in a checkout) read-only in the private dir's CODE_DIR, for PYTHONPATH: never
    the host's site-packages, whose Ray would shadow the image's. Any other path: --container-flags' binds."""
    binds = [containers.Bind(str(private), str(private))]
    log_root = job_dir.resolve().parent
    for shared in (log_root, log_root.parent / RESULTS_DIR):
        shared.mkdir(parents=True, exist_ok=True)  # a bind's source must exist when the container starts
        binds.append(containers.Bind(str(shared), str(shared)))
    if spill_dir is not None:
        # A bind's source must exist when the container starts: rank 0's held `ray start` goes before its
        # pre-flight made the dir (the same checks: a planted one is refused).
        spill.make(spill_dir)
        binds.append(containers.Bind(str(spill_dir), str(spill_dir)))
    for name in ("mpiray", package.TRAINER):
        source = package.PARENT / name
        if (source / "__init__.py").exists():
            target = private / containers.CODE_DIR / name
            target.mkdir(parents=True, exist_ok=True)  # a bind's target must exist (Charliecloud's)
            binds.append(containers.Bind(str(source), str(target), read_only=True))
    return binds


def node_gpu_variables(share: Share) -> dict[str, str | None]:
    """The visible-device variables of a node of this share: its vendor's, as the installed Ray reads them."""
    intel = raycompat.intel_visible_variable() if share.gpu_vendor == gpus.INTEL else "ZE_AFFINITY_MASK"
    return commands.gpu_env(share.gpu_vendor, share.gpu_ids, intel)


def driver_gpu_variables(view: HostView) -> tuple[tuple[str, str | None], ...]:
    """The driver's: every GPU rank 0 found, named as the installed Ray reads them; none where it found none
    (a driver's own CUDA_VISIBLE_DEVICES then stays as the user set it)."""
    if view.gpu_vendor == gpus.NONE:
        return ()
    share = Share(0, view.gpu_ids, 0, 0, gpu_vendor=view.gpu_vendor)
    return tuple(sorted(node_gpu_variables(share).items()))


def job_spill_dir(config: Config, job_id: str) -> Path:
    """The job's spill dir on this host: --spill-dir's, or in the temp dir (raynode/spill.py)."""
    return spill.job_spill_dir(config.spill_dir or config.temp_dir, job_id)


def start_node(me: Rank, share: Share, ports: network.NodePorts, head: bool,
               autoscaling_config: str = "") -> commands.NodeSpec:
    """Prepare this rank's Ray node and start its `ray start`, held until me.own_node.up() (or, planned, say
    what would run).

    autoscaling_config: the head's, where Ray's autoscaler runs (elastic/autoscale.py)."""
    config, session = me.config, me.current_session
    ray_dir = me.own_node.prepare(session)
    node_ip = session.head_ip if head else network.worker_address(config.interface, session.head_ip, config.address_rule)
    slots = config.learner_slots if config.learner_slots is not None else max(1, len(share.gpu_ids))
    image = preflight.image_facts(me) if containers.of(config) else None  # its Ray decides, not the host's
    if containers.of(config) and image is None:  # rank 0 refuses the job for it too: never a node that cannot start
        raise ImageFailed(f"on {me.host}: {preflight.image_problem(me)}")
    if image is not None:  # a /dev/shm of the container's own: the store fits it, or the job stops (never slow)
        try:
            share = resources.fit_own_shm(share, *image.shm, me.view, f"the image on {me.host}")
        except ValueError as error:
            raise ImageFailed(str(error)) from None
    node_labels = labels.node_labels(job=session.job_id, batch_job=session.own_job_id or session.job_id,
                                     host=me.host, rank=me.rank, role=config.role, partition=me.env.partition,
                                     switch=me.env.switch, user=labels.parse(config.labels or ""))
    spec = commands.NodeSpec(node_ip, str(ray_dir), share, ports, f"{me.host}-rank{me.rank}",
                             commands.node_resources(config.resources, slots), autoscaling_config,
                             spill_dir=str(spill.ray_spill_dir(job_spill_dir(config, session.job_id))),
                             labels=labels.text(node_labels),
                             dashboard_host=dashboard_listen(config, node_ip, image) if head else commands.LOOPBACK,
                             **({"full_agent": image.full_agent, "ray_client": image.ray_client} if image else {}))
    ray = commands.ray_command(niced_import=not head)  # the head's start comes first on a shared host
    box = containers.of(config)
    if box is not None:  # the image's Python, which may predate -P
        ray = [box.python, "-m", "mpiray.raynode.starter", *(["--niced-import"] if not head else [])]
    argv = commands.head_command(ray, spec, dashboard=config.dashboard, metrics=config.metrics) if head else \
        commands.worker_command(ray, spec, session.gcs_address)
    for note in share.notes:
        me.log.event("resource_note", note=note)
    me.log.event("resources_given", cpus=share.cpus, gpus=",".join(share.gpu_ids), memory_mib=share.memory >> 20,
                 object_store_mib=share.object_store >> 20)
    top_worker = commands.head_ports(spec).max_worker if head else ports.max_worker
    me.log.event("ports_planned", first=ports.node_manager - 1, last=ports.max_worker, gcs=ports.gcs if head else "-",
                 workers=top_worker - ports.min_worker + 1)
    me.own_node.start(spec, argv, head, image)
    return spec


def wait_for_head(me: Rank) -> None:
    """Until rank 0 gives this rank a join slot: the head is ALIVE, and few enough nodes are joining
    (this rank's `ray start` failing, or rank 0 stopping the job, end the wait too)."""

    def between() -> None:
        me.own_node.check_running()
        me.raise_if_stopped()

    if poll_until(lambda: me.comm.poll(0, JOIN), Deadline.since(me.current_session.started, me.config.startup_timeout),
                  STARTUP_POLL, between) is None:
        raise StartupTimeout(f"rank 0 gave this rank no join slot within --startup-timeout "
                             f"{me.config.startup_timeout:g} s (its head was not up, or the nodes before it took "
                             f"that long to join)")


def _mpi4py_version() -> str:
    module = sys.modules.get("mpi4py")
    return getattr(module, "__version__", "not loaded")


def dashboard_listen(config: Config, node_ip: str, image: containers.ImageFacts | None) -> str:
    """Where this job's head dashboard (Ray's Jobs API) listens (commands.dashboard_host): whether it checks the
    token is the Ray's that runs it, the image's with --container (image: what its probe read; None: the host's)."""
    checks = image.dashboard_checks_token if image is not None else \
        not config.container and raycompat.dashboard_checks_token()
    return commands.dashboard_host(node_ip, config.auth, checks)
