"""`ray start`, loaded early, let go by its rank, and watched: `python -m mpiray.raynode.starter [--niced-import] start ARGS...`.

1. It imports Ray's CLI at once (~1 s of CPU), so a worker rank does this while the head starts.
   With --niced-import (workers) the import yields the CPU to the head's start on a shared host:
   it runs at nice 10, and so does this process's session while sched_autogroup is on (the kernel
   then shares CPU between sessions, each Ray node being one, whatever their processes' nice).
   Both go back to 0 before `ray start` runs, so Ray's processes start at the normal priority.
2. It waits for one line on stdin. The rank writes it when the head has registered (rank 0: at once):
   a joining `ray start` asks the GCS for the head's record and sleeps 2 s between tries
   (`get_all_node_info_until_retrieved`), so started any earlier it would mostly sleep. End of file
   (the rank died) means exit, not start.
3. It runs `ray start` in this process (signals, --block and exit codes are Ray's own) while a daemon
   thread asks the GCS every 0.1 s for this node, by the --node-name and --temp-dir the rank gave,
   and once the node is ALIVE prints its record as one line, `mpiray-node-alive {json}`, to stdout:
   the node's output file, which the rank reads. (`ray start` prints "Ray runtime started." ~0.9 s
   after the node registered, while it polls the GCS on its own.) Each query runs in a thread of
   its own with a hard deadline: a query that hangs is left behind and the next one uses a new
   client. If the watch itself fails, it says so (`mpiray-watch-failed ...`) and the rank stops at
   once instead of at --startup-timeout. SIGUSR1 prints every thread's stack to the output file.
4. Given --include-log-monitor=false, the same thread starts Ray's log monitor (which streams the
   node's task output to drivers) once the node is ALIVE, as `ray start` would have at once: its
   ~0.7 s of Python imports then no longer compete with the node's own start. It reads the log
   files from their beginning, so no output is lost.
5. On the head, with MPIRAY_NODE_GCS_RESTARTS above 0, a `gcs_server` that dies is started again (gcsrestart.py).
6. What an older Ray lacks (raycompat) it works around, and says so once in `mpiray-compat ...` lines,
   which the rank copies into its log: e.g. before 2.55 a worker's --temp-dir is ignored, so this
   process answers Ray's lookup of the head's temp dir with the rank's own.

Run by module name (package.py); the rank side is node.RayNode (release, wait_alive).
"""

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from mpiray.deadline import Deadline
from mpiray.errors import QueryHung
from mpiray.raynode import gcsrestart, raycompat
from mpiray.raynode.gcs import Gcs
from mpiray.raynode.output import ALIVE, COMPAT, WATCH_FAILED

WATCH_INTERVAL = 0.1
IMPORT_NICE = 10
AUTOGROUP = Path("/proc/self/autogroup")
QUIET_SECONDS = 5.0  # GCS errors are expected while it starts; printed (once each) only after this
QUERY_TIMEOUT = 2.0  # asked of Ray's client; a query still running QUERY_TIMEOUT + HUNG_AFTER later hangs
HUNG_AFTER = 3.0
# Command groups Ray's CLI module adds at import, each in a `try` that drops the group if its import fails, and
# that `ray start` never uses: Serve's alone pulls pandas, pyarrow and FastAPI in (Ray 2.60: 189 MiB RSS after
# the import, 70 MiB without the three). Each node's starter lives as long as its node, so this is per node.
UNUSED_CLI_GROUPS = ("ray.serve.scripts", "ray.dashboard.modules.job.cli", "ray.util.state.state_cli")


def option(args: list[str], name: str) -> str | None:
    """The value of --name=VALUE in args (commands.py writes every option in that form)."""
    prefix = f"--{name}="
    return next((arg[len(prefix):] for arg in args if arg.startswith(prefix)), None)


def set_session_nice(nice: int, seconds: float) -> bool:
    """This session's autogroup nice. Anyone may raise it and set it back to 0 (only a negative value
    needs privileges), but without CAP_SYS_ADMIN only once per 100 ms on the whole host: retry."""
    deadline = Deadline.after(seconds)
    while True:
        try:
            AUTOGROUP.write_text(f"{nice}\n")
            return True
        except BlockingIOError:  # EAGAIN: another session changed its nice less than 100 ms ago
            if deadline.expired():
                return False
            time.sleep(0.02)
        except OSError:  # no autogroup support, or not allowed here
            return False


def load_cli(niced: bool):
    """Ray's CLI entry point, imported in a thread of its own so that a thread's nice stays with the import."""
    loaded = []
    lowered = niced and set_session_nice(IMPORT_NICE, seconds=0.3)

    failed: list[BaseException] = []

    def load():
        if niced:
            os.nice(IMPORT_NICE)
        for name in UNUSED_CLI_GROUPS:  # None in sys.modules: its import raises ImportError, which Ray skips
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
        try:
            from ray.scripts.scripts import main
        except ImportError:
            raise  # printed by the thread's hook: a missing package
        except Exception as error:  # Ray itself refused this node's environment at import (ray-project/ray#53737)
            failed.append(error)
            return
        loaded.append(main)

    loader = threading.Thread(target=load, name="import-ray")
    loader.start()
    loader.join()
    if lowered and not set_session_nice(0, seconds=30):
        print(f"mpiray: WARNING: could not set {AUTOGROUP} back to nice 0: this Ray node runs niced", flush=True)
    if failed:
        sys.exit(f"mpiray: Ray refused to start this node: {type(failed[0]).__name__}: {failed[0]}")
    if not loaded:
        sys.exit("mpiray: cannot import Ray's CLI (see the error above): pip install 'ray[default]'")
    return loaded[0]


def find_once(gcs: Gcs, name: str, temp_dir: str, hung_after: float = QUERY_TIMEOUT + HUNG_AFTER):
    """gcs.find in a daemon thread of its own, abandoned (QueryHung) if it runs hung_after seconds."""
    result: list = []

    def query():
        try:
            result.append(gcs.find(name, temp_dir, timeout=QUERY_TIMEOUT))
        except Exception as error:
            result.append(error)

    thread = threading.Thread(target=query, name="gcs-query", daemon=True)
    thread.start()
    thread.join(hung_after)
    if not result:
        raise QueryHung(f"a GCS query did not return within {hung_after:g} s")
    if isinstance(result[0], Exception):
        raise result[0]
    return result[0]


def say(message: str) -> None:
    os.write(1, f"{message}\n".encode())  # one write: one whole line, whatever else writes here


def say_compat_notes() -> None:
    """What this Ray lacks and mpiray does instead, for the rank's log (output.NodeOutput reads them)."""
    for key, note in raycompat.take_notes():
        say(f"{COMPAT.decode()}{key} {note}")


def refused(error: BaseException) -> bool:
    """The GCS answered and refused this node's token: asking again cannot help."""
    text = f"{type(error).__name__} {error}"
    return "AuthenticationError" in text or "InvalidAuthToken" in text or "UNAUTHENTICATED" in text.upper()


def watch(address: str, name: str, temp_dir: str):
    gcs, started, errors = Gcs(address), time.monotonic(), set()
    while True:
        try:
            node = find_once(gcs, name, temp_dir)
        except QueryHung as error:
            node, gcs = None, Gcs(address)  # the hung query keeps the old client: start afresh
            say(f"mpiray: node {name}: {error}; asking again with a new client")
        except Exception as error:  # the GCS is not up yet: say so if it lasts; one that refuses us: now
            if refused(error):
                raise
            node = None
            if time.monotonic() - started > QUIET_SECONDS and str(error) not in errors:
                errors.add(str(error))
                say(f"mpiray: node {name}: GCS query failed: {error}")
        say_compat_notes()
        if node is not None:
            say(ALIVE.decode() + json.dumps(asdict(node)))
            return gcs
        time.sleep(raycompat.watch_interval(WATCH_INTERVAL))


def watch_then_log(address: str, args: list[str], name: str, temp_dir: str) -> None:
    try:
        gcs = watch(address, name, temp_dir)
    except BaseException as error:  # the rank must hear of it now, not at --startup-timeout
        say(WATCH_FAILED.decode() + repr(error).replace("\n", " "))
        raise
    if "--include-log-monitor=false" not in args:
        return
    try:
        raycompat.start_log_monitor(gcs.address, option(args, "node-ip-address"), temp_dir)
    except Exception as error:  # the node works without it; its task output stays in its log files
        say(f"mpiray: WARNING: could not start Ray's log monitor: {error!r}")
        return
    threading.Event().wait()  # a child's PR_SET_PDEATHSIG fires when the thread that forked it ends


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the rank asks for stacks when it times out
    args = sys.argv[1:]
    niced = args[:1] == ["--niced-import"]
    args = args[1:] if niced else args
    main = load_cli(niced)
    if not sys.stdin.readline():
        sys.exit("mpiray: the launcher rank exited before it let `ray start` go")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # Ray's processes inherit stdin: not our pipe
    name, temp_dir = option(args, "node-name"), option(args, "temp-dir")
    address = option(args, "address") or f"{option(args, 'node-ip-address')}:{option(args, 'port')}"
    if args[:1] == ["start"] and temp_dir:
        args = raycompat.keep_worker_temp_dir(args, temp_dir)
        raycompat.check_stop_order()
        say_compat_notes()
    if args[:1] == ["start"] and name and temp_dir:
        threading.Thread(target=watch_then_log, args=(address, args, name, temp_dir), daemon=True).start()
    if args[:1] == ["start"] and "--head" in args and int(os.environ.get(gcsrestart.VARIABLE, "0")) > 0:
        gcsrestart.Keeper(int(os.environ[gcsrestart.VARIABLE]), address, say).install()
    sys.argv = ["ray", *args]
    sys.exit(main())
