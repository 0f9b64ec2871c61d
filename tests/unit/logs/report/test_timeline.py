"""The start-up timeline image (mpiray/logs/report/timeline.py)."""

from __future__ import annotations

import sys

from mpiray.logs import report as joblogs
from mpiray.logs.report import timeline

from sample_jobs import OK_RANK0, OK_RANK1, analyse, bar_pixels, write_job


def test_png_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch, capsys):
    job_dir = write_job(tmp_path, "j", OK_RANK0, OK_RANK1)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    assert joblogs.main([str(job_dir), "--png", str(tmp_path / "t.png")]) == 1
    assert "--png needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "t.png").exists()


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
