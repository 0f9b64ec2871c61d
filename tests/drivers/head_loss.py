"""A Ray program that loses its head as a user's does: it SIGKILLs the head's gcs_server (the one whose command line
has --gcs_server_port=PORT of the cluster's address), then defines a new remote function and waits for its first
task, ray.get(timeout=60): the function's export waits for the gone GCS inside Ray's C++ client.

    head_loss.py init LOG_DIR    # mpiray.init() first: `mpirun -np 3 python head_loss.py init LOG_DIR`,
                                 # or under `python -m mpiray`, or `srun -N3 python head_loss.py init LOG_DIR`
    head_loss.py driver          # a command line's driver: start_ray.py ... -- python head_loss.py driver

Prints `KILLED PID` once the GCS is gone; `ANSWERED 1` would mean Ray answered without its GCS.
"""

import os
import signal
import sys

import psutil

if sys.argv[1] == "init":
    import mpiray

    address = mpiray.init(log_dir=sys.argv[2], gcs_restarts=0).gcs_address  # a GCS that dies is the head lost
else:
    address = os.environ["RAY_ADDRESS"]

import ray  # noqa: E402  (after init(), which connected this script)

if not ray.is_initialized():
    ray.init()
flag = f"--gcs_server_port={address.rsplit(':', 1)[1]}"
for process in psutil.process_iter(["name", "cmdline"]):
    if process.info["name"] == "gcs_server" and flag in (process.info["cmdline"] or []):
        os.kill(process.pid, signal.SIGKILL)
        print(f"KILLED {process.pid}", flush=True)


@ray.remote
def f(x):
    return x


print(f"ANSWERED {ray.get(f.remote(1), timeout=60)}", flush=True)
