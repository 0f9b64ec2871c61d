"""What the trainer's console leaves out: what Ray and RLlib print about their own internals on every run.

Most of these lines come from Ray's worker processes (the algorithm and env-runner actors) and reach
the driver through Ray's log monitor; the driver drops those matching RAY_DEDUP_LOGS_SKIP_REGEX, which
Ray reads when it is imported, before printing them. The same notices logged in this process are dropped
by a filter on the logger that logs them. `--verbose` keeps everything.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Iterator, MutableMapping, Optional

SKIP_VARIABLE = "RAY_DEDUP_LOGS_SKIP_REGEX"
NEW_OUTPUT_VARIABLE = "RAY_AIR_NEW_OUTPUT"

# Every line dropped, in one place: (the logger that logs it in a Python process, or None, its pattern).
# Each is Ray or RLlib speaking of its own code on every run, whatever the flags; any other warning shows.
INTERNAL_NOTICES: tuple[tuple[Optional[str], str], ...] = (
    # RLlib builds its default modules through its own deprecated RLModule(config=...) path.
    ("ray._common.deprecation", r"`(?:Multi)?RLModule\(config=[^`]*\)` has been deprecated"),
    # RLlib announces its default API stack, once in every process.
    ("ray.rllib.algorithms.algorithm_config", r"You are running \w+ on the new API stack!"),
    # Tune's system-usage monitor asks for an optional package, once per trial.
    ("ray.tune.utils.util", r"Install gputil for GPU system monitoring"),
    # Ray's core (C++, logged as E) about how RLlib creates its env runners (restartable actors with
    # arguments in the object store, ray-project/ray#53727): nothing a run's flags change.
    # Ray's W&B logging actor (--wandb) is made the same way.
    (None, r"core_worker\.cc:\d+: Actor with class name: '(?:\w*EnvRunner|_WandbLoggingActor)' .*has constructor "
           r"arguments in the object store and max_restarts > 0"),
    # W&B's own console in that actor: its banner and a table of every metric per trial (the trainer says
    # where the runs are); its errors show.
    (None, r"\bwandb: (?!ERROR)"),
    # Tune's note for every checkpoint: the trainer counts them and says so once at the end.
    ("ray.train._internal.storage", r"Checkpoint successfully created at: "),
)


class _DropMatching(logging.Filter):
    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def skip_regex() -> str:
    """One regular expression matching every line of INTERNAL_NOTICES."""
    return "|".join(f"(?:{pattern})" for _, pattern in INTERNAL_NOTICES)


def is_internal_notice(line: str) -> bool:
    return re.search(skip_regex(), line) is not None


@contextlib.contextmanager
def quiet(environ: MutableMapping[str, str]) -> Iterator[None]:
    """Leave INTERNAL_NOTICES out of this process's console while the block runs, and Tune's start-up box
    (its TensorBoard hint names a temp dir the launcher removes; the trainer names the results directory).

    Enter it before Ray is imported: Ray reads RAY_DEDUP_LOGS_SKIP_REGEX then.
    """
    saved = {name: environ.get(name) for name in (SKIP_VARIABLE, NEW_OUTPUT_VARIABLE)}
    theirs = saved[SKIP_VARIABLE]
    environ[SKIP_VARIABLE] = f"(?:{theirs})|{skip_regex()}" if theirs else skip_regex()
    # Tune's legacy output engine prints nothing at verbose=0; ProgressLine prints the iterations.
    environ.setdefault(NEW_OUTPUT_VARIABLE, "0")
    filters = [(logging.getLogger(name), _DropMatching(pattern)) for name, pattern in INTERNAL_NOTICES if name]
    for logger, drop in filters:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger, drop in filters:
            logger.removeFilter(drop)
        for name, value in saved.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
