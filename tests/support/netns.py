"""Hosts on one machine, for the batch testbeds (tests/slurm/, tests/pbs/): a network namespace per host,
each with its own address on a private bridge (and, if the testbed has one, a second address on a second
bridge: a fabric, like a site's high-speed network), their names in a marked block of /etc/hosts, and the
daemons a testbed starts, tracked by PID and start time (never found by name).

The hosts share the PID space, the filesystem (/tmp, $HOME, the checkout) and the CPUs with each other
and with the machine, like the nodes of a shared HPC system.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

COMMAND_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2
NETNS_DIR = Path("/var/run/netns")
HOSTS_FILE = Path("/etc/hosts")


class TestbedError(RuntimeError):
    """A testbed could not be brought up or down; the message names the log to read."""

    __test__ = False  # not a pytest test class, despite the name


@dataclasses.dataclass(frozen=True)
class Node:
    name: str  # the host's name: its network namespace, hostname and /etc/hosts name
    ip: str
    veth: str  # host end of the veth pair; the node end is eth0 inside the namespace
    hsn_ip: str | None = None  # the host's address on its network's fabric (Network.fabric), if it has one

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def hsn_name(self) -> str:
        """The name of hsn_ip in /etc/hosts: the host's own name stays on the management network, as on a site."""
        return f"{self.name}.hsn.testbed"

    @property
    def hsn_veth(self) -> str:
        # Host end of the fabric's veth pair; with its peer's "p" at most 15 characters, as every interface name.
        return f"{self.veth}h"

    def command(self, argv: list[str]) -> list[str]:
        """argv run on this host: in its network namespace, with its own hostname.

        nsenter, not `ip netns exec`, which remounts /sys (slurmd then finds no cgroups);
        unshare --uts gives the host its name, resolved through /etc/hosts."""
        return ["nsenter", f"--net={self.netns_path}", "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *argv]


def login_command(argv: list[str], name: str) -> list[str]:
    """argv run as on a login node: a process table of its own, in which no raylet of any job runs (Ray's
    `ray.init(address=...)` looks for one there), and a hostname of its own, on the machine's side of the
    testbed's bridge (where the scheduler's controller is)."""
    return ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--",
            "sh", "-c", 'hostname "$0" && exec "$@"', name, *argv]


@dataclasses.dataclass(frozen=True)
class Fabric:
    """A second network beside the management one, like a site's high-speed network (HPE Slingshot's hsn0): a
    bridge and subnet of its own, and in every host an interface on it addressed Node.hsn_ip. The hosts have no
    default route, so a job reaches the fabric only by naming its interface or its addresses."""

    bridge: str  # at most 15 characters, as every Linux interface name
    subnet: ipaddress.IPv4Network
    gateway_ip: str  # the machine's end of the bridge
    interface: str = "hsn0"  # its name inside each host


@dataclasses.dataclass(frozen=True)
class Network:
    """A private bridge with the machine's end of it (gateway), the hosts on it, their names in /etc/hosts;
    optionally a fabric, a second bridge that every host is on too."""

    bridge: str
    subnet: ipaddress.IPv4Network
    gateway_ip: str
    nodes: tuple[Node, ...]
    hosts_block: str  # names the testbed in the /etc/hosts markers
    extra_names: tuple[tuple[str, str], ...] = ()  # more (ip, name) lines for /etc/hosts, e.g. a server's
    fabric: Fabric | None = None

    def __post_init__(self) -> None:
        if self.fabric is None:
            return
        if self.fabric.subnet.overlaps(self.subnet):
            raise ValueError(f"the fabric's {self.fabric.subnet} overlaps the management network's {self.subnet}")
        for node in self.nodes:
            if node.hsn_ip is None or ipaddress.ip_address(node.hsn_ip) not in self.fabric.subnet:
                raise ValueError(f"{node.name} needs an hsn_ip in the fabric's {self.fabric.subnet}, not {node.hsn_ip}")

    @property
    def subnets(self) -> dict[str, ipaddress.IPv4Network]:
        """Bridge -> its subnet: the management network's, then the fabric's."""
        subnets = {self.bridge: self.subnet}
        if self.fabric is not None:
            subnets[self.fabric.bridge] = self.fabric.subnet
        return subnets

    @property
    def hosts_begin(self) -> str:
        return f"# BEGIN {self.hosts_block}"

    @property
    def hosts_end(self) -> str:
        return f"# END {self.hosts_block}"

    def create(self) -> None:
        self._check_subnet_free()
        _add_bridge(self.bridge, f"{self.gateway_ip}/{self.subnet.prefixlen}")
        if self.fabric is not None:
            _add_bridge(self.fabric.bridge, f"{self.fabric.gateway_ip}/{self.fabric.subnet.prefixlen}")
        for node in self.nodes:
            run(["ip", "netns", "add", node.name])
            run(["ip", "-n", node.name, "link", "set", "lo", "up"])
            _plug(node, node.veth, self.bridge, "eth0", f"{node.ip}/{self.subnet.prefixlen}")
            if self.fabric is not None:
                _plug(node, node.hsn_veth, self.fabric.bridge, self.fabric.interface,
                      f"{node.hsn_ip}/{self.fabric.subnet.prefixlen}")
        self._add_hosts_block()

    def delete(self) -> None:
        # Deleting a veth end deletes its peer; deleting the namespace does so too, but later,
        # asynchronously. So the veths first, and "already gone" is fine.
        veths = [node.veth for node in self.nodes]
        if self.fabric is not None:
            veths += [node.hsn_veth for node in self.nodes]
        for link in veths + list(self.subnets):
            result = run(["ip", "link", "delete", link], check=False)
            if result.returncode != 0 and link_exists(link):
                raise TestbedError(f"cannot delete {link}: {result.stderr.strip()}")
        for node in self.nodes:
            if node.netns_path.exists():
                run(["ip", "netns", "delete", node.name])
        self._remove_hosts_block()

    def exists(self) -> bool:
        # The fabric's bridge too: a testbed made before it had a fabric is not this one, and up() remakes it.
        return all(link_exists(bridge) for bridge in self.subnets) and all(node.netns_path.exists()
                                                                          for node in self.nodes)

    def _check_subnet_free(self) -> None:
        for line in run(["ip", "-o", "-4", "addr", "show"]).stdout.splitlines():
            fields = line.split()
            interface, cidr = fields[1], fields[3]
            for bridge, subnet in self.subnets.items():
                if interface != bridge and ipaddress.ip_interface(cidr).network.overlaps(subnet):
                    raise TestbedError(f"{subnet} is already used on this machine ({interface} has {cidr}); "
                                       f"the testbed needs it for its private bridge {bridge}")

    def _without_block(self, text: str) -> str:
        kept, inside = [], False
        for line in text.splitlines(keepends=True):
            if line.rstrip("\n") == self.hosts_begin:
                inside = True
            elif line.rstrip("\n") == self.hosts_end and inside:
                inside = False
            elif not inside:
                kept.append(line)
        return "".join(kept)

    def _add_hosts_block(self) -> None:
        text = self._without_block(HOSTS_FILE.read_text())
        if text and not text.endswith("\n"):
            text += "\n"
        names = [*self.extra_names, *((node.ip, node.name) for node in self.nodes)]
        if self.fabric is not None:  # a host's own name stays on the management network, as on a site
            names += [(node.hsn_ip, node.hsn_name) for node in self.nodes]
        block = [self.hosts_begin, *(f"{ip} {name}" for ip, name in names), self.hosts_end]
        _write_hosts(text + "\n".join(block) + "\n")

    def _remove_hosts_block(self) -> None:
        text = HOSTS_FILE.read_text()
        if self.hosts_begin in text:
            _write_hosts(self._without_block(text))


def _add_bridge(name: str, gateway_cidr: str) -> None:
    run(["ip", "link", "add", name, "type", "bridge"])
    run(["ip", "addr", "add", gateway_cidr, "dev", name])
    run(["ip", "link", "set", name, "up"])


def _plug(node: Node, veth: str, bridge: str, interface: str, cidr: str) -> None:
    """A veth pair from the bridge (host end veth) into the node's namespace, where its end is named interface
    and holds cidr."""
    peer = f"{veth}p"
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
    run(["ip", "link", "set", peer, "netns", node.name])
    run(["ip", "-n", node.name, "link", "set", peer, "name", interface])
    run(["ip", "-n", node.name, "addr", "add", cidr, "dev", interface])
    run(["ip", "-n", node.name, "link", "set", interface, "up"])
    run(["ip", "link", "set", veth, "master", bridge])
    run(["ip", "link", "set", veth, "up"])


def _write_hosts(text: str) -> None:
    # In place, not by rename: /etc/hosts is often a bind mount in containers.
    with open(HOSTS_FILE, "r+") as hosts:
        hosts.seek(0)
        hosts.write(text)
        hosts.truncate()


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", name], check=False).returncode == 0


def unavailable_reason(what: str) -> str | None:
    """Why this machine cannot host a testbed at all (not root, no network namespaces), or None."""
    if os.geteuid() != 0:
        return f"the {what} needs root (network namespaces, bridge, /etc/hosts)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"the {what} needs `{tool}` (iproute2 / util-linux)"
    for probe in (["ip", "netns", "list"], ["unshare", "--net", "true"]):
        result = subprocess.run(probe, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if result.returncode != 0:
            return f"no network namespaces here: `{' '.join(probe)}`: {result.stderr.strip()}"
    return None


# --- commands and processes ------------------------------------------------------------------


def run(cmd: list[str], *, env: dict[str, str] | None = None, check: bool = True,
        timeout: float = COMMAND_TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as error:
        raise TestbedError(f"`{' '.join(cmd)}` did not finish within {timeout} s") from error
    if check and result.returncode != 0:
        raise TestbedError(f"`{' '.join(cmd)}` exited {result.returncode}: {result.stderr.strip()}")
    return result


def start_time(pid: int) -> str | None:
    """Kernel start time of pid (guards against PID reuse), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        _reap(pid)
        return None
    return fields[19]


def alive(pid: int) -> bool:
    return start_time(pid) is not None


# Daemons this process started: a running Popen that is garbage collected warns.
_started: dict[int, subprocess.Popen] = {}


def _reap(pid: int) -> None:
    # Daemons started by this process become its zombies when they exit; others are init's.
    process = _started.pop(pid, None)
    if process is not None:
        process.poll()


class Daemons:
    """The daemons of one testbed: PID and start time in pid_dir/NAME.pid, which down() trusts."""

    def __init__(self, pid_dir: Path, log_dir: Path):
        self.pid_dir, self.log_dir = pid_dir, log_dir

    def _pid_file(self, name: str) -> Path:
        return self.pid_dir / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        """PID of a daemon this testbed started, if that very process still runs."""
        try:
            pid_text, started = self._pid_file(name).read_text().split()
        except (FileNotFoundError, ValueError):
            return None
        pid = int(pid_text)
        return pid if start_time(pid) == started else None

    def started(self, name: str) -> bool:
        return self._pid_file(name).exists()

    def record(self, name: str, pid: int) -> None:
        """A daemon that forked itself away (its own lock file names it)."""
        self._pid_file(name).write_text(f"{pid} {start_time(pid) or '0'}\n")

    def start(self, name: str, cmd: list[str], **popen_kwargs) -> int:
        """Start a foreground daemon in its own session, its output in log_dir/NAME.out."""
        with open(self.log_dir / f"{name}.out", "ab") as out:
            process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, **popen_kwargs)
        _started[process.pid] = process
        self.record(name, process.pid)
        return process.pid


def terminate(pids: list[int], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, wait until the deadline, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [pid for pid in pids if alive(pid)]
            if not pids:
                return
            time.sleep(POLL_INTERVAL_S)
    if pids:
        raise TestbedError(f"processes {pids} survived SIGKILL")


def processes_on(node: Node) -> list[int]:
    """PIDs of every process living on the node (its network namespace): its daemons, jobs, Ray."""
    try:
        st = os.stat(node.netns_path)
    except FileNotFoundError:
        return []
    inode = st.st_dev, st.st_ino
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            ns = os.stat(entry / "ns" / "net")
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        if (ns.st_dev, ns.st_ino) == inode and alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def processes_with(nodes: tuple[Node, ...], matches) -> dict[int, str]:
    """PID -> 'node: command line' of every live process on the nodes for which
    matches(command line, environment variables as bytes) is true."""
    found = {}
    for node in nodes:
        for pid in processes_on(node):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:  # exited meanwhile
                continue
            command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            if matches(command, environ):
                found[pid] = f"{node.name}: {command}"
    return found


def remove_stale_mpich_segments() -> None:
    """MPICH's shared-memory segments that no process maps: ranks SIGKILLed mid-run leave them, and a
    restarted testbed reuses job ids, whose ranks then hang or fail in MPI_Init on a stale one."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(line.split(maxsplit=5)[5].strip() for line in maps.read_text().splitlines()
                          if line.count(" ") >= 5 and "/dev/shm/mpich_shm_" in line)
        except OSError:
            pass
    for segment in Path("/dev/shm").glob("mpich_shm_*"):
        if str(segment) not in mapped:
            segment.unlink(missing_ok=True)


def command_line(testbed, argv: list[str] | None, name: str, waits_for: str) -> int:
    """`python tests/<slurm|pbs>/testbed.py up|down|status|env|available` for a testbed module (its up, down,
    status, describe, exports, unavailable_reason, STATE_DIR_ENV, DEFAULT_STATE_DIR and UP_TIMEOUT_S).
    available: whether the testbed can run here; if not, why, in one line, and exit code 1."""
    parser = argparse.ArgumentParser(description=testbed.__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status", "env", "available"))
    parser.add_argument("--state-dir", default=None,
                        help=f"default: ${testbed.STATE_DIR_ENV} or {testbed.DEFAULT_STATE_DIR}")
    parser.add_argument("--timeout", type=float, default=testbed.UP_TIMEOUT_S, help=f"seconds to wait for {waits_for} (up)")
    args = parser.parse_args(argv)
    if args.action == "available":
        reason = testbed.unavailable_reason()
        print(reason or f"the {name} can run here")
        return 0 if reason is None else 1
    try:
        if args.action == "up":
            started = time.monotonic()
            bed = testbed.up(args.state_dir, args.timeout)
            print(f"{name} up in {time.monotonic() - started:.1f} s: "
                  + ", ".join(f"{n.name}={n.ip}" + (f" (hsn {n.hsn_ip})" if n.hsn_ip else "") for n in bed.nodes))
            print(testbed.exports(bed))
        elif args.action == "down":
            testbed.down(args.state_dir)
            print(f"{name} down")
        elif args.action == "status":
            print(testbed.status(args.state_dir))
        else:
            print(testbed.exports(testbed.describe(args.state_dir)))
    except TestbedError as error:
        print(f"testbed: {error}", file=sys.stderr)
        return 1
    return 0
