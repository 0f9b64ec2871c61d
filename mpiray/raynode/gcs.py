"""Asking the GCS about nodes (through raycompat: starter.py, inside `ray start`), and whether a GCS answers at all."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from mpiray.host.network import connects
from mpiray.raynode import raycompat


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    ip: str
    name: str
    temp_dir: str  # "" where Ray's GCS does not record it (before 2.55)
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
            self._client = raycompat.gcs_client(self.address)
        try:
            records = raycompat.alive_nodes(self._client, timeout, name)
        except Exception:
            self._client = None  # reconnect on the next call
            raise
        return [NodeInfo(**record) for record in records]

    def find(self, name: str, temp_dir: str, timeout: float = 2.0) -> NodeInfo | None:
        """This rank's node (its name and temp dir are unique per job and rank), if it is alive.

        Where the GCS records no temp dir (Ray before 2.55), the name alone, unique too, finds it.
        """
        for node in self.alive_nodes(timeout, name):
            if node.temp_dir in (temp_dir, ""):
                return node
        return None


def gcs_answers(address: str, timeout: float = 2.0) -> bool:
    """Whether anything accepts connections at the GCS's address (a cheap look: no Ray client)."""
    return connects(address, timeout)
