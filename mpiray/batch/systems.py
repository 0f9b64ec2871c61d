"""The batch systems an elastic cluster submits worker jobs to, by name (the BatchSystem back ends).

Apart from batch/__init__: a rank that runs no elastic cluster imports none of them (environment.py is all
it reads of the batch layer)."""

from __future__ import annotations

from mpiray.batch.jobs import BatchSystem
from mpiray.batch.pbs import Pbs
from mpiray.batch.slurm import Slurm

SYSTEMS: dict[str, type[BatchSystem]] = {"slurm": Slurm, "pbs": Pbs}
