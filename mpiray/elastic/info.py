"""What a login node reads of a running cluster from its log dir (LOG_DIR/JOB_ID/), rather than the registry:

- `cluster_info.json`: how to reach it (a person, a notebook, a workflow tool). Written once by rank 0 of the
  head's job when the cluster is up, 0600 like the rank logs; no secret: the token stays in the registry,
  and the file names its path. Its keys are INFO_KEYS (docs/logs.md lists them; a test pins them).
- `prometheus/JOB.json`: Prometheus's file-based service discovery, each Ray node's metrics endpoint, one
  file per batch job whose nodes are in the cluster (the head's job, each job that joined it, the autoscaler's
  worker jobs), written by that job's rank 0 when its nodes are up and removed when they stop; Prometheus
  reads `prometheus/*.json` (file_sd_configs) and sees nodes come and go. Readable by all (0644): it holds
  addresses and ports only, and Prometheus often runs as its own user.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from mpiray.elastic.registry import Entry

FILE_NAME = "cluster_info.json"
LOCAL_PORT = 8265  # Ray's own dashboard port, on the user's machine (mpiray dashboard's default)
INFO_KEYS = ("job_id", "host", "head_ip", "gcs_address", "ray", "python", "scheduler", "ends_at", "dashboard_url",
             "jobs_url", "ray_client", "token_path", "tunnel", "submit", "nodes")
NODE_KEYS = ("rank", "host", "ip", "node_id", "cpus", "gpus", "labels")


def build(entry: Entry, nodes: Sequence, token_path: Path | None) -> dict:
    """The file's content (pure): entry is the cluster's registry entry, nodes its Report of each Ray node."""
    url = f"http://{entry.dashboard_host}:{entry.dashboard_port}" if entry.dashboard_port is not None else None
    tunnel = (f"ssh -N -L {LOCAL_PORT}:{entry.dashboard_host}:{entry.dashboard_port} {entry.host}"
              if entry.dashboard_port is not None else None)
    info = {
        "job_id": entry.job_id, "host": entry.host, "head_ip": entry.head_ip, "gcs_address": entry.gcs_address,
        "ray": entry.ray, "python": entry.python, "scheduler": entry.scheduler, "ends_at": entry.ends_at,
        "dashboard_url": url, "jobs_url": url, "ray_client": f"ray://{entry.head_ip}:{entry.client_port}"
        if entry.client_port is not None else None,
        "token_path": str(token_path) if token_path is not None else None, "tunnel": tunnel,
        "submit": f"mpiray submit {entry.job_id} -- python driver.py" if url is not None else None,
        "nodes": [{"rank": node.rank, "host": node.host, "ip": node.node_ip, "node_id": node.node_id,
                   "cpus": node.resources.get("CPU", 0), "gpus": node.resources.get("GPU", 0),
                   "labels": dict(node.labels)} for node in nodes],
    }
    assert tuple(info) == INFO_KEYS
    return info


def write(job_dir: Path, info: dict) -> Path:
    """info as job_dir/cluster_info.json (0600, like the rank logs)."""
    return _write_json(job_dir / FILE_NAME, info, 0o600)


def _write_json(path: Path, content, mode: int) -> Path:
    """content as JSON in path, written whole: a temporary name in the same dir (never a planted link), then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as out:
        json.dump(content, out, indent=1)
        out.write("\n")
    os.replace(tmp, path)
    return path


TARGETS_DIR = "prometheus"


def targets(cluster_job: str, own_job: str, nodes: Sequence) -> list[dict]:
    """file_sd content (pure): one target group per Ray node that exports metrics (Report.metrics_port)."""
    return [{"targets": [f"{node.node_ip}:{node.metrics_port}"],
             "labels": {"mpiray_cluster": cluster_job, "mpiray_job": own_job, "mpiray_rank": str(node.rank),
                        "host": node.host, "ray_node_id": node.node_id}}
            for node in nodes if node.metrics_port and node.node_ip]


def write_targets(job_dir: Path, own_job: str, groups: list[dict]) -> Path:
    """groups as job_dir/prometheus/OWN_JOB.json (0644: Prometheus often runs as a user of its own)."""
    directory = job_dir / TARGETS_DIR
    directory.mkdir(mode=0o755, exist_ok=True)
    return _write_json(directory / f"{own_job}.json", groups, 0o644)
