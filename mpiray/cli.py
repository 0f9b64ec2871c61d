"""Command line: argv -> Config -> driver.run(config) -> exit code.

`mpirun -np N python start_ray.py [launcher options] [-- DRIVER COMMAND ...]`. Every option takes
its default from an `MPIRAY_<OPTION>` environment variable (e.g. MPIRAY_STARTUP_TIMEOUT=300), so a
batch script can set them once. A variable's value goes through the same checks as the flag's; an
empty one counts as unset. Bad input ends every task with exit code 2 before MPI starts, and only
the job's first task says why, in one line.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Mapping, Sequence

from mpiray import commands, raycompat, scheduler
from mpiray.config import DEFAULT_DRIVER, Config
from mpiray.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MAX_SECONDS = 10**7  # ~115 days: past any batch walltime, far below what timers accept (threading.TIMEOUT_MAX)
MAX_COUNT = 10**6  # CPUs or GPUs per node: generous oversubscription, well inside Ray's fixed-point resources
MIN_OBJECT_STORE = 75 * 2**20  # Ray refuses smaller object stores (OBJECT_STORE_MINIMUM_MEMORY_BYTES)

# MPIRAY_* names that are not an option's MPIRAY_<OPTION>, so that a misspelled setting can be told
# from these: read here (AUTH, DASHBOARD, METRICS, DRIVER); set for the driver by lifecycle.py (NUM_NODES,
# TOTAL_CPUS, TOTAL_GPUS, HEAD_IP; JOB_ID, LOG_DIR and STOP_GRACE are options' names too); the
# test hooks (FAKE_VERSION, TEST_FAIL_JOIN); jobs/ scripts (SITE_MPI, DIR); the Slurm testbed (TESTBED_DIR,
# KEEP_TESTBED).
OTHER_VARIABLES = (
    "MPIRAY_AUTH", "MPIRAY_DASHBOARD", "MPIRAY_METRICS", "MPIRAY_DRIVER", "MPIRAY_DRY_RUN",
    "MPIRAY_JOB_ID", "MPIRAY_LOG_DIR", "MPIRAY_NUM_NODES", "MPIRAY_TOTAL_CPUS", "MPIRAY_TOTAL_GPUS",
    "MPIRAY_HEAD_IP", "MPIRAY_STOP_GRACE",
    "MPIRAY_FAKE_VERSION", "MPIRAY_TEST_FAIL_JOIN",
    "MPIRAY_SITE_MPI", "MPIRAY_DIR",
    "MPIRAY_TESTBED_DIR", "MPIRAY_KEEP_TESTBED",
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage on every rank and exiting."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.variables: list[str] = []  # each option's MPIRAY_<OPTION>

    def error(self, message: str):
        raise ConfigError(f"{message} (see start_ray.py --help)")


def _number(kind: type, text: str):
    try:
        value = kind(text)
    except ValueError:
        example = "a whole number, e.g. 4" if kind is int else "a number, e.g. 300"
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (give {example})") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def parse_bytes(text: str) -> int:
    """'2G', '512M', '1000000' -> bytes (binary units)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    try:
        amount = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 2G, 512M or bytes)") from None
    if not math.isfinite(amount):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (a size must be finite, e.g. 2G)")
    if amount < 1:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return int(amount)


def _object_store_size(text: str) -> int:
    size = parse_bytes(text)
    if size < MIN_OBJECT_STORE:
        raise argparse.ArgumentTypeError(f"{text!r} is below the 75M that Ray needs at least")
    return size


def _count(text: str) -> int:
    value = _number(int, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, got {text}")
    return value


def _positive_count(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _seconds(text: str) -> float:
    value = _number(float, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS} seconds (~115 days), got {text}")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def _port(text: str) -> int:
    value = _number(int, text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text} (use 1-65535, or 0 for a free one)")
    return value


def _path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path: give a directory")
    return Path(text)


def _interface(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("empty interface name: give one, e.g. ib0, or leave it out")
    return text


def _job_id(text: str) -> str:
    if scheduler.safe_job_id(text) != text:
        raise argparse.ArgumentTypeError(
            f"not a job id: {text!r} (use up to 100 letters, digits and . _ + -, not '.' or '..'; "
            "it names a directory under --log-dir)"
        )
    return text


def _setting(environ: Mapping[str, str], name: str) -> str | None:
    """The variable's value; unset when absent or blank (`MPIRAY_X=` in a script clears a setting)."""
    text = environ.get(name)
    return text if text is not None and text.strip() else None


def _from_environment(action: argparse.Action, name: str, text: str):
    """A variable's value through its flag's own conversion and choices; a ConfigError naming it."""
    try:
        value = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
        raise ConfigError(f"{name}={text!r}: {error}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{name}={text!r}: invalid choice (choose from {', '.join(action.choices)})")
    return value


def _env_bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    text = _setting(environ, name)
    if text is None:
        return default
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    raise ConfigError(f"{name}={text!r} is not a boolean: use 1/0, true/false, yes/no")


def _env_driver(environ: Mapping[str, str]) -> list[str] | None:
    text = _setting(environ, "MPIRAY_DRIVER")
    if text is None:
        return None
    try:
        return shlex.split(text)
    except ValueError as error:  # e.g. "No closing quotation"
        raise ConfigError(
            f"MPIRAY_DRIVER={text!r}: {error} (it is split like a shell command line: close the quote or escape it)"
        ) from None


def unknown_settings(environ: Mapping[str, str], known: Sequence[str]) -> list[str]:
    """A warning for each MPIRAY_* variable that is no setting, with the closest name that is."""
    # Compared without the common prefix, which would make every name look close.
    suffixes = {known_name.removeprefix("MPIRAY_"): known_name for known_name in known}
    warnings = []
    for name in sorted(environ):
        if not name.upper().startswith("MPIRAY_") or name in known:
            continue
        close = _close_matches(name.upper().removeprefix("MPIRAY_"), suffixes)
        hint = f"did you mean {suffixes[close[0]]}?" if close else "see start_ray.py --help"
        warnings.append(f"{name} is not a setting of mpiray ({hint})")
    return warnings


def _close_matches(name: str, choices) -> list[str]:
    import difflib  # ~9 ms of import on every rank: only for a misspelling

    return difflib.get_close_matches(name, choices, n=1)


def _first_task(environ: Mapping[str, str]) -> bool:
    # Under mpirun every task parses the same argv: the first one alone explains, the others just exit.
    return scheduler.detect(environ).task_rank in (None, 0)


def _say(environ: Mapping[str, str], kind: str, message: str) -> None:
    if _first_task(environ):
        print(f"mpiray: {kind}: {message}", file=sys.stderr)


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    """The launcher's options, their defaults taken from valid MPIRAY_<OPTION> variables.

    Raises ConfigError naming the variable when one's value is not valid for its flag.
    """
    parser = _Parser(
        prog="start_ray.py",
        usage="mpirun -np N python start_ray.py [options] [-- DRIVER COMMAND ...]",
        description="Start a Ray cluster over the MPI ranks (rank 0: head and driver, others: "
        "worker nodes), run the driver, exit with its exit code. Without a driver command it "
        "runs the RLlib trainer (python -m train). Every option also reads MPIRAY_<OPTION>.",
    )

    def option(*flags, **kwargs):
        env_name = "MPIRAY_" + flags[0].lstrip("-").replace("-", "_").upper()
        parser.variables.append(env_name)
        kwargs["help"] = kwargs.get("help", "") + f" [env {env_name}]"
        action = parser.add_argument(*flags, **kwargs)
        text = _setting(environ, env_name)
        if text is not None:
            action.default = _from_environment(action, env_name, text)

    option("--log-dir", type=_path, default=Path("logs"),
           help="per-rank logs go to LOG_DIR/JOB_ID/rank-NNNN.log (default: logs)")
    option("--job-id", type=_job_id, default=None,
           help="job id used for log and temp paths: letters, digits and . _ + - (default: "
           "SLURM_JOB_ID, PBS_JOBID, COBALT_JOBID or ALPS_APP_ID, else a timestamp and pid)")
    option("--startup-timeout", type=_positive_seconds, default=120.0,
           help="seconds for the head and every worker node to come up (default: 120)")
    option("--port", type=_port, default=0, help="GCS port of the head; 0 picks a free one (default)")
    option("--num-cpus", type=_count, default=None,
           help="CPUs each Ray node offers (default: the rank's share of its host)")
    option("--num-gpus", type=_count, default=None,
           help="GPUs each Ray node offers (default: the rank's share of the visible GPUs)")
    option("--head-cpus", type=_count, default=None,
           help="CPUs the head node offers to Ray (e.g. 0 keeps them for the driver and learner)")
    option("--object-store-memory", type=_object_store_size, default=None,
           help="object store size of each Ray node, at least 75M, e.g. 2G (default: 30%% of the "
           "rank's memory share, capped by /dev/shm)")
    option("--stop-grace", type=_seconds, default=30.0,
           help="seconds the driver gets between SIGTERM and SIGKILL to checkpoint; Ray nodes get at "
           "most 5 of them (they stop in ~1 s) (default: 30, Slurm's default KillWait)")
    option("--time-limit", type=_positive_seconds, default=None,
           help="stop the driver after this many seconds (SIGTERM, grace, SIGKILL); exit code 124")
    option("--interface", type=_interface, default=None,
           help="network interface whose address the nodes advertise, e.g. ib0 or hsn0 "
           "(default: the one that routes to the head)")
    option("--temp-dir", type=_path, default=Path(environ.get("TMPDIR") or "/tmp"),
           help="node-local root for per-rank Ray temp dirs (default: TMPDIR or /tmp)")
    option("--ray-node-per", choices=("rank", "host"), default="rank",
           help="one Ray node per MPI rank (default) or one per host, the other local ranks idle")
    option("--join-window", type=_positive_count, default=64,
           help="the most worker nodes joining the head at once; the window starts at 8 and adapts to "
           "how fast nodes register (default: 64)")
    option("--gcs-core", choices=("auto", "on", "off"), default="auto",
           help="on the head's host, when unbound ranks share it, the other Ray nodes run on every CPU "
           "but one, left to the GCS; auto: on hosts of 8 CPUs or more (default: auto)")
    option("--progress", choices=("auto", "on", "off"), default="auto",
           help="rank 0's live start-up line ('12/24 ranks ready, 8 joining'), redrawn in place: auto shows it "
           "when rank 0's stdout or its launcher's is a terminal (not TERM=dumb), never in a batch log "
           "(default: auto)")
    parser.add_argument("--auth", action=argparse.BooleanOptionalAction,
                        default=_env_bool(environ, "MPIRAY_AUTH", True),
                        help="token authentication; --no-auth lets anyone who reaches the "
                        "ports join the cluster (default: on) [env MPIRAY_AUTH]")
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction,
                        default=_env_bool(environ, "MPIRAY_DASHBOARD", False),
                        help="start Ray's dashboard on the head, bound to 127.0.0.1 "
                        "(default: off) [env MPIRAY_DASHBOARD]")
    parser.add_argument("--metrics", action=argparse.BooleanOptionalAction,
                        default=_env_bool(environ, "MPIRAY_METRICS", True),
                        help="Ray's metrics: every node exports them on a port of the job's block (needs "
                        "ray[default]); --no-metrics collects none, which saves the head a core's worth of "
                        "work when nodes are lost (default: on) [env MPIRAY_METRICS]")
    parser.add_argument("--dry-run", action="store_true", default=_env_bool(environ, "MPIRAY_DRY_RUN", False),
                        help="run the whole MPI protocol (session, host split, resources, ports, reports, exit "
                        "code) and log each rank's exact `ray start` line, but start no Ray and no driver; rank 0 "
                        "prints the planned cluster [env MPIRAY_DRY_RUN]")
    parser.add_argument("--redis-password", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None, with_driver: bool = True) -> Config:
    """argv (without the program name) -> Config. Raises ConfigError (exit code 2) on bad input.

    with_driver=False: the library's (the driver is the calling script), so nothing after '--'.
    """
    environ = os.environ if environ is None else environ
    argv = list(argv)
    launcher_argv, driver = argv, _env_driver(environ) or list(DEFAULT_DRIVER)
    if "--" in argv:
        split = argv.index("--")
        launcher_argv, driver = argv[:split], argv[split + 1 :]
    parser = build_parser(environ)
    for warning in unknown_settings(environ, [*parser.variables, *OTHER_VARIABLES]):
        _say(environ, "warning", warning)
    args, extra = parser.parse_known_args(launcher_argv)
    if extra:
        parser.error(
            f"unrecognized arguments: {' '.join(extra)}. A driver command goes after '--', "
            f"e.g. start_ray.py -- python my_driver.py"
        )
    if not with_driver:
        driver = []
    elif not driver:
        parser.error("nothing after '--': give the driver command, e.g. -- python my_driver.py")
    problem = raycompat.version_problem(raycompat.ray_version(), args.auth) or raycompat.agent_http_problem(
        args.auth, full_agent=commands.metrics_agent_problem() is None)
    if problem:
        raise ConfigError(problem)
    if args.redis_password is not None:
        _say(environ, "warning", "--redis-password is ignored: Ray no longer uses Redis; the cluster "
             "is protected by a per-job token instead (see --auth).")
    return Config(
        driver=tuple(driver),
        log_dir=args.log_dir,
        job_id=args.job_id,
        startup_timeout=args.startup_timeout,
        port=args.port,
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
        head_cpus=args.head_cpus,
        object_store_memory=args.object_store_memory,
        stop_grace=args.stop_grace,
        time_limit=args.time_limit,
        interface=args.interface,
        temp_dir=args.temp_dir,
        auth=args.auth,
        dashboard=args.dashboard,
        metrics=args.metrics,
        ray_node_per=args.ray_node_per,
        join_window=args.join_window,
        dry_run=args.dry_run,
        progress=args.progress,
        gcs_core=args.gcs_core,
    )


def library_config(options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> Config:
    """mpiray.init(**options) -> Config, checked exactly as the same flags would be (MPIRAY_* too).

    log_dir="x" stands for --log-dir x; auth=False for --no-auth; None for "not given".
    """
    environ = os.environ if environ is None else environ
    names = {action.dest for action in build_parser(environ)._actions} - {"help", "redis_password"}
    argv = []
    for name, value in options.items():
        if name not in names:
            close = _close_matches(name, names)
            hint = f"did you mean {close[0]}?" if close else f"the options are: {', '.join(sorted(names))}"
            raise ConfigError(f"mpiray.init() has no option {name!r} ({hint})")
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{name.replace('_', '-')}")
        elif value is not None:
            argv += [flag, str(value)]
    return parse_args(argv, environ, with_driver=False)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if list(argv[:1]) == ["logs"]:  # `mpiray logs JOB`: read a job's rank logs (no MPI)
        from mpiray import joblogs

        return joblogs.main(argv[1:])
    try:
        config = parse_args(argv)
    except ConfigError as error:
        _say(os.environ, "error", str(error))
        return error.exit_code
    from mpiray import driver  # imports mpi4py, which initializes MPI: only once args are valid

    return driver.run(config)
