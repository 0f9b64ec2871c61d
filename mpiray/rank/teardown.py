"""The end of a rank: stop the leader and this rank's Ray, keep the logs, meet the other ranks.

Every step runs whatever an earlier one did; a failed step is logged and never changes the exit code.
Order matters where Ray needs it: a worker's `ray start` is let finish starting before its node is
stopped, and rank 0 keeps the head (the GCS) up until every worker's `ray start` is done (and, where
Ray does not drain a node it stops, until every worker's node has stopped).
"""

from __future__ import annotations

import time

from mpiray.deadline import Deadline
from mpiray.rank.state import Leader, Rank, Role
from mpiray.rank.timings import RAY_STOP_GRACE

STOP_SIGNAL_RAY_GRACE = 2.0  # after scancel: Ray's processes got the signal too, and a raylet then hangs on SIGTERM
MEET_MARGIN = 30.0  # seconds past --stop-grace that a rank waits for the others at the end
DRAIN_QUIET, DRAIN_POLL = 0.05, 0.005  # the end: no message for this long, looked for this often


def finish(me: Rank, role: Role, leader: Leader | None, code: int) -> int:
    """Tear this rank down and return code. leader: rank 0's (None elsewhere)."""
    config = me.config
    # A healthy node stops in order in ~1 s; one that does not (GCS lost, or scancel already signalled
    # raylet, which then hangs on SIGTERM) will not, so Ray gets less than the driver. A node whose head's host is
    # gone (me.all_met already False) hangs on SIGTERM too: 4 of its 5 processes needed SIGKILL after 5 s.
    short = me.stop.signum is not None or not me.all_met
    grace = min(config.stop_grace, STOP_SIGNAL_RAY_GRACE if short else RAY_STOP_GRACE)
    last = head_stops_last(me)
    steps = [
        ("tell the other ranks", lambda: role.announce(code)),
        ("stop the driver", lambda: leader.stop(config.stop_grace, code) if leader is not None else None),
        # A node is ALIVE ~0.3-0.9 s before its `ray start` is done: signalled in between (a driver that ends at
        # once), it has no handler of its own yet, and its processes were seen to need SIGKILL.
        ("let `ray start` finish starting", lambda: me.own_node.settle() if me.stop.signum is None else None),
        ("keep the head up for the workers' Ray", lambda: role.before_stopping_node(last)),
        ("stop this rank's Ray node", lambda: me.own_node.stop(grace)),
        ("tell rank 0 this rank's Ray node stopped", lambda: role.after_stopping_node(last)),
        ("keep Ray's logs and remove the private dir", lambda: me.own_node.close()),
        ("release the host's port block", lambda: me.port_block.release() if me.port_block else None),
        ("send the last messages", lambda: me.comm.flush(5)),
        ("meet the other ranks", lambda: meet(me)),
        ("drop the messages this rank never read", lambda: drain(me)),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as error:
            me.log.event("teardown_failed", step=what, problem=repr(error))
    me.log.event("mpi_messages", sent=me.comm.sent + me.host_comm.sent,
                 received=me.comm.received + me.host_comm.received)
    me.log.event("exit", code=code)
    # Never learned the job id: under srun without PMI every task is "rank 0", so use the task rank.
    job_id = config.job_id or me.env.job_id or "unknown-job"
    rank = me.env.task_rank if me.comm.size == 1 and me.env.task_rank is not None else me.rank
    me.log.close(config.log_dir / job_id, rank)
    return code


def head_stops_last(me: Rank) -> bool:
    """On a normal end, with a Ray that does not drain a node it stops (this rank's node said so; every
    rank runs the same Ray): rank 0 waits for the workers' STOPPED, which they send."""
    return me.stop.signum is None and me.own_node.stops_last()


def meet(me: Rank) -> None:
    """The last barrier; among the others where ranks are known gone with their worker host (me.gone); none where
    the head's host is gone (all_met already False): it would only wait out its timeout."""
    timeout = me.config.stop_grace + MEET_MARGIN
    if me.gone:
        met = me.meet_without_gone(timeout)
    else:
        met = me.all_met and me.meet_last(timeout)
    if not met:
        me.log.event("peer_missing")


def drain(me: Rank, quiet: float = DRAIN_QUIET, timeout: float = 2.0) -> None:
    """Drop every message still addressed to this rank (comm.drop_pending), on the world and the host's
    communicator at once, until none came for `quiet` seconds (one sent just before the barrier may still be
    on its way), at most `timeout`. Every message for this rank was sent before the barrier: one left unread
    makes MPICH's MPI_Finalize fail before its PMI barrier, where all the other ranks would then wait forever."""
    dropped = 0
    deadline, quiet_until = Deadline.after(timeout), Deadline.after(quiet)
    while not deadline.expired():
        got = me.comm.drop_pending() + me.host_comm.drop_pending()
        if got:
            dropped += got
            quiet_until = Deadline.after(quiet)
        elif quiet_until.expired():
            break
        else:
            time.sleep(DRAIN_POLL)
    if dropped:
        me.log.event("messages_dropped", count=dropped)
