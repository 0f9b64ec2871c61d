"""The real runs' tier: every test here starts real processes (mpirun, Ray, a testbed's daemons), and is
marked slow by this folder. Its fixtures: how fast this machine is now (pace), and the Slurm and PBS testbeds'
(their own folders, slurm/ and pbs/, mark their tests; a containers/ test may use the Slurm testbed too)."""

from __future__ import annotations

import sys

import pytest

from helpers import Pace, launch
from pbs.fixture import pbs_jobs, pbs_testbed  # noqa: F401  (fixtures of tests/real/pbs/)
from slurm.fixture import jobs, slurm_testbed  # noqa: F401  (fixtures of tests/real/slurm/ and a container test)

# setup.cfg's timeout (300 s) is the fast tier's; a real run's own deadlines (a job's JOB_TIMEOUT_S, then the wait
# for its nodes to go, an image build) add up past it, and must fire first: they say what did not happen. This is
# the backstop above them, for a test that has no timeout marker of its own.
REAL_TIMEOUT_S = 1200


# Fixtures of what there is one of on this machine, the testbeds and the container images (each built once per
# clone, on first use): the tests that use them are marked `testbed`, and run in one pytest, in turn.
TESTBED_FIXTURES = {"slurm_testbed", "jobs", "pbs_testbed", "pbs_jobs", "images"}


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.slow)
    if item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(REAL_TIMEOUT_S))
    # `-m testbed` and `-m "not testbed"` can run as two pytests side by side (CONTRIBUTING.md).
    if TESTBED_FIXTURES & set(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.testbed)


@pytest.fixture(scope="session")
def pace(tmp_path_factory) -> Pace:
    run = launch(tmp_path_factory.mktemp("pace"), 1, driver=[sys.executable, "-c", "pass"], tag="pace")
    assert run.returncode == 0, run.stderr[-3000:]
    times = {record["event"]: record["time"] for record in run.events(0)}
    return Pace(head_start=times["head_alive"] - times["rank_started"])
