"""Sample jobs' events, as ranks write them, for the tests of `mpiray logs`' pure parts (tests/unit/logs/report/)
and of its reading of real jobs (tests/real/local/test_joblogs.py): a clean 2-rank job, a failed start, a start-up
timeout; and a row of the cluster table with what the classifier reads of it (entry)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mpiray.logs.events import KINDS
from mpiray.logs.report import timeline
from mpiray.logs.report.analyse import analyse as analyse_logs
from mpiray.logs.report.model import RankEntry


def entry(rank: int, status: str = "ok", cause: str = "", error: str = "", exit_code: int | None = 1) -> RankEntry:
    """A row of the cluster table with what the classifier reads of it (the rest empty)."""
    return RankEntry(rank=rank, host="", pid=None, ip="", resources={}, resources_text="", joined_s=None, status=status,
                     exit_code=exit_code, log="", has_log=True, logged_until_s=None, first_s=None, last_s=None,
                     last_step="", join_slot_s=None, join_attempts=1, error=error, error_s=None, cause=cause,
                     launched_s=None, mpi_ready_s=None, stopped=None)


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


def at(stamp, rank, host, pid, event, **fields):
    return rec(f"2026-11-23 15:16:{stamp}", rank, host, pid, event, **fields)


# Rank 3 of 4 fails at once (a bad --temp-dir); rank 0 relays it and stops everyone; rank 2 has no log.
TEMP_DIR_ERROR = ("cannot create the temp dir /nonexistent-dir/mpiray-0-r3-itlx7g: No such file or directory; point "
                  "--temp-dir (or TMPDIR) at a writable node-local directory")


FAILED_RANK0 = [
    at("42.832", 0, "vm", 23408, "rank_started", size=4, launch="scheduler none, launcher hydra, 4 tasks"),
    at("42.892", 0, "vm", 23408, "session_sent", workers=3, gcs_address="192.0.2.2:25200"),
    at("42.896", 0, "vm", 23408, "node_starting", role="head", command="python -m mpiray.raynode.starter start --head"),
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
    at("42.999", 1, "vm", 23409, "node_starting", role="worker", command="python -m mpiray.raynode.starter --niced-import start"),
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
    ("35.206", "node_starting", dict(role="head", command="python -m mpiray.raynode.starter start --head")),
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
    return analyse_logs(job_id, "/j", records, changed, ray_logs=ray_logs)


def write_job(root: Path, name: str, *logs: list | None) -> Path:
    job_dir = root / name
    job_dir.mkdir(parents=True)
    for rank, records in enumerate(logs):
        if records is not None:
            (job_dir / f"rank-{rank:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return job_dir


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
