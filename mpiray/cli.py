"""The `mpiray` command and `start_ray.py`: a command's argv -> Config -> rank.life.run(config, leader).

    mpirun -np N mpiray run [options] [-- DRIVER COMMAND ...]      (= python start_ray.py [options] ...)
    srun mpiray run --join JOB_ID                                 (this job's nodes join JOB_ID's cluster)
    mpiray logs [LOG_DIR/]JOB_ID [--json] [--png FILE]
    mpiray list | mpiray attach JOB_ID -- python driver.py | mpiray dashboard JOB_ID
    mpiray submit JOB_ID -- python driver.py | mpiray jobs JOB_ID [logs|stop SUBMISSION]
    mpirun -np N python -m mpiray my_script.py [ARGS]             (a script that calls mpiray.init(): library.py)

`mpiray` alone (or --help) says what it can do. Options are declared in options.py. Bad input ends
every task with exit code 2 before MPI starts, and only the job's first task says why, in one line.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from mpiray import __version__
from mpiray.config import DEFAULT_DRIVER, Config
from mpiray.console import first_task, quiet_exit_delay, say
from mpiray.errors import ConfigError, TrainerMissing
from mpiray.leaders.command import CommandLeader
from mpiray.leaders.dryrun import DryRunLeader
from mpiray.options import parse_args
from mpiray.rank import life, preflight
from mpiray.rank.state import Leader
from mpiray.rank.timings import EXIT_LIMIT
from mpiray.raynode import container as containers

# What the default driver (python -m train: RLlib PPO) imports beyond the launcher's own packages.
TRAINER_MODULES = ("gymnasium", "torch")
USAGE = "usage: mpiray COMMAND [ARGS ...]   (mpiray COMMAND --help for its options)"


def run(argv: Sequence[str], prog: str = "mpiray run") -> int:
    """`mpiray run ...` / `python start_ray.py ...`: this rank's part of the cluster; every rank's exit code."""
    try:
        config = parse_args(argv, prog=prog)
        if not config.container:  # with one, the image's Ray is checked on every host (the pre-flight)
            preflight.check_ray_install(config.auth)
        leader = leader_for(config)
    except ConfigError as error:
        say(os.environ, "error", str(error))
        quiet_exit_delay(os.environ)
        return error.exit_code
    # MPI_Init happens in there: only once the options are valid. Every rank finalizes right after the last barrier.
    return life.run(config, leader, finalize_limit=EXIT_LIMIT)


def leader_for(config: Config) -> Leader:
    """Rank 0's leader step for this command line (every rank picks it; rank 0 runs it). The dry run's is
    chosen here, and nowhere else for the leader (its Ray nodes': rank.life.setup)."""
    if config.dry_run:
        return DryRunLeader(config.driver)
    if config.join and not config.driver:
        from mpiray.leaders.stay import StayLeader  # a joining job's alone: off every other rank's start

        return StayLeader()
    box = containers.of(config)
    if box is None:  # in an image, the trainer's packages are the image's: its driver says what it lacks
        check_default_driver(config)
    return CommandLeader(config.driver, box)


def entry(module: str, function: str = "main") -> Callable[[Sequence[str]], int]:
    """A command's main, imported when the command runs: `mpiray run`, which every rank of a job runs, pays
    for none of the others' imports (measured: `--dry-run` at 64 ranks, tests/benchmarks/bench_preflight.py)."""
    return lambda argv: getattr(importlib.import_module(module), function)(argv)


# Each command: what it does (one line of the overview), an example, and its entry point.
COMMANDS: dict[str, tuple[str, str, Callable[[Sequence[str]], int]]] = {
    "run": ("start a Ray cluster over this job's MPI ranks, run a driver on rank 0, exit with its code",
            "mpirun -np 4 mpiray run -- python my_driver.py", run),
    "logs": ("explain a job from its rank logs: the cluster, the start-up, why it failed and the fix",
             "mpiray logs 4711", entry("mpiray.logs.report")),
    "list": ("your running clusters (from the registry): nodes, CPUs, GPUs, time left",
             "mpiray list", entry("mpiray.elastic.listing")),
    "attach": ("run a driver against your running cluster, from a login node or another job",
               "mpiray attach 4711 -- python evaluate.py", entry("mpiray.elastic.attach")),
    "submit": ("run a driver on your running cluster as a Ray Job (from a login node; it outlives this shell)",
               "mpiray submit 4711 -- python train.py", entry("mpiray.elastic.submit")),
    "jobs": ("the Ray Jobs of your running cluster: list them, print one's output, stop one",
             "mpiray jobs 4711 logs mpiray-4711-...", entry("mpiray.elastic.submit", "jobs_main")),
    "dashboard": ("the ssh tunnel to a running cluster's Ray dashboard, and how to log in to it",
                  "mpiray dashboard 4711", entry("mpiray.elastic.dashboard")),
}


def overview() -> str:
    width = max(map(len, COMMANDS))
    lines = [USAGE, "", "A Ray cluster over the MPI ranks of a batch job (mpirun, srun, aprun, PALS mpiexec).", "",
             "commands:"]
    for name, (what, example, _) in COMMANDS.items():
        lines += [f"  {name:<{width}}  {what}", f"  {'':<{width}}    e.g. {example}"]
    lines += ["", "In a checkout, `python start_ray.py ...` is `mpiray run ...`. In your own script: mpiray.init()",
              "(the same options, as keywords), run as `mpirun -np N python -m mpiray SCRIPT.py [ARGS]` (or -m MODULE):",
              "every rank exits with the script's exit code, however it ends. Every option of run also reads",
              "MPIRAY_<OPTION>."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The `mpiray` command (python -m mpiray)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        if first_task(os.environ):  # a bare `mpiray` may run on every rank of a job: say it once
            print(overview())
        return 0
    if argv[0] == "--version":
        if first_task(os.environ):
            print(f"mpiray {__version__}")
        return 0
    if argv[0] in COMMANDS:
        return COMMANDS[argv[0]][2](argv[1:])
    if argv[0].endswith(".py") or (argv[0] == "-m" and len(argv) > 1):  # a script that calls mpiray.init()
        if argv[0] != "-m" and not os.path.isfile(argv[0]):
            say(os.environ, "error", f"no script {argv[0]!r} to run: give the path of a Python file (or -m MODULE)")
            quiet_exit_delay(os.environ)
            return 2
        from mpiray import library

        return library.run_script(argv)
    if argv[0].startswith("-"):
        hint = f"options belong to a command: mpiray run {' '.join(argv)}"
    else:
        hint = f"the commands are {', '.join(COMMANDS)}"
    say(os.environ, "error", f"unknown command {argv[0]!r}: {hint} (see mpiray --help)")
    quiet_exit_delay(os.environ)
    return 2


def check_default_driver(config: Config) -> None:
    """The default driver (the trainer) needs the `train` extra: say so before MPI starts, not as a
    bare ModuleNotFoundError from rank 0's driver after the whole cluster came up."""
    if config.driver != DEFAULT_DRIVER:
        return
    missing = [name for name in TRAINER_MODULES if importlib.util.find_spec(name) is None]
    ray = importlib.util.find_spec("ray")  # finds the package without importing it
    if ray is None or not any((Path(p) / "rllib").is_dir() for p in ray.submodule_search_locations or ()):
        missing.append("ray[rllib]")
    if missing:
        raise TrainerMissing(
            f"the default driver (python -m train: RLlib PPO on CartPole) needs {', '.join(missing)}, not "
            f"installed here: pip install '.[train]' in the mpiray checkout (or give your own driver after '--')")
