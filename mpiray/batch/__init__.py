"""Batch systems: what started a rank (environment.py: every scheduler's and launcher's variables, as
tables) and the worker jobs an elastic cluster submits (jobs.py: one interface, BatchSystem, with a back
end per scheduler in slurm.py and pbs.py).

    SYSTEMS["slurm"]() / SYSTEMS["pbs"]()   -> a BatchSystem: script, submit, states, cancel
"""

from __future__ import annotations

from mpiray.batch.jobs import BatchSystem
from mpiray.batch.pbs import Pbs
from mpiray.batch.slurm import Slurm

SYSTEMS: dict[str, type[BatchSystem]] = {"slurm": Slurm, "pbs": Pbs}
