"""Rank 0's role (mpiray/rank/head.py): what it hands the layers below it, as named values."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mpiray.config import Config
from mpiray.host.network import node_ports
from mpiray.host.resources import Share
from mpiray.rank.batchjob import BatchJob
from mpiray.rank.head import Head
from mpiray.rank.messages import Cluster, Report, Session
from mpiray.raynode.commands import NodeSpec

SPEC = NodeSpec("10.0.0.1", "/tmp/ray", Share(cpus=4, gpu_ids=("0",), memory=2**32, object_store=2**30),
                node_ports(20000, gcs_port=20000), "n1-rank0", ray_client=True)


def head(dashboard: bool, spec: NodeSpec | None = SPEC) -> Head:
    """A head whose cluster is up: what Head.entry reads of its rank (no MPI, no Ray)."""
    me = SimpleNamespace(rank=0, host="n1", started=time.time() - 30, config=Config(dashboard=dashboard),
                         env=SimpleNamespace(scheduler="pbs"), node=SimpleNamespace(spec=spec) if spec else None)
    role = Head(me)
    role.batch_job = BatchJob(ends_at=time.time() + 3600, restart="run 2 (PBS run_count)")
    return role


def cluster(tmp_path: Path) -> Cluster:
    session = Session("1234", "10.0.0.1", "10.0.0.1:20000", "token", time.time() - 30)
    nodes = tuple(Report(rank, f"n{rank + 1}", "log", node_id=f"id{rank}", resources={"CPU": 4.0, "GPU": 1.0})
                  for rank in range(2))
    return Cluster(session, nodes, tmp_path / "logs" / "1234", None, 30.0)


@pytest.mark.parametrize("dashboard", [False, True])
def test_the_registry_entry_says_how_to_reach_the_cluster_until_when_and_how_big_it_is(tmp_path, dashboard):
    role = head(dashboard)
    entry = role.entry(cluster(tmp_path))
    assert (entry.job_id, entry.gcs_address, entry.head_ip, entry.host) == ("1234", "10.0.0.1:20000", "10.0.0.1", "n1")
    assert (entry.pid, entry.uid, entry.started) == (os.getpid(), os.getuid(), role.me.started)
    assert (entry.ends_at, entry.scheduler) == (role.batch_job.ends_at, "pbs")
    assert (entry.nodes, entry.cpus, entry.gpus) == (2, 8.0, 2.0)
    assert entry.log_dir == str((tmp_path / "logs" / "1234").resolve()) and Path(entry.log_dir).is_absolute()
    assert entry.dashboard_port == (SPEC.ports.dashboard if dashboard else None)
    assert entry.client_port == SPEC.ports.max_worker  # the block's top port: Ray Client's, where it runs
    assert entry.stale() is None


def test_a_head_without_a_node_names_no_port_of_it(tmp_path):
    entry = head(dashboard=True, spec=None).entry(cluster(tmp_path))
    assert (entry.dashboard_port, entry.client_port) == (None, None)
