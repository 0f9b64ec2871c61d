"""The rank protocol's fixtures: each test twice (mpiray's messages, and every message reworded), and the
dry-run config every rank runs with."""

from __future__ import annotations

import pytest

from mpiray.config import Config
from mpiray.rank import teardown

from reword import put_back, reword


@pytest.fixture(params=["plain", "reworded"])
def wording(request):
    """Each test twice: with mpiray's messages, and with every message reworded (the events are the same)."""
    if request.param == "plain":
        yield
        return
    old = reword()
    yield
    put_back(old)


@pytest.fixture
def config(tmp_path, monkeypatch, wording) -> Config:
    monkeypatch.setattr(teardown, "MEET_MARGIN", 0.5)  # a rank that never came: the others wait this long
    return Config(driver=("true",), log_dir=tmp_path / "logs", job_id="job", dry_run=True, startup_timeout=10,
                  stop_grace=1, progress="off")
