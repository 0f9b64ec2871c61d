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

from conftest import BIN, ROOT, Launch, alive_pids, assert_nothing_left, launch, launcher_argv, new_job_id
from mpiray import cli, joblogs
from mpiray.joblogs import parse, render, timeline
from mpiray.joblogs.analyse import analyse as analyse_logs

# ---- literal logs, shaped as real ones (trimmed) ----------------------------------------------------

OK_RANK0 = """\
2026-11-23 15:39:14.501 rank 0 (vm): mpiray on vm (pid 1901): rank 0 of 2, scheduler none, launcher hydra, 2 tasks, MPICH Version: 5.0.2, Ray 2.60.0, Python 3.11.7
2026-11-23 15:39:14.555 rank 0 (vm): Session sent to 1 workers: head will be at 192.0.2.2:27200
2026-11-23 15:39:14.556 rank 0 (vm): Resources given to Ray: 1 CPUs, GPUs [], memory 4218 MiB, object store 1807 MiB
2026-11-23 15:39:14.556 rank 0 (vm): Starting Ray head node: python ray_node.py start --head --port=27200
2026-11-23 15:39:16.175 rank 0 (vm): Head started at: 192.0.2.2:27200 (node 54e0afa1b13c, 1 CPUs, 0 GPUs, 4.1 GiB)
2026-11-23 15:39:16.177 rank 0 (vm): Ray node processes: pids 1910 1923
2026-11-23 15:39:16.198 rank 0 (vm): Worker on rank 1 with host vm is waiting for its node
2026-11-23 15:39:17.764 rank 0 (vm): Worker on rank 1 with ip 192.0.2.3 is connected! (1 CPUs, 0 GPUs, 4.1 GiB, 3.2 s)
2026-11-23 15:39:17.765 rank 0 (vm): Workers are all running! (1 workers, 2 Ray nodes)
2026-11-23 15:39:17.765 rank 0 (vm): Ready to start driver!
2026-11-23 15:39:17.800 rank 0 (vm): Driver started (pid 2042): python my_driver.py --epochs 3; output also in logs/j/driver.log
2026-11-23 15:39:20.800 rank 0 (vm): Driver exited with code 0
2026-11-23 15:39:21.500 rank 0 (vm): Stopped 8 processes this rank started in 0.7 s (0 needed SIGKILL): pids 1910 1923
2026-11-23 15:39:21.826 rank 0 (vm): Exit code 0
"""

OK_RANK1 = """\
2026-11-23 15:39:14.498 rank 1 (node2): Waiting for broadcast...
2026-11-23 15:39:14.654 rank 1 (node2): mpiray on node2 (pid 1902): rank 1 of 2, scheduler none, launcher hydra, 2 tasks, MPICH Version: 5.0.2, Ray 2.60.0, Python 3.11.7
2026-11-23 15:39:14.665 rank 1 (node2): Starting Ray worker node: python ray_node.py --niced-import start --address=192.0.2.2:27200
2026-11-23 15:39:14.678 rank 1 (node2): Worker on rank 1 with ip 192.0.2.3 will connect to 192.0.2.2:27200
2026-11-23 15:39:17.721 rank 1 (node2): Worker on rank 1 with ip 192.0.2.3 is connected! (node c9aa923f668d, 1 CPUs, 0 GPUs, 4.1 GiB)
2026-11-23 15:39:20.810 rank 1 (node2): Rank 0 ended the job with exit code 0
2026-11-23 15:39:21.387 rank 1 (node2): Stopped 6 processes this rank started in 0.5 s (1 needed SIGKILL): pids 1916 2098
2026-11-23 15:39:21.832 rank 1 (node2): Exit code 0
"""

# Rank 3 of 4 fails at once (a bad --temp-dir); rank 0 relays it and stops everyone; rank 2 has no log.
FAILED_RANK0 = """\
2026-11-23 15:16:42.832 rank 0 (vm): mpiray on vm (pid 23408): rank 0 of 4, scheduler none, launcher hydra, 4 tasks
2026-11-23 15:16:42.892 rank 0 (vm): Session sent to 3 workers: head will be at 192.0.2.2:25200
2026-11-23 15:16:42.896 rank 0 (vm): Starting Ray head node: python ray_node.py start --head
2026-11-23 15:16:44.742 rank 0 (vm): Head started at: 192.0.2.2:25200 (node 6c77d7d660c8, 1 CPUs, 0 GPUs, 4.1 GiB)
2026-11-23 15:16:44.766 rank 0 (vm): Worker on rank 2 with host vm2 is waiting for its node
2026-11-23 15:16:44.766 rank 0 (vm): ERROR: rank 3 on vm failed: cannot create the temp dir /nonexistent-dir/mpiray-0-r3-itlx7g: No such file or directory; point --temp-dir (or TMPDIR) at a writable node-local directory (log: /j/rank-0003.log)
2026-11-23 15:16:46.042 rank 0 (vm): Stopped 7 processes this rank started in 0.7 s (0 needed SIGKILL): pids 23435 23479
2026-11-23 15:16:46.152 rank 0 (vm): Exit code 2
"""
FAILED_RANK1 = """\
2026-11-23 15:16:42.829 rank 1 (vm): Waiting for broadcast...
2026-11-23 15:16:42.991 rank 1 (vm): mpiray on vm (pid 23409): rank 1 of 4, scheduler none, launcher hydra, 4 tasks
2026-11-23 15:16:42.999 rank 1 (vm): Starting Ray worker node: python ray_node.py --niced-import start
2026-11-23 15:16:43.003 rank 1 (vm): Worker on rank 1 with ip 192.0.2.2 will connect to 192.0.2.2:25200
2026-11-23 15:16:44.774 rank 1 (vm): rank 0 ended the job with exit code 2
2026-11-23 15:16:44.831 rank 1 (vm): Stopped 1 processes this rank started in 0.1 s (0 needed SIGKILL): pids 23440
2026-11-23 15:16:46.206 rank 1 (vm): Exit code 2
"""
FAILED_RANK3 = """\
2026-11-23 15:16:42.833 rank 3 (vm): Waiting for broadcast...
2026-11-23 15:16:42.990 rank 3 (vm): mpiray on vm (pid 23411): rank 3 of 4, scheduler none, launcher hydra, 4 tasks
2026-11-23 15:16:42.990 rank 3 (vm): ERROR: cannot create the temp dir /nonexistent-dir/mpiray-0-r3-itlx7g: No such file or directory; point --temp-dir (or TMPDIR) at a writable node-local directory
2026-11-23 15:16:46.283 rank 3 (vm): Exit code 2
"""

# Rank 0 times out waiting for rank 1, whose log is missing (e.g. a node-local disk).
TIMEOUT_RANK0 = """\
2026-11-23 14:55:35.046 rank 0 (n1): mpiray on n1 (pid 4398): rank 0 of 2, scheduler slurm, launcher srun, 2 tasks
2026-11-23 14:55:35.206 rank 0 (n1): Session sent to 1 workers: head will be at 10.0.0.1:24800
2026-11-23 14:55:35.206 rank 0 (n1): Starting Ray head node: python ray_node.py start --head
2026-11-23 14:55:40.746 rank 0 (n1): Head started at: 10.0.0.1:24800 (node 7961b5aef486, 1 CPUs, 0 GPUs, 2.1 GiB)
2026-11-23 14:55:40.771 rank 0 (n1): Worker on rank 1 with host n2 is waiting for its node
2026-11-23 14:55:50.042 rank 0 (n1): ERROR: 1 worker(s) did not join within --startup-timeout 15 s: rank 1 on n2 (log: logs/2/rank-0001.log)
2026-11-23 14:55:53.839 rank 0 (n1): Stopped 7 processes this rank started in 3.8 s (0 needed SIGKILL): pids 4457
2026-11-23 14:55:56.756 rank 0 (n1): Exit code 1
"""


def analyse(*logs: str | None, job_id: str = "j", changed: float | None = None) -> dict:
    texts = {r: (f"/j/rank-{r:04d}.log", t) for r, t in enumerate(logs) if t is not None}
    return analyse_logs(job_id, "/j", texts, changed)


def by_rank(report: dict) -> dict[int, dict]:
    return {entry["rank"]: entry for entry in report["cluster"]}


def phase(report: dict, name: str) -> float | None:
    return next(p["s"] for p in report["phases"] if p["phase"] == name)


# ---- the parser --------------------------------------------------------------------------------


def test_lines_carry_time_rank_host_and_a_multi_line_message():
    lines = parse.parse_lines(
        "2026-11-23 15:00:00.250 rank 2 (gpu-node7): ERROR: unexpected failure:\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
        "2026-11-23 15:00:01.000 rank 2 (gpu-node7): Exit code 1\n"
    )
    assert [(l.rank, l.host) for l in lines] == [(2, "gpu-node7"), (2, "gpu-node7")]
    assert lines[0].message.endswith("ValueError: boom") and lines[0].message.count("\n") == 3
    assert lines[1].time - lines[0].time == pytest.approx(0.75)


def test_resources_are_read_from_either_sides_wording():
    assert parse.parse_resources("node 54e0afa1b13c, 1 CPUs, 0 GPUs, 4.1 GiB") == \
        {"cpus": 1.0, "gpus": 0.0, "memory_gib": 4.1}
    assert parse.parse_resources("8 CPUs, 2 GPUs, 60.5 GiB, 2.9 s")["gpus"] == 2.0
    assert parse.parse_resources("idle") == {}


def test_a_clean_job_reads_as_a_table_and_its_phases():
    report = analyse(OK_RANK0, OK_RANK1)
    ranks = by_rank(report)
    assert report["ranks"] == 2 and report["hosts"] == ["node2", "vm"] and report["exit_code"] == 0
    assert [ranks[r]["status"] for r in (0, 1)] == ["ok", "ok"]
    assert ranks[1]["ip"] == "192.0.2.3" and ranks[1]["resources"] == {"cpus": 1.0, "gpus": 0.0, "memory_gib": 4.1}
    # Times are after the job's first line: rank 1's "Waiting for broadcast..." at 15:39:14.498.
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


def test_segments_show_each_ranks_start_up_in_order():
    ranks = by_rank(analyse(OK_RANK0, OK_RANK1))
    assert [s[0] for s in ranks[0]["segments"]] == ["waiting", "starting", "alive", "driver", "stopping"]
    assert [s[0] for s in ranks[1]["segments"]] == ["waiting", "starting", "alive", "stopping"]
    # A worker's `ray start` may go only once the head is ALIVE: it waits until then.
    assert ranks[1]["segments"][1][1] == pytest.approx(1.677)
    for entry in ranks.values():
        ends = [t for segment in entry["segments"] for t in segment[1:]]
        assert ends == sorted(ends)
    assert ranks[0]["segments"][-1][2] == pytest.approx(7.328)  # its "Exit code" line


def test_a_failed_start_names_the_failing_rank_first_and_the_ranks_that_never_reported():
    report = analyse(FAILED_RANK0, FAILED_RANK1, None, FAILED_RANK3)
    ranks = by_rank(report)
    assert report["ranks"] == 4 and report["exit_code"] == 2
    assert [ranks[r]["status"] for r in range(4)] == ["ok", "never reported", "never reported", "failed"]
    error = report["first_error"]
    assert (error["rank"], error["host"], error["log"], error["reported_by"]) == (3, "vm", "/j/rank-0003.log", 3)
    assert error["message"].startswith("cannot create the temp dir /nonexistent-dir")
    never = {n["rank"]: n for n in report["never_reported"]}
    assert sorted(never) == [1, 2, 3]
    assert never[1]["why"] == "stopped by rank 0 before joining"
    assert "will connect to 192.0.2.2:25200" in never[1]["detail"]
    assert never[2]["why"] == "no log" and never[2]["host"] == "vm2"  # rank 0 heard from it
    assert never[3]["why"] == "failed"
    assert phase(report, "last join") is None and phase(report, "driver start") is None
    text = render.format_report(report)
    assert "first error: rank 3 on vm at 0.16 s (log: /j/rank-0003.log)" in text
    assert "rank 2 on vm2: no log" in text
    assert re.search(r"^\s+3\s+vm\s+-\s+-\s+-\s+failed\s+2$", text, re.MULTILINE), text


def test_rank_0_relaying_a_failure_counts_as_the_failing_ranks_when_its_own_log_is_missing():
    report = analyse(FAILED_RANK0, FAILED_RANK1, None, None)
    error = report["first_error"]
    assert (error["rank"], error["host"], error["log"], error["reported_by"]) == (3, "vm", "/j/rank-0003.log", 0)
    ranks = by_rank(report)
    assert ranks[0]["status"] == "ok" and ranks[0]["job_error_s"] is None  # its own node was fine
    assert ranks[3]["status"] == "failed" and ranks[3]["error"].startswith("cannot create the temp dir")
    assert ranks[3]["error_s"] == pytest.approx(1.937)  # when rank 0 heard of it
    assert {n["rank"]: n["why"] for n in report["never_reported"]}[3] == "failed"


def test_a_startup_timeout_names_the_missing_rank_from_rank_0s_log():
    report = analyse(TIMEOUT_RANK0, None)
    ranks = by_rank(report)
    assert report["ranks"] == 2 and report["exit_code"] == 1
    assert ranks[0]["status"] == "ok" and ranks[1]["status"] == "never reported"
    assert ranks[1]["host"] == "n2" and ranks[1]["log"] == "/j/rank-0001.log"
    assert report["first_error"]["rank"] == 0
    assert "did not join within --startup-timeout 15 s" in report["first_error"]["message"]
    assert [n["rank"] for n in report["never_reported"]] == [1]
    assert ranks[0]["job_error_s"] == pytest.approx(14.996)


def test_a_killed_jobs_logs_stop_mid_way():
    cut = OK_RANK0.split("2026-11-23 15:39:20.800")[0]  # SIGKILL while the driver ran
    report = analyse(cut, OK_RANK1.split("2026-11-23 15:39:20.810")[0] + "2026-11-23 15:39:18.0")
    ranks = by_rank(report)
    assert report["exit_code"] is None and report["unfinished"] == [0, 1]
    assert [ranks[r]["status"] for r in (0, 1)] == ["ok", "ok"]
    assert phase(report, "driver start") is not None and phase(report, "driver end") is None
    assert phase(report, "exit") is None
    assert ranks[0]["segments"][-1][0] == "driver"  # it ran until the log stops
    text = render.format_report(report)
    assert "exit code unknown" in text and "no exit line (killed, or still running): ranks 0-1" in text
    # The job dir changed later (a guard kept a killed rank's Ray logs): the last state lasted at least until the kill.
    lines = parse.parse_lines("2026-11-23 15:39:25.501 rank 0 (vm): -")
    report = analyse(cut, None, changed=lines[0].time)
    assert report["job_dir_changed_s"] == pytest.approx(11.0)
    rank0 = by_rank(report)[0]
    assert rank0["segments"][-1] == ["driver", pytest.approx(3.299), pytest.approx(11.0)]
    assert rank0["logged_until_s"] == pytest.approx(3.299)


def test_ranks_missing_from_the_job_dir_come_from_rank_0s_count():
    report = analyse(OK_RANK0.replace("rank 0 of 2", "rank 0 of 6"))
    assert report["ranks"] == 6
    assert [n["rank"] for n in report["never_reported"]] == [2, 3, 4, 5]  # rank 1 joined, said rank 0
    assert "ranks 2-5: no log" in render.format_report(report)
    headless = analyse(None, FAILED_RANK1, None, FAILED_RANK3)
    assert headless["ranks"] == 4 and by_rank(headless)[0]["status"] == "never reported"


def test_a_reused_job_id_shows_the_last_run_only():
    second = OK_RANK0.replace("15:39:", "15:49:").replace("pid 1901", "pid 7777")
    report = analyse(OK_RANK0 + second, OK_RANK1)  # rank 1's log is the first run's only
    assert report["earlier_runs"] == 1 and report["started"] == "2026-11-23 15:49:14.501"
    rank1 = by_rank(report)[1]
    assert not rank1["has_log"] and rank1["segments"] == []  # the earlier run's lines are not this run's
    assert rank1["status"] == "ok" and rank1["joined_s"] == pytest.approx(3.263)  # as rank 0 heard it
    lines, earlier = parse.last_run(parse.parse_lines(OK_RANK1 + OK_RANK1.replace("15:39:", "15:59:")))
    assert earlier == 1 and lines[0].message == "Waiting for broadcast..." and len(lines) == 8


def test_idle_ranks_and_the_library_front_end():
    rank0 = OK_RANK0.replace(
        "2026-11-23 15:39:17.764 rank 0 (vm): Worker on rank 1 with ip 192.0.2.3 is connected! (1 CPUs, 0 GPUs, 4.1 GiB, 3.2 s)",
        "2026-11-23 15:39:17.764 rank 0 (vm): Worker on rank 1 with idle: its host's Ray node runs on the host's first rank",
    ).replace(
        "Driver started (pid 2042): python my_driver.py --epochs 3; output also in logs/j/driver.log",
        "Connected this script to the cluster (mpiray.init): 192.0.2.2:27200",
    ).replace("2026-11-23 15:39:20.800 rank 0 (vm): Driver exited with code 0\n", "")
    report = analyse(rank0, None)
    assert by_rank(report)[1]["status"] == "idle" and report["never_reported"] == []
    assert report["driver"] == "the calling script (mpiray.init)"
    assert [s[0] for s in by_rank(report)[0]["segments"]] == ["waiting", "starting", "alive", "driver", "stopping"]


def test_warnings_and_errors_with_tracebacks_read_in_one_line():
    rank1 = OK_RANK1.replace(
        "2026-11-23 15:39:21.387 rank 1 (node2): Stopped",
        "2026-11-23 15:39:21.000 rank 1 (node2): WARNING: not every rank reached the end (one may have died)\n"
        "2026-11-23 15:39:21.100 rank 1 (node2): ERROR: unexpected failure:\nTraceback (most recent call last):\n"
        "  File \"lifecycle.py\", line 9\nRuntimeError: boom\n"
        "2026-11-23 15:39:21.387 rank 1 (node2): Stopped",
    )
    rank1 = rank1.replace(
        "2026-11-23 15:39:17.721 rank 1 (node2): Worker",
        "2026-11-23 15:39:16.000 rank 1 (node2): WARNING: `ray start` exited with code 1 before its node joined: "
        "timed out; the head is up: starting this rank's node again (attempt 2 of 3)\n"
        "2026-11-23 15:39:17.721 rank 1 (node2): Worker",
    )
    report = analyse(OK_RANK0, rank1)
    assert by_rank(report)[1]["status"] == "failed" and by_rank(report)[1]["join_attempts"] == 2
    assert [w["rank"] for w in report["warnings"]] == [1, 1]
    text = render.format_report(report)
    assert "  unexpected failure: ... RuntimeError: boom" in text
    assert "joins tried again: rank 1 (2 attempts)" in text
    assert "warnings: 2; first: rank 1 at 1.50 s: `ray start` exited with code 1" in text


# ---- the command -------------------------------------------------------------------------------


def write_job(root: Path, name: str, *logs: str | None) -> Path:
    job_dir = root / name
    job_dir.mkdir(parents=True)
    for rank, text in enumerate(logs):
        if text is not None:
            (job_dir / f"rank-{rank:04d}.log").write_text(text)
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
    assert "has no rank logs" in capsys.readouterr().err
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
                           run.job_dir.name, "--png", str(png)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
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
def test_logs_of_a_real_startup_timeout(tmp_path):
    """Rank 1's `ray start` hangs (a sitecustomize that sleeps in ray_node.py only): rank 0 gives up
    after its --startup-timeout and names it. Rank 1's own timeout is longer, so rank 0 speaks first."""
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text(
        "import time\n"
        "if b'ray_node.py' in open('/proc/self/cmdline', 'rb').read():\n"
        "    time.sleep(120)\n"
    )
    job_id = new_job_id("logs-timeout")
    common = [sys.executable, str(ROOT / "start_ray.py"), "--log-dir", str(tmp_path / "logs"), "--job-id", job_id]
    argv = [str(BIN / "mpirun"), "-np", "1", *common, "--startup-timeout", "8", "--", *PROBE,
            ":", "-np", "1", "-env", "PYTHONPATH", str(hang), *common, "--startup-timeout", "60", "--", *PROBE]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    assert time.monotonic() - started < 60
    job_dir = tmp_path / "logs" / job_id
    assert_nothing_left(Launch(result.returncode, result.stdout, result.stderr, job_dir, 0), wait=10)
    report = report_of(job_dir)
    assert [e["status"] for e in report["cluster"]] == ["ok", "never reported"]
    error = report["first_error"]
    assert error["rank"] == 0 and "1 worker(s) did not join within --startup-timeout 8 s: rank 1 on" in error["message"]
    never = report["never_reported"]
    assert [n["rank"] for n in never] == [1] and never[0]["why"] == "stopped by rank 0 before joining"
    assert "will connect to" in never[0]["detail"]
    phases = {p["phase"]: p["s"] for p in report["phases"]}
    assert phases["head alive"] is not None and phases["last join"] is None and phases["driver start"] is None
    assert 8 <= report["cluster"][0]["job_error_s"] < 20


@pytest.mark.slow
def test_logs_of_a_job_whose_mpirun_was_killed(tmp_path):
    job_id = new_job_id("logs-killed")
    job_dir = tmp_path / "logs" / job_id
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], [*PROBE, "--sleep", "600"])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "Driver started" not in _text(job_dir / "rank-0000.log"):
            time.sleep(0.2)
        assert "Driver started" in _text(job_dir / "rank-0000.log")
        time.sleep(1)
        ranks = [int(pid) for r in (0, 1) for pid in re.findall(r"\(pid (\d+)\): rank \d of 2", _text(job_dir / f"rank-{r:04d}.log"))]
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


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_the_readmes_example_is_what_the_tool_prints_for_the_committed_logs(monkeypatch, capsys):
    """README's `mpiray logs` output of a real 3-host run is the tool's output for logs/example-3-hosts."""
    readme = (ROOT / "README.md").read_text()
    shown = re.search(r"<!-- mpiray logs logs/example-3-hosts -->\n```\n(.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(ROOT)
    assert joblogs.main(["logs/example-3-hosts"]) == 0
    assert capsys.readouterr().out == shown
    assert "3 ranks on 3 hosts" in shown and "exit code 0" in shown
