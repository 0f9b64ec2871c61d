"""What the front doors print before MPI starts, when every task of a job runs the same argv: only the
job's first task speaks, in one line (`mpiray: error: ...`), and the others exit without a word; a
misspelled name gets the closest one that is right."""

from __future__ import annotations

import sys
import time
from typing import Iterable, Mapping, Sequence

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


def unknown_settings(environ: Mapping[str, str], known: Sequence[str], prog: str = "mpiray run") -> list[str]:
    """A warning for each MPIRAY_* variable that is no setting, with the closest name that is."""
    # Compared without the common prefix, which would make every name look close.
    suffixes = {known_name.removeprefix("MPIRAY_"): known_name for known_name in known}
    warnings = []
    for name in sorted(environ):
        if not name.upper().startswith("MPIRAY_") or name in known:
            continue
        close = close_matches(name.upper().removeprefix("MPIRAY_"), suffixes)
        hint = f"did you mean {suffixes[close[0]]}?" if close else f"see {prog} --help"
        warnings.append(f"{name} is not a setting of mpiray ({hint})")
    return warnings


def close_matches(name: str, choices: Iterable[str]) -> list[str]:
    """The one name of choices closest to name, if any is close: for "did you mean ...?"."""
    import difflib  # ~9 ms of import on every rank: only for a misspelling

    return difflib.get_close_matches(name, choices, n=1)
