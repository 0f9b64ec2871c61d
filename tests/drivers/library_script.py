"""A user's own script on mpiray.init(), for the library's tests: `library_script.py MODE [LOG_DIR [MARKER]]`.

MODE: ok (normal end), exit3 (sys.exit(3)), raise-exit3 (raise SystemExit(3)), swallowed (a SystemExit
caught inside, then a normal end), bound-exit (sys.exit bound before init(): exit(4) caught by the script's
`except SystemExit`, then exit(3)), raise (an uncaught exception), sigterm (waits for SIGTERM),
exit-false (init(exit=False): the other ranks go on with MPI), context (mpiray.cluster()),
time-limit (init(time_limit=4), then sleeps 60 s), time-limit-stuck (the same, with SIGTERM blocked in
the main thread: the script cannot end when told to), wait-then-ray (waits for MARKER to exist, then
calls Ray), blocked-in-ray (blocked in
ray.get(timeout=60) of a task that sleeps 60 s), blocked-in-c (sleeps 60 s with SIGTERM blocked in the main
thread, as C code that never returns to Python), finalize-pause
(exits 3, and every rank then pauses in its exit functions, where MPI_Finalize runs), port-in-use
(init(exit=False, port=P) with P held by this script: rank 0 cannot start the head; prints `REFUSED {json}`).
Every rank prints `RANK r: ...` lines; rank 0 prints `CONNECTED {json}` once connected.
"""

import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path
from sys import exit as bound_exit  # bound before init(), as `from sys import exit` does

import mpiray

mode, log_dir = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "logs"


def connected(info) -> None:
    import ray

    @ray.remote(num_cpus=0)
    def where():
        return ray.get_runtime_context().get_node_id()

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    affinity = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
    ran_on = ray.get([where.options(scheduling_strategy=affinity(n, soft=False)).remote() for n in nodes], timeout=60)
    print("CONNECTED " + json.dumps({
        "initialized": ray.is_initialized(), "nodes": info.num_nodes, "ran_on": len(set(ran_on)),
        "cpus": info.total_cpus, "job_id": info.job_id, "token": os.environ.get("RAY_AUTH_TOKEN_PATH"),
        "ranks": [n.rank for n in info.nodes],
    }), flush=True)


if mode == "port-in-use":
    import socket

    from mpiray.errors import LaunchError

    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    try:
        mpiray.init(log_dir=log_dir, exit=False, port=holder.getsockname()[1])
    except LaunchError as error:
        print("REFUSED " + json.dumps({"code": error.exit_code, "cause": error.cause, "message": str(error)}), flush=True)
    sys.exit(0)

if mode == "context":
    with mpiray.cluster(log_dir=log_dir, exit=False) as info:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        if info is not None:
            connected(info)
        print(f"RANK {rank}: in the block, info {'set' if info else 'None'}", flush=True)
    print(f"RANK {rank}: after the block", flush=True)
    sys.exit(0)

if mode == "finalize-pause":
    # A C exit function, registered after mpi4py's MPI_Finalize, so it runs just before it: as a rank
    # waiting in MPI_Finalize, a stop signal must not end it there (srun --kill-on-bad-exit sends one).
    from mpi4py import MPI  # noqa: F401  (registers MPI_Finalize first)

    ctypes.pythonapi.Py_AtExit(ctypes.cast(ctypes.CDLL(None).pause, ctypes.c_void_p))

limits = {"time_limit": 4, "stop_grace": 3} if mode.startswith("time-limit") else {}
info = mpiray.init(log_dir=log_dir, exit=(mode != "exit-false"), **limits)
from mpi4py import MPI  # noqa: E402  (MPI is initialised by now)

rank = MPI.COMM_WORLD.Get_rank()
print(f"RANK {rank}: init returned {'info' if info else 'None'}", flush=True)
if info is None:  # exit=False, a worker: the cluster has stopped, MPI goes on
    total = MPI.COMM_WORLD.allreduce(rank)
    print(f"RANK {rank}: MPI after the cluster, allreduce {total}", flush=True)
    sys.exit(0)
connected(info)
if mode == "exit3":
    sys.exit(3)
if mode == "raise-exit3":
    raise SystemExit(3)
if mode == "finalize-pause":
    print("EXITING", flush=True)
    sys.exit(3)
if mode == "swallowed":
    try:
        sys.exit(5)
    except SystemExit:
        pass
if mode == "bound-exit":
    try:
        bound_exit(4)
    except SystemExit as caught:
        print(f"CAUGHT {caught.code}", flush=True)
    bound_exit(3)
if mode == "raise":
    raise RuntimeError("the user's script failed")
if mode == "sigterm":
    print("WAITING", flush=True)
    time.sleep(120)
if mode in ("time-limit-stuck", "blocked-in-c"):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as a thread stuck in C code never sees it
if mode.startswith("time-limit") or mode == "blocked-in-c":
    print("SLEEPING", flush=True)
    time.sleep(60)
    print("SLEPT TO THE END", flush=True)
if mode == "wait-then-ray":
    import ray

    print("WAITING", flush=True)
    marker = Path(sys.argv[3])
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    print("CALLING RAY", flush=True)
    print(f"RAY ANSWERED {ray.get(ray.remote(lambda: 42).remote(), timeout=120)}", flush=True)
if mode == "blocked-in-ray":
    import ray

    @ray.remote(num_cpus=0)
    def nap():
        time.sleep(60)

    task = nap.remote()
    print("BLOCKED", flush=True)
    print(f"RAY ANSWERED {ray.get(task, timeout=60)}", flush=True)
if mode == "exit-false":
    mpiray.shutdown()  # the other ranks return from init() now
    total = MPI.COMM_WORLD.allreduce(rank)
    print(f"RANK {rank}: MPI after the cluster, allreduce {total}", flush=True)
