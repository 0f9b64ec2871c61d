"""The rank protocol, rank 0's side (Head; every other rank's is worker.Worker), up to a running cluster.

Rank 0 sends the session (job id, head address, token) before its head is even up, so every worker
loads `ray start` (starter.py: ~1 s of imports) while the head starts. Each node's starter.py
watches the GCS until its own node is ALIVE and says so in the node's output, which the rank reads.
When the head is ALIVE, rank 0 hands out join slots (slots.py) and a worker lets its `ray start` go
when it gets one (JOIN): never more joins at once than the GCS and the hosts' CPUs take. Ray's own
head lookup then succeeds at its first try instead of sleeping 2 s. Each worker reports its verified
node; rank 0 then runs the leader step (life.py) and sends everyone the exit code (teardown.py).

Messages (tags in messages.py): rank 0 sends each worker SESSION, JOIN and CONTROL; each worker sends
rank 0 HELLO, REPORT and SETTLED (and STOPPED where the head must stop last, EVENT if its node dies
later); within a host, LOCAL carries the ranks' views of it and the host's plan.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from typing import TYPE_CHECKING

from mpiray import package
from mpiray.batch import environment
from mpiray.config import Config
from mpiray.deadline import Deadline, poll_until
from mpiray.errors import PortInUse, StartupTimeout
from mpiray.host import network, portblocks
from mpiray.rank import preflight
from mpiray.rank.hostsplit import split_host_first
from mpiray.rank.messages import (
    DRAINING,
    SESSION,
    SETTLED,
    STOPPED,
    Cluster,
    Session,
    versions,
)
from mpiray.rank.nodestart import start_node
from mpiray.rank.state import Lost, Rank
from mpiray.rank.timings import HEAD_LOST_EXIT, RAY_STOP_GRACE, STARTUP_POLL
from mpiray.rank.zero import RankZero
from mpiray.raynode.commands import LOOPBACK, NodeSpec, head_ports
from mpiray.raynode.gcs import NodeInfo

if TYPE_CHECKING:
    from mpiray.elastic.autoscale import Autoscale
    from mpiray.elastic.registry import Entry, Published


# The most rank 0 waits for Ray to hear that the nodes go (Head.drain): a Ray import and one GCS call per node,
# ~3 s here; the driver's SIGTERM follows it.
DRAIN_WAIT = 20.0
# How long Ray's libraries get to see the drain before the driver's SIGTERM, where mpiray picks the moment (the walltime
# margin, --time-limit): one look of Ray Train's PreemptionWatcher (every 5 s), inside the margin's WALLTIME_TEARDOWN.
DRAIN_NOTICE = 6.0


class Head(RankZero):
    """Rank 0 of the job whose cluster it is: start the head, publish the cluster, keep the GCS up until the
    workers' nodes are done (and, with --autoscale, Ray's autoscaler's worker jobs)."""

    own_alive_event = "head_alive"

    def __init__(self, me: Rank):
        super().__init__(me)
        self.published: Published | None = None  # this cluster in the registry, for --join and attach
        self.cluster: Cluster | None = None  # once it is up (cluster_up): what drain() needs to reach it
        self.autoscale: Autoscale | None = None  # with --autoscale

    def start_own(self) -> NodeInfo:
        """The head: its session sent first (the workers load `ray start` while it starts), then its node."""
        me, config = self.me, self.me.config
        job_id = config.job_id or environment.safe_job_id(environment.default_job_id(me.env))
        me.log.open(config.log_dir / job_id)
        me.log_started(job_id)
        head_ip = network.head_address(config.interface, config.address_rule)
        if config.port and not portblocks.port_is_free(config.port):
            raise PortInUse(f"--port {config.port} is already in use on {me.host}: pick another or use 0 (a free one)")
        share, ports = split_host_first(me, job_id, gcs_port=config.port)
        token = os.urandom(32).hex() if config.auth else None  # secrets.token_hex(32), without its imports
        if not config.auth:
            me.log.event("no_auth")
        me.enter(Session(job_id=job_id, head_ip=head_ip, gcs_address=f"{head_ip}:{ports.gcs}", token=token,
                         started=me.started, run=os.urandom(3).hex()))
        me.enter(dataclasses.replace(me.current_session, marker=preflight.make_marker(me)))
        me.comm.send_to_others(me.current_session, SESSION)
        me.log.event("session_sent", workers=me.comm.size - 1, gcs_address=me.current_session.gcs_address)

        autoscaling = ""
        if config.autoscale and me.own_node.runs_ray:
            from mpiray.elastic.autoscale import Autoscale  # an elastic cluster's alone: off every rank's start

            self.autoscale = Autoscale(config, me.env.scheduler, own_node_count(config, me.comm.size, me.hosts), job_id,
                                       job_dir=me.current_session.job_dir(config.log_dir), log=me.log)
            autoscaling = self.autoscale.write_config(share)
        start_node(me, share, ports, head=True, autoscaling_config=autoscaling)
        self.gather_hellos()  # before the head's `ray start` goes (its starter has loaded Ray by then)
        head = me.own_node.up(joins=False, between=me.raise_if_stopped)
        if self.autoscale is not None:
            self.autoscale.own_nodes_are(head.node_id, [])
        return head

    def cluster_up(self, cluster: Cluster, own: NodeInfo) -> None:
        """This cluster in the user's registry: how other jobs (--join) and shells (attach) reach it; the
        autoscaler told which nodes are the job's own."""
        from mpiray.elastic import info
        from mpiray.elastic.registry import Registry, publish  # a running cluster's, not every rank's (nor a dry run's)

        self.cluster = cluster
        registry, entry = Registry(self.me.config.registry), self.entry(cluster)
        self.published = publish(registry, entry, cluster.session.token, self.me.log)
        token = registry.token_path(entry.job_id) if self.published is not None and cluster.session.token else None
        try:
            path = info.write(cluster.log_dir, info.build(entry, cluster.nodes, token))
            self.me.log.event("cluster_info", path=str(path))
        except OSError as error:
            self.me.log.event("cluster_info_failed", path=str(cluster.log_dir / info.FILE_NAME), problem=str(error))
        if self.autoscale is not None:
            self.autoscale.own_nodes_are(own.node_id, [r.node_id for r in cluster.nodes if r.rank != 0])
        if entry.dashboard_port is None:  # before a user's first Ray Job or Ray Train run meets it (docs/options.md)
            print(f"mpiray: job {entry.job_id}: no dashboard (--dashboard turns it on): `mpiray submit` (Ray Jobs) "
                  f"and Ray Train's state queries need it", flush=True)

    def entry(self, cluster: Cluster) -> Entry:
        """What the registry says of this cluster (registry_entry)."""
        me = self.me
        ours = versions(me.rank)
        image = preflight.image_facts(me) if me.config.container else None  # what `mpiray attach` must match
        if image is not None:
            ours = {"ray": image.ray, "python": image.python}
        return registry_entry(me.config, cluster, me.own_node.spec, me.host, started=me.started, scheduler=me.env.scheduler,
                              ends_at=self.batch_job.ends_at, ours=ours)

    def drain(self, seconds: float, why: str) -> bool:
        """The workers' nodes drained through Ray (raynode/drain.py: reason preemption, the deadline in `seconds`),
        so Ray's libraries see the end coming while the driver still runs; the workers told first (DRAINING), as an
        idle node's raylet ends at once. The head's node is not drained: the driver connects through it. Waited for
        at most DRAIN_WAIT; a failure is only said. Whether Ray heard it."""
        me, cluster = self.me, self.cluster
        nodes = [r.node_id for r in cluster.nodes if r.rank != 0] if cluster is not None else []
        if cluster is None or not nodes:
            return False
        me.comm.send_to_others(why, DRAINING, skip=self.unheard())
        for rank in list(self.watches):  # Ray ends a drained node at once if it is idle: its port closes by design
            self.unwatch(rank)
        argv = [*package.module_command("mpiray.raynode.drain"), cluster.session.gcs_address, f"{seconds:.0f}", why,
                *nodes]
        try:
            done = subprocess.run(argv, env=cluster.driver_env(dict(os.environ)), capture_output=True, text=True,
                                  timeout=DRAIN_WAIT, check=False)
            answers = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as error:
            me.log.event("drain_failed", problem=str(error))
            return False
        if answers is None:
            me.log.event("drain_failed", problem=(done.stderr.strip().splitlines() or ["no output"])[-1])
            return False
        refused = {node: answer for node, answer in answers.items() if answer != "accepted"}
        me.log.event("nodes_draining", seconds=round(seconds), why=why, nodes=len(answers), refused=refused)
        return len(refused) < len(answers)

    def lost(self) -> Lost | None:
        """The cluster's heart stopped, or None. The head's is its own node."""
        ended = self.me.own_node.ended()
        return None if ended is None else Lost("head_lost", {**ended, "cause": "head_lost"}, HEAD_LOST_EXIT)

    def tick(self) -> None:
        """While the leader runs: the GCS's deaths and restarts its node's starter said (raynode/gcsrestart.py),
        logged; the registry's heartbeat."""
        for event, fields in self.me.own_node.gcs_restarts():
            self.me.log.event(event, **fields)
        if self.published is not None and time.monotonic() - self.beat > self.published.heartbeat_s:
            self.beat = time.monotonic()
            self.published.beat()

    # ---- teardown (teardown.py) ----------------------------------------------------------------

    def announce(self, code: int) -> None:
        super().announce(code)
        if self.published is not None:  # gone from the registry first: nobody joins a cluster that is ending
            self.published.withdraw()

    def before_stopping_node(self, head_stops_last: bool) -> None:
        """Keep the GCS up until every worker's `ray start` is done starting (not on a stop signal),
        and, where Ray does not drain a node it stops, until every worker's node has stopped."""
        if self.me.stop.signum is None:
            self._wait_for_settled()
        if head_stops_last:
            self._wait_for_stopped()

    def after_stopping_node(self, head_stops_last: bool) -> None:
        if self.autoscale is not None:  # Ray's monitor is gone with the head: nothing submits any more
            self.autoscale.cancel_all()  # pending and running worker jobs alike
            self.autoscale.remove()

    def _wait_for_settled(self) -> None:
        """A worker's node is ALIVE, and the driver may run, ~0.3-0.9 s before its `ray start` is done;
        if the head's GCS went away in between, that `ray start` would hang and its node need SIGKILL.
        Usually every SETTLED message arrived while the driver ran."""
        me = self.me

        def all_settled() -> bool:
            while (message := me.comm.poll(tag=SETTLED)) is not None:
                self.settled_ranks.add(message.source)
            return not self.node_ranks - self.settled_ranks

        if not poll_until(all_settled, Deadline.after(RAY_STOP_GRACE + 1), STARTUP_POLL):
            me.log.event("settle_late", ranks=sorted(self.node_ranks - self.settled_ranks))

    def _wait_for_stopped(self) -> None:
        """Before 2.57 (raycompat.check_stop_order) a worker's raylet stopped while the head stops waits
        for the GCS and needed SIGKILL 5 s later; with the GCS up, workers stop in order in ~0.4 s."""
        me, stopped = self.me, set()

        def all_stopped() -> bool:
            while (message := me.comm.poll(tag=STOPPED)) is not None:
                stopped.add(message.source)
            return not self.node_ranks - stopped

        if not poll_until(all_stopped, Deadline.after(RAY_STOP_GRACE + 1), STARTUP_POLL):
            me.log.event("stop_late", ranks=sorted(self.node_ranks - stopped))


def registry_entry(config: Config, cluster: Cluster, spec: NodeSpec | None, host: str, *, started: float, scheduler: str,
                   ends_at: float | None, ours: dict[str, str]) -> Entry:
    """What the registry says of a cluster: how to reach it (GCS, dashboard, Ray Client: spec, the head node's;
    None where it has none), what it runs (ours: the ray and python versions), until when, and how big it is;
    no secret (the token lies beside it)."""
    from mpiray.elastic.registry import Entry

    session = cluster.session
    return Entry(
        job_id=session.job_id, gcs_address=session.gcs_address, head_ip=session.head_ip, host=host,
        pid=os.getpid(), uid=os.getuid(), ray=ours["ray"], python=ours["python"],
        log_dir=str(cluster.log_dir.resolve()), started=started, heartbeat=time.time(),
        ends_at=ends_at, scheduler=scheduler, nodes=len(cluster.nodes),
        cpus=float(cluster.total_cpus), gpus=float(cluster.total_gpus),
        dashboard_port=spec.ports.dashboard if spec is not None and config.dashboard else None,
        dashboard_host=spec.dashboard_host if spec is not None else LOOPBACK,
        client_port=head_ports(spec).ray_client if spec is not None else None, auth=config.auth, run=session.run,
    )


def own_node_count(config: Config, ranks: int, hosts: int | None) -> int:
    """The job's own Ray nodes, as --autoscale MIN:MAX counts them: one per rank, or one per host (--ray-node-per
    host: every rank counted the hosts in life.setup; hosts is None where some rank never did)."""
    count = ranks if config.ray_node_per == "rank" else hosts
    if count is None:
        raise StartupTimeout("the job's ranks did not all count their hosts within --startup-timeout: some rank "
                             "did not start (see the rank logs)")
    return count
