"""`mpiray logs`: the rank logs' parser on literal texts (fast), then real jobs under the real mpirun (slow)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpiray import cli, joblogs
from mpiray.events import KINDS
from mpiray.joblogs import parse, render, timeline
from mpiray.joblogs.analyse import analyse as analyse_logs

from conftest import (
    BIN,
    ROOT,
    Launch,
    alive_pids,
    assert_nothing_left,
    launch,
    launcher_argv,
    new_job_id,
    rank_pid,
    wait_for_event,
)

# ---- literal events, shaped as real ones (trimmed) ---------------------------------------------------


def rec(stamp: str, rank: int, host: str, process: int, event: str, **fields) -> dict:
    """One event record as a rank writes it; stamp in local time, as the human log shows it."""
    seconds = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + float("0" + stamp[19:])
    return {"v": 1, "time": seconds, "rank": rank, "host": host, "pid": process, "event": event,
            "level": KINDS[event].level, "fields": fields}


def rank0(stamp, event, **fields):
    return rec(f"2026-11-23 15:39:{stamp}", 0, "vm", 1901, event, **fields)


def rank1(stamp, event, **fields):
    return rec(f"2026-11-23 15:39:{stamp}", 1, "node2", 1902, event, **fields)


CONTEXT = dict(launch="scheduler none, launcher hydra, 2 tasks", mpi="MPICH Version: 5.0.2", ray="2.60.0",
               python="3.11.7")
NODE = dict(cpus=1.0, gpus=0.0, memory_gib=4.1)
OK_RANK0 = [
    rank0("14.501", "rank_started", size=2, **CONTEXT),
    rank0("14.555", "session_sent", workers=1, gcs_address="192.0.2.2:27200"),
    rank0("14.556", "resources_given", cpus=1, gpus="", memory_mib=4218, object_store_mib=1807),
    rank0("14.556", "node_starting", role="head", command="python ray_node.py start --head --port=27200"),
    rank0("16.175", "head_alive", gcs_address="192.0.2.2:27200", ip="192.0.2.2", node_id="54e0afa1b13c", **NODE),
    rank0("16.177", "node_pids", pids=[1910, 1923]),
    rank0("16.190", "join_granted", peer=1, in_use=1, window=8),
    rank0("16.198", "worker_waiting", peer=1, peer_host="node2", log="logs/j/rank-0001.log"),
    rank0("17.764", "worker_joined", peer=1, peer_host="node2", ip="192.0.2.3", node_id="c9aa", seconds=3.2, **NODE),
    rank0("17.765", "cluster_ready", workers=1, nodes=2, cpus=2.0, gpus=0.0, seconds=3.3),
    rank0("17.800", "driver_started", pid=2042, command="python my_driver.py --epochs 3", output="logs/j/driver.log"),
    rank0("20.800", "driver_exited", code=0),
    rank0("21.500", "processes_stopped", count=8, seconds=0.7, killed=0, pids=[1910, 1923]),
    rank0("21.826", "exit", code=0),
]
OK_RANK1 = [
    rank1("14.498", "waiting_for_session"),
    rank1("14.654", "rank_started", size=2, **CONTEXT),
    rank1("14.665", "node_starting", role="worker", command="python ray_node.py --niced-import start"),
    rank1("14.678", "worker_will_connect", ip="192.0.2.3", gcs_address="192.0.2.2:27200"),
    rank1("17.721", "node_alive", ip="192.0.2.3", node_id="c9aa923f668d", **NODE),
    rank1("20.810", "job_ended", code=0),
    rank1("21.387", "processes_stopped", count=6, seconds=0.5, killed=1, pids=[1916, 2098]),
    rank1("21.832", "exit", code=0),
]


def at(stamp, rank, host, pid, event, **fields):
    return rec(f"2026-11-23 15:16:{stamp}", rank, host, pid, event, **fields)


# Rank 3 of 4 fails at once (a bad --temp-dir); rank 0 relays it and stops everyone; rank 2 has no log.
TEMP_DIR_ERROR = ("cannot create the temp dir /nonexistent-dir/mpiray-0-r3-itlx7g: No such file or directory; point "
                  "--temp-dir (or TMPDIR) at a writable node-local directory")
FAILED_RANK0 = [
    at("42.832", 0, "vm", 23408, "rank_started", size=4, launch="scheduler none, launcher hydra, 4 tasks"),
    at("42.892", 0, "vm", 23408, "session_sent", workers=3, gcs_address="192.0.2.2:25200"),
    at("42.896", 0, "vm", 23408, "node_starting", role="head", command="python ray_node.py start --head"),
    at("44.742", 0, "vm", 23408, "head_alive", gcs_address="192.0.2.2:25200", ip="192.0.2.2", node_id="6c77d7", **NODE),
    at("44.766", 0, "vm", 23408, "worker_waiting", peer=2, peer_host="vm2", log="/j/rank-0002.log"),
    at("44.766", 0, "vm", 23408, "worker_failed", peer=3, peer_host="vm", message=TEMP_DIR_ERROR,
       log="/j/rank-0003.log", cause="temp_dir"),
    at("46.042", 0, "vm", 23408, "processes_stopped", count=7, seconds=0.7, killed=0, pids=[23435, 23479]),
    at("46.152", 0, "vm", 23408, "exit", code=2),
]
FAILED_RANK1 = [
    at("42.829", 1, "vm", 23409, "waiting_for_session"),
    at("42.991", 1, "vm", 23409, "rank_started", size=4, launch="scheduler none, launcher hydra, 4 tasks"),
    at("42.999", 1, "vm", 23409, "node_starting", role="worker", command="python ray_node.py --niced-import start"),
    at("43.003", 1, "vm", 23409, "worker_will_connect", ip="192.0.2.2", gcs_address="192.0.2.2:25200"),
    at("44.774", 1, "vm", 23409, "job_ended", code=2),
    at("44.831", 1, "vm", 23409, "processes_stopped", count=1, seconds=0.1, killed=0, pids=[23440]),
    at("46.206", 1, "vm", 23409, "exit", code=2),
]
FAILED_RANK3 = [
    at("42.833", 3, "vm", 23411, "waiting_for_session"),
    at("42.990", 3, "vm", 23411, "rank_started", size=4, launch="scheduler none, launcher hydra, 4 tasks"),
    at("42.990", 3, "vm", 23411, "failed", message=TEMP_DIR_ERROR, cause="temp_dir"),
    at("46.283", 3, "vm", 23411, "exit", code=2),
]

# Rank 0 times out waiting for rank 1, whose log is missing (e.g. a node-local disk).
TIMEOUT_RANK0 = [rec(f"2026-11-23 14:55:{stamp}", 0, "n1", 4398, event, **fields) for stamp, event, fields in [
    ("35.046", "rank_started", dict(size=2, launch="scheduler slurm, launcher srun, 2 tasks")),
    ("35.206", "session_sent", dict(workers=1, gcs_address="10.0.0.1:24800")),
    ("35.206", "node_starting", dict(role="head", command="python ray_node.py start --head")),
    ("40.746", "head_alive", dict(gcs_address="10.0.0.1:24800", ip="10.0.0.1", node_id="7961b5", cpus=1.0, gpus=0.0,
                                  memory_gib=2.1)),
    ("40.771", "worker_waiting", dict(peer=1, peer_host="n2", log="logs/2/rank-0001.log")),
    ("50.042", "startup_timeout", dict(missing=[{"rank": 1, "host": "n2", "log": "logs/2/rank-0001.log"}],
                                       missing_count=1, timeout=15.0, cause="startup_timeout",
                                       missing_text="rank 1 on n2 (log: logs/2/rank-0001.log)")),
    ("53.839", "processes_stopped", dict(count=7, seconds=3.8, killed=0, pids=[4457])),
    ("56.756", "exit", dict(code=1)),
]]


def analyse(*logs: list | None, job_id: str = "j", changed: float | None = None, ray_logs=None) -> dict:
    records = {r: (f"/j/rank-{r:04d}.log", t) for r, t in enumerate(logs) if t is not None}
    return analyse_logs(job_id, "/j", records, changed, ray_logs)


def by_rank(report: dict) -> dict[int, dict]:
    return {entry["rank"]: entry for entry in report["cluster"]}


def phase(report: dict, name: str) -> float | None:
    return next(p["s"] for p in report["phases"] if p["phase"] == name)


def replace(records: list[dict], event: str, *new: dict) -> list[dict]:
    """records with the first `event` replaced by new (none: removed)."""
    index = next(i for i, r in enumerate(records) if r["event"] == event)
    return records[:index] + list(new) + records[index + 1:]


# ---- the report ------------------------------------------------------------------------------------


def test_a_clean_job_reads_as_a_table_and_its_phases():
    report = analyse(OK_RANK0, OK_RANK1)
    ranks = by_rank(report)
    assert report["ranks"] == 2 and report["hosts"] == ["node2", "vm"] and report["exit_code"] == 0
    assert [ranks[r]["status"] for r in (0, 1)] == ["ok", "ok"]
    assert ranks[1]["ip"] == "192.0.2.3" and ranks[1]["resources"] == {"cpus": 1.0, "gpus": 0.0, "memory_gib": 4.1}
    # Times are after the job's first event: rank 1's waiting_for_session at 15:39:14.498.
    assert report["started"] == "2026-11-23 15:39:14.498"
    assert ranks[0]["joined_s"] == pytest.approx(1.677) and ranks[1]["joined_s"] == pytest.approx(3.223)
    assert phase(report, "session sent") == pytest.approx(0.057)
    assert phase(report, "head alive") == pytest.approx(1.677)
    assert phase(report, "last join") == pytest.approx(3.223)
    assert phase(report, "driver start") == pytest.approx(3.302)
    assert phase(report, "driver end") == pytest.approx(6.302)
    assert phase(report, "teardown") == pytest.approx(7.002)
    assert phase(report, "exit") == pytest.approx(7.334)
    assert report["driver"] == "python my_driver.py --epochs 3" and report["driver_exit_code"] == 0
    assert report["first_error"] is None and report["never_reported"] == [] and report["unfinished"] == []
    assert ranks[1]["stopped"] == {"processes": 6, "seconds": 0.5, "sigkilled": 1}
    assert report["causes"] == []


def test_segments_show_each_ranks_start_up_in_order():
    ranks = by_rank(analyse(OK_RANK0, OK_RANK1))
    assert [s[0] for s in ranks[0]["segments"]] == ["waiting", "starting", "alive", "driver", "stopping"]
    assert [s[0] for s in ranks[1]["segments"]] == ["waiting", "starting", "alive", "stopping"]
    # A worker's `ray start` may go only once it holds a join slot: it waits until then.
    assert ranks[1]["segments"][1][1] == pytest.approx(1.692)
    for entry in ranks.values():
        ends = [t for segment in entry["segments"] for t in segment[1:]]
        assert ends == sorted(ends)
    assert ranks[0]["segments"][-1][2] == pytest.approx(7.328)  # its exit event


def test_a_failed_start_names_the_failing_rank_first_and_the_ranks_that_never_reported():
    report = analyse(FAILED_RANK0, FAILED_RANK1, None, FAILED_RANK3)
    ranks = by_rank(report)
    assert report["ranks"] == 4 and report["exit_code"] == 2
    assert [ranks[r]["status"] for r in range(4)] == ["ok", "never reported", "never reported", "failed"]
    error = report["first_error"]
    assert (error["rank"], error["host"], error["log"], error["reported_by"]) == (3, "vm", "/j/rank-0003.log", 3)
    assert error["message"].startswith("cannot create the temp dir /nonexistent-dir") and error["cause"] == "temp_dir"
    never = {n["rank"]: n for n in report["never_reported"]}
    assert sorted(never) == [1, 2, 3]
    assert never[1]["why"] == "stopped by rank 0 before joining"
    assert never[1]["detail"] == "last step: worker_will_connect"
    assert never[2]["why"] == "no log" and never[2]["host"] == "vm2"  # rank 0 heard from it
    assert never[3]["why"] == "failed"
    assert phase(report, "last join") is None and phase(report, "driver start") is None
    assert [(c["cause"], c["ranks"]) for c in report["causes"]] == [("temp_dir", [3])]
    text = render.format_report(report)
    assert "first error: rank 3 on vm at 0.16 s (log: /j/rank-0003.log)" in text
    assert "rank 2 on vm2: no log" in text
    assert re.search(r"^\s+3\s+vm\s+-\s+-\s+-\s+failed\s+2$", text, re.MULTILINE), text
    assert "  temp_dir (rank 3): the rank's private temp dir could not be made" in text
    assert "    fix: point --temp-dir (or TMPDIR) at a writable node-local directory" in text


def test_rank_0_relaying_a_failure_counts_as_the_failing_ranks_when_its_own_log_is_missing():
    report = analyse(FAILED_RANK0, FAILED_RANK1, None, None)
    error = report["first_error"]
    assert (error["rank"], error["host"], error["log"], error["reported_by"]) == (3, "vm", "/j/rank-0003.log", 0)
    ranks = by_rank(report)
    assert ranks[0]["status"] == "ok" and ranks[0]["job_error_s"] is None  # its own node was fine
    assert ranks[3]["status"] == "failed" and ranks[3]["error"].startswith("cannot create the temp dir")
    assert ranks[3]["error_s"] == pytest.approx(1.937)  # when rank 0 heard of it
    assert {n["rank"]: n["why"] for n in report["never_reported"]}[3] == "failed"
    assert [(c["cause"], c["ranks"]) for c in report["causes"]] == [("temp_dir", [3])]


def test_a_startup_timeout_names_the_missing_rank_from_rank_0s_log():
    report = analyse(TIMEOUT_RANK0, None)
    ranks = by_rank(report)
    assert report["ranks"] == 2 and report["exit_code"] == 1
    assert ranks[0]["status"] == "ok" and ranks[1]["status"] == "never reported"
    assert ranks[1]["host"] == "n2" and ranks[1]["log"] == "/j/rank-0001.log"
    assert report["first_error"]["rank"] == 0 and report["first_error"]["cause"] == "startup_timeout"
    assert "did not join within --startup-timeout 15 s" in report["first_error"]["message"]
    assert [(c["cause"], c["ranks"]) for c in report["causes"]] == [("startup_timeout", [1])]
    assert [n["rank"] for n in report["never_reported"]] == [1]
    assert ranks[0]["job_error_s"] == pytest.approx(14.996)


def test_a_killed_jobs_logs_stop_mid_way():
    cut0 = [r for r in OK_RANK0 if r["event"] not in ("driver_exited", "processes_stopped", "exit")]
    cut1 = [r for r in OK_RANK1 if r["event"] not in ("job_ended", "processes_stopped", "exit")]
    report = analyse(cut0, cut1)
    ranks = by_rank(report)
    assert report["exit_code"] is None and report["unfinished"] == [0, 1]
    assert [ranks[r]["status"] for r in (0, 1)] == ["ok", "ok"]
    assert phase(report, "driver start") is not None and phase(report, "driver end") is None
    assert phase(report, "exit") is None
    assert ranks[0]["segments"][-1][0] == "driver"  # it ran until the log stops
    text = render.format_report(report)
    assert "exit code unknown" in text and "no exit line (killed, or still running): ranks 0-1" in text
    # The job dir changed later (a guard kept a killed rank's Ray logs): the last state lasted at least until the kill.
    changed = parse.local_seconds(rank0("25.501", "exit"))
    report = analyse(cut0, None, changed=changed)
    assert report["job_dir_changed_s"] == pytest.approx(11.0)
    first = by_rank(report)[0]
    assert first["segments"][-1] == ["driver", pytest.approx(3.299), pytest.approx(11.0)]
    assert first["logged_until_s"] == pytest.approx(3.299)


def test_ranks_missing_from_the_job_dir_come_from_rank_0s_count():
    six = [dict(r, fields={**r["fields"], "size": 6}) if r["event"] == "rank_started" else r for r in OK_RANK0]
    report = analyse(six)
    assert report["ranks"] == 6
    assert [n["rank"] for n in report["never_reported"]] == [2, 3, 4, 5]  # rank 1 joined, said rank 0
    assert "ranks 2-5: no log" in render.format_report(report)
    headless = analyse(None, FAILED_RANK1, None, FAILED_RANK3)
    assert headless["ranks"] == 4 and by_rank(headless)[0]["status"] == "never reported"


def test_a_reused_job_id_shows_the_last_run_only():
    later = 600.0
    second = [dict(r, time=r["time"] + later, pid=7777) for r in OK_RANK0]
    report = analyse(OK_RANK0 + second, OK_RANK1)  # rank 1's log is the first run's only
    assert report["earlier_runs"] == 1 and report["started"] == "2026-11-23 15:49:14.501"
    first = by_rank(report)[1]
    assert not first["has_log"] and first["segments"] == []  # the earlier run's events are not this run's
    assert first["status"] == "ok" and first["joined_s"] == pytest.approx(3.263)  # as rank 0 heard it
    records, earlier = parse.last_run(OK_RANK1 + [dict(r, pid=8888) for r in OK_RANK1])
    assert earlier == 1 and records[0]["event"] == "waiting_for_session" and len(records) == 8


def test_idle_ranks_and_the_library_front_end():
    records = replace(OK_RANK0, "worker_joined", rank0("17.764", "worker_idle", peer=1, peer_host="node2"))
    records = replace(records, "driver_started", rank0("17.800", "script_connected", gcs_address="192.0.2.2:27200"))
    records = replace(records, "driver_exited", rank0("20.800", "script_ended", code=0, how="the end of the script"))
    report = analyse(records, None)
    assert by_rank(report)[1]["status"] == "idle" and report["never_reported"] == []
    assert report["driver"] == "the calling script (mpiray.init)" and report["driver_exit_code"] == 0
    assert [s[0] for s in by_rank(report)[0]["segments"]] == ["waiting", "starting", "alive", "driver", "stopping"]


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
    assert by_rank(report)[1]["status"] == "failed" and by_rank(report)[1]["join_attempts"] == 2
    assert [w["rank"] for w in report["warnings"]] == [1, 1]
    text = render.format_report(report)
    assert "  unexpected failure: RuntimeError: boom" in text
    assert "joins tried again: rank 1 (2 attempts)" in text
    assert "warnings: 2; first: rank 1 at 1.50 s: `ray start` exited with code 1" in text


# ---- the command -------------------------------------------------------------------------------


def write_job(root: Path, name: str, *logs: list | None) -> Path:
    job_dir = root / name
    job_dir.mkdir(parents=True)
    for rank, records in enumerate(logs):
        if records is not None:
            (job_dir / f"rank-{rank:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return job_dir


def test_the_job_is_found_as_a_path_as_log_dir_slash_id_or_as_a_bare_id(tmp_path, monkeypatch, capsys):
    job_dir = write_job(tmp_path / "logs", "j1", OK_RANK0, OK_RANK1)
    monkeypatch.chdir(tmp_path)
    for target in (str(job_dir), "logs/j1", "j1"):
        assert cli.main(["logs", target]) == 0
        assert capsys.readouterr().out.startswith("mpiray job j1: 2 ranks on 2 hosts (node2, vm), exit code 0")
    assert cli.main(["logs"]) == 0  # the newest job under ./logs
    assert "mpiray job j1" in capsys.readouterr().out
    assert cli.main(["logs", "--log-dir", str(tmp_path / "logs"), "j1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cluster"][1]["ip"] == "192.0.2.3"


def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["logs", "no-such-job"]) == 2
    err = capsys.readouterr().err
    assert err == "mpiray logs: no such job: 'no-such-job' (neither a directory nor logs/no-such-job)\n"
    assert cli.main(["logs", str(tmp_path)]) == 2
    assert "has no rank events" in capsys.readouterr().err
    assert cli.main(["logs"]) == 2
    assert "no job logs under logs/" in capsys.readouterr().err


def test_png_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch, capsys):
    job_dir = write_job(tmp_path, "j", OK_RANK0, OK_RANK1)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    assert joblogs.main([str(job_dir), "--png", str(tmp_path / "t.png")]) == 1
    assert "--png needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "t.png").exists()


def bar_pixels(png: Path) -> tuple[tuple[int, int], dict[str, int]]:
    """The image's (height, width) and how many pixels have each segment's colour."""
    import numpy
    from matplotlib import colors, image

    pixels = (image.imread(png)[:, :, :3] * 255).round().astype(int)
    counts = {}
    for kind, colour in timeline.COLOURS.items():
        rgb = numpy.array([round(c * 255) for c in colors.to_rgb(colour)])
        counts[kind] = int((numpy.abs(pixels - rgb).sum(axis=2) <= 6).sum())
    return pixels.shape[:2], counts


def test_the_timeline_is_a_real_image_with_a_bar_per_rank(tmp_path):
    report = analyse(OK_RANK0, OK_RANK1)
    png = tmp_path / "timeline.png"
    width, height = timeline.draw_timeline(report, png)
    shape, counts = bar_pixels(png)
    assert shape == (height, width) and width == 1200 and 250 < height < 500
    legend_patch = 400  # a legend's colour box is ~20x10 pixels: a bar has far more
    for kind in ("waiting", "starting", "alive", "driver", "stopping"):
        assert counts[kind] > legend_patch, (kind, counts)
    assert counts["idle"] == 0


# ---- real jobs (mpirun) ------------------------------------------------------------------------

PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


def mpiray_logs(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mpiray"), "logs", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def report_of(job_dir: Path) -> dict:
    result = mpiray_logs(str(job_dir), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_logs_of_a_real_successful_job(tmp_path):
    run = launch(tmp_path, 2, driver=PROBE, tag="logs-ok", timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    png = tmp_path / "ok.png"
    # As a user types it: a bare job id under --log-dir, through `python -m mpiray`.
    text = subprocess.run([sys.executable, "-m", "mpiray", "logs", "--log-dir", str(run.job_dir.parent),
                           run.job_dir.name, "--png", str(png)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert text.returncode == 0, text.stderr
    assert f"mpiray job {run.job_dir.name}: 2 ranks on 1 host" in text.stdout and "exit code 0" in text.stdout
    assert "first error: none" in text.stdout and "never reported: none" in text.stdout
    report = report_of(run.job_dir)
    assert [e["status"] for e in report["cluster"]] == ["ok", "ok"]
    assert all(e["ip"] and e["resources"]["memory_gib"] > 0 and e["exit_code"] == 0 for e in report["cluster"])
    phases = {p["phase"]: p["s"] for p in report["phases"]}
    assert None not in phases.values(), phases
    order = ["session sent", "head alive", "last join", "driver start", "driver end", "teardown", "exit"]
    assert [phases[name] for name in order] == sorted(phases[name] for name in order)
    assert 0 < phases["exit"] < run.seconds
    assert report["driver"].endswith("probe.py") and report["driver_exit_code"] == 0
    shape, counts = bar_pixels(png)
    assert shape[1] == 1200 and shape[0] > 250
    for kind in ("waiting", "starting", "alive", "driver", "stopping"):
        assert counts[kind] > 400, (kind, counts)


@pytest.mark.slow
def test_logs_of_a_real_failed_start(tmp_path):
    """Rank 1 gets a temp dir root that does not exist (MPMD): it fails at once, rank 0 stops the job."""
    job_id = new_job_id("logs-fail")
    common = [sys.executable, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path / "logs"), "--job-id", job_id,
              "--", *PROBE]
    argv = [str(BIN / "mpirun"), "-np", "1", *common,
            ":", "-np", "1", "-env", "MPIRAY_TEMP_DIR", "/nonexistent-mpiray-root", *common]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    job_dir = tmp_path / "logs" / job_id
    report = report_of(job_dir)
    assert report["exit_code"] == 2
    assert [e["status"] for e in report["cluster"]] == ["ok", "failed"]
    error = report["first_error"]
    assert error["rank"] == 1 and error["log"] == str(job_dir / "rank-0001.log")
    assert "/nonexistent-mpiray-root" in error["message"]
    assert [n["rank"] for n in report["never_reported"]] == [1]
    text = mpiray_logs(str(job_dir)).stdout
    assert re.search(r"first error: rank 1 on \S+ at [\d.]+ s \(log: .*rank-0001\.log\)", text), text
    assert "never reported (no join line): 1 rank" in text


@pytest.mark.slow
def test_logs_of_a_real_startup_timeout(tmp_path, pace):
    """Rank 1's `ray start` hangs (a sitecustomize that sleeps in ray_node.py only): rank 0 gives up
    after its --startup-timeout and names it. Rank 1's own timeout is longer, so rank 0 speaks first.
    Rank 0's timeout leaves its own head room to start on a slow day: it comes from this machine's pace."""
    head_timeout = pace.deadline()
    worker_timeout = head_timeout + 30
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text(
        "import time\n"
        "if b'ray_node.py' in open('/proc/self/cmdline', 'rb').read():\n"
        f"    time.sleep({worker_timeout + 60})\n"
    )
    job_id = new_job_id("logs-timeout")
    common = [sys.executable, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path / "logs"), "--job-id", job_id]
    argv = [str(BIN / "mpirun"), "-np", "1", *common, "--startup-timeout", f"{head_timeout:g}", "--", *PROBE,
            ":", "-np", "1", "-env", "PYTHONPATH", str(hang), *common, "--startup-timeout", f"{worker_timeout:g}",
            "--", *PROBE]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=worker_timeout + 60, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    assert time.monotonic() - started < worker_timeout
    job_dir = tmp_path / "logs" / job_id
    assert_nothing_left(Launch(result.returncode, result.stdout, result.stderr, job_dir, 0), wait=10)
    report = report_of(job_dir)
    assert [e["status"] for e in report["cluster"]] == ["ok", "never reported"]
    error = report["first_error"]
    assert error["rank"] == 0 and error["cause"] == "startup_timeout"
    assert f"1 worker(s) did not join within --startup-timeout {head_timeout:g} s: rank 1 on" in error["message"]
    never = report["never_reported"]
    assert [n["rank"] for n in never] == [1] and never[0]["why"] == "stopped by rank 0 before joining"
    assert never[0]["detail"] == "last step: worker_will_connect"
    phases = {p["phase"]: p["s"] for p in report["phases"]}
    assert phases["head alive"] is not None and phases["last join"] is None and phases["driver start"] is None
    assert head_timeout <= report["cluster"][0]["job_error_s"] < head_timeout + 12
    assert [(c["cause"], c["ranks"]) for c in report["causes"]] == [("startup_timeout", [1])]


@pytest.mark.slow
def test_logs_of_a_job_whose_mpirun_was_killed(tmp_path):
    job_id = new_job_id("logs-killed")
    job_dir = tmp_path / "logs" / job_id
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], [*PROBE, "--sleep", "600"])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        wait_for_event(job_dir, 0, "driver_started")
        time.sleep(1)
        ranks = [rank_pid(job_dir, rank) for rank in (0, 1)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        for pid in ranks:  # mpirun's death reaches its ranks through hydra's proxy; make sure it did
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        logged = Launch(0, "", "", job_dir, 0).stopped_pids() + ranks
        deadline = time.monotonic() + 30
        while alive_pids(logged) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive_pids(logged)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    report = report_of(job_dir)
    assert report["exit_code"] is None and report["unfinished"] == [0, 1]
    assert [e["status"] for e in report["cluster"]] == ["ok", "ok"]
    phases = {p["phase"]: p["s"] for p in report["phases"]}
    assert phases["driver start"] is not None and phases["driver end"] is None and phases["exit"] is None
    assert report["cluster"][0]["segments"][-1][0] == "driver"
    # The guards kept Ray's logs in the job dir as the ranks died: the driver ran at least until then.
    assert report["job_dir_changed_s"] > phases["driver start"] + 0.5
    assert report["cluster"][0]["segments"][-1][2] == report["job_dir_changed_s"]
    text = mpiray_logs(str(job_dir)).stdout
    assert "exit code unknown" in text and "no exit line (killed, or still running): ranks 0-1" in text


def test_the_docs_example_is_what_the_tool_prints_for_the_committed_logs(monkeypatch, capsys):
    """docs/logs.md's `mpiray logs` output of a real 3-host run is the tool's output for logs/example-3-hosts."""
    page = (ROOT / "docs" / "logs.md").read_text()
    shown = re.search(r"<!-- mpiray logs logs/example-3-hosts -->\n```\n(.*?)```", page, re.S).group(1)
    monkeypatch.chdir(ROOT)
    assert joblogs.main(["logs/example-3-hosts"]) == 0
    assert capsys.readouterr().out == shown
    assert "3 ranks on 3 hosts" in shown and "exit code 0" in shown
