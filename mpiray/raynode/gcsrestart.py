"""The head's GCS started again where it died, inside the head's `ray start --block` (starter.py installs it).

Ray keeps the GCS's tables in RocksDB when the head's environment says so (RAY_gcs_storage=rocksdb,
RAY_gcs_storage_path: nodeplan.node_env sets both, in the rank's private dir), and every raylet, worker and
driver waits RAY_gcs_rpc_server_reconnect_timeout_s (60 s) for a GCS to come back at the same address. What
Ray lacks outside Kubernetes is the one who starts it again: `ray start --block` looks at its processes once
a second (Node.dead_processes) and, when one died, kills all the others and exits.

So the look is wrapped here: before Ray sees the dead `gcs_server`, the same command line (port, session, node
id, log files) starts again from Ray's own start_ray_process, at most RESTARTS times; Ray then sees a live one.
Each restart is said in the node's output (`mpiray-gcs-lost {json}`, then `mpiray-gcs-back {json}` once the new
one answers), which the head's rank logs as gcs_lost and gcs_back. The last allowed death is said
(`restarts_left` 0) and left to Ray, as before: the head's node ends, and the job with it (exit 1).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any, Callable

from mpiray.raynode.gcs import gcs_answers

VARIABLE = "MPIRAY_NODE_GCS_RESTARTS"  # in a node's `ray start` environment: how many restarts (nodeplan.node_env)
BACK_WITHIN = 60.0  # seconds a restarted GCS has to answer: Ray's reconnect timeout, after which the raylets give up
ASK_EVERY = 0.2


class Keeper:
    """Wraps Ray's Node.dead_processes so that a dead GCS is started again, `restarts` times at most."""

    def __init__(self, restarts: int, address: str, say: Callable[[str], None]):
        self.restarts, self.address, self.say = restarts, address, say
        self.used = 0
        self.given_up: int | None = None  # the PID of the dead GCS left to Ray: said once, whatever Ray does then

    def install(self) -> None:
        from ray._private import node as ray_node

        original = ray_node.Node.dead_processes
        keeper = self

        def dead_processes(node: Any) -> list:
            keeper.check(node)
            return original(node)

        ray_node.Node.dead_processes = dead_processes

    def check(self, node: Any) -> None:
        from ray._private import ray_constants, services

        kind = ray_constants.PROCESS_TYPE_GCS_SERVER
        infos = node.all_processes.get(kind) or []
        if len(infos) != 1 or infos[0].process.poll() is None or infos[0].process.pid == self.given_up:
            return
        dead, lost_at = infos[0].process, time.time()
        left = self.restarts - self.used
        self.say(f"mpiray-gcs-lost {json.dumps({'code': dead.returncode, 'restarts_left': left, 'pid': dead.pid})}")
        if left <= 0:  # Ray's own --block loop ends the node, as without a keeper (or, for an exit it expects
            self.given_up = dead.pid  # such as SIGTERM's, leaves it be: then this is not said every second)
            return
        self.used += 1
        started = services.start_ray_process(list(dead.args), kind, fate_share=node.kernel_fate_share,
                                             stdout_file=subprocess.DEVNULL, stderr_file=subprocess.DEVNULL)
        node.all_processes[kind] = [started]
        threading.Thread(target=self._say_back, args=(started.process.pid, lost_at, self.used),
                         name="gcs-back", daemon=True).start()

    def _say_back(self, pid: int, lost_at: float, restart: int) -> None:
        deadline = time.monotonic() + BACK_WITHIN
        while time.monotonic() < deadline:
            if gcs_answers(self.address):
                fields = {"pid": pid, "restart": restart, "of": self.restarts, "seconds": round(time.time() - lost_at, 2)}
                self.say(f"mpiray-gcs-back {json.dumps(fields)}")
                return
            time.sleep(ASK_EVERY)
        self.say(f"mpiray-gcs-back {json.dumps({'pid': pid, 'restart': restart, 'answered': False})}")
