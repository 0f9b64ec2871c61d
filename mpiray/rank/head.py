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
from pathlib import Path
from typing import TYPE_CHECKING, Container

from mpiray import package
from mpiray.batch import environment
from mpiray.config import Config
from mpiray.deadline import Deadline, poll_until
from mpiray.errors import PortInUse, StartupTimeout, WorkerFailed, WorkersMissing
from mpiray.host import network
from mpiray.logs import progress
from mpiray.rank import preflight
from mpiray.rank.batchjob import BatchJob, read_batch_job
from mpiray.rank.hostsplit import split_host_first
from mpiray.rank.messages import (
    CONTROL,
    DRAINING,
    JOIN,
    REPORT,
    SESSION,
    SETTLED,
    STOPPED,
    Cluster,
    Hello,
    Report,
    Session,
    print_summary,
    resource_fields,
    versions,
)
from mpiray.rank.ownnode import dashboard_listen, driver_gpu_variables, log_context, start_node
from mpiray.rank.slots import Joins, JoinWindow
from mpiray.rank.state import HEAD_LOST_EXIT, RAY_STOP_GRACE, STARTUP_POLL, Lost, Rank
from mpiray.raynode.commands import LOOPBACK, head_ports
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


class RankZero:
    """What rank 0 does whoever's cluster its job's nodes make: its own node up (start_own, the subclass's),
    join slots handed out, every worker's report collected, the exit code sent. Head (a cluster of this job's
    own) and joiner.Joiner (this job's nodes in another's cluster) supply the rest."""

    own_alive_event = ""  # the event that says this rank's own node is ALIVE

    def __init__(self, me: Rank):
        self.me = me
        self.hellos: dict[int, Hello] = {}  # each worker's HELLO (preflight.py)
        self.batch_job = BatchJob()  # its end and restart, read once the cluster is up (none in a dry run)
        self.node_ranks: set[int] = set()  # the workers that run a Ray node
        self.settled_ranks: set[int] = set()  # ... whose `ray start` is done starting (SETTLED)
        self.targets_file: Path | None = None  # this job's nodes for Prometheus, while they run (publish_targets)
        self.beat = 0.0  # time.monotonic() of the last heartbeat in the registry

    def start_own(self) -> NodeInfo:
        """This rank's own node ALIVE, the session sent to every worker on the way."""
        raise NotImplementedError

    def cluster_up(self, cluster: Cluster, own: NodeInfo) -> None:
        """The cluster is up (not a planned one): say so where others look (the registry)."""
        raise NotImplementedError

    def drain(self, seconds: float, why: str) -> bool:
        """Tell Ray that this job's nodes go in `seconds`, before anything is stopped; whether Ray heard it. A
        joined job's nodes: each `ray start` drains its own node when teardown stops it (Ray 2.57+)."""
        return False

    def lead(self) -> Cluster:
        """The cluster up: this rank's own node first (start_own), then every worker's report."""
        me, config = self.me, self.me.config
        own = self.start_own()
        me.log.event(self.own_alive_event, gcs_address=me.current_session.gcs_address, ip=own.ip, node_id=own.node_id,
                     **resource_fields(own.resources))
        if me.node is not None:
            me.log.event("node_pids", pids=me.ray_node.pids())

        live = progress.Progress(progress.terminal(config.progress), me.comm.size, me.started)
        me.log.listeners.append(live.on_event)
        try:
            reports = self.collect_reports(own, Joins(list(range(1, me.comm.size)), JoinWindow(config.join_window)),
                                           live)
        finally:
            me.log.listeners.remove(live.on_event)
            live.close()
        nodes = tuple(r for r in reports if r.node_id)
        cluster = Cluster(me.current_session, nodes, me.current_session.job_dir(config.log_dir),
                          str(me.ray_node.token_path) if me.node and me.ray_node.token_path else None, config.stop_grace,
                          str(me.ray_node.private.path) if me.node else None,
                          driver_gpus=driver_gpu_variables(me.view))
        me.log.event("cluster_ready", workers=len(reports) - 1, nodes=len(nodes), cpus=cluster.total_cpus,
                     gpus=cluster.total_gpus, seconds=round(time.time() - me.started, 3))
        session = me.current_session
        print_summary(session.job_id, session.gcs_address, me.env.describe(), time.time() - me.started, reports)
        if me.own_node.runs_ray:  # a planned cluster (--dry-run) has nothing to wait for, read or publish
            self.node_ranks = {r.rank for r in reports if r.node_id and r.rank != 0}
            # After the start, off its critical path: a qstat under PBS.
            self.batch_job = read_batch_job(me.env, me.log, config.stop_grace, {r.rank: r.host for r in reports})
            cluster = dataclasses.replace(cluster, restart=self.batch_job.restart)
            self.cluster_up(cluster, own)
            self.publish_targets(cluster)
        return cluster

    def publish_targets(self, cluster: Cluster) -> None:
        """This job's Ray nodes, for Prometheus (info.py: prometheus/OWN_JOB.json in the cluster's log dir)."""
        from mpiray.elastic import info  # a running cluster's rank 0 alone

        session = cluster.session
        groups = info.targets(session.job_id, session.ports_job_id, cluster.nodes)
        if not groups:  # --no-metrics, or Ray without its [default] extras: nothing to scrape
            return
        try:
            self.targets_file = info.write_targets(cluster.log_dir, session.ports_job_id, groups)
            self.me.log.event("metrics_targets", path=str(self.targets_file), nodes=len(groups))
        except OSError as error:
            self.me.log.event("metrics_targets_failed", path=str(cluster.log_dir / info.TARGETS_DIR),
                              problem=str(error))

    def gather_hellos(self) -> None:
        """The pre-flight: every worker's HELLO, judged before this rank's `ray start` goes; a job that cannot
        work ends here, with nothing of Ray started anywhere."""
        me = self.me
        self.hellos = preflight.gather(me)
        if len(self.hellos) < me.comm.size - 1:
            raise WorkersMissing(_missing(me, {0, *self.hellos}, self.hellos), me.config.startup_timeout)
        preflight.judge(me, self.hellos)

    def collect_reports(self, head: NodeInfo, joins: Joins, live: progress.Progress) -> list[Report]:
        """Every worker's report, in rank order, handing out join slots as nodes join; names the missing
        ones at the startup timeout."""
        me = self.me
        reports: dict[int, Report] = {0: me.report(head)}
        hellos = self.hellos
        deadline = Deadline.since(me.started, me.config.startup_timeout)

        def grant() -> None:
            for rank in joins.grants():
                me.comm.send(head.node_id, rank, JOIN)
                me.log.event("join_granted", peer=rank, in_use=len(joins.granted), window=joins.window.size)

        grant()
        while len(reports) < me.comm.size:
            live.tick()
            message = me.comm.poll()
            if message is None:
                if deadline.expired():
                    raise WorkersMissing(_missing(me, reports, hellos), me.config.startup_timeout)
                me.raise_if_stopped()
                time.sleep(STARTUP_POLL)
                continue
            source, tag, payload = message
            if tag == SETTLED:  # a fast worker, done before the others joined
                self.settled_ranks.add(source)
            elif tag == REPORT:
                if payload.error:
                    raise WorkerFailed(payload.rank, payload.host, payload.error, payload.log, payload.exit_code,
                                       payload.cause)
                reports[source] = payload
                if payload.node_id:
                    me.log.event("worker_joined", peer=source, peer_host=payload.host, ip=payload.node_ip,
                                 node_id=payload.node_id, seconds=round(payload.seconds, 3),
                                 **resource_fields(payload.resources))
                else:
                    me.log.event("worker_idle", peer=source, peer_host=payload.host)
                joins.joined(source, started_a_node=bool(payload.node_id))
                grant()
        return [reports[r] for r in sorted(reports)]

    def announce(self, code: int) -> None:
        """The job's exit code, to every rank (teardown.py); this job's nodes off Prometheus's list first."""
        if self.targets_file is not None:
            try:
                self.targets_file.unlink(missing_ok=True)
            except OSError as error:  # the exit code goes out whatever befell the file
                self.me.log.event("metrics_targets_failed", path=str(self.targets_file), problem=str(error))
        self.me.comm.send_to_others(code, CONTROL)


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
        log_context(me, job_id)
        head_ip = network.head_address(config.interface, config.address_rule)
        if config.port and not network.port_is_free(config.port):
            raise PortInUse(f"--port {config.port} is already in use on {me.host}: pick another or use 0 (a free one)")
        share, ports = split_host_first(me, job_id, gcs_port=config.port)
        token = os.urandom(32).hex() if config.auth else None  # secrets.token_hex(32), without its imports
        if not config.auth:
            me.log.event("no_auth")
        me.session = Session(job_id, head_ip, f"{head_ip}:{ports.gcs}", token, me.started)
        me.session = dataclasses.replace(me.session, marker=preflight.make_marker(me))
        me.comm.send_to_others(me.session, SESSION)
        me.log.event("session_sent", workers=me.comm.size - 1, gcs_address=me.current_session.gcs_address)

        autoscaling = ""
        if config.autoscale and me.own_node.runs_ray:
            from mpiray.elastic.autoscale import Autoscale  # an elastic cluster's alone: off every rank's start

            self.autoscale = Autoscale(config, me.env.scheduler, own_node_count(config, me.comm.size, me.hosts), job_id,
                                       me.current_session.job_dir(config.log_dir), me.log)
            autoscaling = self.autoscale.write_config(share)
        start_node(me, share, ports, head=True, autoscaling_config=autoscaling)
        self.gather_hellos()  # before the head's `ray start` goes (its starter has loaded Ray by then)
        head = me.own_node.up(me, joins=False)
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

    def entry(self, cluster: Cluster) -> Entry:
        """What the registry says of this cluster: how to reach it (GCS, dashboard, Ray Client), what it runs,
        until when, and how big it is; no secret (the token lies beside it)."""
        from mpiray.elastic.registry import Entry

        me, session = self.me, cluster.session
        spec = me.node.spec if me.node is not None else None
        ours = versions(me.rank)
        image = preflight.image_facts(me) if me.config.container else None  # what `mpiray attach` must match
        if image is not None:
            ours = {"ray": image.ray, "python": image.python}
        return Entry(
            job_id=session.job_id, gcs_address=session.gcs_address, head_ip=session.head_ip, host=me.host,
            pid=os.getpid(), uid=os.getuid(), ray=ours["ray"], python=ours["python"],
            log_dir=str(cluster.log_dir.resolve()), started=me.started, heartbeat=time.time(),
            ends_at=self.batch_job.ends_at, scheduler=me.env.scheduler, nodes=len(cluster.nodes),
            cpus=float(cluster.total_cpus), gpus=float(cluster.total_gpus),
            dashboard_port=spec.ports.dashboard if spec is not None and me.config.dashboard else None,
            dashboard_host=dashboard_listen(me.config, spec.node_ip) if spec is not None else LOOPBACK,
            client_port=head_ports(spec).ray_client if spec is not None else None,
        )

    def drain(self, seconds: float, why: str) -> bool:
        """The workers' nodes drained through Ray (raynode/drain.py: reason preemption, the deadline in `seconds`),
        so Ray's libraries see the end coming while the driver still runs; the workers told first (DRAINING), as an
        idle node's raylet ends at once. The head's node is not drained: the driver connects through it. Waited for
        at most DRAIN_WAIT; a failure is only said. Whether Ray heard it."""
        me, cluster = self.me, self.cluster
        nodes = [r.node_id for r in cluster.nodes if r.rank != 0] if cluster is not None else []
        if cluster is None or not nodes:
            return False
        me.comm.send_to_others(why, DRAINING)
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
        node = self.me.node
        if node is None or not node.exited():
            return None
        return Lost("head_lost", {"code": node.exit_code(), "output": str(node.output_path), "cause": "head_lost"},
                    HEAD_LOST_EXIT)

    def tick(self) -> None:
        """While the leader runs: the registry's heartbeat."""
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


def own_node_count(config: Config, ranks: int, hosts: int | None) -> int:
    """The job's own Ray nodes, as --autoscale MIN:MAX counts them: one per rank, or one per host (--ray-node-per
    host: every rank counted the hosts in life.setup; hosts is None where some rank never did)."""
    count = ranks if config.ray_node_per == "rank" else hosts
    if count is None:
        raise StartupTimeout("the job's ranks did not all count their hosts within --startup-timeout: some rank "
                             "did not start (see the rank logs)")
    return count


def _missing(me: Rank, answered: Container[int], hellos: dict[int, Hello]) -> list[dict]:
    """The ranks not answered, for the startup_timeout event: where each is and logs, if its HELLO came."""
    unknown = Hello("", "", {}, [])
    return [{"rank": rank, "host": hellos.get(rank, unknown).host, "log": hellos.get(rank, unknown).log}
            for rank in range(me.comm.size) if rank not in answered]
