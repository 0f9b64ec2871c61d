"""`ray start`, loaded early, let go by its rank, and watched: `python ray_node.py [--niced-import] start ARGS...`.

1. It imports Ray's CLI at once (~1 s of CPU), so a worker rank does this while the head starts.
   With --niced-import (workers) the import runs in a thread at nice 10 (on Linux a thread's own
   setting), so on a shared host it yields the CPU to the head's start; the rest runs, and Ray's
   processes start, at the normal priority.
2. It waits for one line on stdin. The rank writes it when the head has registered (rank 0: at once):
   a joining `ray start` asks the GCS for the head's record and sleeps 2 s between tries
   (`get_all_node_info_until_retrieved`), so started any earlier it would mostly sleep. End of file
   (the rank died) means exit, not start.
3. It runs `ray start` in this process (signals, --block and exit codes are Ray's own) while a daemon
   thread asks the GCS every 0.1 s for this node, by the --node-name and --temp-dir the rank gave,
   and once the node is ALIVE prints its record as one line, `mpiray-node-alive {json}`, to stdout:
   the node's output file, which the rank reads. (`ray start` prints "Ray runtime started." ~0.9 s
   after the node registered, while it polls the GCS on its own.)

Run by its path (mpiray may not be installed); the rank side is lifecycle.release_node/wait_until_alive.
"""

import json
import os
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

# Not this file's directory (its modules would shadow top-level names) but the one holding mpiray.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from mpiray.gcs import ALIVE, Gcs  # noqa: E402  (after the path is set)

WATCH_INTERVAL = 0.1
IMPORT_NICE = 10
QUIET_SECONDS = 5.0  # GCS errors are expected while it starts; printed (once each) only after this


def option(args: list[str], name: str) -> str | None:
    """The value of --name=VALUE in args (commands.py writes every option in that form)."""
    prefix = f"--{name}="
    return next((arg[len(prefix):] for arg in args if arg.startswith(prefix)), None)


def load_cli(niced: bool):
    """Ray's CLI entry point, imported in a thread of its own so that niceness stays with the import."""
    loaded = []

    def load():
        if niced:
            os.nice(IMPORT_NICE)
        from ray.scripts.scripts import main

        loaded.append(main)

    loader = threading.Thread(target=load, name="import-ray")
    loader.start()
    loader.join()
    if not loaded:
        sys.exit("mpiray: cannot import Ray's CLI (see the error above): pip install 'ray[rllib]'")
    return loaded[0]


def watch(gcs: Gcs, name: str, temp_dir: str) -> None:
    started, errors = time.monotonic(), set()
    while True:
        try:
            node = gcs.find(name, temp_dir, timeout=2.0)
        except Exception as error:  # the GCS is not up yet, or refuses us: say so if it lasts
            node = None
            if time.monotonic() - started > QUIET_SECONDS and str(error) not in errors:
                errors.add(str(error))
                os.write(1, f"mpiray: node {name}: GCS query failed: {error}\n".encode())
        if node is not None:
            os.write(1, f"{ALIVE} {json.dumps(asdict(node))}\n".encode())  # one write: one whole line
            return
        time.sleep(WATCH_INTERVAL)


if __name__ == "__main__":
    args = sys.argv[1:]
    niced = args[:1] == ["--niced-import"]
    args = args[1:] if niced else args
    main = load_cli(niced)
    if not sys.stdin.readline():
        sys.exit("mpiray: the launcher rank exited before it let `ray start` go")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # Ray's processes inherit stdin: not our pipe
    name, temp_dir = option(args, "node-name"), option(args, "temp-dir")
    address = option(args, "address") or f"{option(args, 'node-ip-address')}:{option(args, 'port')}"
    if args[:1] == ["start"] and name and temp_dir:
        threading.Thread(target=watch, args=(Gcs(address), name, temp_dir), daemon=True).start()
    sys.argv = ["ray", *args]
    sys.exit(main())
