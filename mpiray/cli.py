"""Command line: argv -> Config -> lifecycle.run(config) -> exit code.

`mpirun -np N python start_ray.py [launcher options] [-- DRIVER COMMAND ...]`. Every option takes
its default from an `MPIRAY_<OPTION>` environment variable (e.g. MPIRAY_STARTUP_TIMEOUT=300), so a
batch script can set them once.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Mapping, Sequence

from mpiray.config import DEFAULT_DRIVER, Config
from mpiray.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_bytes(text: str) -> int:
    """'2G', '512M', '1000000' -> bytes (binary units)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    try:
        amount = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 2G, 512M or bytes)") from None
    if amount <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return int(amount)


def _non_negative(kind):
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    return convert


def _positive_float(text: str) -> float:
    value = _non_negative(float)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _port(text: str) -> int:
    value = _non_negative(int)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text}")
    return value


def _env_bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    text = environ.get(name)
    if text is None:
        return default
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    raise ConfigError(f"{name}={text!r} is not a boolean: use 1/0, true/false, yes/no")


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="start_ray.py",
        usage="mpirun -np N python start_ray.py [options] [-- DRIVER COMMAND ...]",
        description="Start a Ray cluster over the MPI ranks (rank 0: head and driver, others: "
        "worker nodes), run the driver, exit with its exit code. Without a driver command it "
        "runs the RLlib trainer (python -m train). Every option also reads MPIRAY_<OPTION>.",
    )

    def option(*flags, **kwargs):
        env_name = "MPIRAY_" + flags[0].lstrip("-").replace("-", "_").upper()
        if env_name in environ:
            kwargs["default"] = environ[env_name]
        kwargs["help"] = kwargs.get("help", "") + f" [env {env_name}]"
        parser.add_argument(*flags, **kwargs)

    option("--log-dir", type=Path, default=Path("logs"),
           help="per-rank logs go to LOG_DIR/JOB_ID/rank-NNNN.log (default: logs)")
    option("--job-id", default=None,
           help="job id used for log and temp paths (default: SLURM_JOB_ID, PBS_JOBID, "
           "COBALT_JOBID or ALPS_APP_ID, else a timestamp and pid)")
    option("--startup-timeout", type=_positive_float, default=120.0,
           help="seconds for the head and every worker node to come up (default: 120)")
    option("--port", type=_port, default=0, help="GCS port of the head; 0 picks a free one (default)")
    option("--num-cpus", type=_non_negative(int), default=None,
           help="CPUs each Ray node offers (default: the rank's share of its host)")
    option("--num-gpus", type=_non_negative(int), default=None,
           help="GPUs each Ray node offers (default: the rank's share of the visible GPUs)")
    option("--head-cpus", type=_non_negative(int), default=None,
           help="CPUs the head node offers to Ray (e.g. 0 keeps them for the driver and learner)")
    option("--object-store-memory", type=parse_bytes, default=None,
           help="object store size of each Ray node, e.g. 2G (default: 30%% of the rank's memory "
           "share, capped by /dev/shm)")
    option("--stop-grace", type=_non_negative(float), default=30.0,
           help="seconds the driver gets between SIGTERM and SIGKILL to checkpoint; Ray nodes get at "
           "most 5 of them (they stop in ~1 s) (default: 30, Slurm's default KillWait)")
    option("--time-limit", type=_positive_float, default=None,
           help="stop the driver after this many seconds (SIGTERM, grace, SIGKILL); exit code 124")
    option("--interface", default=None,
           help="network interface whose address the nodes advertise, e.g. ib0 or hsn0 "
           "(default: the one that routes to the head)")
    option("--temp-dir", type=Path, default=Path(environ.get("TMPDIR") or "/tmp"),
           help="node-local root for per-rank Ray temp dirs (default: TMPDIR or /tmp)")
    option("--ray-node-per", choices=("rank", "host"), default="rank",
           help="one Ray node per MPI rank (default) or one per host, the other local ranks idle")
    parser.add_argument("--auth", action=argparse.BooleanOptionalAction,
                        default=_env_bool(environ, "MPIRAY_AUTH", True),
                        help="token authentication; --no-auth lets anyone who reaches the "
                        "ports join the cluster (default: on) [env MPIRAY_AUTH]")
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction,
                        default=_env_bool(environ, "MPIRAY_DASHBOARD", False),
                        help="start Ray's dashboard on the head, bound to 127.0.0.1 "
                        "(default: off) [env MPIRAY_DASHBOARD]")
    parser.add_argument("--redis-password", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """argv (without the program name) -> Config. Raises SystemExit(2) on bad options."""
    environ = os.environ if environ is None else environ
    argv = list(argv)
    launcher_argv, driver = argv, list(DEFAULT_DRIVER)
    if "--" in argv:
        split = argv.index("--")
        launcher_argv, driver = argv[:split], argv[split + 1 :]
    elif environ.get("MPIRAY_DRIVER"):
        driver = shlex.split(environ["MPIRAY_DRIVER"])
    parser = build_parser(environ)
    args, extra = parser.parse_known_args(launcher_argv)
    if extra:
        parser.error(
            f"unrecognized arguments: {' '.join(extra)}. A driver command goes after '--', "
            f"e.g. start_ray.py -- python my_driver.py"
        )
    if not driver:
        parser.error("nothing after '--': give the driver command, e.g. -- python my_driver.py")
    if args.redis_password is not None:
        print(
            "mpiray: warning: --redis-password is ignored: Ray no longer uses Redis; the cluster "
            "is protected by a per-job token instead (see --auth).",
            file=sys.stderr,
        )
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
        ray_node_per=args.ray_node_per,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        print(f"mpiray: error: {error}", file=sys.stderr)
        return error.exit_code
    from mpiray import lifecycle  # imports mpi4py, which initializes MPI: only once args are valid

    return lifecycle.run(config)
