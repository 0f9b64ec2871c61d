"""A driver that runs a task on every node and reports where that node's Ray keeps its files.

Each task reads the command line of its parent, the node's raylet, for Ray's --temp_dir and
--session_dir; the rank logs' events name each rank's private dir. Prints `SESSIONS {json}`: per node name
(HOST-rankN), the raylet's dirs, and per rank, its private dir.
"""

import json
import os
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mpiray.logs.events import read_events

ray.init()


@ray.remote(num_cpus=0)
def raylet_dirs() -> dict:
    argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")
    flags = dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    return {"pid": os.getppid(), "temp_dir": flags.get("temp_dir"), "session_dir": flags.get("session_dir")}


nodes = {n["NodeID"]: n["NodeName"] for n in ray.nodes() if n["Alive"]}
dirs = ray.get([raylet_dirs.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                for node in nodes], timeout=60)
job_dir = Path(os.environ["MPIRAY_LOG_DIR"]) / os.environ["MPIRAY_JOB_ID"]
private = {}
for events in sorted(job_dir.glob("rank-*.jsonl")):
    found = [r["fields"]["path"] for r in read_events(events) if r["event"] == "private_dir"]
    if found:
        private[int(events.name[5:9])] = found[-1]
report = {"nodes": dict(zip(nodes.values(), dirs)), "private": private}
print("SESSIONS " + json.dumps(report), flush=True)
