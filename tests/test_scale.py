"""Scale: join slots (a window that adapts to how fast nodes register), retried joins, --dry-run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mpiray.joins import FAST_JOIN, FIRST_WINDOW, SLOW_JOIN, Joins, JoinWindow

from conftest import ROOT, assert_nothing_left, last_event, launch, launcher_argv, new_job_id, rank_events

# ---- the window, as pure functions ------------------------------------------------------------


def test_the_window_starts_small_grows_on_fast_joins_and_halves_on_slow_ones():
    window = JoinWindow(limit=64)
    assert window.size == FIRST_WINDOW
    for _ in range(100):
        window.record(FAST_JOIN / 2)
    assert window.size == 64  # never past --join-window
    window.record(SLOW_JOIN + 1)
    assert window.size == 32
    for _ in range(10):
        window.record(SLOW_JOIN + 1)
    assert window.size == 1  # never below one
    window.record((FAST_JOIN + SLOW_JOIN) / 2)
    assert window.size == 1  # a middling join changes nothing
    assert JoinWindow(limit=3).size == 3


def test_slots_go_out_in_rank_order_and_come_back_with_each_report():
    joins = Joins(list(range(1, 11)), JoinWindow(limit=4, size=2))
    assert joins.grants(now=0) == [1, 2]
    assert joins.grants(now=0) == []  # the window is full
    joins.joined(2, now=1)  # fast: the window grows to 3
    assert joins.window.size == 3 and joins.grants(now=1) == [3, 4]
    joins.joined(5, started_a_node=False, now=1)  # an idle rank reported before its turn: no slot, no measure
    joins.joined(1, now=30)  # slow: halved
    assert joins.window.size == 1 and joins.grants(now=30) == []
    joins.joined(3, now=31)
    joins.joined(4, now=31)
    assert joins.grants(now=31) == [6]  # 5 already reported


# ---- real runs ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_window_of_one_lets_one_node_join_at_a_time(tmp_path):
    run = launch(tmp_path, 4, args=["--join-window", "1"], tag="window")
    assert run.returncode == 0, run.stderr
    joins = [(r["event"], r["fields"]["peer"]) for r in run.events(0) if r["event"] in ("join_granted", "worker_joined")]
    assert joins == [("join_granted", 1), ("worker_joined", 1), ("join_granted", 2), ("worker_joined", 2),
                     ("join_granted", 3), ("worker_joined", 3)]
    assert_nothing_left(run)


@pytest.mark.slow
def test_a_join_that_fails_as_an_overloaded_gcs_makes_it_is_retried(tmp_path):
    # The first worker's `ray start` exits as Ray's does when its raylet did not register within 30 s.
    run = launch(tmp_path, 3, env={"MPIRAY_TEST_FAIL_JOIN": str(tmp_path / "failed-once")}, tag="retry")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "failed-once").exists()
    retries = [run.event(rank, "join_retry") for rank in (1, 2) if run.event(rank, "join_retry")]
    assert len(retries) == 1 and retries[0]["attempt"] == 2 and "timed out during startup" in retries[0]["reason"]
    assert run.probe()["nodes"] == 3
    assert_nothing_left(run)


@pytest.mark.slow
def test_dry_run_does_the_whole_protocol_at_32_ranks_and_starts_nothing(tmp_path):
    job_id = new_job_id("dry")
    argv = launcher_argv(32, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id, "--dry-run"])
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "32 Ray nodes on 1 hosts ready" in result.stdout
    assert len(re.findall(r"^  rank +\d+ ", result.stdout, re.M)) == 32
    job_dir = tmp_path / "logs" / job_id
    for rank in range(32):
        names = [r["event"] for r in rank_events(job_dir, rank)]
        assert "--node-name=" in last_event(job_dir, rank, "dry_run_node")["command"]
        assert names[-1] == "exit" and last_event(job_dir, rank, "exit")["code"] == 0
        assert "private_dir" not in names and "node_pids" not in names
    assert not list(job_dir.glob("*.ray.log"))  # no `ray start` ran
    assert "PROBE" not in result.stdout  # nor the driver


def test_dry_run_is_the_command_lines_only():
    script = "import mpiray; mpiray.init(dry_run=True)"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "dry_run is the command line's" in result.stderr
