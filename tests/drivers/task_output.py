"""A driver whose tasks print on every node: the test looks for each line in the job's output.

Ray's log monitor on each node streams its tasks' output to the driver (mpiray starts it once the
node is ALIVE); the driver prints those lines from a background thread, so it waits for them a while.
"""

import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()


@ray.remote(num_cpus=0)
def shout(node_id: str) -> None:
    print(f"TASK-OUTPUT from {node_id}", flush=True)


nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
ray.get([shout.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(n) for n in nodes])
print("NODES " + " ".join(nodes), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3.0)
