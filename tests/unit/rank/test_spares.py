"""Spare hosts (--spares): which hosts rank 0 keeps, the bad input it refuses, and the start of a job with one, in one
process (each rank a thread over the in-memory communicator, --dry-run). A spare's start when a node is lost is
tests/real/slurm/test_slurm_spares.py's."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from mpiray.errors import ConfigError, TooFewNodes
from mpiray.host.findings import Finding
from mpiray.rank import spares
from mpiray.rank.messages import Hello

from memory_comm import HostNames, Job, ScriptedLeader


def hellos(*hosts: str) -> dict[int, Hello]:
    return {rank: Hello(host, "", {}, list[Finding]()) for rank, host in enumerate(hosts, start=1)}


def test_the_spares_are_the_last_worker_hosts_not_left_out_never_rank_0s():
    found = hellos("n1", "n2", "n2", "n3", "n4", "n4")
    assert spares.choose(found, "n1", set(), 2) == [[4], [5, 6]]  # rank 1 is on rank 0's host
    assert spares.choose(found, "n1", {"n4"}, 2) == [[2, 3], [4]]
    assert spares.choose(found, "n1", set(), 0) == []


def test_spares_as_many_as_the_hosts_are_bad_input_naming_the_most_it_takes():
    with pytest.raises(ConfigError, match=r"--spares 3 is as many as this job's 3 hosts or more: .* give at most 2"):
        spares.check(3, hosts=3, nodes_left=3, nodes_per_spare=[1, 1], min_nodes=2)


def test_spares_that_leave_fewer_nodes_than_min_nodes_end_the_job():
    with pytest.raises(TooFewNodes, match="--spares 2 leaves 1 Ray nodes to start, fewer than --min-nodes 2"):
        spares.check(2, hosts=3, nodes_left=3, nodes_per_spare=[1, 1], min_nodes=2)
    with pytest.raises(TooFewNodes, match="only 1 healthy worker hosts are left"):
        spares.check(2, hosts=4, nodes_left=3, nodes_per_spare=[1], min_nodes=1)
    spares.check(1, hosts=3, nodes_left=3, nodes_per_spare=[1], min_nodes=2)  # 2 start, 1 waits


@pytest.fixture
def names(monkeypatch) -> HostNames:
    found = HostNames()
    monkeypatch.setattr(socket, "gethostname", found)
    return found


def test_a_spare_hosts_ranks_wait_and_the_cluster_starts_without_them(tmp_path, config, names):
    leader = ScriptedLeader()
    job = Job(tmp_path, 4, leader, replace(config, spares=1), hosts=["n1", "n2", "n3", "n3"], names=names)
    assert job.wait() == {0: 0, 1: 0, 2: 0, 3: 0}
    assert sorted(node.rank for node in leader.cluster.nodes) == [0, 1]
    (chosen,) = job.events(0, "spares_chosen")
    assert chosen["fields"] == {"hosts": "n3", "ranks": [2, 3]}
    assert all(job.events(rank, "spare_waiting") for rank in (2, 3))
    assert not job.events(2, "dry_run_node") and not job.events(3, "dry_run_node")


def test_as_many_spares_as_hosts_end_the_job_with_2_before_any_node(tmp_path, config, names):
    job = Job(tmp_path, 3, ScriptedLeader(), replace(config, spares=3), hosts=["n1", "n2", "n3"], names=names)
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "failed")
    assert "--spares 3 is as many as this job's 3 hosts" in failed["fields"]["message"]
