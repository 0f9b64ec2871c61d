"""Asking the GCS whether a node is alive (Ray's GcsClient; used by ray_node.py, inside `ray start`)."""

from __future__ import annotations

import socket
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
            # One node's record instead of the whole table: N nodes polling stay O(N), not O(N^2).
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
