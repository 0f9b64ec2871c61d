"""A driver that watches Ray's draining state, as Ray Train's PreemptionWatcher does, and checkpoints on SIGTERM.

    drain_watch.py CHECKPOINT

It keeps an actor on every node (busy nodes: Ray ends an idle node at once when it drains it), then reads
ray._private.state.state.get_draining_nodes() (node id -> deadline in ms) every 0.2 s; on SIGTERM it writes
CHECKPOINT with the nodes and what it saw before the signal, and exits 0: a driver that saved its work in its grace.
"""

import json
import signal
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

checkpoint = sys.argv[1]
ray.init()
nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
head = ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0)
class Resident:
    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


residents = [Resident.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
             for node in nodes]
assert sorted(ray.get([resident.where.remote() for resident in residents])) == sorted(nodes)
print(f"WATCHING {len(nodes)} nodes", flush=True)
seen: dict = {}


def on_sigterm(signum, frame):
    with open(checkpoint, "w") as out:
        json.dump({"nodes": nodes, "head": head, "draining": seen, "sigterm_at": time.time()}, out)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
while True:
    for node, deadline_ms in ray._private.state.state.get_draining_nodes().items():
        seen.setdefault(node, {"deadline_ms": deadline_ms, "seen_at": time.time()})
    time.sleep(0.2)
