"""The rank log as events: written as JSON lines for programs and as English for people, read back
whole, and the English free to change: every message reworded, a real job reads the same."""

from __future__ import annotations

import os
import re

import pytest

from mpiray.logs.events import KINDS, RankLog, read_events, render


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
