"""mpiray as a library: `mpiray.init()` at the top of the user's own script, started by the MPI launcher.

    import mpiray
    info = mpiray.init()        # rank 0 returns, connected to the whole cluster; other ranks serve
    ...                         # the user's Ray code, on rank 0 only

The same lifecycle as the command line (lifecycle.py); only the driver differs: it is the calling
script itself, in-process on rank 0, instead of a subprocess. Rank 0's end (the script's end,
sys.exit(n), an uncaught exception, SIGTERM) stops the cluster on every rank, and every other rank
exits with rank 0's code. With exit=False the other ranks return None after the cluster stopped
instead, for programs that go on with MPI (as dask-mpi's initialize(exit=False)).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mpiray import cli
from mpiray.errors import ConfigError, LaunchError



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


class _Cluster:
    """The cluster this process started, and how rank 0's script is ending (its exit code)."""

    def __init__(self, me):
        self.me = me
        self.code = 0
        self.ended = False
        self._exit = sys.exit
        self._excepthook = sys.excepthook

    def watch_the_script(self) -> None:
        """Learn rank 0's exit code: sys.exit(n), an uncaught exception (1), SIGTERM/SIGHUP (128+N)."""

        def exit(code=0):
            self.code = 0 if code is None else code if isinstance(code, int) else 1
            self._exit(code)

        def excepthook(kind, value, traceback):
            self.code = 128 + signal.SIGINT if issubclass(kind, KeyboardInterrupt) else 1
            self._excepthook(kind, value, traceback)  # the traceback, shown once (rank 0 only)

        def on_signal(signum, frame):
            self.me.stop.signum = signum  # teardown then gives Ray the short grace of a stop signal
            exit(128 + signum)

        sys.exit, sys.excepthook = exit, excepthook
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, on_signal)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C: KeyboardInterrupt, as usual

    def end(self, code: int) -> int:
        """Stop the cluster on every rank (rank 0: its driver connection first); once."""
        from mpiray import lifecycle

        if self.ended:
            return self.code
        self.ended = True
        if self.me.rank == 0:
            import ray

            ray.shutdown()
            sys.exit, sys.excepthook = self._exit, self._excepthook
        self.code = lifecycle.finish(self.me, code)
        return self.code


_cluster: _Cluster | None = None


def init(*, exit: bool = True, comm=None, **options) -> ClusterInfo | None:
    """Start the Ray cluster over this program's MPI ranks; on rank 0, connect to it and return its info.

    options are the command line's, as keywords (log_dir=, job_id=, startup_timeout=, num_cpus=,
    ray_node_per=, interface=, auth=, ...; MPIRAY_* variables give their defaults). Other ranks
    serve as Ray nodes until rank 0's script ends, then exit with its exit code (exit=False: return
    None, the cluster stopped, MPI still usable). comm: an mpi4py communicator (default COMM_WORLD).
    """
    global _cluster
    if _cluster is not None:
        raise LaunchError("mpiray.init() was called before in this process: one cluster per process")
    config = cli.library_config(options)
    if config.dry_run:
        raise ConfigError("dry_run is the command line's (start_ray.py --dry-run): init() connects to a real cluster")
    from mpiray import lifecycle, mpi  # imports mpi4py (MPI_Init): only once the options are valid

    me = lifecycle.setup(config, None if comm is None else mpi.Comm(comm))
    _cluster = cluster_ = _Cluster(me)
    # mpi4py's MPI_Finalize runs at the interpreter's exit (after any exit=False MPI use); not if a
    # rank died, whose closing PMI barrier would never end.
    atexit.register(lambda: None if me.all_met else mpi.abandon(cluster_.code))
    if me.rank != 0:
        code = cluster_.end(lifecycle.outcome(me, lambda: lifecycle.serve(me)))
        if exit:
            sys.exit(code)
        return None
    nodes = []
    code = lifecycle.outcome(me, lambda: nodes.extend(lifecycle.lead(me)) or 0)
    if not nodes:
        code = cluster_.end(code)
        if exit:
            sys.exit(code)
        raise LaunchError(f"the Ray cluster did not start (see {me.log.path})", code)
    info = _connect(me, nodes)
    cluster_.watch_the_script()
    atexit.register(lambda: cluster_.end(cluster_.code))  # runs before the MPI_Finalize above
    return info


def shutdown(code: int = 0) -> None:
    """Rank 0: stop the cluster on every rank now, rather than when the script ends; the other
    ranks exit with code (or, with exit=False, return from init()). Idempotent."""
    if _cluster is not None:
        _cluster.end(code)


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
        code = error.code if isinstance(error, SystemExit) and isinstance(error.code, int) else 1
        raise
    finally:
        shutdown(code)


def _connect(me, nodes) -> ClusterInfo:
    """Rank 0's script becomes the cluster's driver: the environment a CLI driver gets, then ray.init()."""
    from mpiray import driver, raycompat

    env = driver.driver_env(me, nodes)
    for name in set(os.environ) - set(env):  # e.g. RAY_AUTH_TOKEN: the token file is the only source
        del os.environ[name]
    os.environ.update(env)
    raycompat.reload_auth_settings()
    import ray

    ray.init(address=env["RAY_ADDRESS"], log_to_driver=True)
    me.log.step(f"Connected this script to the cluster (mpiray.init): {env['RAY_ADDRESS']}")
    return ClusterInfo(
        job_id=me.session.job_id,
        gcs_address=env["RAY_ADDRESS"],
        head_ip=me.session.head_ip,
        num_nodes=len(nodes),
        total_cpus=int(env["MPIRAY_TOTAL_CPUS"]),
        total_gpus=int(env["MPIRAY_TOTAL_GPUS"]),
        log_dir=me.config.log_dir / me.session.job_id,
        nodes=tuple(Node(r.rank, r.host, r.node_ip, r.resources) for r in nodes),
    )
