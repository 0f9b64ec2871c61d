"""Tell Ray that nodes of the cluster go soon: each drained through the GCS with reason preemption and the moment
it will be killed, as Ray's own `ray drain-node` does, before mpiray stops anything.

    python -P -m mpiray.raynode.drain GCS_ADDRESS SECONDS MESSAGE NODE_ID ...

Rank 0 runs it (rank.head.Head.drain) for the worker nodes (never the head's: the driver connects through it) with
the cluster's token in its environment. What Ray does with it (measured, Ray 2.60): a busy node stays up and is
listed as draining with its deadline, so Ray Train V2's get_preemption_info(), Serve and any driver that reads
ray._private.state.state.get_draining_nodes() see the end coming; an idle node's raylet shuts down at once.
Prints one JSON line: node id -> "accepted" or Ray's reason.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from mpiray.raynode import raycompat

REASON = "DRAIN_NODE_REASON_PREEMPTION"


def drain(address: str, node_ids: Sequence[str], seconds: float, message: str) -> dict[str, str]:
    from ray.core.generated import autoscaler_pb2

    client = raycompat.gcs_client(address)
    deadline_ms = int((time.time() + seconds) * 1000)
    reason = autoscaler_pb2.DrainNodeReason.Value(REASON)
    answers = {}
    for node in node_ids:
        accepted, why = client.drain_node(node, reason, message, deadline_ms)
        answers[node] = "accepted" if accepted else (why or "refused")
    return answers


def main(argv: Sequence[str]) -> int:
    address, seconds, message, *node_ids = argv
    print(json.dumps(drain(address, node_ids, float(seconds), message)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
