"""A user's own script on mpiray.init(), for the library's tests: `library_script.py MODE [LOG_DIR]`.

MODE: ok (normal end), exit3 (sys.exit(3)), raise (an uncaught exception), sigterm (waits for SIGTERM),
exit-false (init(exit=False): the other ranks go on with MPI), context (mpiray.cluster()).
Every rank prints `RANK r: ...` lines; rank 0 prints `CONNECTED {json}` once connected.
"""

import json
import os
import sys
import time

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


if mode == "context":
    with mpiray.cluster(log_dir=log_dir, exit=False) as info:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        if info is not None:
            connected(info)
        print(f"RANK {rank}: in the block, info {'set' if info else 'None'}", flush=True)
    print(f"RANK {rank}: after the block", flush=True)
    sys.exit(0)

info = mpiray.init(log_dir=log_dir, exit=(mode != "exit-false"))
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
if mode == "raise":
    raise RuntimeError("the user's script failed")
if mode == "sigterm":
    print("WAITING", flush=True)
    time.sleep(120)
if mode == "exit-false":
    mpiray.shutdown()  # the other ranks return from init() now
    total = MPI.COMM_WORLD.allreduce(rank)
    print(f"RANK {rank}: MPI after the cluster, allreduce {total}", flush=True)
