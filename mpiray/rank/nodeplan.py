"""A rank's Ray node as planned: its NodeSpec and `ray start` line, its environment, and what its container binds,
each a function of named values that reads nothing of the host (tests/unit/rank/test_nodeplan.py holds them as
lists). nodestart.py gathers those values (the host's interfaces, the image's probe, the installed Ray's
answers); ownnode.py is the node's life: it starts what the plan says and watches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mpiray.config import Config
from mpiray.host import gpus, portblocks, sites
from mpiray.host.resources import HostView, Share
from mpiray.rank.messages import Session
from mpiray.raynode import commands, gcsrestart, labels, spill
from mpiray.raynode import container as containers

GCS_STORE = "gcs-store"  # in the head rank's private dir: the GCS's RocksDB tables (gcsrestart.py)
RESULTS_DIR = "results"  # beside the log root: the default trainer's storage path (train/storage.py)
# seconds between Ray's autoscaler updates (the provider asks the scheduler at most every --scheduler-poll)
AUTOSCALER_UPDATE_S = 1
# The head's GCS takes a node whose raylet does not answer its health checks for dead after this many in a row,
# each waiting 2 s for its answer, 2 s apart: ~12 s, as rank 0's knock (rank/knock.py) finds a host gone.
# Ray's own (10 s each, 3 s apart, 5 in a row) let a trainer's learner wait ~65 s in gloo for a host powered off
# (measured on the testbed) before the trial could restore.
HEALTH_CHECKS = {"RAY_health_check_period_ms": "2000", "RAY_health_check_timeout_ms": "2000",
                 "RAY_health_check_failure_threshold": "3"}


@dataclass(frozen=True)
class Plan:
    """One node's `ray start`: what it is (spec) and the command line that starts it (argv, before any container)."""

    spec: commands.NodeSpec
    argv: list[str]


@dataclass(frozen=True)
class Where:
    """Which node of the job this is: its host, rank, batch system's partition and switch (labels, names)."""

    host: str
    rank: int
    partition: str | None = None
    switch: str | None = None


def plan(config: Config, session: Session, where: Where, share: Share, *, ports: portblocks.NodePorts, head: bool,
         node_ip: str, ray_dir: Path, image: containers.ImageFacts | None = None, autoscaling_config: str = "",
         dashboard_checks_token: bool = True) -> Plan:
    """The node's spec and `ray start` line. node_ip: the address it advertises; image: the probe of --container's
    image (its Ray decides the agent and the dashboard); dashboard_checks_token: whether the host's Ray's dashboard
    checks the token (where no image runs it)."""
    slots = config.learner_slots if config.learner_slots is not None else max(1, len(share.gpu_ids))
    role = labels.role_of(config.role, where.rank)
    node_labels = labels.node_labels(job=session.job_id, batch_job=session.own_job_id or session.job_id,
                                     host=where.host, rank=where.rank, role=role, partition=where.partition,
                                     switch=where.switch, user=labels.parse(config.labels or ""))
    checks = image.dashboard_checks_token if image is not None else not config.container and dashboard_checks_token
    spec = commands.NodeSpec(node_ip=node_ip, temp_dir=str(ray_dir), share=share, ports=ports,
                             node_name=f"{where.host}-rank{where.rank}",
                             resources=commands.node_resources(config.resources, slots, role),
                             autoscaling_config=autoscaling_config,
                             spill_dir=str(spill.ray_spill_dir(job_spill_dir(config, session.spill_key))),
                             labels=labels.text(node_labels),
                             ray_labels=labels.text(labels.ray_labels(market_type=config.market_type, host=where.host,
                                                                      gpus=len(share.gpu_ids))),
                             dashboard_host=commands.dashboard_host(node_ip, config.auth, checks) if head
                             else commands.LOOPBACK,
                             **({"full_agent": image.full_agent, "ray_client": image.ray_client} if image else {}))
    ray = commands.ray_command(niced_import=not head)  # the head's start comes first on a shared host
    box = containers.of(config)
    if box is not None:  # the image's Python, which may predate -P
        ray = [box.python, "-m", "mpiray.raynode.starter", *(["--niced-import"] if not head else [])]
    argv = commands.head_command(ray, spec, dashboard=config.dashboard, metrics=config.metrics) if head else \
        commands.worker_command(ray, spec, session.gcs_address)
    return Plan(spec, argv)


def node_env(config: Config, spec: commands.NodeSpec, *, head: bool, base: Mapping[str, str], token_path: str | None,
             private_tmp: str, interface: str | None, gpu_variables: Mapping[str, str | None],
             gcs_restarts: int = 0) -> dict[str, str]:
    """The environment of a node's `ray start`, from base (the rank's, as helpers get it): its GPUs (gpu_variables:
    the vendor's, as the installed Ray reads them), token and private temp dir; the site's and the collectives'
    network variables for interface (the one holding its address; a value already set wins); the join retries
    and the autoscaler's timing; on the head, the GCS's health checks (HEALTH_CHECKS) and, with gcs_restarts, the
    GCS's tables in RocksDB in the private dir (node-local, one writer) and the restarts its starter makes
    (raynode/gcsrestart.py)."""
    env = commands.node_env(
        dict(base), spec.share.gpu_ids, token_path,
        dashboard_metrics_port=commands.head_ports(spec).dashboard_metrics if head else None,
        private_tmp=private_tmp, gpu_variables=dict(gpu_variables),
    )
    site = sites.of(config)
    for name, value in site.node_env if site else ():  # the site's fabric wants them; a value already set wins
        env.setdefault(name, value)
    chosen = bool(config.interface or config.address_rule)
    env.update(commands.collective_env(env, interface, chosen, spec.share.gpu_vendor))
    # A joining `ray start` gives up after this many ~1-2 s retries (default 20): let it wait as long
    # as --startup-timeout says instead.
    env["RAY_NUM_REDIS_GET_RETRIES"] = str(max(20, int(config.startup_timeout / 2) + 1))
    env[gcsrestart.VARIABLE] = str(gcs_restarts if head else 0)  # never one inherited
    if head:
        for name, value in HEALTH_CHECKS.items():  # a value already set wins
            env.setdefault(name, value)
    if head and gcs_restarts:
        env.update({"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": str(Path(private_tmp) / GCS_STORE)})
    if spec.ray_labels:
        env[labels.OVERRIDE_VARIABLE] = labels.override_env(spec.ray_labels, env.get(labels.OVERRIDE_VARIABLE))
    if spec.autoscaling_config:  # its monitor imports mpiray's node provider, and serves metrics in the block
        env["AUTOSCALER_METRIC_PORT"] = str(commands.head_ports(spec).autoscaler_metrics)
        # Ray looks at the demand every 5 s by default: 2.5 s on average before a job is even asked for,
        # more than the whole by-hand sbatch-to-ALIVE path on an idle queue (tests/benchmarks/bench_elastic.py).
        env.setdefault("AUTOSCALER_UPDATE_INTERVAL_S", str(AUTOSCALER_UPDATE_S))
    return env


def gcs_restarts(wanted: int, image_ray: str | None, store_here: bool) -> tuple[int, str]:
    """The head's GCS restarts, and the pre-flight's words for them: as wanted (--gcs-restarts) where the Ray that
    runs the head (image_ray: the image's version, in a container; else store_here, raycompat.gcs_store() of this
    host's) keeps the GCS's tables on disk (Ray 2.60 and later), else 0."""
    if wanted == 0:
        return 0, "gcs restarts off (--gcs-restarts 0): a GCS that dies ends the job"
    numbers = tuple(int(part) for part in (image_ray or "").split(".")[:2] if part.isdigit())
    if not (numbers >= (2, 60) if image_ray is not None else store_here):
        return 0, (f"gcs restarts off: Ray {image_ray or 'here'} keeps no GCS store (2.60 and later do): a GCS that "
                   f"dies ends the job")
    return wanted, f"gcs restarts {wanted}: its tables in RocksDB on the head's node-local disk"


def image_binds(private: Path, spill_dir: Path | None, job_dir: Path, code: Mapping[str, Path]) -> list[containers.Bind]:
    """What a node's (and the driver's) container binds: the rank's private dir (Ray's temp dir, the token), the
    job's spill dir, the log root above job_dir (LOG_DIR/JOB_ID) and results/ beside it (the default trainer's
    storage path, train/storage.py: its checkpoints outlive the container) at their own paths, and the code
    (name -> its package dir: mpiray's, the trainer's beside it in a checkout) read-only in the private dir's
    CODE_DIR, for PYTHONPATH: never the host's site-packages, whose Ray would shadow the image's. Any other path:
    --container-flags' binds. make_bind_sources makes what they need."""
    binds = [containers.Bind(str(private), str(private))]
    log_root = job_dir.parent
    binds += [containers.Bind(str(shared), str(shared)) for shared in (log_root, log_root.parent / RESULTS_DIR)]
    if spill_dir is not None:
        binds.append(containers.Bind(str(spill_dir), str(spill_dir)))
    binds += [containers.Bind(str(source), str(private / containers.CODE_DIR / name), read_only=True)
              for name, source in code.items()]
    return binds


def make_bind_sources(binds: list[containers.Bind], spill_dir: Path | None) -> None:
    """A bind's source must exist when the container starts, and its target too for Charliecloud: the log root
    and results/, the code's targets; the spill dir by spill.make's checks (rank 0's held `ray start` goes before
    its pre-flight made it: a planted one is refused)."""
    for bind in binds:
        if spill_dir is not None and bind.source == str(spill_dir):
            spill.make(spill_dir)
        elif bind.read_only:
            Path(bind.target).mkdir(parents=True, exist_ok=True)
        else:
            Path(bind.source).mkdir(parents=True, exist_ok=True)


def node_gpu_variables(share: Share, intel_variable: str = "ZE_AFFINITY_MASK") -> dict[str, str | None]:
    """The visible-device variables of a node of this share: its vendor's, as the installed Ray reads them
    (intel_variable: the one it reads for Intel's, raycompat.intel_visible_variable())."""
    return commands.gpu_env(share.gpu_vendor, share.gpu_ids, intel_variable)


def driver_gpu_variables(view: HostView, intel_variable: str = "ZE_AFFINITY_MASK") -> tuple[tuple[str, str | None], ...]:
    """The driver's: every GPU rank 0 found, named as the installed Ray reads them; none where it found none
    (a driver's own CUDA_VISIBLE_DEVICES then stays as the user set it)."""
    if view.gpu_vendor == gpus.NONE:
        return ()
    share = Share(0, view.gpu_ids, 0, 0, gpu_vendor=view.gpu_vendor)
    return tuple(sorted(node_gpu_variables(share, intel_variable).items()))


def job_spill_dir(config: Config, spill_key: str) -> Path:
    """The job's spill dir on this host: --spill-dir's, or in the temp dir (raynode/spill.py); spill_key: the
    session's."""
    return spill.job_spill_dir(config.spill_dir or config.temp_dir, spill_key)
