"""A three-host Slurm cluster on one machine, for testing the launcher under real srun/sbatch.

Each compute node is a host as a cluster's are: a network namespace with its own address on a private bridge
(eth0, the management network: its hostname resolves to it), a second one on a bridge of its own (hsn0, as a site's
high-speed network), its own hostname, process table, /tmp (a job's TMPDIR is /tmp/scratch/JOBID there, as on
Kestrel) and /dev/shm, its own memory cgroup and its own slurmd (netns.Room; host_init.py is each host's PID 1);
slurmctld and munged run in the root namespace. What a site shares stays shared: the checkout and its venv, $HOME,
the testbed's state dir, pytest's base dir and SHARED_DIR. The hosts share the machine's 2 CPUs.

    python tests/slurm/testbed.py up | down | status | env

Needs root, iproute2, nsenter/unshare and the Debian packages from tests/slurm/install.sh.
One testbed per machine: the namespace, bridge and host names are fixed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import ipaddress
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python tests/slurm/testbed.py up
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from lifecycle import bring_up, check_ours, network_lines, remove_state  # noqa: E402
from netns import (  # noqa: E402
    COMMAND_TIMEOUT_S,
    POLL_INTERVAL_S,
    Daemons,
    Fabric,
    FileServer,
    Network,
    Node,
    Room,
    TestbedError,
    command_line,
    cut_off,
    login_command,
    processes_on,
    processes_with,
    terminate,
)
from netns import unavailable_reason as _unavailable  # noqa: E402

STATE_DIR_ENV = "MPIRAYTEST_TESTBED_DIR"
DEFAULT_STATE_DIR = Path("/tmp/mpiray-slurm")
# Marks a state directory as ours, so that down() never deletes a directory it did not make.
MARKER_FILE = ".mpiray-testbed"
# Below the machine's /tmp and shared by every host, as a site's scratch file system: where a benchmark that is not a
# pytest (whose base dir is shared too) puts what its jobs read and write.
SHARED_DIR = Path("/tmp/mpiray-shared")
# Each job's node-local dir on every host of the job, made by the prolog and removed by the epilog (NREL Kestrel's
# naming): the job's TMPDIR.
JOB_TMPDIR = "/tmp/scratch/$SLURM_JOB_ID"
# Debian's libfaketime (install.sh), preloaded in a host's job tasks when that host's clock is set off (set_clock).
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

SUBNET = ipaddress.ip_network("10.77.0.0/24")
CONTROLLER_IP = "10.77.0.1"
BRIDGE = "mpiray-br0"
# Each node's second network, hsn0, as a site's Slingshot (hsn0) beside its management ethernet. Not 10.78.0.0/24:
# that is the PBS testbed's, which can be up beside this one. Above 10.77 on purpose: a head without a default
# route falls back to the lowest address (mpiray/host/network.py head_address), which must stay eth0's.
HSN_SUBNET = ipaddress.ip_network("10.79.0.0/24")
HSN_GATEWAY_IP = "10.79.0.1"
HSN_BRIDGE = "mpiray-hsn0"
FILE_SERVER = "mpiray-fs"  # the host that serves /lustre to the others (netns.FileServer), at SUBNET's .20
LOGIN_HOST = "mpiray-login"  # the login node: the controller's side of the bridge, a process table of its own
NODE_COUNT = 3
CPUS_PER_NODE = 2
REAL_MEMORY_MB = 1024
# Each node's GPUs as Slurm's GRES knows them (Kestrel's GPU nodes: 4 H100s), so that every form of request a site
# documents (--gres=gpu:h100:4, --gpus-per-node, --gpus, -G) is answered as Slurm answers it there. The devices
# are stand-ins (gres.conf's File=, which slurmd wants a character device: each is one like /dev/null, root's
# only): no job opens them; what tests fake is only what a vendor library counts.
GPU_TYPE, GPUS_PER_NODE = "h100", 4
# Not the Slurm defaults (6817/6818), so that a real Slurm on a workstation is left alone.
SLURMCTLD_PORT = 16817
SLURMD_PORT = 16818
PARTITION = "testbed"
KILL_WAIT_S = 10
# A slurmd unheard this long is down: a step with a task on a dead host ends only then (srun --no-kill); Slurm's default is 300.
SLURMD_TIMEOUT_S = 60
MIN_JOB_AGE_S = 10
UP_TIMEOUT_S = 60.0
# A bare mpi4py program on the MPICH wheel under srun --mpi=pmi2 needs MPICH's ofi netmod over libfabric's tcp
# provider; the launcher chooses them by itself, so the testbed's environment leaves MPICH as users have it.
BARE_MPI_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}
# States in the job completion log of a run that Slurm ends and starts again (scontrol requeue, preemption).
REQUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")


@dataclasses.dataclass(frozen=True)
class JobResult:
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
    exit_code: int
    signal: int


@dataclasses.dataclass(frozen=True)
class Testbed:
    """Where a testbed lives; describes it whether or not it is up."""

    __test__ = False  # not a pytest test class, despite the name

    state_dir: Path
    nodes: tuple[Node, ...]
    controller_ip: str = CONTROLLER_IP
    partition: str = PARTITION

    @property
    def conf_path(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def room(self) -> Room:
        """What makes each node a host of its own (netns.Room): its /tmp below state_dir/hosts."""
        # The checkout and its venv too, where a clone lies below /tmp: every host runs the same Python from there.
        checkout = Path(__file__).resolve().parents[2]
        shared = [self.state_dir, SHARED_DIR, Path(f"/tmp/pytest-of-{getpass.getuser()}"), checkout]
        return Room(self.state_dir / "hosts", tuple(path for path in shared if path.is_relative_to("/tmp")),
                    file_server=self.file_server)

    def clock_file(self, node: Node) -> Path:
        """The offset of the node's clock, read by the task prolog (set_clock)."""
        return self.state_dir / "clock" / node.name

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def pid_dir(self) -> Path:
        return self.state_dir / "pid"

    @property
    def network(self) -> Network:
        return Network(BRIDGE, SUBNET, self.controller_ip, self.nodes, "mpiray slurm testbed (tests/slurm/testbed.py)",
                       extra_names=((self.controller_ip, LOGIN_HOST),),
                       fabric=Fabric(HSN_BRIDGE, HSN_SUBNET, HSN_GATEWAY_IP), servers=(self.file_server.node,))

    @property
    def file_server(self) -> FileServer:
        """/lustre on every node: a dir on the machine's disk that the nodes reach only through the file server's
        link (400 Mbit/s each way unless a test throttles it otherwise)."""
        node = Node(name=FILE_SERVER, ip=str(list(SUBNET.hosts())[19]), veth="mpiray-vethfs")
        return FileServer(node, export=self.state_dir / "hosts" / FILE_SERVER / "export",
                          keys=self.state_dir / "file-server-keys")

    @property
    def daemons(self) -> Daemons:
        return Daemons(self.pid_dir, self.log_dir)

    @property
    def munge_dir(self) -> Path:
        return self.state_dir / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket.2"

    @property
    def jobcomp_path(self) -> Path:
        return self.state_dir / "jobcomp.txt"

    @property
    def slurmctld_log(self) -> Path:
        return self.log_dir / "slurmctld.log"

    def slurmd_log(self, node: Node) -> Path:
        return self.log_dir / f"slurmd-{node.name}.log"

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]

    @property
    def node_ips(self) -> list[str]:
        return [node.ip for node in self.nodes]

    @property
    def node_hsn_ips(self) -> list[str]:
        """The nodes' addresses on hsn0 (their names: node.hsn_name)."""
        return [node.hsn_ip for node in self.nodes]

    @property
    def nodelist(self) -> str:
        return ",".join(self.node_names)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for srun/sbatch/sinfo/sacct against this testbed.

        Drops SLURM_* and PMI* variables inherited from an enclosing job, so that srun does not
        try to join an allocation of another cluster.
        """
        env = dict(os.environ if base is None else base)
        for name in list(env):
            if name.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "PMI", "PMIX_")):
                del env[name]
        env["SLURM_CONF"] = str(self.conf_path)
        # No MPIR_CVAR_CH4_NETMOD: the jobs run MPICH as users have it, and the launcher picks the wheel's
        # netmod by itself (mpiray/batch/environment.py wheel_mpi_variables). Slurm's pmi2 plugin reads a PMI-1
        # request with one read() of 1024 bytes (src/plugins/mpi/pmi2/pmi1.c), while MPICH puts UCX's ~3.5 KB
        # address in segments of up to 1024 characters: MPI_Init fails now and then on every task.
        return env

    def node_states(self) -> dict[str, str]:
        """Slurm state of each node as sinfo reports it (idle, mixed, down*, ...); {} if none."""
        result = self.run(["sinfo", "--noheader", "--Node", "--format=%N %T"],
                          timeout=COMMAND_TIMEOUT_S)
        if result.returncode != 0:
            return {}
        return dict(line.split() for line in result.stdout.splitlines())

    def run(self, cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """Run a Slurm client command (srun, sbatch, ...) against this testbed; text output."""
        kwargs.setdefault("capture_output", True)
        return subprocess.run(cmd, env=self.env(kwargs.pop("env", None)), text=True,
                              timeout=timeout, **kwargs)

    def login(self, cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """cmd run on the testbed's login host (LOGIN_HOST): a process table of its own, with no raylet in it."""
        return self.run(login_command(cmd, LOGIN_HOST), timeout, **kwargs)

    def job_result(self, job_id: int | str) -> JobResult | None:
        """How a job ended, from the job completion log (`sacct --completion`); None until then
        (a requeued job's earlier runs do not count).

        There is no slurmdbd, so plain `sacct` answers "accounting storage is disabled".
        """
        result = self.run(["sacct", "--completion", f"--jobs={job_id}", "--noheader",
                           "--parsable2", "--format=JobID,State,ExitCode"],
                          timeout=COMMAND_TIMEOUT_S, check=True)
        for line in result.stdout.splitlines():
            record_id, state, exit_code = line.split("|")
            if state.split()[0] in REQUEUED:  # the end of a run that Slurm starts again
                continue
            if record_id == str(job_id):
                code, sig = exit_code.split(":")
                return JobResult(state=state.split()[0], exit_code=int(code), signal=int(sig))
        return None

    def wait_for_job(self, job_id: int | str, timeout: float) -> JobResult:
        """Poll until the job has ended; quicker than `sbatch --wait`, which sleeps 8 s at once."""
        deadline = time.monotonic() + timeout
        while (result := self.job_result(job_id)) is None:
            if time.monotonic() > deadline:
                raise TestbedError(f"job {job_id} did not end within {timeout:.0f} s")
            time.sleep(POLL_INTERVAL_S)
        return result


def describe(state_dir: str | Path | None = None) -> Testbed:
    """The testbed's layout, without touching the machine."""
    if state_dir is None:
        state_dir = os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR
    hosts, hsn_hosts = list(SUBNET.hosts()), list(HSN_SUBNET.hosts())
    nodes = tuple(
        Node(name=f"mpiray-node{i}", ip=str(hosts[9 + i]), veth=f"mpiray-veth{i}", hsn_ip=str(hsn_hosts[9 + i]))
        for i in range(1, NODE_COUNT + 1)
    )
    return Testbed(state_dir=Path(state_dir).resolve(), nodes=nodes)


def unavailable_reason() -> str | None:
    """Why this machine cannot host the testbed at all (not root, no netns), or None."""
    return _unavailable("Slurm testbed")


# --- slurm.conf -----------------------------------------------------------------------------


def slurm_conf(testbed: Testbed, controller_host: str) -> str:
    """slurm.conf text: no cgroups, no database, per-node spool/pid/log via %n."""
    state = testbed.state_dir
    lines = [
        "# Written by tests/slurm/testbed.py; removed by `testbed.py down`.",
        "ClusterName=mpiray-testbed",
        f"SlurmctldHost={controller_host}({testbed.controller_ip})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={testbed.munge_socket}",
        f"StateSaveLocation={state}/ctld",
        f"SlurmdSpoolDir={state}/spool/%n",
        # Each job's node-local TMPDIR (JOB_TMPDIR) on every host of the job from its start to its end, and the task
        # prolog that names it (and sets a host's clock off: set_clock).
        "PrologFlags=Alloc",
        f"Prolog={state}/prolog.sh",
        f"Epilog={state}/epilog.sh",
        f"TaskProlog={state}/task_prolog.sh",
        f"SlurmctldPidFile={state}/run/slurmctld.pid",
        f"SlurmdPidFile={state}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={testbed.slurmctld_log}",
        f"SlurmdLogFile={testbed.log_dir}/slurmd-%n.log",
        f"PlugStackConfig={state}/plugstack.conf",
        # cgroups are not usable from inside the namespaces (see TESTBED.md).
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        # None on purpose: tests pass --mpi=pmi2 so that a plain srun gives MPI singletons.
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # Nodes share the machine's cores; do not drain them for having fewer than declared.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        f"KillWait={KILL_WAIT_S}",
        # sbatch --wait sleeps 2 s, then 4x longer while under MinJobAge/2 and 32 s: 10 gives
        # polls at 2, 10, 18... s (300 would give 2, 10, 42, 74...). Finished jobs then leave
        # scontrol after ~10 s; `sacct --completion` keeps them.
        f"MinJobAge={MIN_JOB_AGE_S}",
        "InactiveLimit=0",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        # No slurmdbd: `sacct --completion` reads the job completion file instead.
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={testbed.jobcomp_path}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "GresTypes=gpu",
        # The fabric as a site's Slurm knows it (topology.conf beside this file): every task sees its
        # SLURM_TOPOLOGY_ADDR (top.sw1.mpiray-node1), which mpiray's switch label reads.
        "TopologyPlugin=topology/tree",
    ]
    for node in testbed.nodes:
        lines.append(
            f"NodeName={node.name} NodeAddr={node.ip} NodeHostname={node.name} "
            f"CPUs={CPUS_PER_NODE} RealMemory={REAL_MEMORY_MB} Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={testbed.partition} Nodes={testbed.nodelist} Default=YES "
        "MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
    )
    return "\n".join(lines) + "\n"


# --- commands and processes ------------------------------------------------------------------


def prologs(testbed: Testbed) -> dict[str, str]:
    """The prolog (root, on each host as the job starts), epilog (at its end) and task prolog (each task, as its user:
    what it prints as `export NAME=VALUE` is set in the task's environment) scripts, by file name."""
    clock = testbed.state_dir / "clock"
    return {
        "prolog.sh": f'#!/bin/sh\nset -e\nmkdir -p /tmp/scratch\nmkdir -p -m 700 "{JOB_TMPDIR}"\n'
                     f'chown "$SLURM_JOB_UID" "{JOB_TMPDIR}"\n',
        "epilog.sh": '#!/bin/sh\nrm -rf "/tmp/scratch/${SLURM_JOB_ID:?}"\n',
        "task_prolog.sh": f'#!/bin/sh\necho "export TMPDIR={JOB_TMPDIR}"\n'
                          f'offset=$(cat "{clock}/$(hostname)" 2>/dev/null) || exit 0\n'
                          # One variable a line: Slurm reads `export NAME=VALUE`, its value the rest of the line.
                          f'echo "export LD_PRELOAD={LIBFAKETIME}"\necho "export FAKETIME=$offset"\n'
                          'echo "export FAKETIME_DONT_FAKE_MONOTONIC=1"\n',
    }


def gres_conf(testbed: Testbed) -> str:
    """gres.conf text: every node's GPUs, their device files the stand-ins under the state dir."""
    devices = testbed.state_dir / "dev" / f"nvidia[0-{GPUS_PER_NODE - 1}]"
    return (f"NodeName={testbed.nodelist} Name=gpu Type={GPU_TYPE} File={devices}\n")


SWITCHES = (("sw1", 2), ("sw2", 1))  # leaf switches and how many nodes hang from each, in node order


def topology_conf(testbed: Testbed) -> str:
    """topology.conf text: the first two nodes on leaf switch sw1, the third on sw2, both under top."""
    lines, names = [], list(testbed.node_names)
    for switch, count in SWITCHES:
        lines.append(f"SwitchName={switch} Nodes={','.join(names[:count])}")
        names = names[count:]
    lines.append(f"SwitchName=top Switches={','.join(switch for switch, _ in SWITCHES)}")
    return "\n".join(lines) + "\n"


def switch_of(testbed: Testbed, node_name: str) -> str:
    """The leaf switch a node hangs from (topology_conf)."""
    index = testbed.node_names.index(node_name)
    for switch, count in SWITCHES:
        if index < count:
            return switch
        index -= count
    raise ValueError(node_name)


def job_processes(testbed: Testbed, job_id: int | str) -> dict[int, str]:
    """PID -> command line of every live process of a job on the nodes: its slurmstepds and all
    that inherited the job's SLURM_JOB_ID (tasks and whatever they started: Ray, the driver).

    Other jobs running on the same nodes at the same time are not included.
    """
    stepd, variable = f"slurmstepd: [{job_id}.", f"SLURM_JOB_ID={job_id}".encode()
    return processes_with(testbed.nodes, lambda command, environ: command.startswith(stepd) or variable in environ)


# --- network ---------------------------------------------------------------------------------


# --- daemons ---------------------------------------------------------------------------------


def _daemon_names(testbed: Testbed) -> list[str]:
    return ["munged", "slurmctld", f"sshd-{FILE_SERVER}"] + [f"slurmd-{node.name}" for node in testbed.nodes]


def _daemon_log(testbed: Testbed, daemon: str) -> Path:
    if daemon == "munged":
        return testbed.munge_dir / "munged.log"
    if daemon == "slurmctld":
        return testbed.slurmctld_log
    return testbed.log_dir / f"{daemon}.log"


def _make_state_dir(testbed: Testbed) -> None:
    state = testbed.state_dir
    state.mkdir(parents=True, exist_ok=True)
    (state / MARKER_FILE).touch()
    # run/: Slurm's own pid files; pid/: ours, with start times, which down() trusts.
    for sub in ("ctld", "run", "log", "pid"):
        (state / sub).mkdir(exist_ok=True)
    for node in testbed.nodes:
        (state / "spool" / node.name).mkdir(parents=True, exist_ok=True)
    testbed.room.make(testbed.nodes)
    (state / "clock").mkdir(exist_ok=True)
    for name, text in prologs(testbed).items():
        (state / name).write_text(text)
        (state / name).chmod(0o755)
    (state / "plugstack.conf").write_text("")
    (state / "dev").mkdir(exist_ok=True)
    for index in range(GPUS_PER_NODE):
        device = state / "dev" / f"nvidia{index}"
        if not device.exists():
            os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    (state / "gres.conf").write_text(gres_conf(testbed))
    (state / "topology.conf").write_text(topology_conf(testbed))
    testbed.conf_path.write_text(slurm_conf(testbed, socket.gethostname().split(".")[0]))


def _start_munged(testbed: Testbed) -> None:
    munge_user = pwd.getpwnam("munge")
    directory = testbed.munge_dir
    directory.mkdir(exist_ok=True)
    # Clients reach the socket through this directory; the key inside stays 0400.
    directory.chmod(0o755)
    key = directory / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    for path in (directory, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    testbed.daemons.start(
        "munged",
        ["munged", "--foreground", f"--socket={testbed.munge_socket}", f"--key-file={key}",
         f"--pid-file={directory / 'munged.pid'}", f"--log-file={directory / 'munged.log'}",
         f"--seed-file={directory / 'munged.seed'}"],
        user=munge_user.pw_uid, group=munge_user.pw_gid, extra_groups=[],
    )
    _wait_for(lambda: testbed.munge_socket.exists(), testbed, "munged's socket", UP_TIMEOUT_S)


def _start_slurm(testbed: Testbed) -> None:
    env = testbed.env()
    testbed.daemons.start("slurmctld", ["slurmctld", "-D", "-f", str(testbed.conf_path)], env=env)
    for node in testbed.nodes:
        start_slurmd(testbed, node)


def start_slurmd(testbed: Testbed, node: Node, detach: bool = False) -> None:
    """The node's slurmd, the one process its PID 1 starts: the node's power on (netns.power_off is its loss);
    detach: from within a test (the host is then no child of the test's process)."""
    cut_off(node, up=True)  # after a power off: its links were down
    testbed.daemons.start(f"slurmd-{node.name}", node.command(
        ["slurmd", "-D", "-N", node.name, "-f", str(testbed.conf_path)], testbed.room), detach, env=testbed.env())


def set_clock(testbed: Testbed, node: Node, offset_s: float | None) -> None:
    """The node's clock, as its jobs' tasks (and all they start: Ray) read the time of day, offset_s off the machine's
    (libfaketime, preloaded by the task prolog; None: right again). Monotonic clocks stay true; slurmd's own clock
    too. Takes effect for tasks started after it."""
    path = testbed.clock_file(node)
    if offset_s is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(f"{offset_s:+.0f}\n")


def _wait_for(ready, testbed: Testbed, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        dead = _exited_daemon(testbed)
        if dead is not None:
            raise TestbedError(
                f"{dead} exited while waiting for {what}; read {_daemon_log(testbed, dead)} "
                f"and {testbed.log_dir / (dead + '.out')}"
            )
        if time.monotonic() > deadline:
            raise TestbedError(
                f"timed out after {timeout:.0f} s waiting for {what}; read "
                f"{testbed.slurmctld_log} and {testbed.log_dir}/slurmd-*.log"
            )
        time.sleep(POLL_INTERVAL_S)


def _exited_daemon(testbed: Testbed) -> str | None:
    # Only daemons with a pid file: the others are not started yet, not dead.
    for daemon in _daemon_names(testbed):
        if testbed.daemons.started(daemon) and testbed.daemons.pid(daemon) is None:
            return daemon
    return None


def _all_nodes_in(testbed: Testbed, accepted: tuple[str, ...]) -> bool:
    states = testbed.node_states()
    return all(states.get(name) in accepted for name in testbed.node_names)


# --- lifecycle -------------------------------------------------------------------------------


def is_up(state_dir: str | Path | None = None) -> bool:
    """All daemons this testbed started are running and its namespaces exist."""
    testbed = describe(state_dir)
    return (
        testbed.conf_path.exists()
        and all(testbed.daemons.pid(daemon) for daemon in _daemon_names(testbed))
        and all(node.netns_path.exists() for node in testbed.nodes)
        and testbed.network.exists()
    )


def up(state_dir: str | Path | None = None, timeout: float = UP_TIMEOUT_S) -> Testbed:
    """Bring the testbed up (or return at once if it already is) and wait for idle nodes."""
    testbed = describe(state_dir)
    if is_up(state_dir):
        _wait_for(lambda: _all_nodes_in(testbed, ("idle", "mixed", "allocated", "completing")),
                  testbed, "the nodes to answer sinfo", timeout)
        return testbed
    reason = unavailable_reason()
    if reason is not None:
        raise TestbedError(reason)
    missing = [tool for tool in ("munged", "slurmctld", "slurmd", "sinfo", "sacct")
               if shutil.which(tool) is None]
    if missing:
        raise TestbedError(f"{', '.join(missing)} not found; run tests/slurm/install.sh")

    def start() -> None:
        _make_state_dir(testbed)
        testbed.network.create()
        _start_munged(testbed)
        testbed.file_server.start(testbed.daemons)
        _start_slurm(testbed)
        _wait_for(lambda: _all_nodes_in(testbed, ("idle",)), testbed, f"{NODE_COUNT} idle nodes in sinfo", timeout)

    bring_up(testbed, start, lambda: down(state_dir),
             lambda: [testbed.log_dir, testbed.munge_dir / "munged.log", testbed.conf_path])
    return testbed


def down(state_dir: str | Path | None = None) -> None:
    """Stop what up() started, delete namespaces, bridge, /etc/hosts block and state dir."""
    testbed = describe(state_dir)
    check_ours(testbed.state_dir, MARKER_FILE)
    controller = testbed.daemons.pid("slurmctld")
    node_processes = [pid for node in testbed.nodes + (testbed.file_server.node,) for pid in processes_on(node)]
    # Powering off the nodes: slurmd, slurmstepd and every job process on them.
    terminate([pid for pid in [controller] + node_processes if pid is not None])
    munged = testbed.daemons.pid("munged")
    if munged is not None:
        terminate([munged])
    testbed.room.remove_cgroups(testbed.nodes)
    testbed.network.delete()
    for made in (testbed.file_server.mount_point, SHARED_DIR):
        with contextlib.suppress(OSError):  # left where it is not empty (a user's files in it) or is mounted
            made.rmdir()
    remove_state(testbed.state_dir, MARKER_FILE)


def status(state_dir: str | Path | None = None) -> str:
    """What is up, one line per daemon, the bridge and each node, for humans."""
    testbed = describe(state_dir)
    present = testbed.state_dir.exists()
    lines = [f"state dir: {testbed.state_dir} ({'present' if present else 'absent'})"]
    for daemon in _daemon_names(testbed):
        pid = testbed.daemons.pid(daemon)
        lines.append(f"{daemon}: {'running, pid %d' % pid if pid else 'not running'}")
    lines += network_lines(testbed, (BRIDGE, HSN_BRIDGE))
    if testbed.conf_path.exists():
        states = testbed.node_states()
        lines.append("sinfo: " + (", ".join(f"{n}={s}" for n, s in states.items())
                                  if states else "no answer"))
        lines.append(f"export SLURM_CONF={testbed.conf_path}")
    lines.append("up" if is_up(state_dir) else "down")
    return "\n".join(lines)


def exports(testbed: Testbed) -> str:
    """Shell lines that point Slurm's commands and MPICH at this testbed (see Testbed.env)."""
    return f"export SLURM_CONF={testbed.conf_path}"


def main(argv: list[str] | None = None) -> int:
    return command_line(sys.modules[__name__], argv, "testbed", "idle nodes")


if __name__ == "__main__":
    sys.exit(main())
