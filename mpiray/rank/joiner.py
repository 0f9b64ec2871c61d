"""A batch job that joins another job's running cluster: `start_ray.py --join JOB` (or mpiray.init(join=JOB)).

The same rank life as every job (life.py); only rank 0's role differs. The Joiner reads the cluster
from the user's registry (registry.py), refuses at once what cannot work (a cluster that is gone,
another user's, another Ray or Python), then leads its ranks as the head's rank 0 would, except that
its own node is one more worker of that cluster: the session it sends is the cluster's (its GCS,
its token, its log dir, where this job's ranks write as join-JOBID-rank-NNNN.*).

With no driver command, the job's nodes serve (leaders/stay.py) until the cluster ends or this job does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from mpiray.batch import environment
from mpiray.elastic.registry import HEARTBEAT_S, Join, Registry
from mpiray.errors import NoSuchCluster, VersionSkew
from mpiray.rank import preflight
from mpiray.rank.hostsplit import split_host_first
from mpiray.rank.messages import SESSION, Cluster, Session, versions
from mpiray.rank.nodestart import start_node
from mpiray.rank.state import Lost, Rank
from mpiray.rank.zero import RankZero
from mpiray.raynode.gcs import NodeInfo, gcs_answers


class Joiner(RankZero):
    """Rank 0 of a job that joins another's cluster: its own node is a worker there; it leads its own ranks."""

    own_alive_event = "node_alive"

    def __init__(self, me: Rank):
        super().__init__(me)
        self.registry = Registry(me.config.registry)
        self.joined: Join | None = None  # this job in the cluster's registry entry

    def start_own(self) -> NodeInfo:
        me, config = self.me, self.me.config
        assert config.join is not None  # a Joiner leads only a --join job (life.run)
        entry = self.registry.read(config.join)  # gone, or another user's: NoSuchCluster, at once
        own_job = config.job_id or environment.safe_job_id(environment.default_job_id(me.env))
        session = Session(job_id=entry.job_id, head_ip=entry.head_ip, gcs_address=entry.gcs_address,
                          token=self.registry.token(entry.job_id), started=me.started, log_dir=entry.log_dir,
                          own_job_id=own_job, run=entry.run)
        me.log.open(session.job_dir(config.log_dir), prefix=session.prefix)
        me.log_started()
        ours = versions(me.rank)
        if (entry.ray, entry.python) != (ours["ray"], ours["python"]):
            raise VersionSkew(f"cluster {entry.job_id} runs Ray {entry.ray} on Python {entry.python}, this job Ray "
                              f"{ours['ray']} on Python {ours['python']}: start this job from the same environment")
        if not gcs_answers(entry.gcs_address):
            raise NoSuchCluster(f"cluster {entry.job_id}'s GCS at {entry.gcs_address} does not answer: it is ending, "
                                f"or this host cannot reach its host {entry.host}")
        plan = split_host_first(me, own_job)
        me.enter(session)
        me.enter(dataclasses.replace(session, marker=preflight.make_marker(me)))
        me.comm.send_to_others(me.current_session, SESSION)
        me.log.event("joining", cluster=entry.job_id, gcs_address=entry.gcs_address, head_host=entry.host,
                     workers=me.comm.size - 1)
        start_node(me, plan.share, plan.ports, head=False)
        self.gather_hellos()  # as the head's job does: nothing of Ray goes before it passes
        return me.own_node.up(joins=True, between=me.raise_if_stopped)

    def cluster_up(self, cluster: Cluster, own: NodeInfo) -> None:
        """Not a cluster of its own: this job's nodes, added to the cluster's entry (mpiray list, logs)."""
        provider_node = json.loads(self.me.config.resources or "{}").get("NODE_ID_AS_RESOURCE")
        self.joined = Join(job_id=self.me.current_session.own_job_id, host=self.me.host, pid=os.getpid(),
                           nodes=len(cluster.nodes), cpus=cluster.total_cpus, gpus=cluster.total_gpus,
                           node_ids=[r.node_id for r in cluster.nodes],
                           started=self.me.started, heartbeat=time.time(), provider_node=provider_node)
        self._say_joined(self.joined)

    def _say_joined(self, joined: Join) -> None:
        try:
            self.registry.add_join(self.me.current_session.job_id, joined)
        except OSError as error:
            self.me.log.event("registry_failed", root=str(self.registry.root), problem=str(error))

    def lost(self) -> Lost | None:
        """Its own node ended: the cluster ended first (0), or this node alone is gone (1)."""
        ended = self.me.own_node.ended()
        if ended is None:
            return None
        if gcs_answers(self.me.current_session.gcs_address):
            return Lost("own_node_exited", ended, 1)
        return Lost("cluster_ended", {"cluster": self.me.current_session.job_id}, 0)

    def tick(self) -> None:
        if self.joined is not None and time.monotonic() - self.beat > HEARTBEAT_S:
            self.beat = time.monotonic()
            self.joined = dataclasses.replace(self.joined, heartbeat=time.time())
            self._say_joined(self.joined)

    def announce(self, code: int) -> None:
        super().announce(code)
        if self.joined is not None:
            self.registry.remove_join(self.me.current_session.job_id, self.joined.job_id)

    def before_stopping_node(self, head_stops_last: bool) -> None:
        pass  # the GCS is the cluster's, elsewhere: nobody waits for this job's workers

    def after_stopping_node(self, head_stops_last: bool) -> None:
        pass  # no autoscaler of its own
