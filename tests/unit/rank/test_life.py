"""The rank protocol in one process: each rank a thread running rank.life.run over an in-memory communicator,
no MPI and no Ray (--dry-run), in milliseconds. What every front end relies on: the leader's code is
every rank's, a failing or missing worker ends the job with its reason, stop signals and --time-limit
stop the leader, join slots go out one window at a time."""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import replace

import pytest

from mpiray.config import Config
from mpiray.leaders.dryrun import DryRunLeader
from mpiray.logs.events import RankLog
from mpiray.rank import life as rank_life
from mpiray.rank.batchjob import WALLTIME_TEARDOWN, BatchJob
from mpiray.rank.head import Head
from mpiray.rank.state import Lost
from mpiray.rank.timings import HEAD_LOST_EXIT, RAY_STOP_GRACE

from memory_comm import Job, ScriptedLeader

FOREVER = float("inf")






def test_a_dry_run_brings_every_rank_through_the_whole_protocol(tmp_path, config):
    job = Job(tmp_path, 4, DryRunLeader(config.driver), config)
    assert job.wait() == {0: 0, 1: 0, 2: 0, 3: 0}
    names = [r["event"] for r in job.events(0)]
    assert names.index("session_sent") < names.index("head_alive") < names.index("cluster_ready") < names.index("dry_run")
    assert sorted(r["fields"]["peer"] for r in job.events(0, "join_granted")) == [1, 2, 3]
    assert sorted(r["fields"]["peer"] for r in job.events(0, "worker_joined")) == [1, 2, 3]
    assert job.events(0, "cluster_ready")[0]["fields"]["nodes"] == 4
    for rank in range(1, 4):
        assert [r["fields"]["code"] for r in job.events(rank, "job_ended")] == [0]
        sent = job.events(rank, "mpi_messages")[0]["fields"]["sent"]
        assert sent <= 4  # hello, report, and its host view: O(1) per worker
    assert [job.events(rank, "exit")[0]["fields"]["code"] for rank in range(4)] == [0, 0, 0, 0]
    assert job.world.abandoned == {}


@pytest.mark.parametrize("code", [0, 3, 130])
def test_the_leaders_exit_code_is_every_ranks(tmp_path, config, code):
    leader = ScriptedLeader(code, seconds=0.05)
    job = Job(tmp_path, 3, leader, config)
    assert job.wait() == {0: code, 1: code, 2: code}
    assert leader.cluster.total_cpus > 0 and len(leader.cluster.nodes) == 3
    assert leader.stopped is None  # it ended by itself
    assert [r["fields"]["code"] for r in job.events(2, "job_ended")] == [code]


def test_a_failing_worker_ends_every_rank_with_its_code_and_reason(tmp_path, config):
    bad = replace(config, interface="no-such-if0")  # rank 2 alone: its address cannot be found
    job = Job(tmp_path, 3, ScriptedLeader(0, FOREVER), config, configs={2: bad})
    assert job.wait() == {0: 2, 1: 2, 2: 2}
    (failed,) = job.events(0, "worker_failed")
    assert failed["fields"]["peer"] == 2 and "--interface no-such-if0" in failed["fields"]["message"]
    assert "--interface no-such-if0" in job.events(2, "failed")[0]["fields"]["message"]


def test_rank_0_failing_before_the_session_stops_the_waiting_workers(tmp_path, config):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        busy = replace(config, port=taken.getsockname()[1])
        job = Job(tmp_path, 3, ScriptedLeader(), busy)
        assert job.wait() == {0: 2, 1: 2, 2: 2}
    assert job.events(0, "failed")[0]["fields"]["cause"] == "port_in_use"
    assert [r["fields"]["code"] for r in job.events(1, "job_ended")] == [2]


def test_a_worker_that_never_starts_is_named_at_the_startup_timeout(tmp_path, config, names):
    quick = replace(config, startup_timeout=0.3, stop_grace=0)
    job = Job(tmp_path, 3, ScriptedLeader(), quick, missing=(2,), hosts=["n1", "n1", "n2"], names=names)
    assert job.wait() == {0: 1, 1: 1}
    (timeout,) = job.events(0, "startup_timeout")
    assert [m["rank"] for m in timeout["fields"]["missing"]] == [2]
    # Rank 2 never reached the last barrier: no MPI_Finalize, whose closing barrier it would never reach.
    assert job.world.abandoned == {0: 1, 1: 1}


def test_a_stop_signal_gives_the_leader_its_grace_then_every_rank_ends_with_143(tmp_path, config):
    leader = ScriptedLeader(0, FOREVER)
    job = Job(tmp_path, 3, leader, config)
    assert leader.running.wait(10)
    for stop in job.stops:  # as scancel signals every task
        stop.signum = signal.SIGTERM
    assert job.wait() == {0: 143, 1: 143, 2: 143}
    assert leader.stopped == (config.stop_grace, 143)
    assert job.events(0, "stop_signal")[0]["fields"]["signum"] == signal.SIGTERM


def test_the_time_limit_stops_the_leader_with_124(tmp_path, config):
    leader = ScriptedLeader(0, FOREVER)
    job = Job(tmp_path, 2, leader, replace(config, time_limit=0.2))
    assert job.wait() == {0: 124, 1: 124}
    assert leader.stopped == (config.stop_grace, 124)
    assert job.events(0, "time_limit")[0]["fields"]["cause"] == "time_limit"


def test_a_lost_head_stops_the_leader_and_its_code_is_every_ranks(tmp_path, config, monkeypatch):
    leader = ScriptedLeader(0, FOREVER)
    lost = Lost("head_lost", {"code": -9, "output": "ray-out.log", "cause": "head_lost"}, HEAD_LOST_EXIT)
    monkeypatch.setattr(Head, "lost", lambda self: lost if leader.running.is_set() else None)  # no node in a dry run
    job = Job(tmp_path, 2, leader, config)
    assert job.wait() == {0: HEAD_LOST_EXIT, 1: HEAD_LOST_EXIT}
    assert leader.stopped == (min(config.stop_grace, RAY_STOP_GRACE), HEAD_LOST_EXIT)
    assert job.events(0, "head_lost")[0]["fields"] == lost.fields


def test_the_walltime_rank_0_read_of_its_batch_job_is_a_limit_that_says_why():
    config, log = Config(stop_grace=20, time_limit=60), RankLog(0, "n1")
    ends_at = time.time() + 3600
    limits = rank_life.time_limits(config, "pbs", BatchJob(ends_at=ends_at), log)
    assert [(limit.event, limit.fields["cause"]) for limit in limits] == [("time_limit", "time_limit"),
                                                                         ("walltime_near", "walltime")]
    assert limits[1].fields == {"ends_at": ends_at, "margin": 20 + WALLTIME_TEARDOWN, "cause": "walltime"}
    assert not any(limit.deadline.expired() for limit in limits)
    assert rank_life.time_limits(config, "pbs", BatchJob(), log)[1:] == []  # no end known (a dry run, or no scheduler): no stop


def test_a_window_of_one_lets_one_worker_join_at_a_time(tmp_path, config):
    job = Job(tmp_path, 4, ScriptedLeader(), replace(config, join_window=1))
    assert job.wait() == {0: 0, 1: 0, 2: 0, 3: 0}
    joins = [(r["event"], r["fields"]["peer"]) for r in job.events(0) if r["event"] in ("join_granted", "worker_joined")]
    assert joins == [("join_granted", 1), ("worker_joined", 1), ("join_granted", 2), ("worker_joined", 2),
                     ("join_granted", 3), ("worker_joined", 3)]


def test_one_ray_node_per_host_leaves_the_hosts_other_ranks_idle(tmp_path, config):
    leader = ScriptedLeader()
    job = Job(tmp_path, 3, leader, replace(config, ray_node_per="host"))
    assert job.wait() == {0: 0, 1: 0, 2: 0}
    assert len(leader.cluster.nodes) == 1
    assert sorted(r["fields"]["peer"] for r in job.events(0, "worker_idle")) == [1, 2]
    assert job.events(1, "idle_by_design") and job.events(2, "idle_by_design")


@pytest.mark.parametrize("autoscale, hosts", [("1:4", 2), (None, None)])
def test_the_ranks_count_their_hosts_when_the_autoscaler_counts_ray_nodes_per_host(tmp_path, config, autoscale, hosts,
                                                                                  names):
    leader = ScriptedLeader()
    job = Job(tmp_path, 4, leader, replace(config, ray_node_per="host", autoscale=autoscale), hosts=["a", "a", "b", "b"],
              names=names)
    assert job.wait() == {0: 0, 1: 0, 2: 0, 3: 0}
    assert leader.me.hosts == hosts


def test_a_big_nodes_ports_are_planned_by_its_cpus_and_a_host_that_cannot_hold_them_is_refused(tmp_path, config, names):
    job = Job(tmp_path, 2, ScriptedLeader(), replace(config, num_cpus=104), hosts=["x1000c0s0b0n0", "x1000c0s0b0n1"],
              names=names)
    assert job.wait() == {0: 0, 1: 0}
    for rank in (0, 1):  # 300 ports each: 104 CPUs' worth of workers, and as many idle ones
        (planned,) = job.events(rank, "ports_planned")
        assert planned["fields"]["last"] - planned["fields"]["first"] + 1 == 300
        assert planned["fields"]["workers"] >= 2 * 104
    crowded = replace(config, num_cpus=104, job_id="crowded")
    job = Job(tmp_path, 41, ScriptedLeader(), crowded)  # 41 x 300 ports on one host: over its 12,000
    assert set(job.wait(60).values()) == {2}
    (failed,) = job.events(0, "failed")
    assert failed["fields"]["cause"] == "ports_per_host"
    assert "at most 40 such nodes fit on a host" in failed["fields"]["message"]
