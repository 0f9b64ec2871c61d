"""The real runs' tier: every test here starts real processes (mpirun, Ray, a testbed's daemons), and is
marked slow by this folder. Its fixtures: how fast this machine is now (pace), and the Slurm and PBS testbeds'
(their own folders, slurm/ and pbs/, mark their tests; a containers/ test may use the Slurm testbed too)."""

from __future__ import annotations

import sys

import pytest

from helpers import Pace, launch
from pbs.fixture import pbs_jobs, pbs_testbed  # noqa: F401  (fixtures of tests/real/pbs/)
from slurm.fixture import jobs, slurm_testbed  # noqa: F401  (fixtures of tests/real/slurm/ and a container test)


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def pace(tmp_path_factory) -> Pace:
    run = launch(tmp_path_factory.mktemp("pace"), 1, driver=[sys.executable, "-c", "pass"], tag="pace")
    assert run.returncode == 0, run.stderr[-3000:]
    times = {record["event"]: record["time"] for record in run.events(0)}
    return Pace(head_start=times["head_alive"] - times["rank_started"])
