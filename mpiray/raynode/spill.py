"""Where a job's Ray nodes spill objects their object store cannot hold: one directory per host (or one on a
shared file system), the same path on every host, below a 0700 directory of this user's.

    ROOT/mpiray-UID-spill-JOB-RUN/ 0700, made by each host's first rank (a shared ROOT: by the first of them)
        owner                      who made it (as a private dir's: a stale one is swept the same way)
        ray/                       what every node's `ray start --object-spilling-directory` gets (Ray makes it 0777)
            ray_spilled_objects_NODE_ID/

ROOT is --spill-dir, else the temp dir. RUN is the head's random tag of this run: a requeued job keeps its id, and
its killed run's dir, still there, is swept by its host's next rank as stale (remove_stale), which must never be
under this run's nodes. The same path on every node matters: before Ray 2.55 every worker node
spills to the head's path (the GCS's config), so a path of the head's own private dir would be made anew, outside
any private dir, on every other host, and never removed. Each rank removes its node's objects at its end; whoever
finds the rest empty removes the directory. A SIGKILLed job's is swept like its private dirs (remove_stale).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mpiray.errors import DirUnwritable
from mpiray.host.guard import OWNER_FILE, SPILL_SUBDIR, remove_spilled, start_time
from mpiray.raynode.private import pid_scope, remove_stale


def job_spill_dir(root: Path, spill_key: str) -> Path:
    """The job's spill dir under root (every node of the cluster, joined jobs' too, uses the same). spill_key: the
    cluster's job id and the head's tag of this run (a requeued job's killed run may have left its own)."""
    return root / f"mpiray-{os.getuid()}-spill-{spill_key}"


def ray_spill_dir(path: Path) -> Path:
    return path / SPILL_SUBDIR


def prepare(root: Path) -> list[Path]:
    """Sweep the stale spill (and private) dirs of this user's killed jobs under root; return them."""
    return remove_stale(root) if root.is_dir() else []


def make(path: Path) -> bool:
    """The host's first rank: the job's spill dir, 0700, with ray/ in it; True if this rank made it. One that
    is there already (another host made it on a shared file system) is taken only if it is a plain 0700 dir of
    this user's: another user's, a symlink or a file is refused."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
        made = True
    except FileExistsError:
        made = False
    except OSError as error:
        raise DirUnwritable(f"cannot make the spill dir {path}: {error.strerror}; point --spill-dir at a writable "
                            "directory of yours on a local disk") from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise DirUnwritable(f"the spill dir {path} is there already and not a private directory of this user's "
                            "(another user's, a link, or open to others): give --spill-dir another directory")
    if made:
        fd = os.open(path / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"{' '.join(pid_scope())} {os.getpid()} {start_time(os.getpid())}\n")
    ray_spill_dir(path).mkdir(mode=0o700, exist_ok=True)
    return made


def remove_node(path: Path, node_id: str | None) -> None:
    """A rank's end: its node's spilled objects; then, if nothing else is left, the whole directory (as the
    rank's guard does if the rank dies: host/guard.py)."""
    remove_spilled(path, node_id)
