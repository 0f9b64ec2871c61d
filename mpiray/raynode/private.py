"""A rank's private dir: the one place of a shared node that no other user can enter.

    TEMP_DIR/mpiray-UID-LABEL-RANDOM/     0700, made with mkdir (nothing planted before is reused)
        ray/                              the temp dir handed to Ray (it chmods it and below to 0777)
        auth_token                        0600: the cluster's token, beside ray/, never in it
        owner, guard                      who made the dir and who tends it: a dir whose both are gone
                                          is removed by the next rank of this user on the host

Short names, so that Ray's socket paths below it fit 107 bytes (checked before it is made).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import string
import time
from dataclasses import dataclass
from pathlib import Path

from mpiray.errors import ConfigError, SocketPathTooLong, TempDirFailed
from mpiray.host.guard import OWNER_FILE, start_time
from mpiray.raynode import commands

GUARD_FILE = "guard"  # "PID START_TIME" of its guard
NAME_CHARACTERS = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class PrivateDir:
    """A directory only this user can enter: the token, and the temp dir handed to Ray, below it."""

    path: Path

    @property
    def ray_dir(self) -> Path:
        return self.path / "ray"

    @property
    def token_path(self) -> Path:
        return self.path / "auth_token"

    @classmethod
    def create(cls, root: Path, label: str) -> PrivateDir:
        """root/mpiray-UID-LABEL-RANDOM, 0700, with ray/ in it; short, so Ray's socket paths fit 107 bytes."""
        problem = socket_path_problem(root, label)
        if problem:
            raise SocketPathTooLong(problem)
        for _ in range(100):
            # 36**6 names: no one can plant them all. Short, as the socket paths below must stay short.
            tag = "".join(NAME_CHARACTERS[byte % len(NAME_CHARACTERS)] for byte in os.urandom(6))
            path = root / f"mpiray-{os.getuid()}-{label}-{tag}"
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:  # someone's (maybe planted) entry: never reuse it, take another name
                continue
            except OSError as error:
                raise TempDirFailed(
                    f"cannot create the temp dir {path}: {error.strerror}; point --temp-dir (or TMPDIR) "
                    f"at a writable node-local directory"
                ) from None
            private = cls(path)
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
                raise TempDirFailed(f"the temp dir {path} is not a private directory of this user")
            private.ray_dir.mkdir(mode=0o700)
            private._write(OWNER_FILE, f"{' '.join(pid_scope())} {os.getpid()} {start_time(os.getpid())}\n")
            return private
        raise TempDirFailed(f"cannot find a free name for a temp dir in {root}")

    def write_token(self, token: str) -> Path:
        return self._write(self.token_path.name, token)

    def _write(self, name: str, text: str) -> Path:
        path = self.path / name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(text)
        except OSError as error:
            raise ConfigError(f"cannot write {path}: {error.strerror}") from None
        return path

    def remove(self) -> None:
        shutil.rmtree(self.path)  # fd-based on Linux: a symlink inside is removed, never followed


def socket_path_problem(root: Path, label: str = "r99999") -> str | None:
    """Why Ray's socket paths in a private dir below root would pass 107 bytes (label: the dir's, by
    default a rank's of a job of 100,000 ranks), or None."""
    return commands.socket_path_problem(str(root / f"mpiray-{os.getuid()}-{label}-xxxxxx/ray"), str(root))


def pid_scope() -> tuple[str, str, str]:
    """(host, boot id, PID namespace): where a PID names the same process as here."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid").replace(" ", "")
    except OSError:
        boot = namespace = "unknown"
    return socket.gethostname(), boot, namespace


def _read_small(path: Path) -> list[str]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd) as small:
        return small.read(300).split()


def _gone(pid: str, started: str) -> bool:
    return start_time(int(pid)) != started


# A private dir's tree made again after its job removed it: a driver's ray.init() that learnt the node's temp dir
# from the GCS a moment before the node stopped makes its session dirs (sockets, logs, runtime_resources) there,
# 0755 and 0777, with no file in them. Older than this, such a tree is nobody's dir in the making.
SKELETON_AFTER_S = 600.0


def remove_stale(root: Path) -> list[Path]:
    """Remove this user's private dirs under root that nobody tends any more (their job step was
    SIGKILLed whole, rank and guard alike); return them. Only plain 0700 dirs of this user whose
    owner file says they were made here (same host, boot and PID namespace) by a process that is
    gone, and whose guard (if it started) is gone too, are touched: a dir still being made (no owner
    file yet), one a guard is still tidying up, or one of a rank in another container is left.
    Also a skeleton of this user's (SKELETON_AFTER_S): no owner file and no file at all below it."""
    removed = []
    here, uid = list(pid_scope()), os.getuid()
    for path in root.glob(f"mpiray-{uid}-*"):
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                continue
            if _skeleton(path, info):
                shutil.rmtree(path, ignore_errors=True)
                if not path.exists():
                    removed.append(path)
                continue
            if stat.S_IMODE(info.st_mode) & 0o077:
                continue
            *made_at, pid, started = _read_small(path / OWNER_FILE)
            if made_at != here or not _gone(pid, started):
                continue
            guard = _read_small(path / GUARD_FILE) if (path / GUARD_FILE).exists() else None
            if guard and not _gone(*guard):
                continue
        except (OSError, ValueError, TypeError):  # gone meanwhile, no owner file yet, or not ours to read
            continue
        shutil.rmtree(path, ignore_errors=True)  # another rank may be removing it too
        if not path.exists():
            removed.append(path)
    return removed


def _skeleton(path: Path, info: os.stat_result) -> bool:
    """Whether path, a dir of this user's, is a tree of empty dirs (and symlinks) with no owner file, last
    changed over SKELETON_AFTER_S ago: nothing in it to keep, and no rank making it."""
    if time.time() - info.st_mtime < SKELETON_AFTER_S or os.path.lexists(path / OWNER_FILE):
        return False
    return _only_dirs(path, depth=6)  # Ray's tree is 4 deep; its 0777 dirs let others nest deeper: not ours then


def _only_dirs(path: Path | str, depth: int) -> bool:
    if depth == 0:
        return False
    with os.scandir(path) as entries:  # symlinks neither followed nor counted (Ray's session_latest)
        return all(entry.is_symlink() or (entry.is_dir(follow_symlinks=False) and _only_dirs(entry.path, depth - 1))
                   for entry in entries)
