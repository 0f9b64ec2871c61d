"""A driver across a restart of the head's GCS: an actor on every node and a detached one, then (once PATH exists,
the GCS having been killed and started again) the same actors asked again, a new task on every node and a new actor.

    gcs_restart.py PATH     # prints `BEFORE {json}` when its actors answer, `AFTER {json}` at the end
"""

import json
import os
import sys
import time

import ray

ray.init()


@ray.remote(num_cpus=0)
class Keeper:
    def where(self):
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}


@ray.remote(num_cpus=0)
def node_of():
    return ray.get_runtime_context().get_node_id()


nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
by_node = {node: Keeper.options(scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
    node, soft=False)).remote() for node in nodes}
detached = Keeper.options(name="kept", lifetime="detached").remote()
before = {node: ray.get(actor.where.remote()) for node, actor in by_node.items()}
print("BEFORE " + json.dumps({"actors": before, "detached": ray.get(detached.where.remote())}), flush=True)
deadline = time.monotonic() + 300
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.2)
after = {node: ray.get(actor.where.remote(), timeout=60) for node, actor in by_node.items()}
tasks = sorted(set(ray.get([node_of.options(scheduling_strategy=ray.util.scheduling_strategies.
                                            NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                            for node in nodes], timeout=60)))
fresh = Keeper.remote()
print("AFTER " + json.dumps({"actors": after, "detached": ray.get(ray.get_actor("kept").where.remote(), timeout=60),
                             "tasks": tasks, "new_actor": ray.get(fresh.where.remote(), timeout=60),
                             "nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])}), flush=True)
