"""The launcher's configuration: one frozen object built from the command line, passed down."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# What rank 0 runs when the user gives no driver command: the RLlib trainer in train/.
DEFAULT_DRIVER = (sys.executable, "-m", "train")


@dataclass(frozen=True)
class Config:
    driver: tuple[str, ...] = DEFAULT_DRIVER
    log_dir: Path = Path("logs")
    job_id: str | None = None
    startup_timeout: float = 120.0
    port: int = 0  # GCS port; 0 picks a free one
    num_cpus: int | None = None
    num_gpus: int | None = None
    head_cpus: int | None = None
    object_store_memory: int | None = None  # bytes per Ray node
    resources: str | None = None  # custom Ray resources of each node, JSON (ray start --resources)
    labels: str | None = None  # the user's node labels, Ray's --labels text (raynode/labels.py adds mpiray's)
    role: str = "main"  # this job's nodes' role: the label mpiray.io/role
    market_type: str = "on-demand"  # the label ray.io/market-type of this job's nodes
    stop_grace: float = 30.0
    time_limit: float | None = None
    walltime_margin: float | None = None  # seconds before the batch job's end to stop the driver (None: auto)
    interface: str | None = None
    address_rule: str | None = None  # a site's name for a node's high-speed address: '{host}.hsn.example.org'
    gpu_vendor: str = "auto"  # whose GPUs to look for: "auto", "nvidia", "amd" or "intel" (host/gpus.py)
    site: str | None = None  # a named site's row (host/sites.py), applied to the options the user left unset
    container: str | None = None  # "KIND:IMAGE": every `ray start` and the driver run in the image (container.py)
    container_flags: str | None = None  # the runtime's own extra options, as one shell-quoted string
    temp_dir: Path = Path("/tmp")
    spill_dir: Path | None = None  # the root of each host's spill dir (default: temp_dir)
    auth: bool = True
    dashboard: bool = False
    metrics: bool = True  # Ray's metrics collected and exported (with ray[default])
    ray_node_per: str = "rank"  # "rank" or "host"
    join_window: int = 64  # the most workers that run `ray start` against the GCS at once
    bad_nodes: str = "exclude"  # a worker host the pre-flight refuses: "exclude" it, or "refuse" the job (exit 2)
    min_nodes: int = 0  # --bad-nodes exclude: the fewest Ray nodes the job starts with; 0: 2 (all of a smaller job)
    spares: int = 0  # healthy worker hosts kept out of the cluster at start, each started when a node is lost
    gcs_restarts: int = 3  # times the head's GCS is started again where it dies (raynode/gcsrestart.py)
    slow_link: float = 0.25  # the link check refuses a host below this fraction of the median host's (0: no check)
    dry_run: bool = False  # the whole protocol, but no Ray: print the planned cluster
    progress: str = "auto"  # rank 0's live start-up line: "auto" (on a terminal), "on" or "off"
    gcs_core: str = "auto"  # a CPU of the head's host left to the GCS: "auto" (>= 8 CPUs), "on" or "off"
    join: str | None = None  # a running cluster's job id: this job's ranks join it instead of starting one
    registry: Path | None = None  # the cluster registry (registry.py); None: MPIRAY_REGISTRY or ~/.mpiray/clusters
    autoscale: str | None = None  # "MIN:MAX" Ray nodes: Ray's autoscaler adds worker jobs (autoscale.py)
    cooldown: float = 60.0  # idle seconds before a worker job is cancelled
    worker_job: Path | None = None  # the worker jobs' template: #SBATCH/#PBS lines and shell lines
    worker_cpus: int | None = None  # CPUs of a worker job's node (default: the head's)
    worker_gpus: int | None = None  # GPUs of a worker job's node (default: 0)
    learner_slots: int | None = None  # mpiray_learner_slot per Ray node (default: its GPUs, else 1)
    worker_pending_limit: float | None = None  # seconds a worker job may be queued (default: as long as Ray wants it)
    scheduler_poll: float = 10.0  # seconds between the autoscaler's scheduler queries, at least (provider.py)


def parse_bounds(text: str) -> tuple[int, int]:
    """'1:3' -> (1, 3): the fewest and the most Ray nodes of the cluster, its own included."""
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"not MIN:MAX: {text!r} (e.g. 1:8: at least 1 node, at most 8)")
    low_n, high_n = int(low), int(high)
    if not 1 <= low_n <= high_n:
        raise ValueError(f"{text!r}: MIN must be at least 1 and at most MAX")
    return low_n, high_n
