"""What the front doors print before MPI starts, when every task of a job runs the same argv: only the
job's first task speaks, in one line (`mpiray: error: ...`), and the others exit without a word."""

from __future__ import annotations

import sys
import time
from typing import Mapping

from mpiray.batch import environment

QUIET_EXIT_DELAY_S = 2.0  # seconds: a loaded node's first task parses the same argv well within them


def first_task(environ: Mapping[str, str]) -> bool:
    # Under mpirun every task parses the same argv: the first one alone explains, the others just exit.
    return environment.detect(environ).task_rank in (None, 0)


def say(environ: Mapping[str, str], kind: str, message: str) -> None:
    if first_task(environ):
        print(f"mpiray: {kind}: {message}", file=sys.stderr)


def quiet_exit_delay(environ: Mapping[str, str]) -> None:
    """A task that does not explain a usage error (every task but the first) waits a moment before it
    exits: Open MPI's mpirun ends every rank once one exits non-zero, and could end the first before it
    said what was wrong. Only on this error path, before MPI starts."""
    if not first_task(environ):
        time.sleep(QUIET_EXIT_DELAY_S)
