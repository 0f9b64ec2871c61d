"""The leader step of a job that joins another's cluster with no driver command (`--join JOB` alone): its
nodes serve until the cluster ends (exit 0) or this job does (its walltime or scancel: SIGTERM; each
`ray start` then drains its node through Ray, so tasks move away, and the rest of the cluster goes on).
"""

from __future__ import annotations

import time

from mpiray.elastic.autoscale import cancel_siblings
from mpiray.elastic.registry import Registry
from mpiray.rank.messages import Cluster
from mpiray.rank.state import Rank
from mpiray.raynode.gcs import gcs_answers

GONE_AFTER = 3  # failed looks at the cluster's GCS in a row before this job calls it ended


class StayLeader:
    """rank.state.Leader of a joining job with no driver: its nodes serve until the cluster ends (0); a stop
    signal (this job's walltime, scancel) ends it as any job's (128+N)."""

    def __init__(self) -> None:
        self.me: Rank | None = None
        self.misses = 0
        self.looked = 0.0

    def start(self, me: Rank, cluster: Cluster) -> None:
        self.me = me
        me.log.event("serving", cluster=cluster.session.job_id, nodes=len(cluster.nodes), cpus=cluster.total_cpus)

    def poll(self, timeout: float) -> int | None:
        time.sleep(timeout)
        if time.monotonic() - self.looked < 1.0:
            return None
        self.looked = time.monotonic()
        me = self.me
        assert me is not None, "poll() before start()"
        self.misses = 0 if gcs_answers(me.current_session.gcs_address, timeout=1.0) else self.misses + 1
        if self.misses < GONE_AFTER:
            return None
        me.log.event("cluster_ended", cluster=me.current_session.job_id)
        if me.config.resources and "NODE_ID_AS_RESOURCE" in me.config.resources:
            # A worker job of an autoscaler whose head job was killed: nobody else cancels the others.
            gone = cancel_siblings(Registry(me.config.registry), me.current_session.job_id, me.env.scheduler)
            if gone:
                me.log.event("siblings_cancelled", jobs=gone)
        return 0

    def stop(self, grace: float, code: int) -> None:
        pass  # nothing runs but this job's nodes: teardown stops (and so drains) them

    def close(self, me: Rank) -> None:
        pass

