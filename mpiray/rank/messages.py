"""What the ranks tell each other: the message tags of the protocol and their payloads.

No mpi4py here: the protocol (head.py, worker.py) runs over any communicator with mpi.Comm's methods,
an in-memory one in the fast tests.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from mpiray import errors
from mpiray.errors import ConfigError, LaunchError
from mpiray.host.findings import Finding
from mpiray.host.portblocks import NodePorts
from mpiray.host.resources import Share
from mpiray.raynode.commands import node_env
from mpiray.raynode.raycompat import ray_version

# Message tags (see head.py for who sends which, when).
SESSION = 1  # rank 0 -> all: where the head is, the job id, the token
HELLO = 2  # all -> rank 0: "rank r on host h is alive, its log is at ...", what it runs (a Hello)
REPORT = 3  # all -> rank 0: node started and registered (or the error that prevented it)
CONTROL = 4  # rank 0 -> all: "stop now with exit code N"
EVENT = 5  # all -> rank 0: something happened after startup (e.g. this rank's Ray node died)
LOCAL = 6  # within one host: each rank's view of it (host.resources.HostView), then its HostPlan, Idle or PlanRefused
JOIN = 7  # rank 0 -> a worker: the head is ALIVE and this worker holds a join slot: `ray start` may go
SETTLED = 8  # all -> rank 0: this rank's `ray start` is done starting
STOPPED = 9  # all -> rank 0: this rank's Ray node has stopped (the head may stop now)
DRAINING = 10  # rank 0 -> all: Ray is told that the nodes go (walltime): a node that ends now is drained, not lost
PROBE = 11  # rank 0 -> each host's first rank that listens for the link check (Hello.link): a Probe
PROBED = 12  # ... back to rank 0: what it measured (host.linkprobe.Figures)
VERDICT = 13  # rank 0 -> each worker whose HELLO waits for it: what the pre-flight decided of its host (a Verdict)
ACTIVATE = 14  # rank 0 -> every rank of a spare host, when a worker's Ray node was lost: start your node and join
HEAD_GONE = 15  # within one host: its first rank found the head's host gone (knock.PortWatch): end with 1 too
HOST_LOST = 16  # rank 0 -> every rank it still hears: a worker host is gone (knock.PortWatch), these ranks with it
MET = 17  # the last barrier without the ranks gone with their host: each other rank -> rank 0, then rank 0 -> each


class Message(NamedTuple):
    """A message as a rank receives it (Comm.poll): who sent it, its tag (above), and what it carries (the
    payload named with each tag: a Session, a Report, an exit code, ...)."""

    source: int  # the sender's rank in the communicator it came over
    tag: int
    payload: Any


@dataclass(frozen=True)
class Session:
    """What rank 0 tells every rank before anything starts."""

    job_id: str  # the cluster's: the job whose rank 0 runs the head (its logs, its registry entry)
    head_ip: str
    gcs_address: str
    token: str | None
    started: float  # rank 0's time.time() at launch, for "seconds to ready"
    log_dir: str = ""  # where the ranks write (LOG_DIR/JOB_ID); "" for config.log_dir / job_id
    own_job_id: str = ""  # a job that joined another's cluster (--join): its own id, else ""
    marker: str = ""  # rank 0's file in the job's log dir: a host that does not see it has a log dir of its own
    run: str = ""  # the head's random tag of this run of the cluster: a requeued job keeps its id, not this

    @property
    def spill_key(self) -> str:
        """What names the cluster's spill dir (raynode/spill.py): this run's own, never a killed run's of the
        same job id, which may still be there (a requeue) and which its own host's next sweep removes."""
        return f"{self.job_id}-{self.run}" if self.run else self.job_id

    def job_dir(self, log_dir: Path) -> Path:
        return Path(self.log_dir) if self.log_dir else log_dir / self.job_id

    @property
    def prefix(self) -> str:
        """Of this job's files in the cluster's log dir: "" for the cluster's own job, join-ID- for another."""
        return f"join-{self.own_job_id}-" if self.own_job_id else ""

    @property
    def ports_job_id(self) -> str:
        """What picks this job's port blocks (two jobs on one host must differ)."""
        return self.own_job_id or self.job_id


class Hello(NamedTuple):
    """HELLO, each worker to rank 0 before any `ray start` goes (preflight.py): where it is and logs, what it
    runs, and what the pre-flight found on its host (by the host's first rank; the others find nothing)."""

    host: str
    log: str
    versions: dict[str, str]  # name -> version, in preflight.ORDER
    findings: list[Finding]
    link: str = ""  # where its host's first rank listens for the link check (rank/linkcheck.py), "" for not at all
    waits: bool = False  # it waits for rank 0's VERDICT before splitting its host (the link check, --spares)
    first: bool = False  # its host's first rank, as MPI splits the ranks by host (two with one name: two hosts)


class NodeExited(NamedTuple):
    """EVENT, a worker to rank 0 while the job runs: its Ray node exited while the rank lives (what it said), and
    the port of the Beacon rank 0 knocks on from then (0: none), since its raylet's port went with the node: a host
    that dies later must not be one that no one watches (a send to its rank can spin in MPI_Isend for good)."""

    message: str
    knock_port: int = 0


class Verdict(NamedTuple):
    """VERDICT: what the pre-flight, across the hosts, decided of this host: why it is refused ("" for nothing),
    or that it waits as a spare (--spares)."""

    refused: str = ""
    spare: bool = False


@dataclass(frozen=True)
class Probe:
    """PROBE: the link check's key, the peers this host sends to (host, address), how many send to it."""

    key: bytes
    peers: tuple[tuple[str, str], ...]
    expected: int


class HostPlan(NamedTuple):
    """LOCAL, from the host's first rank to each of its ranks (hostsplit.py): this rank's share of the host and its
    Ray node's ports. A host's first rank always has one."""

    share: Share
    ports: NodePorts


class Idle(NamedTuple):
    """LOCAL, instead of a HostPlan: this rank runs no Ray node (--ray-node-per host: the host's first rank's
    node is the host's; or the pre-flight refused its host, and excluded says why)."""

    excluded: str = ""
    spare: bool = False  # its host waits as a spare (--spares): its ranks start their nodes once rank 0 says so


class PlanRefused(NamedTuple):
    """LOCAL, instead of a plan: why this host's ranks cannot have their nodes; each of its ranks fails with it."""

    message: str
    cause: str = ""  # the failure's (errors.LaunchError.cause); "" for a ConfigError

    def error(self) -> LaunchError:
        return errors.by_cause(self.cause)(self.message) if self.cause else ConfigError(self.message)


@dataclass(frozen=True)
class Report:
    """A rank's answer after starting (or failing to start) its node."""

    rank: int
    host: str
    log: str
    node_ip: str = ""
    node_id: str = ""
    resources: dict = field(default_factory=dict)
    seconds: float = 0.0
    versions: dict = field(default_factory=dict)
    error: str = ""
    metrics_port: int = 0  # where its node exports Ray's metrics for Prometheus (0: it exports none)
    exit_code: int = 0  # with error: the code the whole job ends with
    cause: str = ""  # with error: what kind of failure (errors.LaunchError.cause)
    labels: dict = field(default_factory=dict)  # its Ray node's labels (raynode/labels.py), as `ray start` got them
    knock_port: int = 0  # its raylet's port, which rank 0 knocks on while the job runs (knock.py); 0 with no node


@dataclass(frozen=True)
class Cluster:
    """The running cluster, as rank 0's leader step gets it: what a driver needs to use it."""

    session: Session
    nodes: tuple[Report, ...]  # the ranks that run a Ray node, head first
    log_dir: Path  # this job's logs: LOG_DIR/JOB_ID
    token_path: str | None
    stop_grace: float
    private_dir: str | None = None  # rank 0's: the driver's RAY_TMPDIR
    restart: str | None = None  # the batch system started this job again: "restart 1 (SLURM_RESTART_COUNT)"
    # The driver's visible-device variables (commands.gpu_env for all of rank 0's GPUs): on an AMD node `import ray`
    # raises where Slurm's ROCR_VISIBLE_DEVICES is set without HIP_VISIBLE_DEVICES (ray-project/ray#53737).
    driver_gpus: tuple[tuple[str, str | None], ...] = ()

    @property
    def total_cpus(self) -> int:
        return int(sum(r.resources.get("CPU", 0) for r in self.nodes))

    @property
    def total_gpus(self) -> int:
        return int(sum(r.resources.get("GPU", 0) for r in self.nodes))

    def driver_env(self, environ: dict[str, str]) -> dict[str, str]:
        """environ plus what a driver needs to find and use the cluster: RAY_ADDRESS, the token, MPIRAY_*."""
        env = node_env(dict(environ), None, self.token_path, private_tmp=self.private_dir)
        for name, value in self.driver_gpus:
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        env.update(
            RAY_ADDRESS=self.session.gcs_address,
            MPIRAY_JOB_ID=self.session.job_id,
            MPIRAY_LOG_DIR=str(self.log_dir.parent),
            MPIRAY_NUM_NODES=str(len(self.nodes)),
            MPIRAY_TOTAL_CPUS=str(self.total_cpus),
            MPIRAY_TOTAL_GPUS=str(self.total_gpus),
            MPIRAY_HEAD_IP=self.session.head_ip,
            MPIRAY_STOP_GRACE=f"{self.stop_grace:g}",  # how long the driver has after SIGTERM
        )
        if self.restart:  # a trainer continues what this job id started (PBS names no count in a job's environment)
            env["MPIRAY_RESTART"] = self.restart
        return env


def versions(rank: int) -> dict:
    """What a rank reports it runs (the pre-flight compares more, before anything starts: preflight.py)."""
    return {"ray": ray_version(), "python": sys.version.split()[0]}


def resource_fields(resources: dict) -> dict:
    """A node's Ray resources as event fields: cpus, gpus, memory_gib."""
    return {"cpus": float(resources.get("CPU", 0)), "gpus": float(resources.get("GPU", 0)),
            "memory_gib": round(resources.get("memory", 0) / 2**30, 2)}


def describe_resources(resources: dict) -> str:
    return "{cpus:g} CPUs, {gpus:g} GPUs, {memory_gib:.1f} GiB".format(**resource_fields(resources))


def print_summary(job_id: str, gcs_address: str, launch: str, ready: float, *, reports: list[Report]) -> None:
    """The cluster table on rank 0's stdout: one line per rank."""
    nodes, hosts = [r for r in reports if r.node_id], len({r.host for r in reports})
    print(
        f"mpiray: job {job_id}: {len(nodes)} Ray node{'s' * (len(nodes) != 1)} on {hosts} "
        f"host{'s' * (hosts != 1)} ready in {ready:.1f} s ({launch}); head {gcs_address}",
        flush=True,
    )
    for r in reports:
        what = describe_resources(r.resources) if r.node_id else "idle"
        print(f"  rank {r.rank:>4}  {r.host:<20} {r.node_ip or '-':<15} {what:<36} {r.seconds:5.1f} s", flush=True)
