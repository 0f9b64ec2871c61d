"""Hosts on one machine, for the batch testbeds (tests/slurm/, tests/pbs/): a network namespace per host,
each with its own address on a private bridge (and, if the testbed has one, a second address on a second
bridge: a fabric, like a site's high-speed network), their names in a marked block of /etc/hosts, and the
daemons a testbed starts, tracked by PID and start time (never found by name).

A host given a Room (Node.command(argv, room)) is a host as a cluster's are: its own process table, /tmp and
/dev/shm, in a memory cgroup of its own (host_init.py is its PID 1), while the file systems a site shares (the
checkout and its venv, $HOME, the Room's shared paths) stay shared; the knobs below act on one such host:
power_off, cut_off / reconnect, limit_memory. Without a Room, the hosts share the PID space and every file system
with each other and the machine, like the jobs of one shared node. All hosts share the machine's CPUs.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import os
import shutil
import signal
import socket
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

    def command(self, argv: list[str], room: Room | None = None) -> list[str]:
        """argv run on this host: in its network namespace, with its own hostname, and with a room its own PID and
        mount namespaces (host_init.py its PID 1; argv's end is the host's power loss).

        nsenter, not `ip netns exec`, which remounts /sys (slurmd then finds no cgroups);
        unshare --uts gives the host its name, resolved through /etc/hosts."""
        enter = ["nsenter", f"--net={self.netns_path}", "unshare", "--uts"]
        if room is None:
            return [*enter, "--", "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *argv]
        # --ipc: System V shared memory of its own, as every host has: with the machine's, Debian's MPICH over UCX
        # failed MPI_Init between hosts (a shmat of another host's segment: "Shared memory error").
        return [*enter, "--ipc", "--pid", "--fork", "--mount-proc", "--propagation", "slave", "--",
                sys.executable, str(HOST_INIT), "--name", self.name, *room.init_args(self), "--", *argv]


@dataclasses.dataclass(frozen=True)
class Room:
    """What makes the hosts of a testbed hosts, not jobs of one node (host_init.py does it): below hosts_dir, each
    its own /tmp (HOSTS_DIR/NAME/tmp, seen from the machine: Room.path), hidden from the other hosts; the paths
    `shared` below /tmp stay the machine's, as a site's shared file systems (the testbed's state dir, pytest's base
    dir); /dev/shm a tmpfs of shm_size (None: the kernel's default, half the memory); a memory cgroup each below
    the machine's (cgroup v1's memory controller, where there is one: limit_memory)."""

    hosts_dir: Path
    shared: tuple[Path, ...]
    shm_size: str | None = None
    file_server: FileServer | None = None  # mounted in every host before its daemon starts

    def root(self, node: Node) -> Path:
        return self.hosts_dir / node.name

    def path(self, node: Node, inside: str | Path) -> Path:
        """Where a path below the host's /tmp lies, seen from the machine."""
        return self.root(node) / "tmp" / Path(inside).relative_to("/tmp")

    def init_args(self, node: Node) -> list[str]:
        args = ["--root", str(self.root(node)), "--hide", str(self.hosts_dir)]
        args += [arg for path in self.shared for arg in ("--shared", str(path))]
        if self.shm_size is not None:
            args += ["--shm-size", self.shm_size]
        if self.file_server is not None:
            args += ["--first", json.dumps(self.file_server.mount_command())]
        cgroup = memory_cgroup(node)
        if cgroup is not None:
            cgroup.mkdir(exist_ok=True)
            args += ["--memory-cgroup", str(cgroup)]
        return args

    def make(self, nodes: tuple[Node, ...]) -> None:
        for node in nodes:
            (self.root(node) / "tmp").mkdir(parents=True, exist_ok=True)
        for path in self.shared:
            path.mkdir(mode=0o700, exist_ok=True)  # pytest's base dir: 0700, as pytest makes it

    def remove_cgroups(self, nodes: tuple[Node, ...]) -> None:
        """The hosts' memory cgroups, once their processes are gone (a cgroup with a process cannot go)."""
        for node in nodes:
            cgroup = memory_cgroup(node)
            if cgroup is not None and cgroup.exists():
                cgroup.rmdir()


HOST_INIT = Path(__file__).with_name("host_init.py")


@dataclasses.dataclass(frozen=True)
class FileServer:
    """A host that serves one dir to all the others, as a site's parallel file system: sshd (Debian's
    openssh-server) in a network namespace of its own on the management network, the dir mounted with sshfs at
    mount_point in every host with a Room (host_init.py mounts it before the host's daemon starts), its link's
    bandwidth set with tc (throttle): N hosts that read at once share it. export is on the machine's disk, hidden
    from the hosts (below the Room's hosts_dir), so that they reach it only over the link; a host's reads go over it
    each time it opens a file again (sshfs leaves no page cache from one open to the next)."""

    node: Node
    export: Path
    keys: Path
    mount_point: Path = Path("/lustre")
    rate: str = "400mbit"  # the link's bandwidth, each way

    def start(self, daemons: Daemons) -> None:
        self.export.mkdir(parents=True, exist_ok=True)
        self.keys.mkdir(parents=True, exist_ok=True)
        for name in ("host", "user"):
            if not (self.keys / name).exists():
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.keys / name)])
        (self.keys / "authorized_keys").write_text((self.keys / "user.pub").read_text())
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        self.mount_point.mkdir(exist_ok=True)
        options = {"ListenAddress": self.node.ip, "Port": 22, "HostKey": self.keys / "host", "PidFile": "none",
                   "AuthorizedKeysFile": self.keys / "authorized_keys", "StrictModes": "no", "UsePAM": "no",
                   "PermitRootLogin": "prohibit-password", "Subsystem": "sftp internal-sftp"}
        # Detached: its sessions (one per host's mount, made again when a host powers on) are no test's children.
        daemons.start(f"sshd-{self.node.name}", self.node.command(
            ["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null", *[f"-o{key} {value}" for key, value in options.items()]]),
            detach=True)
        self.throttle(self.rate)
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while not self.listening():  # the hosts mount it as they start
            if time.monotonic() > deadline:
                raise TestbedError(f"the file server's sshd does not listen on {self.node.ip}:22 after "
                                   f"{COMMAND_TIMEOUT_S} s; read its log, sshd-{self.node.name}.out")
            time.sleep(POLL_INTERVAL_S)

    def listening(self) -> bool:
        with socket.socket() as client:
            client.settimeout(1)
            return client.connect_ex((self.node.ip, 22)) == 0

    def mount_command(self) -> list[str]:
        """sshfs as a host runs it to mount the export (it stays in the background, a process of that host)."""
        return ["sshfs", "-o", f"IdentityFile={self.keys / 'user'},StrictHostKeyChecking=no,"
                "UserKnownHostsFile=/dev/null,allow_other,reconnect,ServerAliveInterval=5,ConnectTimeout=10",
                f"root@{self.node.name}:{self.export}", str(self.mount_point)]

    def throttle(self, rate: str) -> None:
        """The link's bandwidth, each way: what the server sends (the hosts' reads) and what it receives (their
        writes), e.g. "400mbit"."""
        burst = "1mbit"  # at least rate / HZ: tbf sends no faster than one burst per tick
        shape = ["tbf", "rate", rate, "burst", burst, "latency", "50ms"]
        run(["nsenter", f"--net={self.node.netns_path}", "tc", "qdisc", "replace", "dev", "eth0", "root", *shape])
        run(["tc", "qdisc", "replace", "dev", self.node.veth, "root", *shape])

CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")


def memory_cgroup(node: Node) -> Path | None:
    """The host's memory cgroup: a child of the machine's own (this process's) in cgroup v1's memory hierarchy; None
    where there is none (a cgroup v2 machine: the knob is not built there)."""
    try:
        membership = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in membership.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and CGROUP_V1_MEMORY.is_dir():
            return CGROUP_V1_MEMORY / path.lstrip("/") / node.name
    return None


def limit_memory(node: Node, limit_bytes: int | None) -> None:
    """The host's memory: what its processes may hold together before the kernel's OOM killer takes one (None: no
    limit). For a host in a Room on a machine with cgroup v1's memory controller."""
    cgroup = memory_cgroup(node)
    if cgroup is None or not cgroup.exists():
        raise TestbedError(f"{node.name} has no memory cgroup (no Room, or no cgroup v1 memory controller here)")
    value = str(limit_bytes) if limit_bytes is not None else "-1"
    (cgroup / "memory.limit_in_bytes").write_text(value)


def machine_pids(node: Node) -> dict[int, int]:
    """The host's PID -> the machine's, of every process on the host (a PID a job on it logs is the host's own, where
    the host has a PID namespace: the last of NSpid in /proc/PID/status; else the two are one)."""
    found = {}
    for pid in processes_on(node):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:"):
                found[int(line.split()[-1])] = pid
    return found


def host_init_pid(node: Node) -> int | None:
    """The machine's PID of the host's PID 1 (host_init.py), or None if the host has no Room or is off."""
    pid = machine_pids(node).get(1)
    return pid if pid is not None and pid != 1 else None


def _running_init(node: Node) -> int:
    """host_init_pid, for a knob that needs it: a host without a Room, or off, is an error."""
    init = host_init_pid(node)
    if init is None:
        raise TestbedError(f"{node.name} has no namespaces of its own (no Room), or is off")
    return init


def power_off(node: Node) -> None:
    """Every process of the host ends at once, as at a power loss: SIGKILL to its PID 1, on which the kernel kills
    all the others of its PID namespace; returns once none is left. Its links go down too: a dead host answers no
    one (no refusal from its kernel either), until its power on (testbed.start_slurmd) brings them up."""
    cut_off(node)
    os.kill(_running_init(node), signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while processes_on(node):
        if time.monotonic() > deadline:
            raise TestbedError(f"processes of {node.name} left after its power off: {processes_on(node)}")
        time.sleep(POLL_INTERVAL_S)


def on_host(node: Node, argv: list[str]) -> subprocess.CompletedProcess:
    """argv run on a host with a Room as root, from the machine: in all its namespaces (its files, /tmp, processes)."""
    return run(["nsenter", f"--target={_running_init(node)}", "--mount", "--pid", "--ipc", "--net", "--uts", *argv])


def resize_shm(node: Node, size: str) -> None:
    """The host's /dev/shm remounted at size (tmpfs's size=, e.g. 64m): what Ray's object store may map there."""
    on_host(node, ["mount", "-o", f"remount,size={size}", "/dev/shm"])


def cut_off(node: Node, up: bool = False) -> None:
    """The host's links down (up=True: up again): its processes live on, and no packet reaches them or leaves."""
    for veth in (node.veth, node.hsn_veth if node.hsn_ip else None):
        if veth is not None:
            run(["ip", "link", "set", veth, "up" if up else "down"])


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
    servers: tuple[Node, ...] = ()  # hosts on the management network only, not compute nodes: a file server

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
        for server in self.servers:
            run(["ip", "netns", "add", server.name])
            run(["ip", "-n", server.name, "link", "set", "lo", "up"])
            _plug(server, server.veth, self.bridge, "eth0", f"{server.ip}/{self.subnet.prefixlen}")
        self._add_hosts_block()

    def delete(self) -> None:
        # Deleting a veth end deletes its peer; deleting the namespace does so too, but later,
        # asynchronously. So the veths first, and "already gone" is fine.
        veths = [node.veth for node in self.nodes + self.servers]
        if self.fabric is not None:
            veths += [node.hsn_veth for node in self.nodes]
        for link in veths + list(self.subnets):
            result = run(["ip", "link", "delete", link], check=False)
            if result.returncode != 0 and link_exists(link):
                raise TestbedError(f"cannot delete {link}: {result.stderr.strip()}")
        for node in self.nodes + self.servers:
            if node.netns_path.exists():
                run(["ip", "netns", "delete", node.name])
        self._remove_hosts_block()

    def exists(self) -> bool:
        # The fabric's bridge too: a testbed made before it had a fabric is not this one, and up() remakes it.
        return all(link_exists(bridge) for bridge in self.subnets) and all(node.netns_path.exists()
                                                                          for node in self.nodes + self.servers)

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
        names = [*self.extra_names, *((node.ip, node.name) for node in self.nodes + self.servers)]
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

    def start(self, name: str, cmd: list[str], detach: bool = False, **popen_kwargs) -> int:
        """Start a foreground daemon in its own session, its output in log_dir/NAME.out. detach: not as this
        process's child but as init's (a host powered on again from within a test, which must leave no child)."""
        if detach:
            out = self.log_dir / f"{name}.out"
            started = subprocess.run([sys.executable, "-c", _DETACH, str(out), *cmd], capture_output=True, text=True,
                                     timeout=COMMAND_TIMEOUT_S, check=True, **popen_kwargs)
            pid = int(started.stdout)
            self.record(name, pid)
            return pid
        with open(self.log_dir / f"{name}.out", "ab") as out:
            process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, **popen_kwargs)
        _started[process.pid] = process
        self.record(name, process.pid)
        return process.pid


# Starts argv[2:] in a session of its own, its output appended to argv[1], prints its PID and exits: the daemon is
# then init's child, not the caller's.
_DETACH = """
import subprocess, sys
with open(sys.argv[1], "ab") as out:
    daemon = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              start_new_session=True)
print(daemon.pid)
"""


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
