"""Asking the GCS which nodes are alive (Ray's GcsClient; imported late, it takes ~0.7 s)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    ip: str
    name: str
    temp_dir: str
    resources: dict[str, float]


class Gcs:
    def __init__(self, address: str):
        self.address = address
        self._client = None

    def alive_nodes(self, timeout: float = 2.0, name: str | None = None) -> list[NodeInfo]:
        """The ALIVE nodes (only those called name, if given); raises while the GCS does not answer."""
        if self._client is None:
            # GcsClient() blocks ~30 s while nothing listens: knock on the port first.
            host, port = self.address.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=timeout).close()
            from ray._raylet import GcsClient

            self._client = GcsClient(address=self.address)
        selectors = None
        if name is not None:
            # One node's record instead of the whole table: N workers polling stay O(N), not O(N^2).
            from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

            selectors = [GetAllNodeInfoRequest.NodeSelector(node_name=name)]
        try:
            infos = self._client.get_all_node_info(timeout=timeout, node_selectors=selectors)
        except Exception:
            self._client = None  # reconnect on the next call
            raise
        return [
            NodeInfo(
                node_id=node_id.hex() if hasattr(node_id, "hex") else str(node_id),
                ip=info.node_manager_address,
                name=info.node_name,
                temp_dir=info.temp_dir,
                resources=dict(info.resources_total),
            )
            for node_id, info in infos.items()
            if info.state == 0  # GcsNodeState.ALIVE
        ]

    def find(self, name: str, temp_dir: str, timeout: float = 2.0) -> NodeInfo | None:
        """This rank's node (its name and temp dir are unique per job and rank), if it is alive."""
        for node in self.alive_nodes(timeout, name):
            if node.temp_dir == temp_dir:
                return node
        return None


class BackgroundQuery:
    """Runs query() in a daemon thread: a GcsClient can block ~30 s, the caller's loop must not."""

    def __init__(self, query):
        self._query = query
        self._result = None
        self._thread: threading.Thread | None = None

    def poll(self):
        """(done, value or exception); starts the next query once the last one finished."""
        if self._thread is not None and self._thread.is_alive():
            return False, None
        result, self._result = self._result, None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return (result is not None), (result[0] if result else None)

    def _run(self):
        try:
            self._result = (self._query(),)
        except Exception as error:  # reported to the polling loop
            self._result = (error,)
