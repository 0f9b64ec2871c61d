"""mpiray as a library: `mpiray.init()` at the top of the user's own script, started by the MPI launcher.

    import mpiray
    info = mpiray.init()        # rank 0 returns, connected to the whole cluster; other ranks serve
    ...                         # the user's Ray code, on rank 0 only

Every rank lives the same life as on the command line (rank.life.run); only rank 0's leader step
differs: the cluster is handed to the calling script instead of a driver command (leaders/script.py:
rank 0 runs its rank's life in a thread of its own, and its main thread returns to the script). The
script's own end (its last line, sys.exit(n), raise SystemExit(n), an uncaught exception, a signal)
gives the exit code that every rank exits with: seen by the wrapper of `python -m mpiray my_script.py`
(run_script), or under plain `python my_script.py` by an exit hook (leaders/script.py). os._exit() ends
rank 0 without any of this: the other ranks are then ended by the MPI launcher.

The other ranks serve inside init() and exit with rank 0's code; with exit=False they return None
once the cluster stopped instead, for programs that go on with MPI (as dask-mpi's initialize(exit=False)).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import os
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mpiray.errors import ConfigError, LaunchError
from mpiray.leaders.script import ScriptLeader
from mpiray.logs.events import RankLog
from mpiray.options import library_config
from mpiray.rank import life, preflight
from mpiray.raynode import raycompat


@dataclass(frozen=True)
class Node:
    rank: int
    host: str
    ip: str
    resources: dict


@dataclass(frozen=True)
class ClusterInfo:
    """What rank 0's script gets from init(): what a command-line driver gets as MPIRAY_* variables."""

    job_id: str
    gcs_address: str  # also in RAY_ADDRESS
    head_ip: str
    num_nodes: int
    total_cpus: int
    total_gpus: int
    log_dir: Path  # this job's logs: LOG_DIR/JOB_ID
    nodes: tuple[Node, ...]


_leader: ScriptLeader | None = None
# Plain `python my_script.py`: rank 0 sees how its script ends by replacing builtins.SystemExit while it
# runs (leaders/script.py's ExitWatch). `python -m mpiray my_script.py` (run_script) sees it itself: False.
_watch_exit = True


def init(*, exit: bool = True, comm=None, **options) -> ClusterInfo | None:
    """Start the Ray cluster over this program's MPI ranks; on rank 0, connect to it and return its info.

    options are the command line's, as keywords (log_dir=, job_id=, startup_timeout=, num_cpus=,
    ray_node_per=, time_limit=, interface=, auth=, ...; MPIRAY_* variables give their defaults).
    Other ranks serve as Ray nodes until rank 0's script ends, then exit with its exit code
    (exit=False: return None, the cluster stopped, MPI still usable). comm: an mpi4py communicator
    (default COMM_WORLD).
    """
    global _leader
    if _leader is not None:
        raise ConfigError("mpiray.init() was called before in this process: one cluster per process")
    config = library_config(options)
    preflight.check_ray_install(config.auth)
    log: RankLog | None = None
    if comm is None:  # MPI_Init (the import of mpi4py): only once the options are valid, with a deadline
        log = life.early_log(config)  # before MPI_Init, as the command line's
        world = life.mpi_world(config.startup_timeout, log)
    else:
        from mpiray.rank import mpi

        world = mpi.Comm(comm)
    if world.rank != 0:
        code = life.run(config, None, world, process_ends=exit, log=log)
        if exit:
            sys.exit(code)
        return None
    _leader = leader = ScriptLeader(config, world, log, watch_exit=_watch_exit)
    cluster = leader.begin()
    if cluster is None:  # the agent ended: the cluster did not start, and is torn down
        leader.signals.put_back(process_ends=exit)
        if exit:
            sys.exit(leader.result)
        message, cause = leader.failure or ("see the rank logs", None)
        raise LaunchError(f"the Ray cluster did not start: {message} (rank logs in {config.log_dir})", leader.result,
                          cause)
    try:
        info = _connect(cluster)
    except BaseException as error:
        leader.connected(error)
        leader.agent.join()
        leader.signals.put_back(process_ends=exit)
        raise
    leader.connected(None)
    assert leader.me is not None  # the cluster is up: the agent handed it over
    leader.me.log.event("script_connected", gcs_address=cluster.session.gcs_address)
    atexit.register(leader.at_exit)  # after ray.init's own: runs first; before mpi4py's MPI_Finalize
    return info


def run_script(argv: list[str]) -> int:
    """`python -m mpiray SCRIPT.py [ARGS]` (or `-m MODULE [ARGS]`), as `python -m mpi4py` runs a script: run
    it as `python SCRIPT.py` would (as __main__, its argv, sys.path[0] its folder), inside a wrapper that sees
    every way it ends and replaces nothing of Python's: its last line (0), sys.exit(n) however the script bound
    it (`from sys import exit`), raise SystemExit(n), an uncaught exception (1, its traceback shown;
    KeyboardInterrupt 130), a stop signal (mpiray's handler raises SystemExit(128+N)). The code, to exit with:
    on rank 0 init()'s exit hook then stops the cluster on every rank with it, after the script's threads and
    its own exit hooks, as under plain `python SCRIPT.py`."""
    global _watch_exit
    if argv[0] == "-m":
        sys.argv = argv[1:]  # run_module puts the module's path in argv[0]
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT` sets it
    _watch_exit = False
    try:
        if argv[0] == "-m":
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
        code, how = 0, "the end of the script"
    except builtins.SystemExit as error:
        code, how = _exit_code(error), "SystemExit"
    except BaseException as error:  # noqa: BLE001  (what the interpreter prints, and exits 1 for)
        sys.excepthook(type(error), error, error.__traceback__)
        code, how = (130 if isinstance(error, KeyboardInterrupt) else 1), "an uncaught exception"
    if _leader is not None:  # rank 0, once init() connected it (other ranks exit inside init() or return None)
        _leader.script_returned(code, how)
    return code


def _exit_code(error: BaseException) -> int:
    """The exit code the interpreter gives a SystemExit: None 0, an int itself, anything else printed and 1."""
    code = getattr(error, "code", None)
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def shutdown(code: int = 0) -> None:
    """Rank 0: stop the cluster on every rank now, rather than when the script ends; the other
    ranks exit with code (or, with exit=False, return from init()). Idempotent."""
    if _leader is not None:
        _leader.end(code, "mpiray.shutdown()", process_ends=False)


@contextlib.contextmanager
def cluster(*, exit: bool = True, comm=None, **options) -> Iterator[ClusterInfo | None]:
    """init() with an explicit end: leaving the block stops the cluster on every rank.

    Other ranks serve inside the `with` line and exit with rank 0's code at its end (exit=False:
    their block runs with None once the cluster stopped).
    """
    info = init(exit=exit, comm=comm, **options)
    if info is None:
        yield None
        return
    code = 0
    try:
        yield info
    except BaseException as error:
        code = _exit_code(error) if isinstance(error, builtins.SystemExit) else 1
        raise
    finally:
        shutdown(code)


def _connect(cluster) -> ClusterInfo:
    """Rank 0's script becomes the cluster's driver: the environment a command-line driver gets, then ray.init()."""
    env = cluster.driver_env(dict(os.environ))
    for name in set(os.environ) - set(env):  # e.g. RAY_AUTH_TOKEN: the token file is the only source
        del os.environ[name]
    os.environ.update(env)
    raycompat.reload_auth_settings()
    import ray

    ray.init(address=env["RAY_ADDRESS"], log_to_driver=True)
    return ClusterInfo(
        job_id=cluster.session.job_id,
        gcs_address=cluster.session.gcs_address,
        head_ip=cluster.session.head_ip,
        num_nodes=len(cluster.nodes),
        total_cpus=cluster.total_cpus,
        total_gpus=cluster.total_gpus,
        log_dir=cluster.log_dir,
        nodes=tuple(Node(r.rank, r.host, r.node_ip, r.resources) for r in cluster.nodes),
    )

