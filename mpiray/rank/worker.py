"""The rank protocol, every other rank's side: receive the session, start this rank's node (or idle),
report, then wait for rank 0's exit code, telling rank 0 if the node dies meanwhile (see head.py).

A head whose host dies sends no exit code: each host's first rank knocks on the head's GCS port meanwhile
(PortWatch) and, once it has stayed unanswered longer than a GCS restart takes, ends its host's ranks with 1.
"""

from __future__ import annotations

import dataclasses
import time

from mpiray.deadline import Deadline, poll_until
from mpiray.errors import Interrupted, LaunchError, Shutdown, StartupTimeout
from mpiray.host import network
from mpiray.rank import linkcheck, preflight
from mpiray.rank.hostsplit import split_host
from mpiray.rank.knock import Beacon, PortWatch
from mpiray.rank.messages import (
    ACTIVATE,
    CONTROL,
    DRAINING,
    EVENT,
    HEAD_GONE,
    HELLO,
    HOST_LOST,
    JOIN,
    REPORT,
    SESSION,
    SETTLED,
    STOPPED,
    VERDICT,
    HostPlan,
    Idle,
    Message,
    NodeExited,
    Report,
    Verdict,
    resource_fields,
)
from mpiray.rank.nodestart import start_node
from mpiray.rank.state import Rank
from mpiray.rank.timings import DRIVER_POLL, HEAD_LOST_EXIT, RAY_STOP_GRACE, STARTUP_POLL


class Worker:
    """Every other rank: receive the session, start this rank's node (or idle), report, wait for the end."""

    def __init__(self, me: Rank):
        self.me = me
        self.settled = False  # told rank 0 that its `ray start` is done starting
        self.draining = False  # rank 0 told it that Ray drains its node (the walltime): its end is no loss
        self.spare = False  # its host waits as a spare (--spares) until rank 0's ACTIVATE
        self.beacon: Beacon | None = None  # while its host waits as a spare: where rank 0 knocks (knock.py)

    def serve(self) -> int:
        self.follow()
        return self.wait_for_end()

    def follow(self) -> None:
        me = self.me
        me.log.event("waiting_for_session")
        session = me.comm.receive(0, SESSION, Deadline.after(me.config.startup_timeout), me.raise_if_stopped)
        if session is None:
            raise StartupTimeout(f"no session from rank 0 within {me.config.startup_timeout:g} s")
        me.enter(session)
        me.log.open(session.job_dir(me.config.log_dir), prefix=session.prefix)
        me.log_started()
        # Its host's first rank: the link check's, and rank 0's verdict on the host (--spares too) before it splits it.
        listener = linkcheck.listen(me)
        waits = listener is not None or (me.config.spares > 0 and me.host_comm.rank == 0)
        try:
            hello = preflight.hello(me, listener.address if listener else "", waits)  # what it runs, what its host has
            me.comm.send(hello, 0, HELLO)
            if listener is not None:
                linkcheck.take_part(me, listener)
        finally:
            if listener is not None:
                listener.close()
        verdict = Verdict(preflight.refusal(hello.findings))
        if waits:
            said = me.comm.receive(0, VERDICT, Deadline.since(session.started, me.config.startup_timeout),
                                   me.raise_if_stopped)
            if said is None:
                raise StartupTimeout(f"rank 0 sent no pre-flight verdict within --startup-timeout "
                                     f"{me.config.startup_timeout:g} s")
            verdict = Verdict(verdict.refused or said.refused, said.spare)
        # A host the pre-flight refuses starts no Ray: rank 0 excludes it (--bad-nodes exclude) or ends the job.
        plan = split_host(me, session.ports_job_id, refused=verdict.refused, spare=verdict.spare)
        if isinstance(plan, Idle) and plan.spare:  # its node starts when rank 0 says (ACTIVATE: wait_for_end)
            self.spare = True
            me.log.event("spare_waiting")
            me.comm.send(self.waiting_report(), 0, REPORT)
            return
        if isinstance(plan, Idle):  # one Ray node per host, not this rank's; or a refused host
            me.go_idle()
            if plan.excluded:
                me.log.event("host_refused", why=plan.excluded)
            else:
                me.log.event("idle_by_design")
            me.comm.send(me.report(), 0, REPORT)
            return
        self.start(plan, joins_now=False)

    def waiting_report(self) -> Report:
        """A spare's report while it waits: where rank 0 may knock on its host (its first rank's Beacon, on the
        address its node will advertise), so that rank 0 never sends to a spare whose host is gone."""
        me = self.me
        if me.host_comm.rank != 0 or me.config.dry_run:
            return me.report()
        beacon = self.listen_for_knocks()
        return dataclasses.replace(me.report(), node_ip=beacon.ip, knock_port=beacon.port) if beacon else me.report()

    def listen_for_knocks(self) -> Beacon | None:
        """A Beacon for rank 0's knocks on this host, on the address its node advertises (or will), where that node
        has no raylet port (a spare that waits, a node that exited); None where it cannot listen (said in the log)."""
        me = self.me
        ip = network.worker_address(me.config.interface, me.current_session.head_ip, me.config.address_rule)
        try:
            self.beacon = Beacon(ip)
        except OSError as error:
            me.log.event("beacon_failed", problem=f"cannot listen on {ip}: {error}")
            return None
        return self.beacon

    def start(self, plan: HostPlan, joins_now: bool) -> None:
        """This rank's node started, ALIVE and reported; joins_now: a spare's, whose head is up (no join slot)."""
        me = self.me
        spec = start_node(me, plan.share, plan.ports, head=False)
        me.log.event("worker_will_connect", ip=spec.node_ip, gcs_address=me.current_session.gcs_address)
        if not joins_now:
            wait_for_head(me)
        node = me.own_node.up(joins=True, between=me.raise_if_stopped)
        me.log.event("node_alive", ip=node.ip, node_id=node.node_id, **resource_fields(node.resources))
        if me.own_node.runs_ray:
            me.log.event("node_pids", pids=me.own_node.pids())
        me.comm.send(me.report(node), 0, REPORT)

    def activate(self) -> None:
        """A spare's start (ACTIVATE): its host split among its ranks (every one of them got ACTIVATE), its node
        started and joined; a failure is reported, and the job goes on. Its start-up deadline counts from now."""
        me = self.me
        self.spare = False
        if self.beacon is not None:  # rank 0 knocks on its node's raylet from now
            self.beacon.close()
            self.beacon = None
        me.log.event("spare_started")
        me.enter(dataclasses.replace(me.current_session, started=time.time()))
        try:
            plan = split_host(me, me.current_session.ports_job_id)
            if isinstance(plan, Idle):
                me.go_idle()
                me.log.event("idle_by_design")
                me.comm.send(me.report(), 0, REPORT)
                return
            self.start(plan, joins_now=True)
        except (Interrupted, Shutdown):
            raise  # a stop signal, or rank 0 ended the job meanwhile: this rank's end, as at the start
        except LaunchError as error:
            me.log.event("spare_failed", message=str(error))
            me.own_node.stop(RAY_STOP_GRACE)  # what it started of its node: the job goes on without it
            me.comm.send(me.report(error=str(error), exit_code=error.exit_code, cause=error.cause), 0, REPORT)

    def wait_for_end(self) -> int:
        """Idle (sleeping between polls) until rank 0 sends the exit code."""
        me = self.me
        reported_death = False
        give_up: Deadline | None = None  # after a stop signal: rank 0 has this long to send the code
        interval = STARTUP_POLL  # a driver that ends at once (or --dry-run) is heard of soon; a long one costs nothing
        watch = self.head_watch()
        while True:
            if (code := self.head_gone(watch)) is not None:
                return code
            # One probe for whatever rank 0 sent meanwhile, in the order it sent it (HOST_LOST before CONTROL): each
            # probe drives MPICH's progress engine, slow once a peer is gone (the head's host: its HEAD_GONE waits).
            while (message := me.comm.poll(0)) is not None:
                if (code := self.hear(message)) is not None:
                    return code
            if self.beacon is not None:
                self.beacon.take()
            if not self.settled and me.own_node.describe_once_started():
                self.send_settled()
            if not reported_death and (fields := me.own_node.ended()) is not None:
                reported_death = True
                if self.draining:
                    me.log.event("node_drained", **fields)
                    me.own_node.stop(RAY_STOP_GRACE)
                elif me.stop.signum is None:
                    me.log.event("own_node_exited", **fields)
                    beacon = self.beacon or self.listen_for_knocks()
                    me.comm.send(NodeExited(f"its Ray node exited with code {fields['code']} (see {fields['output']})",
                                            beacon.port if beacon else 0), 0, EVENT)
                    # What its raylet left (workers, a learner) is no node's any more, but it can hold the others'
                    # collectives: a learner whose raylet died kept its gloo peers waiting (torch's 30 min).
                    me.own_node.stop(RAY_STOP_GRACE)
                else:  # the signal reached Ray's processes too: expected
                    me.log.event("node_exited_on_signal", **fields)
            if me.stop.signum is not None:
                # Rank 0 got the same signal and is giving the driver its grace period: wait for it.
                give_up = give_up or Deadline.after(me.config.stop_grace + 10)
                if give_up.expired():
                    raise Interrupted(me.stop.signum)
            time.sleep(interval)
            interval = min(DRIVER_POLL, interval * 1.5)

    def hear(self, message: Message) -> int | None:
        """What rank 0 said while the job runs; the exit code, once it sends it (CONTROL)."""
        me = self.me
        if message.tag == CONTROL:
            me.log.event("job_ended", code=message.payload)
            return message.payload
        if message.tag == HOST_LOST:  # a worker host is gone: its ranks never reach the last barrier
            me.log.event("host_lost", **message.payload)
            me.peer_gone(message.payload["ranks"])
        elif message.tag == DRAINING and not self.draining:
            self.draining = True  # Ray ends this node at once if it is idle: expected, not a loss
            me.log.event("node_draining", why=message.payload)
        elif message.tag == ACTIVATE and self.spare:
            self.activate()
        return None  # JOIN: an idle rank has no node to let go, its slot dropped

    def head_watch(self) -> PortWatch | None:
        """The host's first rank's watch on the head's host; none in a job that joins another's cluster (its
        rank 0 watches that cluster) or in a dry run."""
        me = self.me
        session = me.current_session
        if me.host_comm.rank != 0 or session.own_job_id or me.config.dry_run:
            return None
        return PortWatch(session.gcs_address)

    def head_gone(self, watch: PortWatch | None) -> int | None:
        """HEAD_LOST_EXIT once the head's host is gone, as this host's watch found it (told to the host's other
        ranks) or its first rank said; the last barrier is then not waited for: rank 0 never reaches it."""
        me = self.me
        if watch is not None:
            silent = watch.silent()
            if silent is None:
                return None
            for local in range(1, me.host_comm.size):
                me.host_comm.send((silent, me.rank), local, HEAD_GONE)
            by = me.rank
        else:
            message = me.host_comm.poll(0, HEAD_GONE) if me.host_comm.rank != 0 else None
            if message is None:
                return None
            silent, by = message.payload
        me.log.event("head_host_lost", gcs_address=me.current_session.gcs_address, silent=round(silent, 1),
                     by=by, cause="head_host_lost")
        me.peer_gone()
        return HEAD_LOST_EXIT

    def send_settled(self) -> None:
        self.me.comm.send(None, 0, SETTLED)
        self.settled = True

    # ---- teardown (teardown.py) ----------------------------------------------------------------

    def announce(self, code: int) -> None:
        pass

    def before_stopping_node(self, head_stops_last: bool) -> None:
        if self.me.own_node.alive and self.me.stop.signum is None and not self.settled:
            self.send_settled()

    def after_stopping_node(self, head_stops_last: bool) -> None:
        if head_stops_last:
            self.me.comm.send(None, 0, STOPPED)


def wait_for_head(me: Rank) -> None:
    """Until rank 0 gives this rank a join slot: the head is ALIVE, and few enough nodes are joining
    (this rank's `ray start` failing, or rank 0 stopping the job, end the wait too)."""

    def between() -> None:
        me.own_node.check_running()
        me.raise_if_stopped()

    if poll_until(lambda: me.comm.poll(0, JOIN), Deadline.since(me.current_session.started, me.config.startup_timeout),
                  STARTUP_POLL, between) is None:
        raise StartupTimeout(f"rank 0 gave this rank no join slot within --startup-timeout "
                             f"{me.config.startup_timeout:g} s (its head was not up, or the nodes before it took "
                             f"that long to join)")
