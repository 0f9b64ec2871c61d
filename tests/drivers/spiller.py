"""A driver that makes every node spill: on each alive node a task returns objects worth 3x its object store;
the driver holds them all, then looks at the spill dir (SPILL_ROOT/mpiray-UID-spill-*/ray/). Prints SPILLED {json}.

    python spiller.py SPILL_ROOT STORE_MIB
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

root, store_mib = Path(sys.argv[1]), int(sys.argv[2])
CHUNK_MIB = 5


@ray.remote(num_cpus=0)
def fill(mib: int) -> list:
    return [ray.put(np.ones(CHUNK_MIB << 17, dtype=np.float64)) for _ in range(mib // CHUNK_MIB)]


ray.init()
nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
held = ray.get([fill.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(3 * store_mib)
                for node in nodes])
spilled = sorted(root.glob(f"mpiray-{os.getuid()}-spill-*/ray/ray_spilled_objects_*"))
files = sum(len(list(path.iterdir())) for path in spilled)
print("SPILLED " + json.dumps({"nodes": len(nodes), "node_dirs": len(spilled), "files": files,
                               "held": sum(len(refs) for refs in held)}), flush=True)
