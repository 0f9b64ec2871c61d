"""The `start_ray.py` command line and the `mpiray` command: argv -> Config -> rank.life.run(config, leader).

    mpirun -np N python start_ray.py [launcher options] [-- DRIVER COMMAND ...]
    srun python start_ray.py --join JOB_ID                 (this job's nodes join JOB_ID's cluster)
    mpiray logs [LOG_DIR/]JOB_ID [--json] [--png FILE]
    mpiray list | mpiray attach JOB_ID -- python driver.py

Options are declared in options.py. Bad input ends every task with exit code 2 before MPI starts,
and only the job's first task says why, in one line.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Sequence

from mpiray.config import DEFAULT_DRIVER, Config
from mpiray.elastic import attach, listing
from mpiray.errors import ConfigError
from mpiray.leaders.command import CommandLeader
from mpiray.leaders.stay import StayLeader
from mpiray.logs import report
from mpiray.options import parse_args, say
from mpiray.rank import life

# What the default driver (python -m train: RLlib PPO) imports beyond the launcher's own packages.
TRAINER_MODULES = ("gymnasium", "torch")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = list(argv[:1])
    if command == ["logs"]:  # `mpiray logs JOB`: read a job's rank logs (no MPI)
        return report.main(argv[1:])
    if command in (["list"], ["attach"]):  # the user's running clusters, from a shell (no MPI)
        return (listing.main if command == ["list"] else attach.main)(argv[1:])
    try:
        config = parse_args(argv)
        check_default_driver(config)
    except ConfigError as error:
        say(os.environ, "error", str(error))
        return error.exit_code
    leader = StayLeader() if config.join and not config.driver else CommandLeader(config.driver)
    return life.run(config, leader)  # MPI_Init happens in there: only once the options are valid


def check_default_driver(config: Config) -> None:
    """The default driver (the trainer) needs the `train` extra: say so before MPI starts, not as a
    bare ModuleNotFoundError from rank 0's driver after the whole cluster came up."""
    if config.driver != DEFAULT_DRIVER or config.dry_run:
        return
    missing = [name for name in TRAINER_MODULES if importlib.util.find_spec(name) is None]
    ray = importlib.util.find_spec("ray")  # finds the package without importing it
    if ray is None or not any((Path(p) / "rllib").is_dir() for p in ray.submodule_search_locations or ()):
        missing.append("ray[rllib]")
    if missing:
        raise ConfigError(
            f"the default driver (python -m train: RLlib PPO on CartPole) needs {', '.join(missing)}, not "
            f"installed here: pip install 'mpiray[train]' (or give your own driver after '--')",
            cause="trainer_missing")
