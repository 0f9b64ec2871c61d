"""The pre-flight: what seconds of looking tell of a job that would fail, or run badly, at scale.

Each rank reads the versions of what it runs (per rank: a different venv on some nodes); each host's first
rank looks at the host (the temp and spill dirs, the log dir, the kernel's port range, its neighbour table,
the open-file limit). Everything is read from files and metadata (statvfs, /proc/self/mountinfo, /proc/sys,
the packages' dist-info names), never by importing a package: a rank pays a few milliseconds, a host a few
more. Rank 0 groups what every rank found (rank/preflight.py) before any `ray start` runs.

A finding is a REFUSE (the job cannot work: exit 2, nothing of Ray started), a WARN (it runs, worse), or a
FIXED (mpiray changed it, said once in the log).
"""

from __future__ import annotations

import os
import re
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

REFUSE, WARN, FIXED = "refuse", "warn", "fixed"
# What must be the same on every rank: a driver's or a task's pickles cross them all. The MPI library is read
# from MPI itself (rank/preflight.py). Packages found by their dist-info, so none of them is imported.
PACKAGES = ("ray", "mpiray", "mpi4py", "numpy", "cloudpickle", "torch", "gymnasium")
FULL_REFUSE, FULL_WARN = 0.95, 0.90  # Ray's own spill threshold (local_fs_capacity_threshold) is 95%
# File systems whose sockets and locks fail Ray (#44431): a temp dir there is refused.
NETWORK_FS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "fuse.sshfs", "9p",
              "panfs", "wekafs", "fuse.glusterfs", "glusterfs", "dvs"}
RAM_FS = {"tmpfs", "ramfs"}
# Open files: the GCS keeps a few per node (connections, pubsub, logs); KubeRay hit its 65,536 at 2,000 nodes,
# ~32 a node. A head host whose hard limit is below this estimate is warned of.
FILES_BASE, FILES_PER_NODE = 1024, 32
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
NEIGHBOUR_TABLE = Path("/proc/sys/net/ipv4/neigh/default/gc_thresh3")


@dataclass(frozen=True)
class Finding:
    """One thing the pre-flight found: its level, the check's name (the cause `mpiray logs` names), what it
    saw, and the fix."""

    level: str
    check: str
    message: str
    fix: str = ""


def installed_versions(paths: list[str] | None = None, names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """name -> version of each package in names that is installed on this Python's path (first found wins,
    as an import would), from its dist-info directory's name: no import, no metadata parsing."""
    wanted = {_normal(name): name for name in names}
    found: dict[str, str] = {}
    for entry in paths if paths is not None else sys.path:
        try:
            children = os.listdir(entry or ".")
        except OSError:
            continue
        for child in children:
            if child.endswith(".dist-info") and "-" in child:
                name, _, version = child[: -len(".dist-info")].rpartition("-")
                key = _normal(name)
                if key in wanted and wanted[key] not in found:
                    found[wanted[key]] = version
        if len(found) == len(wanted):
            break
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def mount_of(path: Path, mountinfo: str | None = None) -> tuple[str, str]:
    """(mount point, file system type) of the mount that holds path: the longest mount point above it."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return "/", "unknown"
    target = os.path.realpath(path)
    best = ("/", "unknown")
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        fstype = line.split(" - ", 1)[1].split()[0]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fstype)
    return best


def dir_findings(path: Path, role: str, option: str) -> list[Finding]:
    """What keeps path from serving as Ray's role dir (temp, spill): missing or not writable, full (bytes or
    inodes), on a network file system (a temp dir's sockets fail there), on RAM (spilling frees nothing)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return [Finding(REFUSE, "dir_unwritable", f"the {role} dir {path} is not writable here",
                        f"point {option} at a directory of yours on a node-local file system")]
    found = []
    try:
        fs = os.statvfs(existing)
    except OSError as error:
        return [Finding(REFUSE, "dir_unwritable", f"the {role} dir {path}: {error.strerror}",
                        f"point {option} at a directory of yours on a node-local file system")]
    for what, total, free in (("bytes", fs.f_blocks, fs.f_bavail), ("inodes", fs.f_files, fs.f_favail)):
        if total <= 0:
            continue  # file systems that count no inodes (btrfs, some FUSE)
        used = 1 - free / total
        left = f"{free * fs.f_frsize / 2**30:.1f} GiB" if what == "bytes" else f"{free} inodes"
        if used >= FULL_REFUSE:
            found.append(Finding(REFUSE, "dir_full", f"the {role} dir {path} is {used:.0%} full of {what} ({left} "
                                 f"left): Ray refuses to spill above 95%, and its logs and sockets need room",
                                 f"free space there, or point {option} elsewhere"))
        elif used >= FULL_WARN:
            found.append(Finding(WARN, "dir_full", f"the {role} dir {path} is {used:.0%} full of {what} ({left} "
                                 f"left); Ray stops spilling at 95%", f"free space there, or point {option} elsewhere"))
    point, fstype = mount_of(existing)
    if role == "temp" and fstype in NETWORK_FS:
        found.append(Finding(REFUSE, "dir_network", f"the temp dir {path} is on {fstype} ({point}): Ray's unix "
                             "sockets and file locks fail on a network file system",
                             f"point {option} at a node-local directory (/tmp, $TMPDIR, a local disk)"))
    if fstype in RAM_FS:
        found.append(Finding(WARN, "dir_ram", f"the {role} dir {path} is in RAM ({fstype} at {point}): what Ray "
                             "spills there still takes the node's memory (and its job's cgroup)",
                             "give --spill-dir a local disk (Kestrel: $TMPDIR on a node with NVMe; Frontier: "
                             "/mnt/bb/$USER)" if role != "temp" else
                             "give --spill-dir a local disk, so that spilled objects leave memory"))
    return found


def port_range_findings(low: int, high: int, path: Path = EPHEMERAL_RANGE) -> list[Finding]:
    """The kernel's ephemeral ports overlapping mpiray's port blocks: an outgoing connection can take a
    port a Ray node is about to listen on."""
    try:
        first, last = (int(n) for n in path.read_text().split())
    except (OSError, ValueError):
        return []
    if first < high and low <= last:
        return [Finding(WARN, "ephemeral_ports", f"the kernel's ephemeral port range {first}-{last} "
                        f"(net.ipv4.ip_local_port_range) overlaps mpiray's port blocks {low}-{high - 1}: a connection "
                        "can take a port a Ray node then fails to listen on",
                        f"ask the site to start the range above {high} (or reserve {low}-{high - 1}: "
                        "net.ipv4.ip_local_reserved_ports)")]
    return []


def neighbour_findings(nodes: int, path: Path = NEIGHBOUR_TABLE) -> list[Finding]:
    """A neighbour table smaller than twice the nodes: at 1,000+ nodes the kernel drops entries and
    connections stall (gc_thresh3, default 1024)."""
    try:
        limit = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    if limit < 2 * nodes:
        return [Finding(WARN, "neighbour_table", f"the neighbour table holds {limit} entries (gc_thresh3) for "
                        f"{nodes} Ray nodes", "ask the site to raise net.ipv4.neigh.default.gc_thresh3 (HPE's guides: "
                        "at least twice the node count)")]
    return []


# The soft limits a rank raises to the hard ones before it starts anything (the GCS, raylets and Ray's workers
# inherit them from `ray start`): (limit, check, what, the job script's line that does it by hand). Processes: a
# node's 100+ Ray workers, each with dozens of threads, all count against the user's RLIMIT_NPROC.
SOFT_LIMITS = ((resource.RLIMIT_NOFILE, "open_files", "open files", "ulimit -n $(ulimit -Hn)"),
               (resource.RLIMIT_NPROC, "processes", "processes", "ulimit -u $(ulimit -Hu)"))


def raise_soft_limits(limits=SOFT_LIMITS) -> list[Finding]:
    """The soft open-file and process limits raised to the hard ones, first thing in a rank; what was done, as
    findings (none where a soft limit was already the hard one)."""
    found = []
    for limit, check, what, by_hand in limits:
        soft, hard = resource.getrlimit(limit)
        if soft == hard or soft == resource.RLIM_INFINITY:  # (hard is never below soft)
            continue
        try:
            resource.setrlimit(limit, (hard, hard))
        except (ValueError, OSError) as error:
            found.append(Finding(WARN, check, f"{what}: the soft limit {soft} could not be raised to {hard}: {error}",
                                 f"raise it in the job script: {by_hand}"))
            continue
        found.append(Finding(FIXED, check, f"{what}: soft limit {soft} raised to the hard limit "
                             f"{'unlimited' if hard == resource.RLIM_INFINITY else hard}"))
    return found


def open_files_findings(nodes: int, head_host: bool) -> list[Finding]:
    """A head host whose hard open-file limit is below what a GCS of this many nodes needs."""
    found = []
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    need = FILES_BASE + FILES_PER_NODE * nodes
    if head_host and hard != resource.RLIM_INFINITY and hard < need:
        found.append(Finding(WARN, "open_files", f"open files: the hard limit {hard} is below the ~{need} a GCS of "
                             f"{nodes} nodes needs ({FILES_BASE} + {FILES_PER_NODE} a node)",
                             "ask the site for a higher hard limit (nofile in limits.conf)"))
    return found
