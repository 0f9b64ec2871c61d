"""When rank 0 stops the driver before the batch job's walltime (mpiray/rank/batchjob.py): by default only
under PBS, which warns no job; under Slurm only when asked for (Slurm warns with --signal=TERM@N)."""

from __future__ import annotations

import pytest

from mpiray.config import Config
from mpiray.rank.batchjob import WALLTIME_TEARDOWN, walltime_stop

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
