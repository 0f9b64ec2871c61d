"""The fixtures every test gets: how fast this machine is now (pace), a private cluster registry, and the
check that a test leaves no process behind; the Slurm and PBS testbeds', for the tests marked slurm and pbs. The
helpers of the real runs are in helpers.py."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

pytest.register_assert_rewrite("helpers")

from helpers import Pace, launch, mapped_files, shm_segments  # noqa: E402
from pbs.fixture import pbs_jobs, pbs_testbed  # noqa: E402, F401  (fixtures of the tests marked pbs)
from process_control import descendants, describe, wait_for  # noqa: E402
from slurm.fixture import jobs, slurm_testbed  # noqa: E402, F401  (fixtures of the tests marked slurm)


@pytest.fixture(scope="session")
def pace(tmp_path_factory) -> Pace:
    run = launch(tmp_path_factory.mktemp("pace"), 1, driver=[sys.executable, "-c", "pass"], tag="pace")
    assert run.returncode == 0, run.stderr[-3000:]
    times = {record["event"]: record["time"] for record in run.events(0)}
    return Pace(head_start=times["head_alive"] - times["rank_started"])


@pytest.fixture(scope="session", autouse=True)
def private_registry(tmp_path_factory):
    """Every job the tests start publishes its cluster here, never in the user's ~/.mpiray (the processes
    the tests start inherit the variable)."""
    root = tmp_path_factory.mktemp("registry")
    os.environ["MPIRAY_REGISTRY"] = str(root)
    yield root


@pytest.fixture(autouse=True)
def no_leftover_children():
    """After each test, nothing the test started may still run (ended here by PID, and the test fails).

    Processes that were already there (the Slurm testbed's daemons, from a session fixture) are not
    the test's.
    """
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    segments_before = shm_segments()
    yield
    wait_for(lambda: not descendants(before), 10)
    left = descendants(before)
    # MPICH's (Open MPI's) shared-memory segments of ranks a test SIGKILLed on purpose, or that
    # Open MPI's mpirun SIGKILLed (MPI_Finalize unlinks them): stale ones can make a later MPI_Init fail.
    for segment in shm_segments() - segments_before - mapped_files():
        segment.unlink(missing_ok=True)
    if left:
        names = describe(left)
        for proc in left:
            proc.kill()
        pytest.fail("the test left processes behind: " + "; ".join(names))
