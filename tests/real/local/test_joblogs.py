"""`mpiray logs` on real jobs under the real mpirun; the report's pure parts are tested in tests/logs/report/."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import (
    BIN,
    ROOT,
    Launch,
    alive_pids,
    assert_nothing_left,
    exit_codes,
    launch,
    launcher_argv,
    new_job_id,
    rank_pid,
    wait_for_events,
)
from reword import MARK
from sample_jobs import bar_pixels

# ---- literal events, shaped as real ones (trimmed) ---------------------------------------------------


# ---- the report ------------------------------------------------------------------------------------


# ---- the command -------------------------------------------------------------------------------


# ---- real jobs (mpirun) ------------------------------------------------------------------------

PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


def mpiray_logs(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mpiray"), "logs", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def report_of(job_dir: Path) -> dict:
    result = mpiray_logs(str(job_dir), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


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


def test_logs_of_a_real_startup_timeout(tmp_path, pace):
    """Rank 1's `ray start` hangs (a sitecustomize that sleeps in the starter only): rank 0 gives up
    after its --startup-timeout and names it. Rank 1's own timeout is longer, so rank 0 speaks first.
    Rank 0's timeout leaves its own head room to start on a slow day: it comes from this machine's pace."""
    head_timeout = pace.deadline()
    worker_timeout = head_timeout + 30
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text(
        "import time\n"
        "if b'mpiray.raynode.starter' in open('/proc/self/cmdline', 'rb').read():\n"
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


def test_logs_of_a_job_whose_mpirun_was_killed(tmp_path):
    job_id = new_job_id("logs-killed")
    job_dir = tmp_path / "logs" / job_id
    argv = launcher_argv(2, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], [*PROBE, "--sleep", "600"])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        wait_for_events(job_dir / "rank-0000.jsonl", "driver_started")[-1]
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




def normalized_report(job_dir: Path) -> list[str]:
    """`mpiray logs JOB`'s text with what differs from run to run (numbers, ids, paths, hosts) blotted out."""
    result = subprocess.run([str(BIN / "mpiray"), "logs", str(job_dir)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(job_dir), "JOB_DIR").replace(job_dir.name, "JOB")
    text = re.sub(r"sha256:\w+", "TOKEN", text)
    text = re.sub(r"\d+(\.\d+)*", "N", text)
    return [re.sub(r" +", " ", line) for line in text.splitlines()]


def test_rewording_every_message_changes_no_report_and_no_test_helper(tmp_path):
    plain = launch(tmp_path / "plain", 2, driver=PROBE, tag="plain")
    job_id = new_job_id("reworded")
    argv = [str(BIN / "mpirun"), "-np", "2", sys.executable, str(ROOT / "tests/drivers/reworded.py"),
            "--log-dir", str(tmp_path / "reworded" / "logs"), "--job-id", job_id, "--", *PROBE]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    reworded = Launch(result.returncode, result.stdout, result.stderr, tmp_path / "reworded" / "logs" / job_id, 0)
    assert plain.returncode == reworded.returncode == 0, reworded.stderr[-3000:]
    for rank in (0, 1):  # every line of the human log is in the other words
        lines = (reworded.job_dir / f"rank-{rank:04d}.log").read_text().splitlines()
        assert lines and all(MARK in line for line in lines if re.match(r"\d{4}-", line)), lines[:3]
    assert normalized_report(plain.job_dir) == normalized_report(reworded.job_dir)
    assert exit_codes(reworded.job_dir, 2) == [0, 0]
    assert reworded.event(0, "cluster_ready")["nodes"] == 2
    assert_nothing_left(reworded)
    assert_nothing_left(plain)
