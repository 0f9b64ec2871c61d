"""The rank protocol, top-down: setup -> share the session -> start nodes -> verify -> (drive) -> finish.

Two front ends drive it: driver.run (the command line: the driver is a subprocess of rank 0) and
library.init (mpiray.init(): the driver is the calling script, in-process on rank 0).

Rank 0 sends the session (job id, head address, token) before its head is even up, so every worker
loads `ray start` (ray_node.py: ~1 s of imports) while the head starts. Each node's ray_node.py
watches the GCS until its own node is ALIVE and says so in the node's output, which the rank reads.
When the head is ALIVE, rank 0 hands out join slots (joins.py) and a worker lets its `ray start` go
when it gets one (JOIN): never more joins at once than the GCS and the hosts' CPUs take. Ray's own head
lookup then succeeds at its first try instead of sleeping 2 s. Each worker reports its verified
node; rank 0 drives and sends everyone the exit code. Whatever happens, each rank stops
exactly the processes it started, then all meet at a barrier and exit with the same code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from mpiray import commands, network, processes, progress, raycompat, resources, scheduler
from mpiray.config import Config
from mpiray.deadline import Deadline, poll_until
from mpiray.errors import ConfigError, Interrupted, LaunchError, StartupTimeout
from mpiray.gcs import NodeInfo
from mpiray.joins import Joins, JoinWindow
from mpiray.logs import RankLog, rank_log_path, ray_output_path, ray_session_logs_path
from mpiray.mpi import CONTROL, EVENT, HELLO, JOIN, LOCAL, REPORT, SESSION, SETTLED, STOPPED, Comm, library_version
from mpiray.node import NodeStartFailed, RayNode
from mpiray.progress import Progress
from mpiray.raycompat import ray_version
from mpiray.reports import Report, Session, check_versions, describe_resources, print_summary, versions
from mpiray.signals import StopRequest

JOIN_ATTEMPTS = 3  # a worker's `ray start`, when it fails as an overloaded GCS makes it fail
RAY_STOP_GRACE = 5.0  # the most a Ray node gets to stop in order: healthy ones take ~1 s
DRIVER_POLL = 0.2  # seconds between checks while the driver runs: ~0% CPU for waiting ranks
STARTUP_POLL = 0.02  # seconds between checks while nodes start (a file read or an MPI probe): on the critical path


class Shutdown(LaunchError):
    """Rank 0 told this rank to stop (the reason is in rank 0's log)."""


@dataclass
class Rank:
    """This rank's state, handed down the lifecycle functions."""

    config: Config
    comm: Comm
    host_comm: Comm  # the ranks on this host
    env: scheduler.Environment
    log: RankLog
    stop: StopRequest
    host: str
    started: float = field(default_factory=time.time)
    session: Session | None = None
    node: RayNode | None = None
    port_block: network.PortBlock | None = None  # the host's first rank: its ranks' ports, locked
    settled: bool = False  # a worker told rank 0 its `ray start` is done starting
    node_ranks: set[int] = field(default_factory=set)  # rank 0: the workers that run a Ray node
    settled_ranks: set[int] = field(default_factory=set)  # rank 0: ... whose `ray start` is done starting
    driver: subprocess.Popen | None = None
    view: resources.HostView | None = None
    all_met: bool = True  # every rank reached the last barrier (else MPI_Finalize would wait forever)

    @property
    def rank(self) -> int:
        return self.comm.rank

    def check(self) -> None:
        """Between polls: a stop signal or a message from rank 0 ends the wait."""
        self.stop.check()
        if self.rank != 0:
            message = self.comm.poll(0, CONTROL)
            if message is not None:
                raise Shutdown(f"rank 0 ended the job with exit code {message[2]}", message[2])


def setup(config: Config, comm: Comm | None = None) -> Rank:
    """This rank's state, before any rank waits on another: stop signals, MPI, its host's ranks."""
    stop = StopRequest()
    stop.install()
    processes.become_subreaper()
    comm = Comm() if comm is None else comm
    host = socket.gethostname()
    # A collective: every rank calls it first thing, before any rank can wait on another.
    host_comm = comm.split_by_host()
    me = Rank(config, comm, host_comm, scheduler.detect(), RankLog(comm.rank, host), stop, host)
    # What a rank sees of its host does not depend on the session: send it before waiting for one.
    me.view = resources.probe_host()
    if host_comm.rank != 0:
        host_comm.send(me.view, 0, LOCAL)
    return me


def outcome(me: Rank, step: Callable[[], int]) -> int:
    """step()'s exit code, or the one its failure maps to (said in the log; workers tell rank 0)."""
    comm = me.comm
    try:
        problem = scheduler.singleton_error(me.env, comm.size)
        if problem:
            raise LaunchError(problem)
        return step()
    except Shutdown as shutdown:
        me.log.step(str(shutdown))
        return shutdown.exit_code
    except Interrupted as interrupted:
        me.log.warning(f"stopping on signal {interrupted.signum}")
        return interrupted.exit_code
    except LaunchError as error:
        me.log.error(str(error))
        if me.rank != 0:  # tell rank 0 now rather than let it wait for the startup timeout
            comm.send(_report(me, error=str(error), exit_code=error.exit_code), 0, REPORT)
        return error.exit_code
    except Exception:
        me.log.error("unexpected failure:\n" + traceback.format_exc())
        if me.rank != 0:
            comm.send(_report(me, error="unexpected failure, see its log", exit_code=1), 0, REPORT)
        return 1


# ---- rank 0 ---------------------------------------------------------------------------------


def lead(me: Rank) -> list[Report]:
    """Rank 0: start the head, share the session, collect the workers' reports: the Ray nodes."""
    config = me.config
    job_id = config.job_id or scheduler.safe_job_id(scheduler.default_job_id(me.env))
    me.log.open(rank_log_path(config.log_dir, job_id, 0))
    _log_context(me)
    head_ip = network.head_address(config.interface)
    if config.port and not network.port_is_free(config.port):
        raise ConfigError(f"--port {config.port} is already in use on {me.host}: pick another or use 0 (a free one)")
    share, ports = plan_host(me, job_id, gcs_port=config.port)
    token = os.urandom(32).hex() if config.auth else None  # secrets.token_hex(32), without its imports
    if not config.auth:
        me.log.warning("--no-auth: anyone who can reach this cluster's ports can join it and run code")
    me.session = Session(job_id, head_ip, f"{head_ip}:{ports.gcs}", token, me.started)
    me.comm.send_to_others(me.session, SESSION)
    me.log.step(f"Session sent to {me.comm.size - 1} workers: head will be at {me.session.gcs_address}")

    spec = start_node(me, share, ports, head=True)
    if config.dry_run:
        head = planned_node(me, spec)
    else:
        me.node.release()
        head = wait_until_alive(me)
    me.log.step(f"Head started at: {me.session.gcs_address} (node {head.node_id[:12]}, {describe_resources(head)})")
    if me.node is not None:
        me.log.step(f"Ray node processes: pids {' '.join(map(str, me.node.pids()))}")

    live = Progress(progress.terminal(config.progress), me.comm.size, me.started)
    try:
        reports = collect_reports(me, head, Joins(list(range(1, me.comm.size)), JoinWindow(config.join_window)), live)
    finally:
        live.close()
    if not config.dry_run:  # the workers whose `ray start` the head must outlive
        me.node_ranks = {r.rank for r in reports if r.node_id and r.rank != 0}
    check_versions(reports)
    nodes = [r for r in reports if r.node_id]
    me.log.step(f"Workers are all running! ({len(reports) - 1} workers, {len(nodes)} Ray nodes)")
    print_summary(me.session.job_id, me.session.gcs_address, me.env.describe(), time.time() - me.started, reports)
    me.log.step("Ready to start driver!")
    return nodes


def collect_reports(me: Rank, head: NodeInfo, joins: Joins, live: Progress | None = None) -> list[Report]:
    """Every worker's report, in rank order, handing out join slots as nodes join; names the missing
    ones at the startup timeout. live: the terminal's start-up line."""
    live = live or Progress(None, 0, 0.0)
    reports: dict[int, Report] = {0: _report(me, head)}
    hellos: dict[int, dict] = {}
    deadline = Deadline.since(me.started, me.config.startup_timeout)

    def grant() -> None:
        for rank in joins.grants():
            me.comm.send(head.node_id, rank, JOIN)
            me.log.step(f"Join slot for rank {rank} ({len(joins.granted)} of a window of {joins.window.size} in use)")

    grant()
    while len(reports) < me.comm.size:
        live.update(len(reports), len(joins.granted))
        message = me.comm.poll()
        if message is None:
            if deadline.expired():
                raise StartupTimeout(_missing(me, reports, hellos))
            me.check()
            time.sleep(STARTUP_POLL)
            continue
        source, tag, payload = message
        if tag == HELLO:
            hellos[source] = payload
            me.log.step(f"Worker on rank {source} with host {payload['host']} is waiting for its node")
        elif tag == SETTLED:  # a fast worker, done before the others joined
            me.settled_ranks.add(source)
        elif tag == REPORT:
            if payload.error:
                raise LaunchError(
                    f"rank {source} on {payload.host} failed: {payload.error} (log: {payload.log})",
                    payload.exit_code or 1,
                )
            reports[source] = payload
            what = f"ip {payload.node_ip} is connected! ({describe_resources(payload)}, {payload.seconds:.1f} s)"
            if not payload.node_id:
                what = "idle: its host's Ray node runs on the host's first rank"
            me.log.step(f"Worker on rank {source} with {what}")
            joins.joined(source, started_a_node=bool(payload.node_id))
            grant()
    return [reports[r] for r in sorted(reports)]


def _missing(me: Rank, reports: dict, hellos: dict) -> str:
    lines = []
    for rank in range(me.comm.size):
        if rank in reports:
            continue
        if rank in hellos:
            lines.append(f"rank {rank} on {hellos[rank]['host']} (log: {hellos[rank]['log']})")
        else:
            lines.append(f"rank {rank} (never received the session; host unknown)")
    return (
        f"{len(lines)} worker(s) did not join within --startup-timeout "
        f"{me.config.startup_timeout:g} s: " + "; ".join(lines)
    )


# ---- ranks 1..N-1 -----------------------------------------------------------------------------


def serve(me: Rank) -> int:
    """A worker's whole job: its node, then idle until rank 0 sends the exit code."""
    follow(me)
    return wait_for_end(me)


def follow(me: Rank) -> None:
    """A worker: receive the session, start this rank's node (or idle), report to rank 0."""
    me.log.step("Waiting for broadcast...")
    session = me.comm.receive(0, SESSION, Deadline.after(me.config.startup_timeout), me.check)
    if session is None:
        raise StartupTimeout(f"no session from rank 0 within {me.config.startup_timeout:g} s")
    me.session = session
    me.log.open(rank_log_path(me.config.log_dir, session.job_id, me.rank))
    _log_context(me)
    me.comm.send({"host": me.host, "log": str(me.log.path)}, 0, HELLO)
    share, ports = plan_host(me, session.job_id)
    if share is None:
        me.log.step("Ray node per host: this host's first rank runs the node; this rank stays idle")
        me.comm.send(_report(me), 0, REPORT)
    else:
        spec = start_node(me, share, ports, head=False)
        me.log.step(f"Worker on rank {me.rank} with ip {spec.node_ip} will connect to {session.gcs_address}")
        wait_for_head(me)
        if me.config.dry_run:
            node = planned_node(me, spec)
        else:
            me.node.release()
            node = join(me)
        me.log.step(
            f"Worker on rank {me.rank} with ip {node.ip} is connected! "
            f"(node {node.node_id[:12]}, {describe_resources(node)})"
        )
        if me.node is not None:
            me.log.step(f"Ray node processes: pids {' '.join(map(str, me.node.pids()))}")
        me.comm.send(_report(me, node), 0, REPORT)


def wait_for_end(me: Rank) -> int:
    """Idle (sleeping between polls) until rank 0 sends the exit code."""
    reported_death = False
    give_up: Deadline | None = None  # after a stop signal: rank 0 has this long to send the code
    interval = STARTUP_POLL  # a driver that ends at once (or --dry-run) is heard of soon; a long one costs nothing
    while True:
        me.comm.poll(0, JOIN)  # an idle rank has no node to let go: drop its slot
        if me.node is not None and me.node.alive and not me.settled and me.node.ray_started():
            send_settled(me)
        message = me.comm.poll(0, CONTROL)
        if message is not None:
            me.log.step(f"Rank 0 ended the job with exit code {message[2]}")
            return message[2]
        if me.node is not None and me.node.exited() and not reported_death:
            reported_death = True
            what = f"its Ray node exited with code {me.node.exit_code()} (see {me.node.output_path})"
            if me.stop.signum is None:
                me.log.error(what)
                me.comm.send(what, 0, EVENT)
            else:  # the signal reached Ray's processes too: expected
                me.log.step(what)
        if me.stop.signum is not None:
            # Rank 0 got the same signal and is giving the driver its grace period: wait for it.
            give_up = give_up or Deadline.after(me.config.stop_grace + 10)
            if give_up.expired():
                raise Interrupted(me.stop.signum)
        time.sleep(interval)
        interval = min(DRIVER_POLL, interval * 1.5)


# ---- both ---------------------------------------------------------------------------------------


def plan_host(me: Rank, job_id: str, gcs_port: int = 0):
    """Split this host among its ranks: (share, ports) for this rank, (None, None) if it idles."""
    host_comm = me.host_comm
    deadline = Deadline.after(me.config.startup_timeout)
    if host_comm.rank == 0:
        others = host_comm.receive_each(list(range(1, host_comm.size)), LOCAL, deadline, me.check)
        if len(others) < host_comm.size - 1:
            raise StartupTimeout(f"ranks on {me.host} did not report their view of the host")
        views = [me.view] + [others[r] for r in range(1, host_comm.size)]
        plans = _plan_for(me, views, job_id, gcs_port)
        for local, plan in enumerate(plans[1:], start=1):
            host_comm.send(plan, local, LOCAL)
        plan = plans[0]
    else:
        plan = host_comm.receive(0, LOCAL, deadline, me.check)
        if plan is None:
            raise StartupTimeout(f"the first rank on {me.host} did not send this host's plan")
    host_comm.flush(5)
    if isinstance(plan, str):
        raise ConfigError(plan)
    return plan


def _plan_for(me: Rank, views: list, job_id: str, gcs_port: int) -> list:
    """The local leader's plan for every rank of the host: (Share, NodePorts), None, or an error."""
    config = me.config
    nodes = 1 if config.ray_node_per == "host" else len(views)
    problem = resources.check_object_store(config.object_store_memory, views[0], nodes)
    if problem:
        return [problem] * len(views)
    try:
        take = network.planned_block if config.dry_run else network.free_block
        me.port_block = take(job_id, nodes, reserved=gcs_port)
    except ConfigError as error:
        return [str(error)] * len(views)
    for note in me.port_block.notes:
        me.log.step(f"Ports: {note}")
    return resources.plan_host(config, views, me.port_block.base, gcs_port, me.rank == 0, me.env.cpus_per_task)


def start_node(me: Rank, share: resources.Share, ports: network.NodePorts, head: bool) -> commands.NodeSpec:
    """Prepare this rank's Ray node and start its `ray start` (held until released); --dry-run: only say so."""
    config, session = me.config, me.session
    if config.dry_run:
        ray_dir = config.temp_dir / f"mpiray-{os.getuid()}-r{me.rank}-XXXXXX" / "ray"  # as it would be named
    else:
        me.node = RayNode.prepare(
            config.temp_dir, f"r{me.rank}",
            output_path=ray_output_path(config.log_dir, session.job_id, me.rank),
            kept_logs=ray_session_logs_path(config.log_dir, session.job_id, me.rank),
            token=session.token,
        )
        ray_dir = me.node.ray_dir
        if me.node.swept:
            me.log.step(f"Removed {len(me.node.swept)} private dir(s) of this user's ranks that were killed before "
                        f"they could (their job step was SIGKILLed): {' '.join(map(str, me.node.swept))}")
    node_ip = session.head_ip if head else network.worker_address(config.interface, session.head_ip)
    spec = commands.NodeSpec(node_ip, str(ray_dir), share, ports, f"{me.host}-rank{me.rank}")
    ray = commands.ray_command(niced_import=not head)  # the head's start comes first on a shared host
    argv = commands.head_command(ray, spec, dashboard=config.dashboard, metrics=config.metrics) if head else \
        commands.worker_command(ray, spec, session.gcs_address)
    for note in share.notes:
        me.log.step(f"Resources: {note}")
    me.log.step(
        f"Resources given to Ray: {share.cpus} CPUs, GPUs [{','.join(share.gpu_ids)}], "
        f"memory {share.memory >> 20} MiB, object store {share.object_store >> 20} MiB"
    )
    me.log.step(f"Ports: block {ports.node_manager - 1}-{ports.max_worker}" + (f", GCS {ports.gcs}" if head else ""))
    if config.dry_run:
        me.log.step(f"Dry run: would start Ray {'head' if head else 'worker'} node: {' '.join(argv)}")
        return spec
    me.log.step(f"Private dir (0700, token and Ray's temp dir): {me.node.private.path}")
    me.log.step(f"Starting Ray {'head' if head else 'worker'} node: {' '.join(argv)}")
    me.log.step(f"Ray output: {me.node.output_path}; Ray session logs kept in {me.node.kept_logs} at the end")
    env = commands.node_env(
        dict(os.environ), share.gpu_ids, str(me.node.token_path) if me.node.token_path else None,
        dashboard_metrics_port=commands.head_ports(spec).dashboard_metrics if head and config.dashboard else None,
    )
    # A joining `ray start` gives up after this many ~1-2 s retries (default 20): let it wait as long
    # as --startup-timeout says instead.
    env["RAY_NUM_REDIS_GET_RETRIES"] = str(max(20, int(config.startup_timeout / 2) + 1))
    me.node.start(argv, env, share.affinity)
    if head and config.dashboard:
        me.log.step(
            f"Dashboard on 127.0.0.1:{ports.dashboard}; from your machine: "
            f"ssh -L 8265:127.0.0.1:{ports.dashboard} {me.host}, then open http://localhost:8265"
        )
    return spec


def planned_node(me: Rank, spec: commands.NodeSpec) -> NodeInfo:
    """--dry-run: the node this rank would have started, as if the GCS showed it."""
    share = spec.share
    return NodeInfo(f"dry-run-{me.rank}", spec.node_ip, spec.node_name, spec.temp_dir,
                    {"CPU": float(share.cpus), "GPU": float(len(share.gpu_ids)), "memory": float(share.memory)})


def wait_for_head(me: Rank) -> None:
    """Until rank 0 gives this rank a join slot: the head is ALIVE, and few enough nodes are joining
    (this rank's `ray start` failing, or rank 0 stopping the job, end the wait too)."""

    def between() -> None:
        if me.node is not None:
            me.node.check_running()
        me.check()

    if poll_until(lambda: me.comm.poll(0, JOIN), Deadline.since(me.session.started, me.config.startup_timeout),
                  STARTUP_POLL, between) is None:
        raise StartupTimeout(f"rank 0 gave this rank no join slot within --startup-timeout {me.config.startup_timeout:g} s "
                             f"(its head was not up, or the nodes before it took that long to join)")


def join(me: Rank) -> NodeInfo:
    """This worker's node ALIVE: a `ray start` that failed as an overloaded GCS makes it fail (Ray gives a
    raylet 30 s to register) is started again while the head is up, at most JOIN_ATTEMPTS times."""
    for attempt in range(1, JOIN_ATTEMPTS + 1):
        try:
            return wait_until_alive(me)
        except NodeStartFailed as failure:
            if attempt == JOIN_ATTEMPTS or not failure.retryable or not gcs_answers(me.session.gcs_address):
                raise
            me.log.warning(f"{failure}; the head is up: starting this rank's node again "
                           f"(attempt {attempt + 1} of {JOIN_ATTEMPTS})")
            me.node.restart(RAY_STOP_GRACE)


def gcs_answers(address: str, timeout: float = 2.0) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return True
    except OSError:
        return False


def wait_until_alive(me: Rank) -> NodeInfo:
    deadline = Deadline.since(me.session.started, me.config.startup_timeout)
    node = me.node.wait_alive(deadline, me.check, me.session.gcs_address, me.config.startup_timeout)
    for note in me.node.output.compat.values():  # said before the node's ALIVE line, so all here now
        me.log.step(f"Ray compatibility: {note}")
    return node


def send_settled(me: Rank) -> None:
    me.comm.send(None, 0, SETTLED)
    me.settled = True


def wait_for_settled(me: Rank) -> None:
    """Rank 0, before stopping the head: until every worker's `ray start` is done starting.

    A worker's node is ALIVE, and the driver may run, ~0.3-0.9 s before its `ray start` is done; if
    the head's GCS went away in between, that `ray start` would hang and its node need SIGKILL.
    Usually every SETTLED message arrived while the driver ran.
    """

    def all_settled() -> bool:
        message = me.comm.poll(tag=SETTLED)
        if message is not None:
            me.settled_ranks.add(message[0])
        return not me.node_ranks - me.settled_ranks

    if not poll_until(all_settled, Deadline.after(RAY_STOP_GRACE + 1), STARTUP_POLL):
        starting = sorted(me.node_ranks - me.settled_ranks)
        me.log.warning(f"stopping the head although ranks {starting} did not say their `ray start` is done")


def wait_for_stopped(me: Rank) -> None:
    """Rank 0, before stopping the head: until every worker's Ray node has stopped.

    Where Ray does not drain a node it stops (before 2.57, raycompat.check_stop_order), a worker's
    raylet stopped while the head stops waits for the GCS and needed SIGKILL 5 s later; with the GCS
    up, workers stop in order in ~0.4 s.
    """
    stopped: set[int] = set()

    def all_stopped() -> bool:
        while (message := me.comm.poll(tag=STOPPED)) is not None:
            stopped.add(message[0])
        return not me.node_ranks - stopped

    if not poll_until(all_stopped, Deadline.after(RAY_STOP_GRACE + 1), STARTUP_POLL):
        me.log.warning(f"stopping the head although ranks {sorted(me.node_ranks - stopped)} did not say "
                       f"their Ray node stopped")


def _head_stops_last(me: Rank) -> bool:
    """On a normal end, with a Ray that does not drain a node it stops (this rank's node said so; every
    rank runs the same Ray): rank 0 waits for the workers' STOPPED, which they send."""
    return (me.stop.signum is None and me.node is not None and me.node.alive
            and raycompat.DRAIN_ON_STOP in me.node.output.compat)


def finish(me: Rank, code: int) -> int:
    """Stop the driver and this rank's Ray, keep the logs, meet the other ranks, return the code.

    Every step runs whatever an earlier one did; a failed step is logged and never changes the code.
    """
    config = me.config
    # A healthy node stops in order in ~1 s; one that does not (GCS lost, or scancel already
    # signalled raylet, which then hangs on SIGTERM) will not, so Ray gets less than the driver.
    grace = min(config.stop_grace, RAY_STOP_GRACE if me.stop.signum is None else 2.0)
    steps = [
        ("tell the other ranks", lambda: me.comm.send_to_others(code, CONTROL) if me.rank == 0 else None),
        ("stop the driver", lambda: _stop_driver(me)),
        ("let `ray start` finish starting", lambda: _settle(me)),
        ("wait for the workers' `ray start`", lambda: wait_for_settled(me) if me.rank == 0 and me.stop.signum is None else None),
        ("wait for the workers' Ray nodes to stop",
         lambda: wait_for_stopped(me) if me.rank == 0 and _head_stops_last(me) else None),
        ("stop this rank's Ray node", lambda: _stop_node(me, grace)),
        ("tell rank 0 this rank's Ray node stopped",
         lambda: me.comm.send(None, 0, STOPPED) if me.rank != 0 and _head_stops_last(me) else None),
        ("keep Ray's logs and remove the private dir", lambda: _close_node(me)),
        ("release the host's port block", lambda: me.port_block.release() if me.port_block else None),
        ("send the last messages", lambda: me.comm.flush(5)),
        ("meet the other ranks", lambda: _meet(me)),
        ("drop the messages this rank never read", lambda: _drain(me)),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as error:
            me.log.error(f"teardown: could not {what}: {error!r} (continuing)")
    me.log.step(f"MPI messages of this rank: {me.comm.sent + me.host_comm.sent} sent, "
                f"{me.comm.received + me.host_comm.received} received")
    me.log.step(f"Exit code {code}")
    # Never learned the job id: under srun without PMI every task is "rank 0", so use the task rank.
    job_id = config.job_id or me.env.job_id or "unknown-job"
    rank = me.env.task_rank if me.comm.size == 1 and me.env.task_rank is not None else me.rank
    me.log.close(rank_log_path(config.log_dir, job_id, rank))
    return code


def _meet(me: Rank) -> None:
    me.all_met = me.comm.barrier(me.config.stop_grace + 30)
    if not me.all_met:
        me.log.warning("not every rank reached the end (one may have died): exiting anyway")


def _drain(me: Rank) -> None:
    # Every message for this rank was sent before the barrier. One left unread makes MPICH's
    # MPI_Finalize fail before its PMI barrier, where all the other ranks would then wait forever.
    dropped = me.comm.drain() + me.host_comm.drain()
    if dropped:
        me.log.step(f"Dropped {dropped} MPI messages this rank never read")


def _stop_driver(me: Rank) -> None:
    if me.driver is not None and me.driver.poll() is None:
        if processes.stop_group(me.driver, me.config.stop_grace) is None:
            me.log.error(f"the driver (pid {me.driver.pid}) did not end even after SIGKILL")


def _settle(me: Rank) -> None:
    if me.node is not None and me.node.alive and me.stop.signum is None:
        me.node.settle(Deadline.after(RAY_STOP_GRACE))
        if me.rank != 0 and not me.settled:
            send_settled(me)


def _stop_node(me: Rank, grace: float) -> None:
    if me.node is None:
        return
    report = me.node.stop(grace)
    if report.pids:
        me.log.step(
            f"Stopped {len(report.pids)} processes this rank started in {report.seconds:.1f} s "
            f"({report.killed} needed SIGKILL): pids {' '.join(map(str, report.pids))}"
        )


def _close_node(me: Rank) -> None:
    if me.node is None:
        return
    for problem in me.node.close():
        me.log.error(f"teardown: {problem}")
    if me.node.kept is not None:
        me.log.step(f"Ray's session logs kept in {me.node.kept}")


def _report(me: Rank, node: NodeInfo | None = None, error: str = "", exit_code: int = 0) -> Report:
    return Report(
        rank=me.rank,
        host=me.host,
        log=str(me.log.path or ""),
        node_ip=node.ip if node else "",
        node_id=node.node_id if node else "",
        resources=node.resources if node else {},
        seconds=time.time() - (me.session.started if me.session else me.started),
        versions=versions(me.rank),
        error=error,
        exit_code=exit_code,
    )


def _log_context(me: Rank) -> None:
    me.log.step(
        f"mpiray on {me.host} (pid {os.getpid()}): rank {me.rank} of {me.comm.size}, {me.env.describe()}, "
        f"{library_version()}, Ray {ray_version()}, Python {sys.version.split()[0]}"
    )
