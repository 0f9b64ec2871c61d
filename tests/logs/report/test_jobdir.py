"""`mpiray logs` finds a job's logs (mpiray/logs/report/jobdir.py) and answers bad input in one line; the
docs' example is what it prints."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from mpiray import cli
from mpiray.logs import report as joblogs
from mpiray.logs.events import KINDS

from helpers import (
    ROOT,
)


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
    rank0("14.556", "node_starting", role="head", command="python -m mpiray.raynode.starter start --head --port=27200"),
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
    rank1("14.665", "node_starting", role="worker", command="python -m mpiray.raynode.starter --niced-import start"),
    rank1("14.678", "worker_will_connect", ip="192.0.2.3", gcs_address="192.0.2.2:27200"),
    rank1("17.721", "node_alive", ip="192.0.2.3", node_id="c9aa923f668d", **NODE),
    rank1("20.810", "job_ended", code=0),
    rank1("21.387", "processes_stopped", count=6, seconds=0.5, killed=1, pids=[1916, 2098]),
    rank1("21.832", "exit", code=0),
]


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


def test_the_docs_example_is_what_the_tool_prints_for_the_committed_logs(monkeypatch, capsys):
    """docs/logs.md's `mpiray logs` output of a real 3-host run is the tool's output for logs/example-3-hosts."""
    page = (ROOT / "docs" / "logs.md").read_text()
    shown = re.search(r"<!-- mpiray logs logs/example-3-hosts -->\n```\n(.*?)```", page, re.S).group(1)
    monkeypatch.chdir(ROOT)
    assert joblogs.main(["logs/example-3-hosts"]) == 0
    assert capsys.readouterr().out == shown
    assert "3 ranks on 3 hosts" in shown and "exit code 0" in shown
