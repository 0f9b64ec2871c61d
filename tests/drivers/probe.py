"""A small driver for the launcher's tests: reports what it sees of the cluster as JSON, then exits.

    probe.py [--exit N] [--sleep S] [--until PATH] [--sigterm-marker PATH] [--unauthenticated-client]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import ray

parser = argparse.ArgumentParser()
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--sleep", type=float, default=0)
parser.add_argument("--until", default=None, help="after the sleep, wait (at most 300 s) until PATH exists")
parser.add_argument("--sigterm-marker", default=None)
parser.add_argument("--unauthenticated-client", action="store_true")
args = parser.parse_args()


def on_sigterm(signum, frame):
    if args.sigterm_marker:
        with open(args.sigterm_marker, "w") as marker:
            marker.write(f"{time.time()}\n")  # e.g. where a trainer would save a checkpoint
    sys.exit(99)


ray.init()
signal.signal(signal.SIGTERM, on_sigterm)  # after ray.init(), which installs a handler of its own
nodes = [n for n in ray.nodes() if n["Alive"]]
report = {
    "nodes": len(nodes),
    "ips": sorted(n["NodeManagerAddress"] for n in nodes),
    "cpus": ray.cluster_resources().get("CPU", 0),
    "memory": ray.cluster_resources().get("memory", 0),
    "object_store_memory": ray.cluster_resources().get("object_store_memory", 0),
    "env": {k: v for k, v in os.environ.items() if k.startswith("MPIRAY_") or k.startswith("RAY_")},
}
if args.unauthenticated_client:
    # The same connection, without the token: the cluster must refuse it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_MODE"] = "disabled"
    code = "import ray; ray.init(address='%s'); print('CONNECTED')" % os.environ["RAY_ADDRESS"]
    try:
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        report["unauthenticated"] = {"code": result.returncode, "connected": "CONNECTED" in result.stdout}
    except subprocess.TimeoutExpired:
        report["unauthenticated"] = {"code": None, "connected": False}
print("PROBE " + json.dumps(report), flush=True)
time.sleep(args.sleep)
until = time.monotonic() + 300
while args.until and not os.path.exists(args.until) and time.monotonic() < until:
    time.sleep(0.2)
sys.exit(args.exit)
