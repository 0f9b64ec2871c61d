"""The start-up timeline image (mpiray/logs/report/timeline.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mpiray.logs import report as joblogs
from mpiray.logs.events import KINDS
from mpiray.logs.report import timeline
from mpiray.logs.report.analyse import analyse as analyse_logs


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


def analyse(*logs: list | None, job_id: str = "j", changed: float | None = None, ray_logs=None) -> dict:
    records = {r: (f"/j/rank-{r:04d}.log", t) for r, t in enumerate(logs) if t is not None}
    return analyse_logs(job_id, "/j", records, changed, ray_logs)


def write_job(root: Path, name: str, *logs: list | None) -> Path:
    job_dir = root / name
    job_dir.mkdir(parents=True)
    for rank, records in enumerate(logs):
        if records is not None:
            (job_dir / f"rank-{rank:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return job_dir


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
