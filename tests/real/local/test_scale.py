"""Scale: join slots at work (a window that adapts to how fast nodes register), retried joins, --dry-run."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import (
    ROOT,
    assert_nothing_left,
    driver_report,
    fail_join,
    last_event,
    launch,
    launcher_argv,
    new_job_id,
    rank_events,
)
from process_control import alive_pids

MANY_ACTORS = ROOT / "tests" / "drivers" / "many_actors.py"
KESTREL_CPUS = 104  # a standard NREL Kestrel node

# ---- the window, as pure functions ------------------------------------------------------------


# ---- real runs ------------------------------------------------------------------------------------

def test_a_node_of_a_real_nodes_size_runs_an_actor_on_every_cpu(tmp_path, pace):
    """A Kestrel-size node (104 CPUs declared) runs 104 one-CPU actors at once: once 89 of 100 came up and
    the rest died of "No available ports", as the node had 100 ports for everything."""
    deadline = pace.deadline(phases=20, floor=240)  # 36 s here; the workers start two at a time on 2 cores
    run = launch(tmp_path, 1, args=["--num-cpus", str(KESTREL_CPUS)], timeout=deadline + 120, tag="kestrel",
                 driver=[sys.executable, str(MANY_ACTORS), str(KESTREL_CPUS), str(deadline)])
    report = driver_report(run.stdout, "ACTORS", run.stderr)
    assert run.returncode == 0 and report["ready"] == KESTREL_CPUS, (report, run.stderr[-3000:])
    assert run.event(0, "ports_planned")["workers"] >= 2 * KESTREL_CPUS
    assert_nothing_left(run)


def test_a_window_of_one_lets_one_node_join_at_a_time(tmp_path):
    run = launch(tmp_path, 4, args=["--join-window", "1"], tag="window")
    assert run.returncode == 0, run.stderr
    joins = [(r["event"], r["fields"]["peer"]) for r in run.events(0) if r["event"] in ("join_granted", "worker_joined")]
    assert joins == [("join_granted", 1), ("worker_joined", 1), ("join_granted", 2), ("worker_joined", 2),
                     ("join_granted", 3), ("worker_joined", 3)]
    assert_nothing_left(run)


def test_a_join_that_fails_as_an_overloaded_gcs_makes_it_is_retried(tmp_path):
    # The first worker's `ray start` exits as Ray's does when its raylet did not register within 30 s.
    run = launch(tmp_path, 3, env=fail_join(str(tmp_path / "failed-once")), tag="retry")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "failed-once").exists()
    retries = [run.event(rank, "join_retry") for rank in (1, 2) if run.event(rank, "join_retry")]
    assert len(retries) == 1 and retries[0]["attempt"] == 2 and "timed out during startup" in retries[0]["reason"]
    assert run.probe()["nodes"] == 3
    assert_nothing_left(run)


def test_a_head_whose_raylet_did_not_register_in_time_is_started_again(tmp_path):
    # The head's first `ray start` raises Ray's own "timed out during startup": the hook stops its raylet (SIGSTOP),
    # as a CI run's overloaded host starved it, and lets Ray's 30 s pass at once.
    run = launch(tmp_path, 2, env=fail_join(str(tmp_path / "failed-once"), "FAIL_HEAD"), tag="headretry")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "failed-once").exists()
    retry = run.event(0, "head_retry")
    assert retry["attempt"] == 2 and "timed out during startup" in retry["reason"], retry
    assert run.event(1, "join_retry") is None  # the workers waited for the head: none failed
    assert run.probe()["nodes"] == 2
    assert not alive_pids(retry["stopped"])  # what the first start left, if anything: stopped before the second
    assert_nothing_left(run)


def test_dry_run_does_the_whole_protocol_at_32_ranks_and_starts_nothing(tmp_path):
    job_id = new_job_id("dry")
    argv = launcher_argv(32, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id, "--dry-run"])
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "32 Ray nodes on 1 host ready" in result.stdout
    assert len(re.findall(r"^  rank +\d+ ", result.stdout, re.M)) == 32
    job_dir = tmp_path / "logs" / job_id
    for rank in range(32):
        names = [r["event"] for r in rank_events(job_dir, rank)]
        assert "--node-name=" in last_event(job_dir, rank, "dry_run_node")["command"]
        assert names[-1] == "exit" and last_event(job_dir, rank, "exit")["code"] == 0
        assert "private_dir" not in names and "node_pids" not in names
    assert not list(job_dir.glob("*.ray.log"))  # no `ray start` ran
    assert "PROBE" not in result.stdout  # nor the driver


