"""Which address a node advertises, and which ports it may use.

Addresses: never a hostname (it may resolve to 127.0.1.1), never loopback unless the whole job is on
one host without a network. Ports: every Ray port of a node lies in a block of its own, chosen per
job and per local rank, so two jobs and several ranks on one host never collide: a block is free
when nothing listens on its ports and no other launcher holds its lock, an abstract unix socket
name (two jobs starting at the same moment both see the ports free; the lock, held until the job
ends, decides). A block is a whole number of 100-port units, sized by the node's CPUs and GPUs: Ray
gives every worker process a port of the node's worker range, and refuses a worker it has none for
("No available ports").
"""

from __future__ import annotations

import errno
import math
import socket
import zlib
from dataclasses import dataclass, field

from mpiray.errors import ConfigError, PortInUse, PortsPerHost

# A documentation address (RFC 5737): connecting a UDP socket to it sends nothing but asks the
# kernel which source address the default route would use.
_PROBE_ADDRESS = "192.0.2.1"


def interface_addresses() -> dict[str, str]:
    """Interface name -> its first IPv4 address, for interfaces that are up."""
    import psutil  # at its first use: a rank's start (a dry run's) needs none of it

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


def interface_holding(address: str) -> str | None:
    """The name of the (up) interface that holds the IPv4 address, or None."""
    import psutil

    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        if any(addr.family == socket.AF_INET and addr.address == address for addr in addrs):
            return name
    return None


def address_of_interface(name: str) -> str:
    addresses = interface_addresses()
    if name not in addresses:
        listing = ", ".join(f"{n} ({a})" for n, a in sorted(addresses.items())) or "none"
        raise ConfigError(
            f"--interface {name}: no such interface with an IPv4 address on "
            f"{socket.gethostname()}; interfaces here: {listing}"
        )
    return addresses[name]


RULE_FIELDS = ("host", "hostname")  # what an address rule may name: {host} the short hostname, {hostname} the whole


def rule_name(rule: str, hostname: str) -> str:
    """The name a site's address rule gives a host: '{host}.hsn.cm.polaris.alcf.anl.gov' or '{host}i'."""
    return rule.format(host=hostname.split(".")[0], hostname=hostname)


def address_by_rule(rule: str) -> str:
    """This host's address on the network a site's naming rule names (--address-rule), resolved here.

    The name must resolve to an address this host holds: a name of another host, or one the resolver
    does not know, is an error that names the host, the rule and what it resolved to."""
    hostname = socket.gethostname()
    name = rule_name(rule, hostname)
    try:
        resolved = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)})
    except OSError as error:
        raise ConfigError(f"--address-rule {rule}: {name} (for host {hostname}) does not resolve: {error}; "
                          f"check the rule against `getent hosts {name}` on a compute node") from None
    held = interface_addresses()
    here = [address for address in resolved if address in held.values()]
    if not here:
        listing = ", ".join(f"{n} ({a})" for n, a in sorted(held.items())) or "none"
        raise ConfigError(f"--address-rule {rule}: {name} (for host {hostname}) resolves to {', '.join(resolved)}, "
                          f"which no interface of {hostname} holds (interfaces here: {listing}); the rule must name "
                          f"this host's own address on the fast network")
    return here[0]


def chosen_address(interface: str | None, address_rule: str | None) -> str | None:
    """The address a node advertises when the network was chosen (--interface, else --address-rule), or None."""
    if interface:
        return address_of_interface(interface)
    if address_rule:
        return address_by_rule(address_rule)
    return None


def route_source(destination: str) -> str | None:
    """The local address the kernel would use to reach destination (None: no route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((destination, 9))
        except OSError:
            return None
        return probe.getsockname()[0]


def is_loopback(address: str) -> bool:
    import ipaddress  # ~10 ms of import a rank: only when needed

    return ipaddress.ip_address(address).is_loopback


def head_address(interface: str | None, address_rule: str | None = None) -> str:
    """The head's address: --interface or --address-rule, else the default route's source, else any non-loopback."""
    chosen = chosen_address(interface, address_rule)
    if chosen:
        return chosen
    source = route_source(_PROBE_ADDRESS)
    if source and not is_loopback(source):
        return source
    others = [a for a in interface_addresses().values() if not is_loopback(a)]
    # Only loopback: a laptop without a network, where every rank is on this host.
    return sorted(others)[0] if others else "127.0.0.1"


def worker_address(interface: str | None, head_ip: str, address_rule: str | None = None) -> str:
    """A worker's address: --interface or --address-rule, else the source address of its route to the head."""
    chosen = chosen_address(interface, address_rule)
    if chosen:
        return chosen
    source = route_source(head_ip)
    if source is None:
        raise ConfigError(
            f"no route from {socket.gethostname()} to the head at {head_ip}; pick the network "
            f"that connects the nodes with --interface (e.g. ib0, hsn0) or --address-rule"
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
UNIT = 100  # ports a lock covers; a node's block is a whole number of units
HEAD_EXTRAS = 3  # Ray Client, the dashboard's and the autoscaler's metrics: a head takes them from its worker range
# Worker ports of a node: a worker process per CPU (tasks, one-CPU actors, RLlib's env runners) and as many
# again for the idle workers Ray keeps and prestarts (up to one per CPU) while those run; a GPU's learner
# and its spare; and the rest: drivers, Tune's and RLlib's zero-CPU actors, spill and restore workers, and
# workers still exiting (a port comes back only when its process has gone).
WORKER_PORTS_PER_CPU = 2
WORKER_PORTS_PER_GPU = 2
WORKER_PORTS_SPARE = 32
# Below Linux's ephemeral range (32768+) and above Ray's default worker range (10002-19999).
PORT_RANGE = (20000, 32000)


def node_units(cpus: float, gpus: int = 0) -> int:
    """How many 100-port units a Ray node of cpus CPUs and gpus GPUs needs (1 up to 28 CPUs)."""
    ports = (len(_FIXED) + HEAD_EXTRAS + WORKER_PORTS_SPARE + WORKER_PORTS_PER_CPU * math.ceil(cpus)
             + WORKER_PORTS_PER_GPU * gpus)
    return max(1, -(-ports // UNIT))


def units_in_range(port_range=PORT_RANGE) -> int:
    """How many units one host's port range holds: the most a host's Ray nodes may take together."""
    return (port_range[1] - port_range[0]) // UNIT


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


def node_ports(base: int, gcs_port: int = 0, units: int = 1) -> NodePorts:
    """The ports of the node whose block of units starts at base (gcs_port overrides the GCS slot)."""
    fixed = {name: base + offset for offset, name in enumerate(_FIXED)}
    if gcs_port:
        fixed["gcs"] = gcs_port
    return NodePorts(**fixed, min_worker=base + len(_FIXED), max_worker=base + units * UNIT - 1)


def host_ports(base: int, units: list[int], gcs_port: int = 0) -> list[NodePorts]:
    """The ports of each Ray node of a host, their blocks one after the other from base (the first
    node's GCS slot is gcs_port, if given)."""
    ports = []
    for index, count in enumerate(units):
        ports.append(node_ports(base, gcs_port if index == 0 else 0, count))
        base += count * UNIT
    return ports


def candidate_bases(job_id: str, units: int, port_range=PORT_RANGE) -> list[int]:
    """Start ports for a host's span of units, beginning at a place derived from the job id."""
    span = UNIT * units
    slots = (port_range[1] - port_range[0]) // span
    if slots < 1:
        raise PortsPerHost(f"the Ray nodes of one host need {span} ports, more than mpiray's port range "
                           f"{port_range[0]}-{port_range[1]} holds")
    first = zlib.crc32(job_id.encode()) % slots  # (hashlib's import costs each rank 2 ms of CPU)
    return [port_range[0] + ((first + i) % slots) * span for i in range(slots)]


def port_is_free(port: int) -> bool:
    """Whether Ray could listen on the port: nothing listens there now.

    Ray's servers (gRPC, aiohttp, the metrics exporter) all set SO_REUSEADDR, so connections a
    previous job left in TIME_WAIT do not stop them; the probe sets it too, or every block a job used
    in the last minute would look taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


# Port locks: one abstract AF_UNIX socket name per 100-port unit, bound while the block is held.
# Abstract names live in the network namespace, which is exactly where ports live, and not in a
# file system: no directory to pick or trust, nothing another user can plant (FIFO, symlink),
# rename or unlink, nothing a per-job TMPDIR, a private /tmp or /dev/shm (Slurm job_container) or an
# epilog's clean-up can split or remove, and the kernel frees a name when its holder exits. The most
# another process can do is bind a name first, which skips that block like any held block (it could
# as well listen on the ports). Names are per socket type, so every launcher uses SOCK_STREAM.
LOCK_PREFIX = "mpiray-port"


def lock_name(base: int, prefix: str = LOCK_PREFIX) -> str:
    """The abstract socket name (shown with ss's leading @) that locks the 100-port unit at base."""
    return f"@{prefix}-{base}"


@dataclass
class PortBlock:
    """Ports [base, base + size) of this host, locked until release() or this process's exit.

    notes: how the block was chosen and locked, and every candidate skipped and why (for the log).
    """

    base: int
    size: int
    locks: list[socket.socket] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def release(self) -> None:
        for lock in self.locks:
            lock.close()
        self.locks.clear()


def _take_lock(name: str) -> socket.socket | None:
    """A socket bound to the abstract name name, or None if another process holds it.

    Any other failure (no AF_UNIX, a security module refusing the bind) raises OSError.
    """
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # close-on-exec, like every Python socket
    try:
        lock.bind("\0" + name.removeprefix("@"))
    except OSError as error:
        lock.close()
        if error.errno == errno.EADDRINUSE:
            return None
        raise
    return lock


def _lock_blocks(prefix: str, base: int, count: int) -> tuple[list[socket.socket], str | None]:
    """Locks on the count blocks from base, or ([], name) with the lock another process holds."""
    locks: list[socket.socket] = []
    try:
        for index in range(count):
            name = lock_name(base + index * UNIT, prefix)
            lock = _take_lock(name)
            if lock is None:
                for held in locks:
                    held.close()
                return [], name
            locks.append(lock)
    except OSError:
        for held in locks:
            held.close()
        raise
    return locks, None


def planned_block(job_id: str, units: int, reserved: int = 0) -> PortBlock:
    """--dry-run: the first candidate block, neither checked nor locked (nothing will bind it)."""
    size = UNIT * units
    base = next(base for base in candidate_bases(job_id, units) if reserved not in range(base, base + size))
    return PortBlock(base, size, notes=[f"dry run: ports {base}-{base + size - 1} planned, neither checked nor locked"])


def free_block(job_id: str, units: int, reserved: int = 0, lock_prefix: str = LOCK_PREFIX) -> PortBlock:
    """The first candidate block of units on this host that no launcher holds and whose ports are all free.

    lock_prefix names the locks (tests pass their own). Raises ConfigError, saying why every
    candidate was skipped, if none is left.
    """
    size = UNIT * units
    notes: list[str] = []
    locks_off = ""  # why the locks are off, if they are
    held = busy = skipped = 0
    bases = candidate_bases(job_id, units)
    for base in bases:
        ports = range(base, base + size)
        span = f"ports {base}-{base + size - 1}"
        if reserved in ports:
            skipped += 1
            notes.append(f"{span} skipped: they include the GCS port {reserved}")
            continue
        locks: list[socket.socket] = []
        if not locks_off:
            try:
                locks, holder = _lock_blocks(lock_prefix, base, units)
            except OSError as error:
                locks_off = (
                    f"port locks off: binding an abstract unix socket failed ({error}); only the "
                    f"port check decides, so two jobs starting at the same moment may pick one block"
                )
                notes.append(locks_off)
            else:
                if holder is not None:
                    held += 1
                    notes.append(f"{span} skipped: another process holds its lock {holder}")
                    continue
        block = PortBlock(base, size, locks, notes)
        in_use = next((port for port in ports if not port_is_free(port)), None)
        if in_use is None:
            if locks:
                names = lock_name(base, lock_prefix) + (
                    f" .. {lock_name(base + size - UNIT, lock_prefix)}" if units > 1 else ""
                )
                notes.append(
                    f"{span} locked until the job ends: abstract unix socket {names} "
                    f"(per network namespace; other launchers skip a held block)"
                )
            return block
        block.release()
        busy += 1
        notes.append(f"{span} skipped: port {in_use} is in use")
    reasons = [
        f"{held} held by other launchers (their lock, an abstract unix socket @{lock_prefix}-PORT in "
        f"this network namespace, was bound)" if held else "",
        f"{busy} with a port in use" if busy else "",
        f"{skipped} including the GCS port {reserved}" if skipped else "",
        locks_off,
    ]
    raise PortInUse(
        f"no free block of {size} ports in {PORT_RANGE[0]}-{PORT_RANGE[1]} on {socket.gethostname()}: "
        f"of {len(bases)} candidate blocks, " + "; ".join(r for r in reasons if r)
    )
