"""A rank's guard: `python -I -S guard.py PRIVATE_DIR KEPT_LOGS`, a process of its own that outlives the rank.

If the rank dies (SIGKILL by mpirun or srun, the OOM killer) nobody else tidies its node up:
Ray's agents, which raylet starts without fate-sharing, would live on for a minute, and the rank's
private dir, with the cluster's token in it, would stay in /tmp forever. The guard waits on a pipe
from the rank. Lines it understands:
    group PGID START   the node's process group (its leader's start time, /proc/PID/stat field 22)
    spill NODE PATH    the job's spill dir on this host, and the node's id there ("-" before it is known)
    remove PIDFILE ARGV...  a command that removes a container by name (podman's: its conmon outlives a
                       killed client), shell-quoted, and the file its monitor wrote its PID to ("-": none):
                       the node's, and on rank 0 the driver's
    done               the rank tidied up itself: exit and touch nothing
End of file without "done" means the rank died: SIGKILL the group (unless its id was recycled:
a process with pid PGID exists but started at another time), wait until the group is empty (at
most GROUP_GONE_S), SIGKILL the node's processes outside the group too (stray_processes: Ray's
workers and the driver), keep Ray's logs beside the rank's own, remove the private dir, and remove the
node's spilled objects, and the spill dir once no node's are left in it (remove_spilled).

Only the standard library (it starts in ~20 ms); raynode/node.py imports keep_ray_logs from here,
raynode/spill.py remove_spilled.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

GROUP_GONE_S = 10.0
OWNER_FILE = "owner"  # of a private or spill dir: "HOST BOOT_ID PID_NAMESPACE PID START_TIME" of who made it
SPILL_SUBDIR = "ray"  # of a spill dir: what Ray is given (it adds ray_spilled_objects_NODE below)


def read_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (field 3 is index 0), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].decode().split()


def start_time(pid: int) -> str | None:
    fields = read_stat(pid)
    return fields[19] if fields else None  # field 22: starttime in clock ticks since boot


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = read_stat(int(entry))
            if fields and fields[0] != "Z" and int(fields[2]) == pgid:  # fields: state, ppid, pgrp
                members.append(int(entry))
    return members


def kill_group(pgid: int, leader_start: str) -> None:
    # While any member lives the kernel does not reuse the id; a leader with another start time
    # means the group emptied earlier and the id now names someone else's group.
    current = start_time(pgid)
    if current is not None and current != leader_start:
        return
    deadline = time.monotonic() + GROUP_GONE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not group_members(pgid):
            return
        time.sleep(0.05)


def stray_processes(private_dir: Path, proc: Path = Path("/proc")) -> list[int]:
    """This user's processes (but this one) that belong to the dead rank though outside its node's group: Ray's
    workers, which raylet starts in sessions of their own, and the driver. Their environment (RAY_TMPDIR, the
    token's path) or command line names the rank's private dir, a fresh random name of this user's. Measured:
    a worker still starting when its rank was SIGKILLed made the session's dirs again, 0755 and never removed,
    10 s after the guard had removed the private dir."""
    mark, me, uid = os.fsencode(str(private_dir)), os.getpid(), os.getuid()
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if (proc / entry).stat().st_uid != uid:
                continue
            text = (proc / entry / "environ").read_bytes() + b"\0" + (proc / entry / "cmdline").read_bytes() + b"\0"
        except OSError:  # gone meanwhile
            continue
        if any(mark + end in text for end in (b"/", b"\0")):
            found.append(int(entry))
    return found


def kill_strays(private_dir: Path) -> None:
    deadline = time.monotonic() + GROUP_GONE_S
    while (strays := stray_processes(private_dir)) and time.monotonic() < deadline:
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def make_private(root: Path) -> None:
    """No group/other write anywhere below root (Ray makes its dirs 0777); symlinks are left as they are."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, None]:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022)


def keep_ray_logs(ray_dir: Path, target: Path) -> Path | None:
    """Move the newest Ray session's logs to target (target.2, .3, ... if a run before kept its own there)."""
    sessions = sorted(p for p in ray_dir.glob("session_2*") if (p / "logs").is_dir() and not p.is_symlink())
    if not sessions:
        return None
    logs = sessions[-1] / "logs"
    make_private(logs)  # here, under the rank's 0700 dir, nobody else can see the copy being made
    destination, number = target, 1
    while destination.exists() or destination.is_symlink():
        number += 1
        destination = target.with_name(f"{target.name}.{number}")
    if not destination.parent.is_dir():  # not recreated: a joined job outlives the cluster's log dir
        raise FileNotFoundError(f"the log directory {destination.parent} is gone (removed while the job ran?)")
    shutil.move(str(logs), str(destination))
    return destination


def remove_spilled(path: Path, node_id: str | None) -> None:
    """A node's end: its spilled objects (ray/ray_spilled_objects_NODE); then, if no other node's are left,
    the job's spill dir (made by raynode/spill.py)."""
    if node_id:
        shutil.rmtree(path / SPILL_SUBDIR / f"ray_spilled_objects_{node_id}", ignore_errors=True)
    try:
        (path / SPILL_SUBDIR).rmdir()  # fails while any node's objects are still there
        (path / OWNER_FILE).unlink(missing_ok=True)
        path.rmdir()
    except OSError:
        pass


REMOVE_TIMEOUT = 60.0  # podman rm --force --time=0 of one container


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = read_stat(int(entry))
            if fields and int(fields[1]) == pid:  # fields: state, ppid
                found.append(int(entry))
    return found


def kill_monitor(pidfile: Path) -> None:
    """The container monitor that podman wrote to pidfile (--conmon-pidfile), with all below it: SIGKILL. A
    client killed between its container's create and start leaves conmon and `runc init` that podman no longer
    lists (seen here): removal by name finds nothing, so they go by the PID conmon wrote itself."""
    try:
        pid = int(pidfile.read_text().split()[0])
        with open(f"/proc/{pid}/comm") as comm:  # the PID still names that conmon, not a process since
            if comm.read().strip() != "conmon":
                return
    except (OSError, ValueError, IndexError):
        return
    tree, look = [pid], [pid]
    while look:
        found = children(look.pop())
        tree += found
        look += found
    for member in reversed(tree):
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove_container(argv: list[str], monitor_pidfile: Path | None = None) -> None:
    """A container its client left running (podman's, under conmon): removed by its name, then its monitor's
    tree, if any is left, by PID."""
    try:
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=REMOVE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass
    if monitor_pidfile is not None:
        kill_monitor(monitor_pidfile)


# After the rank died: a client killed while it was still creating its container leaves one that appears
# after a first removal found none (seen: the driver's, killed as it started). Removal again, 15 s in all.
REMOVE_AGAIN_AFTER_S = (0.0, 1.0, 2.0, 4.0, 8.0)


def remove_containers(removes: list[tuple[Path | None, list[str]]]) -> None:
    for pause in REMOVE_AGAIN_AFTER_S:
        time.sleep(pause)
        for pidfile, argv in removes:
            remove_container(argv, pidfile)


def main(private_dir: Path, kept_logs: Path) -> None:
    group = spill = None
    removes: list[tuple[Path | None, list[str]]] = []
    for line in sys.stdin:
        words = line.rstrip("\n").split(" ", 2)
        if words == ["done"]:
            return
        if len(words) == 3 and words[0] == "group":
            group = int(words[1]), words[2]
        elif len(words) == 3 and words[0] == "spill":
            spill = Path(words[2]), None if words[1] == "-" else words[1]
        elif words[0] == "remove" and len(words) == 3:  # remove PIDFILE|- ARGV...
            removes.append((None if words[1] == "-" else Path(words[1]), shlex.split(words[2])))
    if group is not None:
        kill_group(*group)
    kill_strays(private_dir)  # before the dir goes: a worker still starting would make it again
    if removes:
        remove_containers(removes)
    try:
        keep_ray_logs(private_dir / "ray", kept_logs)
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)
        if spill is not None:
            remove_spilled(*spill)


if __name__ == "__main__":
    # scancel and mpirun signal the whole step: the rank answers those; the guard waits for its pipe.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
