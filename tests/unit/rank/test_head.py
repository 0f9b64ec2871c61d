"""Rank 0's role (mpiray/rank/head.py): what it hands the layers below it, a function of named values."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mpiray.config import Config
from mpiray.elastic.registry import Entry
from mpiray.host.portblocks import node_ports
from mpiray.host.resources import Share
from mpiray.rank.head import registry_entry
from mpiray.rank.messages import Cluster, Report, Session
from mpiray.raynode.commands import NodeSpec

SPEC = NodeSpec("10.0.0.1", "/tmp/ray", Share(cpus=4, gpu_ids=("0",), memory=2**32, object_store=2**30),
                node_ports(20000, gcs_port=20000), "n1-rank0", ray_client=True)
STARTED = time.time() - 30


OURS = {"ray": "2.60.0", "python": "3.11.7"}


def entry(tmp_path: Path, dashboard: bool, spec: NodeSpec | None = SPEC, ends_at: float | None = None) -> Entry:
    """The registry entry of a cluster that is up, its head node started as spec (None: it has none)."""
    return registry_entry(Config(dashboard=dashboard), cluster(tmp_path), spec, "n1", started=STARTED, scheduler="pbs",
                          ends_at=ends_at, ours=OURS)


def cluster(tmp_path: Path) -> Cluster:
    session = Session("1234", "10.0.0.1", "10.0.0.1:20000", "token", time.time() - 30)
    nodes = tuple(Report(rank, f"n{rank + 1}", "log", node_id=f"id{rank}", resources={"CPU": 4.0, "GPU": 1.0})
                  for rank in range(2))
    return Cluster(session, nodes, tmp_path / "logs" / "1234", None, 30.0)


@pytest.mark.parametrize("dashboard", [False, True])
def test_the_registry_entry_says_how_to_reach_the_cluster_until_when_and_how_big_it_is(tmp_path, dashboard):
    ends_at = time.time() + 3600
    said = entry(tmp_path, dashboard, ends_at=ends_at)
    assert (said.job_id, said.gcs_address, said.head_ip, said.host) == ("1234", "10.0.0.1:20000", "10.0.0.1", "n1")
    assert (said.pid, said.uid, said.started) == (os.getpid(), os.getuid(), STARTED)
    assert (said.ends_at, said.scheduler, said.ray, said.python) == (ends_at, "pbs", "2.60.0", "3.11.7")
    assert (said.nodes, said.cpus, said.gpus) == (2, 8.0, 2.0)
    assert said.log_dir == str((tmp_path / "logs" / "1234").resolve()) and Path(said.log_dir).is_absolute()
    assert said.dashboard_port == (SPEC.ports.dashboard if dashboard else None)
    assert said.client_port == SPEC.ports.max_worker  # the block's top port: Ray Client's, where it runs
    assert said.stale() is None


def test_a_head_without_a_node_names_no_port_of_it(tmp_path):
    said = entry(tmp_path, dashboard=True, spec=None)
    assert (said.dashboard_port, said.client_port) == (None, None)
