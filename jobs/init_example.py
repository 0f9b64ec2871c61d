"""mpiray as a library: one script, started by the MPI launcher, that calls mpiray.init() at the top.

    mpirun -np 4 .venv/bin/python jobs/init_example.py          # a laptop
    mpirun -np 4 .venv/bin/python -m mpiray jobs/init_example.py   # the same, inside mpiray's wrapper
    srun -N 3 --ntasks-per-node=1 --cpus-per-task=8 --mpi=pmi2 python jobs/init_example.py   # in an allocation

Rank 0 returns from init() connected to the whole cluster and runs the code below; every other rank
serves as a Ray node inside init() and exits with rank 0's exit code when this script ends.
"""

import socket
import sys
from collections import Counter

import mpiray

info = mpiray.init()  # same options as start_ray.py, as keywords (log_dir=, startup_timeout=, ...)

import ray  # noqa: E402  (Ray is initialised and connected by now, on rank 0 only)


@ray.remote(num_cpus=1)
def square(x: int) -> tuple[int, str]:
    return x * x, socket.gethostname()


print(f"job {info.job_id}: {info.num_nodes} Ray nodes, {info.total_cpus} CPUs; logs in {info.log_dir}")
results = ray.get([square.remote(x) for x in range(4 * info.total_cpus)])
print(f"sum of squares: {sum(value for value, _ in results)}")
print("tasks per host:", dict(Counter(host for _, host in results)))
sys.exit(0)  # the exit code of every rank (an uncaught exception: 1 on every rank)
