"""Which address a node advertises, and which ports it may use.

Addresses: never a hostname (it may resolve to 127.0.1.1), never loopback unless the whole job is on
one host without a network. Ports: every Ray port of a node lies in a block of its own, chosen per
job and per local rank, so two jobs and several ranks on one host never collide: a block is free
when nothing listens on its ports and no other launcher holds its lock file (two jobs starting
at the same moment both see the ports free; the lock, held until the job ends, decides).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import ipaddress
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mpiray.errors import ConfigError

# A documentation address (RFC 5737): connecting a UDP socket to it sends nothing but asks the
# kernel which source address the default route would use.
_PROBE_ADDRESS = "192.0.2.1"


def interface_addresses() -> dict[str, str]:
    """Interface name -> its first IPv4 address, for interfaces that are up."""
    stats = psutil.net_if_stats()
    found = {}
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        for addr in addrs:
            if addr.family == socket.AF_INET:
                found[name] = addr.address
                break
    return found


def address_of_interface(name: str) -> str:
    addresses = interface_addresses()
    if name not in addresses:
        listing = ", ".join(f"{n} ({a})" for n, a in sorted(addresses.items())) or "none"
        raise ConfigError(
            f"--interface {name}: no such interface with an IPv4 address on "
            f"{socket.gethostname()}; interfaces here: {listing}"
        )
    return addresses[name]


def route_source(destination: str) -> str | None:
    """The local address the kernel would use to reach destination (None: no route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((destination, 9))
        except OSError:
            return None
        return probe.getsockname()[0]


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def head_address(interface: str | None) -> str:
    """The head's address: --interface, else the default route's source, else any non-loopback."""
    if interface:
        return address_of_interface(interface)
    source = route_source(_PROBE_ADDRESS)
    if source and not is_loopback(source):
        return source
    others = [a for a in interface_addresses().values() if not is_loopback(a)]
    # Only loopback: a laptop without a network, where every rank is on this host.
    return sorted(others)[0] if others else "127.0.0.1"


def worker_address(interface: str | None, head_ip: str) -> str:
    """A worker's address: --interface, else the source address of its route to the head."""
    if interface:
        return address_of_interface(interface)
    source = route_source(head_ip)
    if source is None:
        raise ConfigError(
            f"no route from {socket.gethostname()} to the head at {head_ip}; pick the network "
            f"that connects the nodes with --interface (e.g. ib0, hsn0)"
        )
    return source


# Ports of one Ray node, as offsets into its block. The rest of the block is the worker port range
# (one port per Ray worker process on the node).
_FIXED = (
    "gcs",
    "node_manager",
    "object_manager",
    "dashboard_agent_grpc",
    "dashboard_agent_listen",
    "metrics_export",
    "runtime_env_agent",
    "dashboard",
)
BLOCK_SIZE = 100
# Below Linux's ephemeral range (32768+) and above Ray's default worker range (10002-19999).
PORT_RANGE = (20000, 32000)


@dataclass(frozen=True)
class NodePorts:
    gcs: int
    node_manager: int
    object_manager: int
    dashboard_agent_grpc: int
    dashboard_agent_listen: int
    metrics_export: int
    runtime_env_agent: int
    dashboard: int
    min_worker: int
    max_worker: int

    def all(self) -> list[int]:
        return [getattr(self, name) for name in _FIXED] + list(
            range(self.min_worker, self.max_worker + 1)
        )


def node_ports(base: int, gcs_port: int = 0) -> NodePorts:
    """The ports of the node whose block starts at base (gcs_port overrides the GCS slot)."""
    fixed = {name: base + offset for offset, name in enumerate(_FIXED)}
    if gcs_port:
        fixed["gcs"] = gcs_port
    return NodePorts(**fixed, min_worker=base + len(_FIXED), max_worker=base + BLOCK_SIZE - 1)


def candidate_bases(job_id: str, ranks_on_host: int, port_range=PORT_RANGE) -> list[int]:
    """Start ports for this host's blocks, beginning at a place derived from the job id."""
    span = BLOCK_SIZE * ranks_on_host
    slots = (port_range[1] - port_range[0]) // span
    if slots < 1:
        raise ConfigError(f"{ranks_on_host} ranks on one host need {span} ports: too many for one host")
    first = int(hashlib.sha256(job_id.encode()).hexdigest(), 16) % slots
    return [port_range[0] + ((first + i) % slots) * span for i in range(slots)]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


# One lock file per 100-port block, shared by every user of the host (sticky, like /tmp itself).
PORT_LOCKS = Path(tempfile.gettempdir()) / "mpiray-ports"


@dataclass
class PortBlock:
    """Ports [base, base + size) of this host, held (flock) until release() or this process's exit."""

    base: int
    size: int
    lock_fds: list[int] = field(default_factory=list)

    def release(self) -> None:
        for fd in self.lock_fds:
            os.close(fd)
        self.lock_fds.clear()


def _make_lock_dir(lock_dir: Path) -> bool:
    """Whether the shared lock dir exists (made here if need be) for every user's launcher."""
    try:
        lock_dir.mkdir()
        os.chmod(lock_dir, 0o1777)  # mkdir's mode goes through the umask
    except FileExistsError:
        pass
    except OSError:
        return False
    return True


def _lock_blocks(lock_dir: Path, base: int, count: int) -> list[int] | None:
    """Locks on the count blocks from base, or None if another launcher holds one of them."""
    fds: list[int] = []
    for index in range(count):
        path = lock_dir / f"{base + index * BLOCK_SIZE}.lock"
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except PermissionError:  # another user's lock file: a read-only fd locks it as well
                fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        fds.append(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            for held in fds:
                os.close(held)
            return None
    return fds


def free_block(job_id: str, ranks_on_host: int, reserved: int = 0, lock_dir: Path = PORT_LOCKS) -> PortBlock:
    """The first candidate block of this host that no launcher holds and whose ports are all free."""
    size = BLOCK_SIZE * ranks_on_host
    locking = _make_lock_dir(lock_dir)  # if not (no shared /tmp dir), the port check alone decides
    for base in candidate_bases(job_id, ranks_on_host):
        ports = range(base, base + size)
        if reserved in ports:
            continue
        locks = _lock_blocks(lock_dir, base, ranks_on_host) if locking else []
        if locks is None:
            continue
        block = PortBlock(base, size, locks)
        if all(port_is_free(port) for port in ports):
            return block
        block.release()
    raise ConfigError(
        f"no free block of {size} ports in {PORT_RANGE[0]}-{PORT_RANGE[1]} "
        f"on {socket.gethostname()}"
    )
