"""The rank log as events: written as JSON lines for programs and as English for people, read back
whole, and the English free to change: every message reworded, a real job reads the same."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mpiray.events import KINDS, RankLog, read_events, render

from conftest import BIN, ROOT, Launch, assert_nothing_left, exit_codes, launch, new_job_id
from reword import MARK


def test_an_events_file_is_read_back_and_a_line_cut_short_is_skipped(tmp_path):
    log = RankLog(2, "gpu-node7")
    log.open(tmp_path)
    log.event("rank_started", size=4, launch="l", mpi="m", ray="2.60.0", python="3.11.7")
    log.event("failed", message="boom\nsecond line", cause="")
    log.close()
    with open(tmp_path / "rank-0002.jsonl", "a") as out:
        out.write('{"v": 1, "time": 1, "rank": 2, "ev')  # killed mid-write
    records = read_events(tmp_path / "rank-0002.jsonl")
    assert [r["event"] for r in records] == ["rank_started", "failed"]
    assert records[1]["fields"]["message"] == "boom\nsecond line" and records[1]["level"] == "error"
    assert {"v", "time", "rank", "host", "pid", "event", "level", "fields"} <= records[0].keys()
    human = (tmp_path / "rank-0002.log").read_text().splitlines()
    assert human[0].endswith(f"rank 2 (gpu-node7): mpiray on gpu-node7 (pid {os.getpid()}): rank 2 of 4, l, m, "
                             f"Ray 2.60.0, Python 3.11.7")
    assert "ERROR: boom" in human[1] and human[2] == "second line"


def test_events_before_the_log_opens_wait_and_an_event_never_breaks_a_rank(tmp_path):
    log = RankLog(1, "h")
    log.event("waiting_for_session")
    log.event("head_alive", gcs_address="a:1")  # fields missing: rendered as their names, not an error
    log.open(tmp_path)
    log.close()
    assert [r["event"] for r in read_events(tmp_path / "rank-0001.jsonl")] == ["waiting_for_session", "head_alive"]
    assert "{node_id" in (tmp_path / "rank-0001.log").read_text()
    with pytest.raises(KeyError):
        log.event("no_such_event")


def test_every_kinds_text_renders_from_fields_of_its_own():
    for name, kind in KINDS.items():
        assert kind.level in ("info", "warning", "error"), name
        fields = {field: 1 for field in re.findall(r"{(\w+)", kind.text)}
        line = render(name, fields)
        assert "{" not in line, (name, line)  # every name in the text is a field it can be given


PROBE = [sys.executable, str(ROOT / "tests/drivers/probe.py")]


def normalized_report(job_dir: Path) -> list[str]:
    """`mpiray logs JOB`'s text with what differs from run to run (numbers, ids, paths, hosts) blotted out."""
    result = subprocess.run([str(BIN / "mpiray"), "logs", str(job_dir)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(job_dir), "JOB_DIR").replace(job_dir.name, "JOB")
    text = re.sub(r"sha256:\w+", "TOKEN", text)
    text = re.sub(r"\d+(\.\d+)*", "N", text)
    return [re.sub(r" +", " ", line) for line in text.splitlines()]


@pytest.mark.slow
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


def test_a_log_opened_before_mpi_init_moves_when_the_rank_learns_it_writes_elsewhere(tmp_path):
    # A job that joins another's cluster knows its own job id before MPI_Init, the cluster's log dir after.
    log = RankLog(1, "n2")
    log.open(tmp_path / "own", provisional=True)
    log.event("launched", launcher="srun", task=1, scheduler="slurm", mpi_type="pmi2", netmod="ofi")
    log.event("waiting_for_session")
    log.open(tmp_path / "cluster", prefix="join-77-")
    log.event("exit", code=0)
    log.close()
    assert not (tmp_path / "own").exists()  # the dir made for it went too
    moved = read_events(tmp_path / "cluster" / "join-77-rank-0001.jsonl")
    assert [r["event"] for r in moved] == ["launched", "waiting_for_session", "exit"]
    same = RankLog(0, "n1")  # the common case: the same dir, nothing moves
    same.open(tmp_path / "job", provisional=True)
    same.event("waiting_for_session")
    same.open(tmp_path / "job")
    same.event("exit", code=0)
    same.close()
    assert [r["event"] for r in read_events(tmp_path / "job" / "rank-0000.jsonl")] == ["waiting_for_session", "exit"]
