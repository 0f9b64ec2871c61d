"""Which ports a Ray node may use: every Ray port of a node lies in a block of its own, chosen per job and per
local rank, so two jobs and several ranks on one host never collide: a block is free when nothing listens on its
ports and no other launcher holds its lock, an abstract unix socket name (two jobs starting at the same moment
both see the ports free; the lock, held until the job ends, decides). A block is a whole number of 100-port
units, sized by the node's CPUs and GPUs: Ray gives every worker process a port of the node's worker range, and
refuses a worker it has none for ("No available ports"). (Which address it advertises: network.py.)
"""

from __future__ import annotations

import errno
import math
import socket
import zlib
from dataclasses import dataclass, field

from mpiray.errors import PortInUse, PortsPerHost

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
