"""Rank 0's role, the one contract: what rank 0 does whoever's cluster its job's nodes make (RankZero), with
what differs left to Head (a cluster of this job's own, head.py) and Joiner (this job's nodes in another
job's cluster, joiner.py). life.drive and life.watch drive it; teardown.finish ends it (state.Role)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Container

from mpiray.deadline import Deadline
from mpiray.errors import ConfigError, WorkerFailed, WorkersMissing
from mpiray.logs import progress
from mpiray.rank import linkcheck, preflight, spares
from mpiray.rank.batchjob import BatchJob, read_batch_job
from mpiray.rank.knock import PortWatch
from mpiray.rank.messages import (
    CONTROL,
    EVENT,
    HOST_LOST,
    JOIN,
    REPORT,
    SETTLED,
    VERDICT,
    Cluster,
    Hello,
    NodeExited,
    Report,
    Verdict,
    print_summary,
    resource_fields,
)
from mpiray.rank.nodestart import driver_gpu_variables
from mpiray.rank.slots import Joins, JoinWindow
from mpiray.rank.state import Lost, Rank
from mpiray.rank.timings import STARTUP_POLL
from mpiray.raynode import labels
from mpiray.raynode.gcs import NodeInfo

# How long a worker whose node died takes to say so (EVENT: its wait loop looks every DRIVER_POLL s), at most: a port
# unanswered once (a knock before a message goes out) is its host's loss only past that.
EVENT_GRACE = 1.0


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
        self.spares = spares.Spares(me, [])  # --spares: the hosts that wait, started as nodes are lost
        self.watches: dict[int, PortWatch] = {}  # each worker's raylet, knocked on while the job runs (knock.py)
        self.judging = False  # unheard() is judging the ports that did not answer

    def start_own(self) -> NodeInfo:
        """This rank's own node ALIVE, the session sent to every worker on the way."""
        raise NotImplementedError

    def cluster_up(self, cluster: Cluster, own: NodeInfo) -> None:
        """The cluster is up (not a planned one): say so where others look (the registry)."""
        raise NotImplementedError

    def tick(self) -> None:
        """While the leader runs: keep what needs keeping (the registry's heartbeat)."""
        raise NotImplementedError

    def lost(self) -> Lost | None:
        """The cluster's heart stopped: how, or None while it beats."""
        raise NotImplementedError

    def before_stopping_node(self, head_stops_last: bool) -> None:
        """Wait for what must happen before this rank's Ray node stops (teardown.finish)."""
        raise NotImplementedError

    def after_stopping_node(self, head_stops_last: bool) -> None:
        """Say or undo what must follow this rank's Ray node's stop (teardown.finish)."""
        raise NotImplementedError

    def drain(self, seconds: float, why: str) -> bool:
        """Tell Ray that this job's nodes go in `seconds`, before anything is stopped; whether Ray heard it. A
        joined job's nodes: each `ray start` drains its own node when teardown stops it (Ray 2.57+)."""
        return False

    def lead(self) -> Cluster:
        """The cluster up: this rank's own node first (start_own), then every worker's report."""
        me, config = self.me, self.me.config
        role_problem = labels.roles_problem(config.role, me.comm.size)  # the job's size: known only now
        if role_problem:
            raise ConfigError(role_problem)
        own = self.start_own()
        me.log.event(self.own_alive_event, gcs_address=me.current_session.gcs_address, ip=own.ip, node_id=own.node_id,
                     **resource_fields(own.resources))
        if me.own_node.runs_ray:
            me.log.event("node_pids", pids=me.own_node.pids())

        live = progress.Progress(progress.terminal(config.progress), me.comm.size, me.started)
        me.log.listeners.append(live.on_event)
        try:
            reports = self.collect_reports(own, Joins(list(range(1, me.comm.size)), JoinWindow(config.join_window)),
                                           live)
        finally:
            me.log.listeners.remove(live.on_event)
            live.close()
        nodes = tuple(r for r in reports if r.node_id)
        token_path, private_dir = me.own_node.access()
        cluster = Cluster(session=me.current_session, nodes=nodes, log_dir=me.current_session.job_dir(config.log_dir),
                          token_path=token_path, stop_grace=config.stop_grace, private_dir=private_dir,
                          driver_gpus=driver_gpu_variables(me.view))
        me.log.event("cluster_ready", workers=len(reports) - 1, nodes=len(nodes), cpus=cluster.total_cpus,
                     gpus=cluster.total_gpus, seconds=round(time.time() - me.started, 3))
        session = me.current_session
        print_summary(session.job_id, session.gcs_address, me.env.describe(), time.time() - me.started, reports=reports)
        if me.own_node.runs_ray:  # a planned cluster (--dry-run) has nothing to wait for, read or publish
            self.node_ranks = {r.rank for r in reports if r.node_id and r.rank != 0}
            self.knock_on(reports)
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
        if clash := preflight.hostname_clash(me, self.hellos):
            linkcheck.release(me, self.hellos)  # the hosts that listen wait for their PROBE
            raise ConfigError(clash)
        slow = linkcheck.check(me, self.hellos)
        judged = preflight.judge(me, self.hellos, slow)
        config = me.config
        chosen = spares.choose(self.hellos, me.host, judged.left_out, config.spares)
        if config.spares:
            spares.check(config.spares, hosts=judged.hosts, nodes_left=judged.nodes,
                         nodes_per_spare=[len(ranks) if config.ray_node_per == "rank" else 1 for ranks in chosen],
                         min_nodes=config.min_nodes or min(2, judged.requested))
            me.log.event("spares_chosen", hosts=", ".join(self.hellos[ranks[0]].host for ranks in chosen),
                         ranks=[rank for ranks in chosen for rank in ranks])
        self.spares = spares.Spares(me, chosen)
        spare_ranks = {rank for ranks in chosen for rank in ranks}
        for rank, hello in sorted(self.hellos.items()):  # the host's first ranks that wait to split their hosts
            if hello.waits:
                refused = slow.get(hello.host, [])
                me.comm.send(Verdict(refused[0].message if refused else "", rank in spare_ranks), rank, VERDICT)

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
                    raise WorkerFailed(payload.rank, payload.host, payload.error, payload.log, exit_code=payload.exit_code,
                                       cause=payload.cause)
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

    def node_lost(self, rank: int, exited: NodeExited) -> None:
        """A worker's Ray node was lost while the job runs (its rank lives): a spare host starts, if one waits. Its
        host is knocked on at its rank's Beacon from now (its raylet's port closed with its node)."""
        watched = self.watches.get(rank)
        self.unwatch(rank)  # its port closed with its node: that is not its host's loss
        if watched is not None and exited.knock_port:
            self.watch(rank, watched.address.rsplit(":", 1)[0], exited.knock_port)
        self.me.log.event("node_lost", peer=rank, message=exited.message)
        self.start_spare(rank)

    def start_spare(self, rank: int) -> None:
        """The next spare host that is still there started in place of rank's node; its Beacon then closes, and its
        raylet is knocked on once it reports (spare_reports)."""
        self.unheard()  # a spare host gone meanwhile is forgotten, never sent ACTIVATE
        for started in self.spares.node_lost(rank):
            self.unwatch(started)

    def spare_reports(self) -> None:
        """The started spares' reports: a node that joined is one of the job's (teardown waits for it)."""
        while (message := self.me.comm.poll(tag=REPORT)) is not None:
            if self.spares.reported(message.payload):
                self.node_ranks.add(message.source)
                self.knock_on([message.payload])

    def knock_on(self, reports: list[Report]) -> None:
        """Watch these workers' raylets (or a waiting spare's Beacon) while the job runs: a host whose processes all
        died sends no EVENT."""
        for report in reports:
            if report.rank != 0 and report.knock_port:
                self.watch(report.rank, report.node_ip, report.knock_port)

    def watch(self, rank: int, ip: str, port: int) -> None:
        """Knock on rank's host at ip:port from now. It listened when its rank said so (a node ALIVE, a Beacon open):
        a host that dies before the first knock counts too (armed)."""
        self.watches[rank] = PortWatch(f"{ip}:{port}", armed=True)

    def unwatch(self, rank: int) -> None:
        """No more knocks on rank's host (its knock under way closed)."""
        if (watch := self.watches.pop(rank, None)) is not None:
            watch.close()

    def hosts_lost(self) -> None:
        """Each worker host found gone since the last look: a raylet unanswered for knock.SILENT_FOR s whose rank
        said nothing of it (its host powered off, crashed, or cut off)."""
        for rank, watch in list(self.watches.items()):
            if rank in self.watches and (silent := watch.silent()) is not None:
                self.host_lost(rank, watch.address, silent)

    def hear_events(self) -> None:
        """What the workers said while the job runs: a Ray node lost while its rank lives (EVENT)."""
        while (event := self.me.comm.poll(tag=EVENT)) is not None:
            self.node_lost(event.source, event.payload)

    def unheard(self) -> set[int]:
        """The ranks no message may go to now: those of the hosts gone, each watched port knocked on once more first
        (a host may have died since the last knock: a send to its rank would hold this rank for good). A port that
        does not answer is its host's loss only if its rank has not said within EVENT_GRACE that its node died."""
        if self.judging:  # asked again while it judges (node_lost starts a spare): the answer comes from there
            return self.me.gone
        self.judging = True
        try:
            silent = [rank for rank, watch in list(self.watches.items()) if not watch.answers_now()]
            deadline = Deadline.after(EVENT_GRACE if silent else 0)
            while not deadline.expired():
                self.hear_events()
                time.sleep(STARTUP_POLL)
            self.hear_events()
            for rank in silent:
                if rank in self.watches:
                    self.host_lost(rank, self.watches[rank].address, self.watches[rank].silence())
        finally:
            self.judging = False
        return self.me.gone

    def host_lost(self, rank: int, address: str, silent: float) -> None:
        """A worker host is gone, with every rank on it: nothing is sent to them or waited for any more (no last
        barrier with them, no MPI_Finalize: each rank still heard is told), and a spare host starts in its place (a
        waiting spare's host that is gone is forgotten instead)."""
        me = self.me
        host = self.hellos[rank].host if rank in self.hellos else ""
        ranks = sorted(r for r, hello in self.hellos.items() if hello.host == host) or [rank]
        me.peer_gone(ranks)
        self.node_ranks.difference_update(ranks)
        for lost in ranks:
            self.unwatch(lost)
        spare = self.spares.waits(rank)
        fields = {"peer_host": host, "ranks": ranks, "address": address, "silent": round(silent, 1), "spare": spare}
        me.log.event("host_lost", **fields)
        me.comm.send_to_others(fields, HOST_LOST, skip=self.unheard())  # another host may have gone with it
        if spare:
            self.spares.forget(ranks)
        else:
            self.start_spare(rank)

    def announce(self, code: int) -> None:
        """The job's exit code, to every rank (teardown.py); this job's nodes off Prometheus's list first."""
        if self.targets_file is not None:
            try:
                self.targets_file.unlink(missing_ok=True)
            except OSError as error:  # the exit code goes out whatever befell the file
                self.me.log.event("metrics_targets_failed", path=str(self.targets_file), problem=str(error))
        self.me.comm.send_to_others(code, CONTROL, skip=self.unheard())


def _missing(me: Rank, answered: Container[int], hellos: dict[int, Hello]) -> list[dict]:
    """The ranks not answered, for the startup_timeout event: where each is and logs, if its HELLO came."""
    unknown = Hello("", "", {}, [])
    return [{"rank": rank, "host": hellos.get(rank, unknown).host, "log": hellos.get(rank, unknown).log}
            for rank in range(me.comm.size) if rank not in answered]
