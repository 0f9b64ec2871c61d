"""Why a job failed (mpiray/logs/report/classify.py): each cause from the evidence a failure leaves in the
events and Ray's logs. The real failures that leave that evidence are provoked in
tests/real/local/test_causes_found.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mpiray.logs.report import render
from mpiray.logs.report.classify import CAUSES, PMI2_UCX, classify
from mpiray.logs.report.model import JobReport
from mpiray.logs.report.parse import RankFacts

from sample_jobs import entry


def found(ranks, facts=None, ray_logs=None, exit_code=1, driver_code=None) -> dict[str, list[int]]:
    result = classify(ranks, facts or {}, ray_logs or {}, exit_code, driver_code=driver_code)
    for cause in result:
        assert cause.title and cause.fix and cause.evidence, cause
    return {cause.cause: cause.ranks for cause in result}


def test_a_cause_mpiray_named_wins_and_a_vague_one_gives_way_to_what_ray_logged():
    ranks = [entry(0), entry(1, "failed", "temp_dir", "cannot create the temp dir /x"), entry(2, "failed", "head_lost")]
    oom = "[2026-11-24 10:00:00,000 E 1 1] ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory"
    assert found(ranks, ray_logs={2: oom}) == {"temp_dir": [1], "out_of_memory": [2]}


@pytest.mark.parametrize("line, cause", [
    ("ray.exceptions.OutOfMemoryError: Task was killed", "out_of_memory"),
    ("[raylet] Out of memory: Killed process 4242 (ray::IDLE)", "out_of_memory"),
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    ("Failed to bind to 0.0.0.0:6379", "port_in_use"),
    ("Failed to get cluster ID from GCS server: Unauthenticated: RPC error: InvalidAuthToken", "foreign_gcs"),
    ("AF_UNIX path length cannot exceed 107 bytes", "socket_path_too_long"),
    ("Exception: The current node timed out during startup.", "gcs_overloaded"),
    ("mpiray: Ray refused to start this node: RuntimeError: Please use HIP_VISIBLE_DEVICES instead of "
     "ROCR_VISIBLE_DEVICES", "ray_refused_node"),
    ("ValueError: Attempting to start raylet with 4 GPU, but CUDA_VISIBLE_DEVICES contains ['0', '1'].",
     "ray_refused_node"),
])
def test_each_sign_in_rays_logs_names_its_cause(line, cause):
    assert found([entry(0), entry(1, "failed", "", "`ray start` exited with code 1")], ray_logs={1: f"...\n{line}\n..."}) == \
        {cause: [1]}


def test_a_rank_that_never_came_out_of_mpi_init_is_named_and_pmi2_over_ucx_gets_its_note():
    stuck = RankFacts(rank=1, launched=1.0, launch={"launcher": "srun", "task": 1, "mpi_type": "pmi2", "netmod": None})
    result = classify([entry(0, "never reported"), entry(1, "never reported")], {1: stuck}, {}, None, driver_code=None)
    assert [(c.cause, c.ranks, c.note) for c in result] == [("mpi_init", [1], PMI2_UCX)]
    ofi = RankFacts(rank=1, launched=1.0, launch={"launcher": "srun", "task": 1, "mpi_type": "pmi2", "netmod": "ofi"})
    assert classify([entry(1, "never reported")], {1: ofi}, {}, None, driver_code=None)[0].note == ""


def test_a_rank_on_the_mpich_wheel_stuck_in_mpi_init_is_read_as_such_from_its_log():
    # What rank/life.py logs before MPI_Init on the wheel: launched, then the netmod it chose; nothing after.
    facts = RankFacts(rank=1)
    facts.read({"time": 100.0, "event": "launched",
                "fields": {"launcher": "srun", "task": 1, "mpi_type": "pmi2", "netmod": None}})
    facts.read({"time": 100.1, "event": "netmod_chosen", "fields": {"netmod": "ofi", "provider": "tcp"}})
    assert facts.mpi_ready is None and facts.launch["netmod"] == "ofi"
    (cause,) = classify([entry(1, "never reported")], {1: facts}, {}, None, driver_code=None)
    assert (cause.cause, cause.note) == ("mpi_init", "")


def test_workers_rank_0_waited_for_in_vain_are_named_by_their_own_logs_first():
    head = RankFacts(rank=0, missing=[1, 2])
    result = found([entry(0), entry(1, "never reported"), entry(2, "never reported")], {0: head},
                   {2: "Failed to bind to 10.0.0.2:20001"})
    assert result == {"startup_timeout": [1], "port_in_use": [2]}


def test_a_job_that_failed_without_an_error_event_is_the_drivers_or_a_signals_doing():
    assert found([entry(0)], exit_code=3, driver_code=3) == {"driver_failed": [0]}
    assert found([entry(0)], exit_code=143, driver_code=143) == {"signal": [0]}
    assert found([entry(0)], ray_logs={0: "ray.exceptions.OutOfMemoryError"}, exit_code=1, driver_code=1) == \
        {"out_of_memory": [0]}
    assert found([entry(0, exit_code=0)], exit_code=0, driver_code=0) == {}


def test_the_report_says_why_with_the_fix():
    report = JobReport(job_id="j", job_dir="/j", ranks=1, hosts=["n1"], started=None, exit_code=1, driver="",
                       driver_exit_code=124, batch_job=None, left_out=None, earlier_runs=0, cluster=[], phases=[],
                       first_error=None,
                       never_reported=[], unfinished=[], job_dir_changed_s=None, warnings=[], lost_nodes=[],
                       causes=classify([entry(0, "failed", "time_limit", "ran past --time-limit")], {}, {}, 124, driver_code=124),
                       driver_events=[], manifests={}, joined_jobs=[], planned_joins=[], autoscaler=[], nodes_over_time=[])
    text = render.format_report(report)
    assert "why it failed:\n  time_limit (rank 0): " + CAUSES["time_limit"].title in text
    assert "    fix: " + CAUSES["time_limit"].fix in text


def causes_the_code_can_name() -> set[str]:
    """Every cause mpiray's code gives a failure: cause="x" (a LaunchError or an event field), a class's
    cause = "x", and "cause": "x" in an event's fields."""
    found = set()
    for path in (Path(__file__).resolve().parents[4] / "mpiray").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "cause":
                values = [node.value]
            elif isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["cause"]:
                values = [node.value]
            elif isinstance(node, ast.Dict):
                values = [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "cause"]
            else:
                continue
            for value in values:
                found |= _strings(value)
    return found


def _strings(value: ast.expr) -> set[str]:
    """The strings an expression can be: "a", or "a" if x else None (both branches)."""
    if isinstance(value, ast.Constant):
        return {value.value} if isinstance(value.value, str) and value.value else set()
    if isinstance(value, ast.IfExp):
        return _strings(value.body) | _strings(value.orelse)
    return set()


def test_every_cause_the_code_names_is_one_mpiray_logs_explains():
    named = causes_the_code_can_name()
    assert {"no_such_cluster", "port_in_use", "head_lost", "time_limit"} <= named  # the scan finds them
    assert named - set(CAUSES) == set()
