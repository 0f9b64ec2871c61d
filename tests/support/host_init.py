"""PID 1 of a testbed host (netns.Room): the first process of the host's own PID, mount, IPC and UTS namespaces.

    python host_init.py --name NAME --root DIR [--shared PATH ...] [--hide PATH] [--shm-size SIZE]
                        [--memory-cgroup DIR] [--first JSON_ARGV ...] -- COMMAND...

Started by `unshare --ipc --pid --fork --mount-proc --propagation slave --uts`, it makes the host what a node of a
cluster is beside the others, then starts COMMAND (the host's slurmd or pbs_mom) and reaps every orphan until it
ends:
- its hostname, NAME;
- its own /tmp (ROOT/tmp, on the machine's disk: the testbed's state dir shows it from outside), in which each
  --shared PATH below /tmp stays the machine's (the testbed's state dir, pytest's base dir: a site's shared file
  system), and --hide PATH (the dir of all hosts' roots) is an empty, read-only tmpfs, so no host sees another's;
- its own /dev/shm (a tmpfs of SIZE, default half the machine's memory, as the kernel's);
- each --first ARGV (a JSON list) run and done before COMMAND starts: a network file system's mount (sshfs, whose
  daemon stays in the host), tried up to FIRST_TRIES times, 1 s apart, as a booting host's mounts are (the
  first try after a power on was seen to end "Connection reset by peer" before the file server's sshd saw it);
- with --memory-cgroup, every process of the host in that cgroup (its limit is the host's memory:
  netns.limit_memory), as a site's Slurm puts a job's processes in one; /proc/meminfo stays the machine's.

When COMMAND ends this process ends with its code; the kernel then kills every process left in the host, as a power
loss does. SIGTERM and SIGINT are passed on to COMMAND (PID 1 has no default action for them).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

FIRST_TIMEOUT_S = 60
FIRST_TRIES = 3
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND = 1, 2, 4, 4096
_libc = ctypes.CDLL(None, use_errno=True)


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def make_rooms(root: Path, shared: list[Path], hide: Path | None, shm_size: str | None,
               memory_cgroup: Path | None) -> None:
    """The host's own /tmp, /dev/shm and memory cgroup, as the module's docstring says."""
    machine_tmp = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)  # the machine's /tmp, once /tmp is the host's
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    mount(str(root / "tmp"), "/tmp", flags=MS_BIND)
    for path in shared:
        inside = path.relative_to("/tmp")
        Path("/tmp", inside).mkdir(parents=True, exist_ok=True)
        mount(f"/proc/self/fd/{machine_tmp}/{inside}", str(path), flags=MS_BIND)
    os.close(machine_tmp)
    if hide is not None:
        mount("hidden", str(hide), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777" + (f",size={shm_size}" if shm_size else ""))
    if memory_cgroup is not None:
        (memory_cgroup / "cgroup.procs").write_text("0\n")  # this process, so every one it starts


def run(command: list[str]) -> int:
    """COMMAND as the host's one child; every orphan reaped; COMMAND's exit code (128+N for signal N)."""
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--shared", type=Path, action="append", default=[])
    parser.add_argument("--hide", type=Path)
    parser.add_argument("--shm-size")
    parser.add_argument("--memory-cgroup", type=Path)
    parser.add_argument("--first", type=json.loads, action="append", default=[])
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    if os.getpid() != 1:
        parser.error("must be the first process of a new PID namespace (unshare --pid --fork --mount-proc)")
    socket.sethostname(args.name)
    make_rooms(args.root, args.shared, args.hide, args.shm_size, args.memory_cgroup)
    for argv in args.first:
        for attempt in range(1, FIRST_TRIES + 1):
            if subprocess.run(argv, timeout=FIRST_TIMEOUT_S).returncode == 0:
                break
            if attempt == FIRST_TRIES:
                raise SystemExit(f"host_init: {argv[0]} failed {FIRST_TRIES} times: this host does not boot")
            time.sleep(1)
    sys.stdout.flush()
    return run(args.command)


if __name__ == "__main__":
    sys.exit(main())
