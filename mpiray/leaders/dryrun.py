"""The leader step of `--dry-run`: the whole protocol ran, every rank's Ray node as planned (rank/plannednode.py's
PlannedNode), and no driver runs: it says so and ends at once with 0."""

from __future__ import annotations

from typing import Sequence

from mpiray.rank.messages import Cluster
from mpiray.rank.state import Rank


class DryRunLeader:
    """rank.state.Leader of a dry run: the driver command that would run, logged (dry_run); exit code 0."""

    def __init__(self, command: Sequence[str]):
        self.command = list(command)

    def start(self, me: Rank, cluster: Cluster) -> None:
        me.log.event("dry_run", command=" ".join(self.command))

    def poll(self, timeout: float) -> int | None:
        return 0

    def stop(self, grace: float, code: int) -> None:
        pass  # nothing runs

    def close(self, me: Rank) -> None:
        pass
