"""A driver that lets a hostile neighbour (another uid) attack every rank's private dir, then uses the cluster.

    attacked.py SECRET_FILE

The rank logs' events name each rank's private dir. The attack runs as uid 65534 (setpriv); then a task runs
on every node, so a replaced token or socket would show. Prints `ATTACK {json}` and `AFTER {json}`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import ray

from mpiray.logs.events import read_events

job_dir = Path(os.environ["MPIRAY_LOG_DIR"]) / os.environ["MPIRAY_JOB_ID"]
dirs = [r["fields"]["path"] for events in sorted(job_dir.glob("rank-*.jsonl")) for r in read_events(events)
        if r["event"] == "private_dir"]
attacker = Path(__file__).with_name("attacker.py").read_text()
result = subprocess.run(
    ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-I", "-c", attacker,
     sys.argv[1], *dirs],
    capture_output=True, text=True, timeout=60,
)
print("ATTACK " + (result.stdout.strip() or json.dumps({"error": result.stderr})), flush=True)

ray.init()


@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()


nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
seen = ray.get([where.options(scheduling_strategy=strategy(node, soft=False)).remote() for node in nodes], timeout=60)
print("AFTER " + json.dumps({"dirs": dirs, "nodes": len(nodes), "tasks_ran_on": len(set(seen))}), flush=True)
