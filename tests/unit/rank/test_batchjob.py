"""When rank 0 stops the driver before the batch job's walltime (mpiray/rank/batchjob.py): by default only
under PBS, which warns no job; under Slurm only when asked for (Slurm warns with --signal=TERM@N)."""

from __future__ import annotations

import pytest

from mpiray.config import Config
from mpiray.rank.batchjob import WALLTIME_TEARDOWN, ranks_outside, walltime_stop

END = 1_800_000_000.0


@pytest.mark.parametrize("scheduler, margin, expected", [
    ("pbs", None, (END - 30 - WALLTIME_TEARDOWN, 30 + WALLTIME_TEARDOWN)),  # --stop-grace + teardown
    ("pbs", 120.0, (END - 120, 120.0)),
    ("pbs", 0.0, None),  # asked for never
    ("slurm", None, None),  # Slurm warns the job itself (--signal=TERM@N)
    ("slurm", 90.0, (END - 90, 90.0)),
])
def test_the_walltime_stop_comes_margin_seconds_before_the_end(scheduler, margin, expected):
    assert walltime_stop(Config(stop_grace=30, walltime_margin=margin), scheduler, END) == expected


def test_without_a_known_end_there_is_no_walltime_stop():
    assert walltime_stop(Config(walltime_margin=60), "pbs", None) is None


def test_ranks_on_hosts_that_are_not_the_jobs_are_named():
    job = ("x1001c0s0b0n0", "x1001c0s0b0n1")
    ranks = {0: "x1001c0s0b0n0.hsn.cm.example.gov", 1: "x1001c0s0b0n1", 2: "login2.example.gov"}
    assert ranks_outside(ranks, job) == {2: "login2.example.gov"}
    assert ranks_outside({0: "x1001c0s0b0n0", 1: "x1001c0s0b0n1"}, job) == {}


def test_vnodes_named_otherwise_than_hosts_tell_nothing():
    assert ranks_outside({0: "nid001", 1: "nid002"}, ("vnode-a", "vnode-b")) == {}
    assert ranks_outside({0: "nid001"}, ()) == {}
