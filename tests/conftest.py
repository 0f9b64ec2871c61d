"""The fixtures every test gets, unit or real: a private cluster registry, the check that a test leaves no
process behind, and a short temp root. Each tier is a folder with a conftest.py of its own that marks its
items: tests/unit/ (the fast tier), tests/real/ (real processes) and in it local/, slurm/, pbs/ and
containers/. The support code is in tests/support/ (helpers.py: the real runs' helpers), the testbeds in
tests/slurm/ and tests/pbs/."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil
import pytest

pytest.register_assert_rewrite("helpers")

from helpers import mapped_files, shm_segments  # noqa: E402
from process_control import descendants, describe, wait_for  # noqa: E402


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
        names, killed = describe(left), []
        for proc, name in zip(left, names):
            try:
                proc.kill()
                killed.append(name)
            except psutil.NoSuchProcess:  # it ended by itself between the look and the kill: not left behind
                pass
        if killed:
            pytest.fail("the test left processes behind: " + "; ".join(killed))


@pytest.fixture
def short_tmp():
    """A temp root short enough for Ray's socket paths (pytest's tmp_path is too long)."""
    root = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)
