"""A driver for the Slurm tests: where Ray places tasks on the launcher's cluster.

Prints one line `PLACEMENT {json}`: every alive node (id, advertised IP, resources), the node each
of the hard node-affinity tasks (one per node) ran on, where SPREAD tasks ran, and with --gpu-task
where a task that needs one GPU ran. Exits with --exit.
"""

import argparse
import json
import os
import socket
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

parser = argparse.ArgumentParser()
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--spread", type=int, default=6, help="number of SPREAD tasks")
parser.add_argument("--gpu-task", action="store_true", help="also run a task that needs 1 GPU")
args = parser.parse_args()


@ray.remote(num_cpus=0)
def where(hold: float = 0) -> dict:
    time.sleep(hold)
    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "host": socket.gethostname(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "fi_provider": os.environ.get("FI_PROVIDER"),
    }


ray.init()
nodes = [node for node in ray.nodes() if node["Alive"]]
pinned = ray.get([
    where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote()
    for node in nodes
])
# Each SPREAD task holds its worker a moment: the driver would otherwise run them all, one after the
# other, on the first worker it leased (Ray reuses a lease for tasks of the same kind), on one node.
spread = ray.get([where.options(scheduling_strategy="SPREAD").remote(0.5) for _ in range(args.spread)])
report = {
    "nodes": [
        {"node_id": n["NodeID"], "ip": n["NodeManagerAddress"], "host": n["NodeManagerHostname"],
         "resources": {k: v for k, v in n["Resources"].items() if k in ("CPU", "GPU", "mpiray_learner_slot")},
         "role": n.get("Labels", {}).get("mpiray.io/role"), "gpu_domain": n.get("Labels", {}).get("ray.io/gpu-domain")}
        for n in nodes
    ],
    "pinned": pinned,
    "spread": spread,
    "driver_host": socket.gethostname(),
    "driver_fi_provider": os.environ.get("FI_PROVIDER"),
}
if args.gpu_task:
    report["gpu_task"] = ray.get(where.options(num_gpus=1).remote())
print("PLACEMENT " + json.dumps(report), flush=True)
sys.exit(args.exit)
