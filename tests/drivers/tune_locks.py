"""A driver that takes the file lock Ray Tune and Train take around a checkpoint's local copy
(ray.air._internal.filelock.TempFileLock), in the driver and in a task on every node.

argv[1]: the path whose lock is taken. Prints `LOCKS {json}`: per place (driver, node name), the lock
file's directory, or the error.
"""

import json
import sys

import ray
from ray.air._internal.filelock import TempFileLock
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

TARGET = sys.argv[1]


def take_lock() -> str:
    lock = TempFileLock(TARGET, timeout=10)
    try:
        with lock:
            return str(lock._lock_dir)
    except Exception as error:  # a neighbour holds it: Timeout; or made the directory: PermissionError
        return f"ERROR {error!r}"


ray.init()
nodes = {n["NodeID"]: n["NodeName"] for n in ray.nodes() if n["Alive"]}
remote = ray.remote(num_cpus=0)(take_lock)
found = ray.get([remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                 for node in nodes], timeout=120)
print("LOCKS " + json.dumps({"driver": take_lock(), **dict(zip(nodes.values(), found))}), flush=True)
