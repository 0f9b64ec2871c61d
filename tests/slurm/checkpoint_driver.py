"""A driver for the Slurm tests that saves a "checkpoint" on SIGTERM, as a trainer would.

    checkpoint_driver.py MARKER [--save-seconds S]

Connects to the cluster, prints READY, then waits for a signal. On SIGTERM it takes S seconds to
"save" (without Ray: the Ray nodes may be stopping too), then writes MARKER as JSON with the time
SIGTERM arrived and the time the save finished, and exits 0.
"""

import argparse
import json
import signal
import sys
import time

import ray

parser = argparse.ArgumentParser()
parser.add_argument("marker")
parser.add_argument("--save-seconds", type=float, default=2.0)
args = parser.parse_args()


def save_and_exit(signum, frame):
    received = time.time()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Slurm's and the launcher's SIGTERM both come
    time.sleep(args.save_seconds)  # the checkpoint's write
    with open(args.marker, "w") as marker:
        json.dump({"sigterm": received, "saved": time.time()}, marker)
    sys.exit(0)


ray.init()
signal.signal(signal.SIGTERM, save_and_exit)  # after ray.init(), which installs a handler of its own
print(f"READY {len([n for n in ray.nodes() if n['Alive']])} nodes", flush=True)
while True:
    signal.pause()
