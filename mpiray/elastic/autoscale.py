"""The head's side of an elastic cluster (`mpiray run --autoscale MIN:MAX`): Ray's autoscaler, given a
config that names mpiray's node provider (provider.py), grows the cluster with worker jobs on the batch
scheduler and shrinks it when their nodes idle for the cooldown.

MIN and MAX count every Ray node of the cluster, the head job's own included (one per rank, or one per host
with --ray-node-per host). Each worker job is one Ray
node of --worker-cpus CPUs (default: the head node's) and --worker-gpus GPUs; the rest of it comes from
the template --worker-job FILE: its #SBATCH (or #PBS) lines (partition, account, qos, walltime, ...)
and its shell lines (module loads, a venv's activate), run before the node starts. The files of the
autoscaler (its config, the head job's own nodes, the provider's state) lie in a 0700 directory beside
the cluster's registry entry.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from mpiray import package
from mpiray.batch.jobs import GONE, WorkerJob
from mpiray.batch.systems import SYSTEMS
from mpiray.config import Config, parse_bounds
from mpiray.elastic.registry import Registry, private_root
from mpiray.errors import ConfigError
from mpiray.host import sites
from mpiray.host.resources import Share
from mpiray.logs.events import RankLog

HEAD_TYPE, STATIC_TYPE, WORKER_TYPE = "mpiray.head", "mpiray.static", "mpiray.worker"  # Ray's node types

# What a worker job's node needs from the head job's environment: where the registry is, and how its
# MPI talks (the job itself starts with --export=NONE).
PASSED_ON = ("MPIRAY_REGISTRY",)
PASSED_ON_PREFIXES = ("MPIR_CVAR_", "FI_", "UCX_", "I_MPI_", "OMPI_MCA_", "PRTE_MCA_")
# Keys Ray's v1 autoscaler reads without defaults (cf. ray/autoscaler/spark/defaults.yaml).
EMPTY_KEYS = {"auth": {}, "docker": {}, "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
              "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
              "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
              "rsync_exclude": [], "rsync_filter": []}


def load(path: Path, default: dict) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def save(path: Path, state: dict) -> None:
    """Written whole or not at all (a temporary file renamed), 0600; nothing if its dir is gone (the
    cluster's end removed it while Ray's monitor still ran)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "w") as out:
        json.dump(state, out)
    os.replace(tmp, path)


def active_jobs(state: dict) -> dict[str, str]:
    """node id -> batch job id of every worker job of the provider's state not known to have ended."""
    return {node: job["job"] for node, job in state.get("jobs", {}).items() if job["state"] != GONE}


class Autoscale:
    """The head job's autoscaler: made before the head starts (its config), told the job's own nodes, and
    asked at the end to cancel every worker job it still has."""

    def __init__(self, config: Config, scheduler: str, own_nodes: int, job_id: str, *, job_dir: Path, log: RankLog):
        """config: the head job's; scheduler: the batch system it runs under (environment.Environment's);
        own_nodes: the head job's own Ray nodes (one per rank, or one per host with --ray-node-per host), which
        --autoscale MIN:MAX counts too; job_dir: its logs, where the worker jobs write theirs."""
        if scheduler not in SYSTEMS:
            raise ConfigError(f"--autoscale needs a batch scheduler to submit worker jobs to (Slurm or PBS); this "
                              f"job runs under {scheduler}")
        self.config, self.scheduler, self.own_nodes, self.job_id, self.log = config, scheduler, own_nodes, job_id, log
        self.low, self.high = parse_bounds(config.autoscale or "")
        self.registry = Registry(config.registry)
        self.dir = private_root(self.registry.root) / f"{job_id}.autoscale"
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.config_path, self.static_path = self.dir / "config.json", self.dir / "static.json"
        self.state_path = self.dir / "state.json"
        self.job_dir = job_dir.resolve()  # worker jobs start elsewhere (their own workdir): no relative path

    def write_config(self, head_share: Share) -> str:
        """Ray's autoscaling config, for the head's `ray start --autoscaling-config`; returns its path."""
        config = self.config
        cpus = config.worker_cpus if config.worker_cpus is not None else head_share.cpus
        gpus = config.worker_gpus or 0
        env = {name: os.environ[name] for name in os.environ
               if name in PASSED_ON or name.startswith(PASSED_ON_PREFIXES)}
        env["MPIRAY_REGISTRY"] = str(self.registry.root)
        env.update(package.helper_env({}))  # PYTHONPATH, where mpiray is not installed (a checkout)
        directives, setup = self._template()
        # The site's required directives (Polaris refuses a job without -l filesystems=), and the network and
        # GPU choices the head job made, so that each worker job's node chooses as the job's own nodes did.
        directives += sites.missing_directives(sites.of(config), self.scheduler, directives)
        for option, value in (("site", config.site), ("interface", config.interface),
                              ("address_rule", config.address_rule), ("gpu_vendor", config.gpu_vendor)):
            if value and value != "auto":
                env[f"MPIRAY_{option.upper()}"] = value
        job = WorkerJob(cluster=self.job_id, python=sys.executable,
                              log_dir=str(self.job_dir), cpus=max(cpus, 1), gpus=gpus, directives=directives,
                              setup=setup, env=env, stop_grace=config.stop_grace)
        static_workers = self.own_nodes - 1
        max_workers = self.high - self.own_nodes
        if max_workers < 0:
            raise ConfigError(f"--autoscale {config.autoscale}: this job alone has {self.own_nodes} nodes, more "
                              f"than the maximum {self.high}")
        ray_config = {
            "cluster_name": f"mpiray-{self.job_id}",
            "max_workers": max_workers,  # worker jobs only: the job's own nodes are unmanaged
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": config.cooldown / 60,
            "provider": {
                "type": "external", "module": "mpiray.elastic.provider.BatchNodeProvider",
                "use_node_id_as_ip": True, "disable_node_updaters": True, "disable_launch_config_check": True,
                "scheduler": self.scheduler, "max_workers": max_workers, "worker_job": asdict(job),
                "state": str(self.state_path), "static": str(self.static_path),
                "joins": str(self.registry.root / f"{self.job_id}.joins"), "log_dir": str(self.job_dir),
                "pending_limit": config.worker_pending_limit, "scheduler_poll": config.scheduler_poll,
            },
            "available_node_types": {
                HEAD_TYPE: {"resources": {"CPU": head_share.cpus, "GPU": len(head_share.gpu_ids)}, "node_config": {},
                            "max_workers": 0},
                STATIC_TYPE: {"resources": {"CPU": head_share.cpus}, "node_config": {}, "min_workers": 0,
                              "max_workers": max(static_workers, 0)},
                WORKER_TYPE: {"resources": {"CPU": job.cpus, "GPU": job.gpus}, "node_config": {},
                              "min_workers": max(0, self.low - self.own_nodes), "max_workers": max_workers},
            },
            "head_node_type": HEAD_TYPE,
            **EMPTY_KEYS,
        }
        save(self.config_path, ray_config)
        self.log.event("autoscaler_configured", low=self.low, high=self.high, own=self.own_nodes,
                          scheduler=self.scheduler, cpus=job.cpus, gpus=job.gpus, cooldown=config.cooldown,
                          config=str(self.config_path))
        return str(self.config_path)

    def _template(self) -> tuple[tuple[str, ...], str]:
        """--worker-job FILE: its #SBATCH/#PBS lines, and its shell lines (a shebang and comments dropped)."""
        path = self.config.worker_job
        if not path:
            return (), ""
        try:
            lines = [line.rstrip() for line in Path(path).read_text().splitlines()]
        except OSError as error:
            raise ConfigError(f"--worker-job {path}: {error.strerror}") from None
        directives = tuple(line.strip() for line in lines if line.strip().startswith(("#SBATCH", "#PBS")))
        setup = "\n".join(line for line in lines if line.strip() and not line.strip().startswith("#"))
        return directives, setup

    def own_nodes_are(self, head_id: str, worker_ids: list[str]) -> None:
        """Tell the provider which Ray nodes are the job's own (the head, and the static workers)."""
        save(self.static_path, {"head": head_id, "workers": worker_ids})

    def cancel_all(self) -> None:
        """At the cluster's end: every worker job it still has, pending or running, is cancelled."""
        jobs = active_jobs(load(self.state_path, {}))
        if jobs:
            SYSTEMS[self.scheduler]().cancel(list(jobs.values()))
            self.log.event("worker_jobs_cancelled", jobs=sorted(jobs.values()))

    def remove(self) -> None:
        for path in (self.config_path, self.static_path, self.state_path):
            path.unlink(missing_ok=True)
        try:
            self.dir.rmdir()
        except OSError:
            pass


def cancel_siblings(registry: Registry, cluster: str, scheduler: str) -> list[str]:
    """A worker job that outlived its cluster (the head job was SIGKILLed, nobody cancelled the others):
    cancel every worker job of it that the provider's state names; return them."""
    jobs = active_jobs(load(registry.root / f"{cluster}.autoscale" / "state.json", {}))
    if jobs and scheduler in SYSTEMS:
        SYSTEMS[scheduler]().cancel(list(jobs.values()))
    return sorted(jobs.values())
