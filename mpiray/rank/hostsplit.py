"""The ranks of one host agree on its split: each sends the host's first rank what it sees of the host
(LOCAL), that rank takes the host's port block and plans every rank's share (host/resources.py), and
sends each its plan."""

from __future__ import annotations

from mpiray.deadline import Deadline
from mpiray.errors import ConfigError, StartupTimeout
from mpiray.host import portblocks, resources
from mpiray.rank.messages import LOCAL, HostPlan, Idle, PlanRefused
from mpiray.rank.state import Rank


def split_host(me: Rank, job_id: str, gcs_port: int = 0, *, refused: str = "", spare: bool = False) -> HostPlan | Idle:
    """Split this host among its ranks: this rank's plan (its share and ports), or Idle. refused (the host's
    first rank's: what the pre-flight refused here): every rank of the host idles, with that as its reason; spare
    (rank 0 keeps the host as a spare, spares.py): every rank of the host waits, and splits it once started."""
    host_comm = me.host_comm
    deadline = Deadline.after(me.config.startup_timeout)
    plan: HostPlan | Idle | PlanRefused | None
    if host_comm.rank == 0:
        others = host_comm.receive_each(list(range(1, host_comm.size)), LOCAL, deadline, me.raise_if_stopped)
        if len(others) < host_comm.size - 1:
            raise StartupTimeout(f"ranks on {me.host} did not report their view of the host")
        views = [me.view] + [others[r] for r in range(1, host_comm.size)]
        plans = [Idle(refused)] * len(views) if refused else [Idle(spare=True)] * len(views) if spare else \
            _plan_for(me, views, job_id, gcs_port)
        for local, each in enumerate(plans[1:], start=1):
            host_comm.send(each, local, LOCAL)
        plan = plans[0]
    else:
        plan = host_comm.receive(0, LOCAL, deadline, me.raise_if_stopped)
        if plan is None:
            raise StartupTimeout(f"the first rank on {me.host} did not send this host's plan")
    host_comm.flush(5)
    if isinstance(plan, PlanRefused):
        raise plan.error()
    return plan


def split_host_first(me: Rank, job_id: str, gcs_port: int = 0) -> HostPlan:
    """split_host for a rank that is its host's first (rank 0: the head's, a joining job's), whose plan is never
    Idle: the host's node, if there is one, is its."""
    plan = split_host(me, job_id, gcs_port)
    if isinstance(plan, Idle):
        raise AssertionError(f"rank {me.rank} leads {me.host}, yet its plan is to idle")
    return plan


def _plan_for(me: Rank, views: list[resources.HostView], job_id: str,
              gcs_port: int) -> list[HostPlan | Idle] | list[PlanRefused]:
    """The host's first rank's plan for every rank of the host, or why there is none (the same for each)."""
    config = me.config
    nodes = 1 if config.ray_node_per == "host" else len(views)
    problem = resources.check_object_store(config.object_store_memory, views[0], nodes)
    if problem:
        return [PlanRefused(problem)] * len(views)
    shares = resources.plan_shares(config, views, me.rank == 0, me.env.cpus_per_task)
    problem = resources.ports_problem(shares, views[0].hostname)
    if problem:
        return [PlanRefused(problem, "ports_per_host")] * len(views)
    units = resources.port_units(shares)
    try:
        block = me.own_node.port_block(job_id, sum(units), reserved=gcs_port)
    except ConfigError as error:
        return [PlanRefused(str(error), error.cause)] * len(views)
    me.hold(block)
    for note in block.notes:
        me.log.event("port_note", note=note)
    ports = iter(portblocks.host_ports(block.base, units, gcs_port))
    return [HostPlan(share, next(ports)) if share is not None else Idle() for share in shares]
