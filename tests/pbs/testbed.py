"""A three-host OpenPBS cluster on one machine, for testing the launcher under real qsub, qdel and qrerun.

The PBS server (with its scheduler, comm and datastore) runs on the host mpiray-pbs-server, the
machine's end of a private bridge; each of the three moms is a host of its own: a network namespace
with its own address and hostname (and a second address on hsn0, a bridge of its own, as a site's
high-speed network), its own PBS_HOME. The hosts share the PID space, the filesystem and
the CPUs, like the nodes of a shared HPC machine, and this testbed can be up beside the Slurm one.

    python tests/pbs/testbed.py up | down | status | env | available

Needs root, network namespaces, and an OpenPBS 23.06 or PBS Professional already installed on the machine
under MPIRAYTEST_PBS_PREFIX (default /opt/pbs): the project holds no PBS and builds none. `available` says
whether the testbed can run here, and if not why, in one line (exit 1): tests/run.sh, tests/envs.sh and the
tests' fixture decide by it. PBS runs no job of root: jobs are submitted as an ordinary user
(MPIRAYTEST_PBS_USER, default mpiraypbs), made by `up` if missing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python tests/pbs/testbed.py up
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from lifecycle import bring_up, check_ours, network_lines, remove_state  # noqa: E402
from netns import (  # noqa: E402
    POLL_INTERVAL_S,
    Daemons,
    Fabric,
    Network,
    Node,
    TestbedError,
    alive,
    command_line,
    processes_on,
    processes_with,
    run,
    terminate,
)
from netns import unavailable_reason as _unavailable  # noqa: E402

STATE_DIR_ENV = "MPIRAYTEST_PBS_TESTBED_DIR"
USER_ENV = "MPIRAYTEST_PBS_USER"
# Not below /tmp: PBS refuses a PBS_HOME whose path passes a directory others may write ("Security violation").
DEFAULT_STATE_DIR = Path("/var/spool/mpiray-pbs")
MARKER_FILE = ".mpiray-pbs-testbed"  # down() deletes only a state dir that holds it
PREFIX_ENV = "MPIRAYTEST_PBS_PREFIX"
DEFAULT_PREFIX = Path("/opt/pbs")
PBS_EXEC = Path(os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX)  # where PBS is installed: /etc/pbs.conf's PBS_EXEC
# What the testbed runs of an installed PBS: the server side through PBS's init script (server, scheduler,
# comm), a mom per host, the commands (qsub, qstat, qdel, qrerun, qmgr, pbsnodes), pbs_tmrsh inside jobs and
# pbs_iff, through which an ordinary user's command authenticates.
INSTALLED_FILES = ("libexec/pbs_init.d", "sbin/pbs_server", "sbin/pbs_sched", "sbin/pbs_comm", "sbin/pbs_mom",
                   "sbin/pbs_iff", "bin/qsub", "bin/qstat", "bin/qdel", "bin/qrerun", "bin/qmgr", "bin/pbsnodes",
                   "bin/pbs_tmrsh")
# Debian packages an installed PBS needs to run here (none to build it): PostgreSQL, which PBS runs as its
# datastore, its own libraries, Python for its hooks, and what the hosts are made with.
RUNTIME_PACKAGES = ("postgresql", "postgresql-contrib", "python3", "expat", "libedit2", "tcl", "tk", "libical3",
                    "libcjson1", "iproute2", "util-linux")
CREATECLUSTER_CONF = Path("/etc/postgresql-common/createcluster.conf")
PACKAGES_TIMEOUT_S = 900
CONF = Path("/etc/pbs.conf")  # the server's, and every PBS command's wherever it runs (a job's qsub too)
SUBNET = ipaddress.ip_network("10.78.0.0/24")  # the Slurm testbed has 10.77.0.0/24, and 10.79.0.0/24 on hsn0
SERVER_IP = "10.78.0.1"
# The moms' second network, hsn0 (as Polaris's Slingshot); above SUBNET, so that a head without a default route
# still falls back to eth0's address, the lowest (mpiray/host/network.py head_address).
HSN_SUBNET = ipaddress.ip_network("10.80.0.0/24")
HSN_GATEWAY_IP = "10.80.0.1"
HSN_BRIDGE = "mpiray-pbshsn0"
# A host name of its own: PBS refuses one that resolves to loopback, as a workstation's own often does.
SERVER = "mpiray-pbs-server"
BRIDGE = "mpiray-pbsbr0"
NODE_COUNT = 3
# Declared above the machine's 2 cores, as a site's nodes have many: two jobs of 3 x 2 CPUs fit at once.
CPUS_PER_NODE = 4
KILL_DELAY_S = 30  # SIGTERM to SIGKILL on qdel, qrerun and the walltime (PBS's default is 10 s)
DEFAULT_USER = "mpiraypbs"
UP_TIMEOUT_S = 120.0
FINISHED = "F"  # job_state of a job that ended (kept as history: job_history_enable)
SERVER_DAEMONS = {  # name -> the lock file of PBS_HOME that holds its PID
    "pbs_server": "server_priv/server.lock", "pbs_sched": "sched_priv/sched.lock",
    "pbs_comm": "server_priv/comm.lock", "postgres": "datastore/postmaster.pid",
}


@dataclasses.dataclass(frozen=True)
class Testbed:
    """Where the testbed lives; describes it whether or not it is up."""

    __test__ = False  # not a pytest test class, despite the name

    state_dir: Path
    nodes: tuple[Node, ...]
    user: str = DEFAULT_USER
    server: str = SERVER

    @property
    def server_home(self) -> Path:
        return self.state_dir / "server"

    def mom_home(self, node: Node) -> Path:
        return self.state_dir / node.name

    def mom_conf(self, node: Node) -> Path:
        return self.state_dir / f"{node.name}.conf"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def network(self) -> Network:
        return Network(BRIDGE, SUBNET, SERVER_IP, self.nodes, "mpiray pbs testbed (tests/pbs/testbed.py)",
                       extra_names=((SERVER_IP, self.server),), fabric=Fabric(HSN_BRIDGE, HSN_SUBNET, HSN_GATEWAY_IP))

    @property
    def daemons(self) -> Daemons:
        return Daemons(self.state_dir / "pid", self.log_dir)

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]

    @property
    def node_ips(self) -> list[str]:
        return [node.ip for node in self.nodes]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for qsub, qstat, qdel, pbsnodes against this testbed."""
        env = dict(os.environ if base is None else base)
        for name in list(env):
            if name.startswith(("PBS_", "PMI", "SLURM_")):  # of an enclosing job
                del env[name]
        env["PATH"] = os.pathsep.join([str(PBS_EXEC / "bin"), env.get("PATH", "/usr/bin:/bin")])
        return env

    def run(self, cmd: list[str], timeout: float, user: str | None = None, **kwargs) -> subprocess.CompletedProcess:
        """A PBS command (as root, or as user: PBS runs no job of root) against this testbed; text output."""
        kwargs.setdefault("capture_output", True)
        argv = ["runuser", "-u", user, "--", *cmd] if user else cmd
        return subprocess.run(argv, env=self.env(kwargs.pop("env", None)), text=True, timeout=timeout, **kwargs)

    def submit(self, script: Path | str, *options: str, workdir: Path, variables: dict[str, str] | None = None,
               timeout: float = 30) -> str:
        """qsub script as the testbed's user from workdir (its PBS_O_WORKDIR); variables: qsub -v. The job's id."""
        argv = ["qsub", *options]
        if variables:
            argv += ["-v", ",".join(f"{name}={value}" for name, value in variables.items())]
        result = self.run([*argv, str(script)], timeout, user=self.user, cwd=workdir)
        if result.returncode != 0:
            raise TestbedError(f"qsub exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout.strip()

    def job(self, job_id: str) -> dict | None:
        """The job as `qstat -f -F json -x` shows it (finished ones too), or None if PBS knows none."""
        result = self.run(["qstat", "-f", "-F", "json", "-x", job_id], timeout=30)
        if result.returncode != 0:
            return None
        jobs = json.loads(result.stdout).get("Jobs", {})
        return next(iter(jobs.values()), None)

    def wait_for_state(self, job_id: str, states: str, timeout: float) -> dict:
        """Poll until the job is in one of states (job_state letters, e.g. "R" or "F"); its record then."""
        deadline = time.monotonic() + timeout
        while (record := self.job(job_id)) is None or record["job_state"] not in states:
            if time.monotonic() > deadline:
                raise TestbedError(f"job {job_id} not in {states!r} within {timeout:.0f} s: "
                                   f"{record and record['job_state']}")
            time.sleep(POLL_INTERVAL_S)
        return record

    def wait_for_job(self, job_id: str, timeout: float) -> dict:
        """The finished job's record (Exit_status, run_count, ...)."""
        return self.wait_for_state(job_id, FINISHED, timeout)

    def node_states(self) -> dict[str, str]:
        result = self.run(["pbsnodes", "-a", "-F", "json"], timeout=30)
        if result.returncode != 0:
            return {}
        return {name: node["state"] for name, node in json.loads(result.stdout).get("nodes", {}).items()}

    def qmgr(self, command: str) -> None:
        run(["qmgr", "-c", command], env=self.env())


def describe(state_dir: str | Path | None = None) -> Testbed:
    """The testbed's layout, without touching the machine."""
    if state_dir is None:
        state_dir = os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR
    hosts, hsn_hosts = list(SUBNET.hosts()), list(HSN_SUBNET.hosts())
    nodes = tuple(Node(name=f"mpiray-pbs{i}", ip=str(hosts[9 + i]), veth=f"mpiray-pveth{i}", hsn_ip=str(hsn_hosts[9 + i]))
                  for i in range(1, NODE_COUNT + 1))
    return Testbed(state_dir=Path(state_dir).resolve(), nodes=nodes, user=os.environ.get(USER_ENV) or DEFAULT_USER)


def not_installed_reason(prefix: Path | None = None) -> str | None:
    """Why no PBS the testbed can run is installed at prefix (default PBS_EXEC), in one line; or None."""
    prefix = PBS_EXEC if prefix is None else prefix
    missing = [name for name in INSTALLED_FILES if not (prefix / name).is_file()]
    if not missing:
        return None
    found = "none there" if len(missing) == len(INSTALLED_FILES) else f"it lacks {', '.join(missing)}"
    return (f"the PBS tier needs an installed OpenPBS 23.06 or PBS Professional, looked for in {prefix} "
            f"({PREFIX_ENV}, default {DEFAULT_PREFIX}): {found}")


def unavailable_reason() -> str | None:
    """Why this machine cannot host the testbed (no installed PBS, not root, no netns), or None."""
    return not_installed_reason() or _unavailable("PBS testbed")


def install_runtime_packages() -> None:
    """The Debian packages an installed PBS needs to run (RUNTIME_PACKAGES), those missing only: nothing
    is done, not even `apt-get update`, when all are there, nor on a machine without dpkg (another
    distribution: its PBS came with what it needs). Only ever called where PBS is installed."""
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        return
    missing = [package for package in RUNTIME_PACKAGES if "install ok installed" not in run(
        ["dpkg-query", "-W", "-f=${Status}", package], check=False).stdout]
    if not missing:
        return
    # Debian's postgresql would make a cluster of its own, which PBS does not use: PBS runs its datastore.
    conf = CREATECLUSTER_CONF.read_text() if CREATECLUSTER_CONF.exists() else ""
    if "\ncreate_main_cluster = false" not in f"\n{conf}":
        CREATECLUSTER_CONF.parent.mkdir(parents=True, exist_ok=True)
        CREATECLUSTER_CONF.write_text(conf + ("" if conf.endswith("\n") or not conf else "\n")
                                      + "create_main_cluster = false\n")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env, timeout=PACKAGES_TIMEOUT_S)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env, timeout=PACKAGES_TIMEOUT_S)


def prepare(user: str) -> None:
    """What the testbed needs of the machine beside the installed PBS: its runtime packages, and the
    ordinary user its jobs run as (PBS runs no job of root), with a home directory. Idempotent."""
    reason = unavailable_reason()
    if reason is not None:
        raise TestbedError(reason)
    iff = PBS_EXEC / "sbin" / "pbs_iff"
    if not iff.stat().st_mode & stat.S_ISUID:
        raise TestbedError(f"{iff} is not setuid root, so the job user's qsub cannot authenticate to the server: "
                           f"`chmod 4755 {iff}`, as a PBS installation leaves it")
    install_runtime_packages()
    if run(["id", user], check=False).returncode != 0:
        run(["useradd", "--create-home", "--shell", "/bin/bash", user])


def job_processes(testbed: Testbed, job_id: str) -> dict[int, str]:
    """PID -> command line of every live process of a job on the hosts: all that inherited its PBS_JOBID
    (the job script, mpiexec and its proxies, ranks, Ray, the driver). Other jobs' are not included."""
    variable = f"PBS_JOBID={job_id}".encode()
    return processes_with(testbed.nodes, lambda command, environ: variable in environ)


# --- configuration --------------------------------------------------------------------------


def server_conf(testbed: Testbed) -> str:
    return "\n".join([
        "# Written by tests/pbs/testbed.py; `testbed.py down` puts back what was here.",
        f"PBS_SERVER={testbed.server}", "PBS_START_SERVER=1", "PBS_START_SCHED=1", "PBS_START_COMM=1",
        "PBS_START_MOM=0", f"PBS_EXEC={PBS_EXEC}", f"PBS_HOME={testbed.server_home}",
        f"PBS_SERVER_HOST_NAME={testbed.server}", f"PBS_LEAF_NAME={testbed.server}",
        f"PBS_COMM_NAME={testbed.server}", "PBS_CORE_LIMIT=unlimited", ""])


def mom_conf(testbed: Testbed, node: Node) -> str:
    return "\n".join([
        f"PBS_SERVER={testbed.server}", "PBS_START_SERVER=0", "PBS_START_SCHED=0", "PBS_START_COMM=0",
        "PBS_START_MOM=1", f"PBS_EXEC={PBS_EXEC}", f"PBS_HOME={testbed.mom_home(node)}",
        f"PBS_MOM_NODE_NAME={node.name}", f"PBS_LEAF_NAME={node.name}", f"PBS_LEAF_ROUTERS={testbed.server}",
        "PBS_CORE_LIMIT=unlimited", ""])


def _make_mom_home(testbed: Testbed, node: Node) -> None:
    """A mom's PBS_HOME, with the modes PBS checks (a wrong one and it exits: "Security violation")."""
    home = testbed.mom_home(node)
    for sub, mode in (("", 0o755), ("aux", 0o755), ("mom_logs", 0o755), ("checkpoint", 0o700), ("spool", 0o1777),
                      ("undelivered", 0o1777), ("mom_priv", 0o751), ("mom_priv/jobs", 0o751),
                      ("mom_priv/hooks", 0o750), ("mom_priv/hooks/tmp", 0o750)):
        path = home / sub
        path.mkdir(exist_ok=True)
        path.chmod(mode)
    (home / "pbs_environment").write_text("PATH=/bin:/usr/bin\n")
    # No sshd here: every output copy-back is a local copy (the hosts share the filesystem).
    (home / "mom_priv" / "config").write_text(f"$clienthost {testbed.server}\n$usecp *:/ /\n")
    testbed.mom_conf(node).write_text(mom_conf(testbed, node))


def _lock_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# --- lifecycle -------------------------------------------------------------------------------


def _server_side(testbed: Testbed, action: str, timeout: float) -> subprocess.CompletedProcess:
    """PBS's own init script (start or stop: server, scheduler, comm, datastore; by their lock files'
    PIDs), as the host mpiray-pbs-server."""
    with open(testbed.log_dir / f"pbs_init-{action}.out", "a") as out:
        return subprocess.run(
            ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$1" "$2"', testbed.server,
             str(PBS_EXEC / "libexec" / "pbs_init.d"), action],
            env={**testbed.env(), "PBS_CONF_FILE": str(CONF)}, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)


def _start(testbed: Testbed, timeout: float) -> None:
    state = testbed.state_dir
    state.mkdir(mode=0o755, parents=True, exist_ok=True)
    (state / MARKER_FILE).touch()
    for sub in ("log", "pid"):
        (state / sub).mkdir(exist_ok=True)
    original = state / "pbs.conf.orig"  # put back by down()
    if not original.exists():
        original.write_text(CONF.read_text() if CONF.exists() else "")
    CONF.write_text(server_conf(testbed))
    testbed.network.create()
    result = _server_side(testbed, "start", timeout)
    for name, lock in SERVER_DAEMONS.items():
        pid = _lock_pid(testbed.server_home / lock)
        if pid is None or not alive(pid):
            raise TestbedError(f"{name} did not start (pbs_init.d start exited {result.returncode}); read "
                               f"{testbed.log_dir / 'pbs_init-start.out'} and {testbed.server_home}/*_logs/")
        testbed.daemons.record(name, pid)
    for node in testbed.nodes:
        _make_mom_home(testbed, node)
        # pbs_mom forks itself away; its lock file names it.
        run(node.command([str(PBS_EXEC / "sbin" / "pbs_mom")]),
            env={**testbed.env(), "PBS_CONF_FILE": str(testbed.mom_conf(node))})
        pid = _lock_pid(testbed.mom_home(node) / "mom_priv" / "mom.lock")
        if pid is None:
            raise TestbedError(f"pbs_mom on {node.name} did not start: read {testbed.mom_home(node)}/mom_logs/")
        testbed.daemons.record(f"pbs_mom-{node.name}", pid)
    # Site resources that jobs/pbs_polaris.sh asks for, as ALCF's Polaris defines them.
    testbed.qmgr("create resource system type=string,flag=h")
    testbed.qmgr("create resource filesystems type=string")
    for node in testbed.nodes:
        testbed.qmgr(f"create node {node.name}")
        testbed.qmgr(f"set node {node.name} resources_available.ncpus = {CPUS_PER_NODE}")
        testbed.qmgr(f"set node {node.name} resources_available.system = polaris")
    sched_config = testbed.server_home / "sched_priv" / "sched_config"  # the scheduler matches select on these
    sched_config.write_text(sched_config.read_text().replace('\nresources: "ncpus,', '\nresources: "system, ncpus,'))
    os.kill(testbed.daemons.pid("pbs_sched"), signal.SIGHUP)  # re-read
    for command in ("set server job_history_enable = True",
                    "set server flatuid = True",  # the user may qsub from the moms (elastic worker jobs)
                    f"set queue workq kill_delay = {KILL_DELAY_S}"):
        testbed.qmgr(command)


def is_up(state_dir: str | Path | None = None) -> bool:
    testbed = describe(state_dir)
    daemons = [*SERVER_DAEMONS, *(f"pbs_mom-{node.name}" for node in testbed.nodes)]
    return (state_dir_is_ours(testbed) and all(testbed.daemons.pid(name) for name in daemons)
            and testbed.network.exists())


def state_dir_is_ours(testbed: Testbed) -> bool:
    return (testbed.state_dir / MARKER_FILE).exists()


def up(state_dir: str | Path | None = None, timeout: float = UP_TIMEOUT_S) -> Testbed:
    """Bring the testbed up (or return at once if it already is) and wait for three free moms."""
    testbed = describe(state_dir)
    if not is_up(state_dir):
        prepare(testbed.user)
        bring_up(testbed, lambda: _start(testbed, timeout), lambda: down(state_dir),
                 lambda: [testbed.log_dir, *testbed.server_home.glob("*_logs"),
                          *testbed.state_dir.glob("mpiray-pbs*/mom_logs")])
    deadline = time.monotonic() + timeout
    while (states := testbed.node_states()) != dict.fromkeys(testbed.node_names, "free"):
        if time.monotonic() > deadline:
            raise TestbedError(f"the moms are not free within {timeout:.0f} s: {states}; read "
                               f"{testbed.state_dir}/mpiray-pbs*/mom_logs/")
        time.sleep(POLL_INTERVAL_S)
    return testbed


def down(state_dir: str | Path | None = None) -> None:
    """Stop what up() started (the moms and every job process on their hosts, then the server side), put
    back /etc/pbs.conf, delete the namespaces, bridge, /etc/hosts block and state dir."""
    testbed = describe(state_dir)
    state = testbed.state_dir
    check_ours(state, MARKER_FILE)
    terminate([pid for node in testbed.nodes for pid in processes_on(node)])  # moms, jobs, Ray
    if testbed.daemons.pid("pbs_server") or testbed.daemons.pid("postgres"):
        _server_side(testbed, "stop", timeout=60)
    terminate([pid for name in SERVER_DAEMONS if (pid := testbed.daemons.pid(name))])
    original = state / "pbs.conf.orig"
    if original.exists():
        CONF.write_text(original.read_text())
    testbed.network.delete()
    # What PBS leaves itself: a killed job's TMPDIR (the moms remove those of jobs that end), a boot marker.
    for leftover in Path("/var/tmp").glob(f"pbs.*.{testbed.server}"):
        shutil.rmtree(leftover, ignore_errors=True)
    Path("/var/tmp/pbs_boot_check").unlink(missing_ok=True)
    remove_state(state, MARKER_FILE)


def status(state_dir: str | Path | None = None) -> str:
    testbed = describe(state_dir)
    lines = [f"state dir: {testbed.state_dir} ({'present' if testbed.state_dir.exists() else 'absent'})"]
    for name in [*SERVER_DAEMONS, *(f"pbs_mom-{node.name}" for node in testbed.nodes)]:
        pid = testbed.daemons.pid(name)
        lines.append(f"{name}: {'running, pid %d' % pid if pid else 'not running'}")
    lines += network_lines(testbed, (BRIDGE, HSN_BRIDGE))
    if testbed.daemons.pid("pbs_server"):
        states = testbed.node_states()
        lines.append("pbsnodes: " + (", ".join(f"{n}={s}" for n, s in states.items()) if states else "no answer"))
    lines.append("up" if is_up(state_dir) else "down")
    return "\n".join(lines)


def exports(testbed: Testbed) -> str:
    return "\n".join([f"export PATH={PBS_EXEC / 'bin'}:$PATH", f"export {USER_ENV}={shlex.quote(testbed.user)}"])


def main(argv: list[str] | None = None) -> int:
    return command_line(sys.modules[__name__], argv, "PBS testbed", "free moms")


if __name__ == "__main__":
    sys.exit(main())
