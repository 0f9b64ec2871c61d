"""What each rank gives Ray: its share of the host's CPUs, GPUs and memory.

Ranks on one host split the host so that the sum of what they offer never exceeds it; Ray left alone
would let each of them count every core and take 30% of the host's memory for its object store.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from typing import Callable, Mapping

from mpiray.batch import environment
from mpiray.host import gpus as gpu_vendors
from mpiray.host import portblocks

OBJECT_STORE_FRACTION = 0.3  # Ray's own default share of memory for the object store
SHM_HEADROOM = 0.9  # keep some of /dev/shm for everything else on the host


@dataclass(frozen=True)
class HostView:
    """What one rank sees of its host (probed once, sent to the other ranks of the host)."""

    hostname: str
    affinity: tuple[int, ...]
    memory: int  # bytes this job may use on the host
    shm: int  # bytes of /dev/shm free now (what Ray compares its store with: stale MPI segments count against it)
    gpu_ids: tuple[str, ...] = field(default=())
    shm_total: int = 0  # bytes of /dev/shm in all
    gpu_vendor: str = gpu_vendors.NONE  # whose GPUs gpu_ids are (host/gpus.py)
    gpu_source: str = ""  # where they were read


@dataclass(frozen=True)
class Share:
    cpus: int
    gpu_ids: tuple[str, ...]
    memory: int  # Ray's "memory" resource, object store excluded
    object_store: int
    notes: tuple[str, ...] = ()
    affinity: tuple[int, ...] = ()  # the CPUs the node's processes may run on; () = the rank's own
    gpu_vendor: str = gpu_vendors.NONE  # whose GPUs gpu_ids are: decides the variables the node is handed


GCS_CORE_MIN_CPUS = 8  # --gcs-core auto: a host this big gives the GCS one CPU (12.5% or less)


def _cgroup_memory_limit() -> int | None:
    """The lowest memory limit over this process's own cgroup and its parents: a Slurm job's or a container's
    cgroup, not the root one, which has none."""
    try:
        membership = open("/proc/self/cgroup").read()
    except OSError:
        return None
    return cgroup_memory_limit(membership, _read_or_none)


def _read_or_none(path: str) -> str | None:
    try:
        return open(path).read()
    except OSError:
        return None


def cgroup_memory_limit(membership: str, read: Callable[[str], str | None]) -> int | None:
    """The lowest memory limit of the cgroups listed in membership (/proc/self/cgroup's text) and their parents,
    read with read(path) under /sys/fs/cgroup: cgroup v1's memory controller (memory.limit_in_bytes), else v2's
    unified tree (memory.max, mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified). None: no limit."""
    found: list[int] = []
    for line in membership.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            roots, name = ["/sys/fs/cgroup/memory"], "memory.limit_in_bytes"
        elif controllers == "":
            roots, name = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"], "memory.max"
        else:
            continue
        parts = [part for part in path.split("/") if part]
        for root in roots:
            for depth in range(len(parts), -1, -1):
                text = (read("/".join([root, *parts[:depth], name])) or "").strip()
                if text.isdigit() and int(text) < 2**60:  # v1 says "no limit" with a huge number, v2 with "max"
                    found.append(int(text))
    return min(found, default=None)


def visible_gpus(environ: Mapping[str, str], vendor: str = "auto") -> gpu_vendors.Gpus:
    """The GPUs a rank may use: what a vendor's variables bind, else what the scheduler says, else the node's
    devices (host/gpus.py); vendor: "auto" or the one to look for (--gpu-vendor)."""
    return gpu_vendors.find(environ, vendor, environment.detect(environ).gpu_ids)


def probe_host(environ: Mapping[str, str] | None = None, gpu_vendor: str = "auto") -> HostView:
    environ = os.environ if environ is None else environ
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # MemTotal, as psutil's, without its import
    for limit in (_cgroup_memory_limit(), environment.detect(environ).memory):
        if limit:
            memory = min(memory, limit)
    try:
        fs = os.statvfs("/dev/shm")  # shutil.disk_usage's, without shutil's imports
        shm, shm_total = fs.f_bavail * fs.f_frsize, fs.f_blocks * fs.f_frsize
    except OSError:
        shm = shm_total = 0
    gpus = visible_gpus(environ, gpu_vendor)
    return HostView(
        hostname=socket.gethostname(),
        affinity=tuple(sorted(os.sched_getaffinity(0))),
        memory=memory,
        shm=shm,
        gpu_ids=gpus.ids,
        shm_total=shm_total,
        gpu_vendor=gpus.vendor,
        gpu_source=gpus.source,
    )


def _even_share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def rank_share(
    views: list[HostView],
    index: int,
    *,
    cpus_per_task: int | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    object_store_memory: int | None = None,
    head_core: int | None = None,
) -> Share:
    """The share of the index-th of the ranks (views) that run a Ray node on one host.

    head_core: a CPU that the host's other Ray nodes leave to the head's (index 0) GCS.
    """
    notes = []
    parts = len(views)
    own = views[index]
    masks = [set(v.affinity) for v in views]
    disjoint = _bound(views)
    affinity: tuple[int, ...] = ()
    if index > 0 and head_core in own.affinity:  # within this rank's own CPUs, never beyond them
        affinity = tuple(sorted(set(own.affinity) - {head_core}))
    if affinity:
        notes.append(f"CPU {head_core} is left to the head's GCS: this node runs on CPUs {_ranges(affinity)}")
    if disjoint:  # bound by srun/aprun/mpirun: each rank owns its mask
        cpus = len(own.affinity)
        notes.append(f"CPU binding: {cpus} CPUs in this rank's affinity mask")
    else:
        host_cpus = len(set().union(*masks))
        cpus = _even_share(host_cpus, parts, index)
        notes.append(f"{host_cpus} host CPUs shared by {parts} ranks: {cpus} for this rank")
    if cpus_per_task and cpus_per_task < cpus:
        cpus = cpus_per_task
        notes.append(f"scheduler allots {cpus_per_task} CPUs per task")
    if num_cpus is not None:
        cpus = num_cpus
        notes.append(f"--num-cpus {num_cpus}")

    gpu_sets = [set(v.gpu_ids) for v in views]
    if parts > 1 and sum(map(len, gpu_sets)) == len(set().union(*gpu_sets)):
        gpus = own.gpu_ids  # bound per rank (srun --gpus-per-task, a GPU binding script): each owns its own
    else:
        gpus = own.gpu_ids[index::parts] if parts > 1 else own.gpu_ids
    if num_gpus is not None:
        gpus = gpus[:num_gpus] if num_gpus <= len(gpus) else tuple(str(i) for i in range(num_gpus))

    memory = own.memory // parts
    shm_share = int(own.shm * SHM_HEADROOM) // parts
    store = object_store_memory or int(memory * OBJECT_STORE_FRACTION)
    if store > shm_share and object_store_memory is None:
        notes.append(
            f"object store {store >> 20} MiB does not fit this rank's share of /dev/shm's free space "
            f"({shm_share >> 20} MiB of {own.shm >> 20} MiB free, of {own.shm_total >> 20} MiB): using {shm_share >> 20} MiB"
        )
        store = shm_share
    if own.gpu_ids or gpus:
        notes.append(f"{own.gpu_vendor or 'no'} GPUs {','.join(own.gpu_ids) or '-'} from {own.gpu_source or '-'}: "
                     f"this node gets {','.join(gpus) or 'none'}")
    return Share(cpus=cpus, gpu_ids=tuple(gpus), memory=max(memory - store, 0), object_store=store, notes=tuple(notes),
                 affinity=affinity, gpu_vendor=own.gpu_vendor)


def _bound(views: list[HostView]) -> bool:
    """Whether the launcher bound each rank to CPUs of its own (srun, aprun, mpirun --bind-to)."""
    masks = [set(v.affinity) for v in views]
    return sum(len(m) for m in masks) == len(set().union(*masks))


def head_core(views: list[HostView], mode: str = "auto") -> int | None:
    """The CPU kept for the GCS on the head's host, or None (--gcs-core MODE).

    A join storm on the head's host once starved the GCS (24 raylets on 2 cores; Ray gives a raylet
    30 s to register). When unbound ranks share the head's host, the other Ray nodes there run on
    every CPU but one: the GCS and the head's own tasks share that one with nothing else. Ray's
    CPU counts stay as they were. Ranks bound to their own CPUs need nothing; one CPU cannot be split.
    "auto" keeps one on hosts of GCS_CORE_MIN_CPUS or more: on 2 cores it would leave the other
    nodes half the host (4 ranks on 2 cores: ready in 6.4 s instead of 4.9).
    """
    cpus = set().union(*(set(v.affinity) for v in views))
    if mode == "off" or len(views) < 2 or len(cpus) < 2 or _bound(views):
        return None
    if mode == "auto" and len(cpus) < GCS_CORE_MIN_CPUS:
        return None
    return max(cpus)


def _ranges(cpus: tuple[int, ...]) -> str:
    """0,1,2,5 -> '0-2,5' (as taskset and Slurm write CPU lists)."""
    spans: list[list[int]] = []
    for cpu in cpus:
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


MIN_OBJECT_STORE = 75 * 2**20  # Ray refuses smaller object stores (OBJECT_STORE_MINIMUM_MEMORY_BYTES)


def fit_own_shm(share: Share, shm_free: int, shm_total: int, view: HostView, *, where: str) -> Share:
    """A share whose node sees a /dev/shm of its own (a container's --shm-size, not the host's): its object
    store fitted to that one, with a note. Raises ValueError where even Ray's smallest store does not fit."""
    if shm_total == view.shm_total or not shm_total:  # the host's own /dev/shm (the runtimes' default here)
        return share
    room = int(shm_free * SHM_HEADROOM)
    if room < MIN_OBJECT_STORE:
        raise ValueError(f"{where}'s /dev/shm holds {shm_total >> 20} MiB ({shm_free >> 20} MiB free), less than Ray's "
                         f"smallest object store ({MIN_OBJECT_STORE >> 20} MiB) with room for the rest: run the container "
                         f"with the host's /dev/shm (podman --ipc=host, mpiray's default) or a --shm-size of at least "
                         f"{(MIN_OBJECT_STORE * 2) >> 20}m")
    if share.object_store <= room:
        return share
    note = (f"object store {share.object_store >> 20} MiB does not fit {where}'s own /dev/shm ({shm_free >> 20} MiB "
            f"free of {shm_total >> 20} MiB): using {room >> 20} MiB")
    return dataclasses.replace(share, object_store=room, memory=share.memory + share.object_store - room,
                               notes=(*share.notes, note))


def check_object_store(object_store_memory: int | None, view: HostView, parts: int) -> str | None:
    """The problem with an explicit --object-store-memory on this host, if any."""
    if object_store_memory is None:
        return None
    for what, limit in (("memory", view.memory), ("/dev/shm's free space", int(view.shm * SHM_HEADROOM))):
        if object_store_memory * parts > limit:
            return (
                f"--object-store-memory {object_store_memory >> 20} MiB x {parts} Ray nodes on "
                f"{view.hostname} does not fit its {what} ({limit >> 20} MiB usable): give at most "
                f"{limit // parts >> 20}M"
            )
    return None


def plan_shares(config, views: list[HostView], leader_is_rank0: bool, cpus_per_task: int | None) -> list:
    """Each local rank's Share, or None for a rank that idles (one node per host).

    views: what each rank of the host sees of it, the host's first rank first; config: the job's Config.
    """
    idle = 0
    if config.ray_node_per == "host":
        merged = dataclasses.replace(views[0], affinity=tuple(sorted({c for v in views for c in v.affinity})))
        views, idle = [merged], len(views) - 1
    shares: list[Share | None] = []
    kept = head_core(views, config.gcs_core) if leader_is_rank0 else None
    for index in range(len(views)):
        is_head = leader_is_rank0 and index == 0
        shares.append(rank_share(
            views, index,
            cpus_per_task=cpus_per_task,
            num_cpus=config.head_cpus if is_head and config.head_cpus is not None else config.num_cpus,
            num_gpus=config.num_gpus,
            object_store_memory=config.object_store_memory,
            head_core=kept,
        ))
    return shares + [None] * idle


def port_units(shares: list[Share | None]) -> list[int]:
    """The 100-port units each Ray node of a host needs (its CPUs and GPUs), the host's nodes in order."""
    return [portblocks.node_units(share.cpus, len(share.gpu_ids)) for share in shares if share is not None]


def ports_problem(shares: list[Share | None], hostname: str) -> str | None:
    """Why this host's Ray nodes cannot all have their ports (None: they fit mpiray's port range)."""
    units = port_units(shares)
    room = portblocks.units_in_range()
    if sum(units) <= room:
        return None
    largest = max(share.cpus for share in shares if share is not None)
    fit = room // portblocks.node_units(largest)
    low, high = portblocks.PORT_RANGE
    return (f"{len(units)} Ray nodes on {hostname} need {sum(units) * portblocks.UNIT} ports together (a node of "
            f"{largest} CPUs needs {portblocks.node_units(largest) * portblocks.UNIT}: a worker port per process), but one "
            f"host has {room * portblocks.UNIT} ({low}-{high}): at most {fit} such nodes fit on a host; run fewer "
            f"ranks per host, or one Ray node per host (--ray-node-per host)")
