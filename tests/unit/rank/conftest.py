"""The rank protocol's fixtures: each test twice (mpiray's messages, and every message reworded), and the
dry-run config every rank runs with."""

from __future__ import annotations

import socket

import pytest

from mpiray.config import Config
from mpiray.rank import teardown

from memory_comm import HostNames
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


@pytest.fixture
def names(monkeypatch) -> HostNames:
    """Each rank's thread named after the host the test puts it on (n1, n2, ...): without it every rank says this
    machine's name, and ranks on two hosts are refused as hosts that share a hostname (preflight.hostname_clash)."""
    found = HostNames()
    monkeypatch.setattr(socket, "gethostname", found)
    return found
