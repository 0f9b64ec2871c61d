"""A driver for the fast-network test: three learner-shaped actors, one per node (a learner slot each, as the
trainer's learners ask), form a torch.distributed gloo group as RLlib's learners do and all-reduce; while the
group is up each reports its node's address, the local addresses of its own TCP connections (gloo's), and
`ss -tnap` of its node (its network namespace). Prints `FABRIC {json}`."""

import json
import os
import socket
import subprocess
from datetime import timedelta

import psutil
import ray
import torch
import torch.distributed as dist

WORLD = 3


@ray.remote(num_cpus=0, resources={"mpiray_learner_slot": 1})
class Learner:
    def address(self) -> str:
        return ray.util.get_node_ip_address()

    def free_port(self) -> int:
        with socket.socket() as probe:
            probe.bind((ray.util.get_node_ip_address(), 0))
            return probe.getsockname()[1]

    def all_reduce(self, rank: int, master: str, port: int) -> dict:
        dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=WORLD,
                                timeout=timedelta(seconds=60))
        total = torch.ones(1)
        dist.all_reduce(total)
        own = psutil.Process().net_connections("tcp")
        sockets = subprocess.run(["ss", "-tnap"], capture_output=True, text=True, timeout=30).stdout
        dist.barrier()  # every member looked while the group was up
        dist.destroy_process_group()
        return {"rank": rank, "node_ip": ray.util.get_node_ip_address(), "sum": total.item(),
                "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
                "gloo_local": sorted({c.laddr.ip for c in own if c.status == psutil.CONN_ESTABLISHED}),
                "ss": sockets}


ray.init()
learners = [Learner.remote() for _ in range(WORLD)]
addresses = ray.get([learner.address.remote() for learner in learners], timeout=120)
port = ray.get(learners[0].free_port.remote(), timeout=60)
reports = ray.get([learner.all_reduce.remote(rank, addresses[0], port) for rank, learner in enumerate(learners)],
                  timeout=180)
nodes = sorted(node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"])
print("FABRIC " + json.dumps({"nodes": nodes, "learners": reports}), flush=True)
