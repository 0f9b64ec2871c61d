"""A driver for the launcher's tests: the CPUs a task may run on, on each Ray node (JSON).

    affinity.py   ->   AFFINITY {"<node name>": [cpu, ...], ...}
"""

import json
import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]
found = ray.get([cpus.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("AFFINITY " + json.dumps({n["NodeName"]: cpu_list for n, cpu_list in zip(nodes, found)}), flush=True)
