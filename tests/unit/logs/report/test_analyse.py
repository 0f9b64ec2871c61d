"""A job's events read into the report (mpiray/logs/report/parse.py, analyse.py, render.py): the table, the
phases, the failing rank, partial logs."""

from __future__ import annotations

import re

import pytest

from mpiray.logs.report import parse, render
from mpiray.logs.report.model import JobReport, RankEntry, Stopped

from sample_jobs import FAILED_RANK0, FAILED_RANK1, FAILED_RANK3, NODE, OK_RANK0, OK_RANK1, TIMEOUT_RANK0, analyse, rank0, rank1


def by_rank(report: JobReport) -> dict[int, RankEntry]:
    return {entry.rank: entry for entry in report.cluster}


def phase(report: JobReport, name: str) -> float | None:
    return report.phase(name).s


def replace(records: list[dict], event: str, *new: dict) -> list[dict]:
    """records with the first `event` replaced by new (none: removed)."""
    index = next(i for i, r in enumerate(records) if r["event"] == event)
    return records[:index] + list(new) + records[index + 1:]


def test_a_clean_job_reads_as_a_table_and_its_phases():
    report = analyse(OK_RANK0, OK_RANK1)
    ranks = by_rank(report)
    assert report.ranks == 2 and report.hosts == ["node2", "vm"] and report.exit_code == 0
    assert [ranks[r].status for r in (0, 1)] == ["ok", "ok"]
    assert ranks[1].ip == "192.0.2.3" and ranks[1].resources == {"cpus": 1.0, "gpus": 0.0, "memory_gib": 4.1}
    # Times are after the job's first event: rank 1's waiting_for_session at 15:39:14.498.
    assert report.started == "2026-11-23 15:39:14.498"
    assert ranks[0].joined_s == pytest.approx(1.677) and ranks[1].joined_s == pytest.approx(3.223)
    assert phase(report, "session sent") == pytest.approx(0.057)
    assert phase(report, "head alive") == pytest.approx(1.677)
    assert phase(report, "last join") == pytest.approx(3.223)
    assert phase(report, "driver start") == pytest.approx(3.302)
    assert phase(report, "driver end") == pytest.approx(6.302)
    assert phase(report, "teardown") == pytest.approx(7.002)
    assert phase(report, "exit") == pytest.approx(7.334)
    assert report.driver == "python my_driver.py --epochs 3" and report.driver_exit_code == 0
    assert report.first_error is None and report.never_reported == [] and report.unfinished == []
    assert ranks[1].stopped == Stopped(processes=6, seconds=0.5, sigkilled=1)
    assert report.causes == []


def test_segments_show_each_ranks_start_up_in_order():
    ranks = by_rank(analyse(OK_RANK0, OK_RANK1))
    assert [s[0] for s in ranks[0].segments] == ["waiting", "starting", "alive", "driver", "stopping"]
    assert [s[0] for s in ranks[1].segments] == ["waiting", "starting", "alive", "stopping"]
    # A worker's `ray start` may go only once it holds a join slot: it waits until then.
    assert ranks[1].segments[1][1] == pytest.approx(1.692)
    for entry in ranks.values():
        ends = [t for segment in entry.segments for t in segment[1:]]
        assert ends == sorted(ends)
    assert ranks[0].segments[-1][2] == pytest.approx(7.328)  # its exit event


def test_a_failed_start_names_the_failing_rank_first_and_the_ranks_that_never_reported():
    report = analyse(FAILED_RANK0, FAILED_RANK1, None, FAILED_RANK3)
    ranks = by_rank(report)
    assert report.ranks == 4 and report.exit_code == 2
    assert [ranks[r].status for r in range(4)] == ["ok", "never reported", "never reported", "failed"]
    error = report.first_error
    assert (error.rank, error.host, error.log, error.reported_by) == (3, "vm", "/j/rank-0003.log", 3)
    assert error.message.startswith("cannot create the temp dir /nonexistent-dir") and error.cause == "temp_dir"
    never = {n.rank: n for n in report.never_reported}
    assert sorted(never) == [1, 2, 3]
    assert never[1].why == "stopped by rank 0 before joining"
    assert never[1].detail == "last step: worker_will_connect"
    assert never[2].why == "no log" and never[2].host == "vm2"  # rank 0 heard from it
    assert never[3].why == "failed"
    assert phase(report, "last join") is None and phase(report, "driver start") is None
    assert [(c.cause, c.ranks) for c in report.causes] == [("temp_dir", [3])]
    text = render.format_report(report)
    assert "first error: rank 3 on vm at 0.16 s (log: /j/rank-0003.log)" in text
    assert "rank 2 on vm2: no log" in text
    assert re.search(r"^\s+3\s+vm\s+-\s+-\s+-\s+failed\s+2$", text, re.MULTILINE), text
    assert "  temp_dir (rank 3): the rank's private temp dir could not be made" in text
    assert "    fix: point --temp-dir (or TMPDIR) at a writable node-local directory" in text


def test_rank_0_relaying_a_failure_counts_as_the_failing_ranks_when_its_own_log_is_missing():
    report = analyse(FAILED_RANK0, FAILED_RANK1, None, None)
    error = report.first_error
    assert (error.rank, error.host, error.log, error.reported_by) == (3, "vm", "/j/rank-0003.log", 0)
    ranks = by_rank(report)
    assert ranks[0].status == "ok" and ranks[0].job_error_s is None  # its own node was fine
    assert ranks[3].status == "failed" and ranks[3].error.startswith("cannot create the temp dir")
    assert ranks[3].error_s == pytest.approx(1.937)  # when rank 0 heard of it
    assert {n.rank: n.why for n in report.never_reported}[3] == "failed"
    assert [(c.cause, c.ranks) for c in report.causes] == [("temp_dir", [3])]


def test_a_startup_timeout_names_the_missing_rank_from_rank_0s_log():
    report = analyse(TIMEOUT_RANK0, None)
    ranks = by_rank(report)
    assert report.ranks == 2 and report.exit_code == 1
    assert ranks[0].status == "ok" and ranks[1].status == "never reported"
    assert ranks[1].host == "n2" and ranks[1].log == "/j/rank-0001.log"
    assert report.first_error.rank == 0 and report.first_error.cause == "startup_timeout"
    assert "did not join within --startup-timeout 15 s" in report.first_error.message
    assert [(c.cause, c.ranks) for c in report.causes] == [("startup_timeout", [1])]
    assert [n.rank for n in report.never_reported] == [1]
    assert ranks[0].job_error_s == pytest.approx(14.996)


def test_a_killed_jobs_logs_stop_mid_way():
    cut0 = [r for r in OK_RANK0 if r["event"] not in ("driver_exited", "processes_stopped", "exit")]
    cut1 = [r for r in OK_RANK1 if r["event"] not in ("job_ended", "processes_stopped", "exit")]
    report = analyse(cut0, cut1)
    ranks = by_rank(report)
    assert report.exit_code is None and report.unfinished == [0, 1]
    assert [ranks[r].status for r in (0, 1)] == ["ok", "ok"]
    assert phase(report, "driver start") is not None and phase(report, "driver end") is None
    assert phase(report, "exit") is None
    assert ranks[0].segments[-1][0] == "driver"  # it ran until the log stops
    text = render.format_report(report)
    assert "exit code unknown" in text and "no exit line (killed, or still running): ranks 0-1" in text
    # The job dir changed later (a guard kept a killed rank's Ray logs): the last state lasted at least until the kill.
    changed = parse.local_seconds(rank0("25.501", "exit"))
    report = analyse(cut0, None, changed=changed)
    assert report.job_dir_changed_s == pytest.approx(11.0)
    first = by_rank(report)[0]
    assert first.segments[-1] == ["driver", pytest.approx(3.299), pytest.approx(11.0)]
    assert first.logged_until_s == pytest.approx(3.299)


def test_ranks_missing_from_the_job_dir_come_from_rank_0s_count():
    six = [dict(r, fields={**r["fields"], "size": 6}) if r["event"] == "rank_started" else r for r in OK_RANK0]
    report = analyse(six)
    assert report.ranks == 6
    assert [n.rank for n in report.never_reported] == [2, 3, 4, 5]  # rank 1 joined, said rank 0
    assert "ranks 2-5: no log" in render.format_report(report)
    headless = analyse(None, FAILED_RANK1, None, FAILED_RANK3)
    assert headless.ranks == 4 and by_rank(headless)[0].status == "never reported"


def test_a_reused_job_id_shows_the_last_run_only():
    later = 600.0
    second = [dict(r, time=r["time"] + later, pid=7777) for r in OK_RANK0]
    report = analyse(OK_RANK0 + second, OK_RANK1)  # rank 1's log is the first run's only
    assert report.earlier_runs == 1 and report.started == "2026-11-23 15:49:14.501"
    first = by_rank(report)[1]
    assert not first.has_log and first.segments == []  # the earlier run's events are not this run's
    assert first.status == "ok" and first.joined_s == pytest.approx(3.263)  # as rank 0 heard it
    records, earlier = parse.last_run(OK_RANK1 + [dict(r, pid=8888) for r in OK_RANK1])
    assert earlier == 1 and records[0]["event"] == "waiting_for_session" and len(records) == 8


def test_hosts_the_preflight_left_out_are_named_with_the_line_for_the_next_submission():
    records = replace(OK_RANK0, "worker_joined", rank0("17.764", "nodes_excluded", hosts="node2", nodes=1, requested=2,
                                                       why="node2: dir_full: the temp dir /tmp is 97% full",
                                                       exclude="sbatch --exclude=node2", checks={"node2": ["dir_full"]}),
                      rank0("17.765", "worker_idle", peer=1, peer_host="node2"))
    report = analyse(records, None)
    assert report.left_out is not None and (report.left_out.hosts, report.left_out.nodes) == ("node2", 1)
    assert ("left out by the pre-flight: node2 (1 of 2 Ray nodes started): node2: dir_full: the temp dir /tmp is 97% "
            "full; next submission: sbatch --exclude=node2") in render.format_report(report)
    assert analyse(OK_RANK0, OK_RANK1).left_out is None


def test_idle_ranks_and_the_library_front_end():
    records = replace(OK_RANK0, "worker_joined", rank0("17.764", "worker_idle", peer=1, peer_host="node2"))
    records = replace(records, "driver_started", rank0("17.800", "script_connected", gcs_address="192.0.2.2:27200"))
    records = replace(records, "driver_exited", rank0("20.800", "script_ended", code=0, how="the end of the script"))
    report = analyse(records, None)
    assert by_rank(report)[1].status == "idle" and report.never_reported == []
    assert report.driver == "the calling script (mpiray.init)" and report.driver_exit_code == 0
    assert [s[0] for s in by_rank(report)[0].segments] == ["waiting", "starting", "alive", "driver", "stopping"]


def test_warnings_and_errors_with_tracebacks_read_in_one_line():
    records = replace(OK_RANK1, "processes_stopped",
                      rank1("21.000", "peer_missing"),
                      rank1("21.100", "unexpected", traceback="Traceback (most recent call last):\n"
                            "  File \"rank.py\", line 9\nRuntimeError: boom\n"),
                      rank1("21.387", "processes_stopped", count=6, seconds=0.5, killed=1, pids=[1916]))
    records = replace(records, "node_alive",
                      rank1("16.000", "join_retry", reason="`ray start` exited with code 1 before its node joined: "
                            "timed out", attempt=2, attempts=3),
                      rank1("17.721", "node_alive", ip="192.0.2.3", node_id="c9aa", **NODE))
    report = analyse(OK_RANK0, records)
    assert by_rank(report)[1].status == "failed" and by_rank(report)[1].join_attempts == 2
    assert [w.rank for w in report.warnings] == [1, 1]
    text = render.format_report(report)
    assert "  unexpected failure: RuntimeError: boom" in text
    assert "joins tried again: rank 1 (2 attempts)" in text
    assert "warnings: 2; first: rank 1 at 1.50 s: `ray start` exited with code 1" in text


# `mpiray logs --json` is a promise to scripts: its keys change only with this table (and docs/logs.md).
JSON_KEYS = {
    "report": {"autoscaler", "batch_job", "causes", "cluster", "driver", "driver_exit_code", "earlier_runs",
               "exit_code", "first_error", "hosts", "job_dir", "job_dir_changed_s", "job_id", "joined_jobs", "left_out",
               "driver_events", "lost_nodes", "manifests", "never_reported", "nodes_over_time", "phases", "planned_joins",
               "ranks", "started", "unfinished", "warnings"},
    "cluster": {"cause", "error", "error_s", "exit_code", "first_s", "has_log", "host", "ip", "job_error_s",
                "join_attempts", "join_slot_s", "joined_s", "last_s", "last_step", "launched_s", "log",
                "logged_until_s", "mpi_ready_s", "pid", "rank", "resources", "resources_text", "segments", "status",
                "stopped"},
    "phases": {"detail", "phase", "rank", "s"},
    "causes": {"cause", "evidence", "fix", "note", "ranks", "title"},
    "first_error": {"cause", "host", "log", "message", "rank", "reported_by", "s"},
    "never_reported": {"detail", "host", "log", "rank", "s", "why"},
}


def test_the_json_report_keeps_its_keys():
    report = analyse(FAILED_RANK0, FAILED_RANK1).to_json()
    assert set(report) == JSON_KEYS["report"]
    for part in ("cluster", "phases", "causes", "never_reported"):
        assert report[part] and all(set(entry) == JSON_KEYS[part] for entry in report[part]), part
    assert set(report["first_error"]) == JSON_KEYS["first_error"]
