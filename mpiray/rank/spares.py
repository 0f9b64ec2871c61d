"""Spare hosts (--spares K): healthy worker hosts kept out of the cluster at start, so that it has a known size, each
started when a worker's Ray node is lost while its rank lives (its raylet killed, out of memory, its GPU gone), or its
whole host.

Rank 0 chooses them once the pre-flight has judged (after the hosts it left out): the last K worker hosts in rank
order, never its own. Their ranks split nothing and start nothing; each waits (worker.py) for ACTIVATE. When a
worker reports its node lost (EVENT), rank 0 sends the next spare host's ranks ACTIVATE; they split their host,
start their nodes and join the head at once (it is up), report as at the start, and the driver sees the cluster
back at its size.

A worker host that dies outright sends no EVENT: rank 0 finds its raylet silent (knock.py, zero.RankZero.hosts_lost)
and starts a spare the same way. A waiting spare's host is knocked on too (its first rank's knock.Beacon): one that
is gone is forgotten, never sent ACTIVATE. Under srun the step outlives the host with --no-kill; under mpirun, not tested (the
launcher's daemon there dies with it, and Hydra ends the job when it loses one).
"""

from __future__ import annotations

import time

from mpiray.errors import ConfigError, TooFewNodes
from mpiray.rank.messages import ACTIVATE, Hello, Report
from mpiray.rank.state import Rank


def choose(hellos: dict[int, Hello], own_host: str, left_out: set[str], count: int) -> list[list[int]]:
    """The spare hosts, as each one's ranks: the last `count` worker hosts in rank order, of those not left out."""
    hosts: dict[str, list[int]] = {}
    for rank, hello in sorted(hellos.items()):
        if hello.host != own_host and hello.host not in left_out:
            hosts.setdefault(hello.host, []).append(rank)
    return list(hosts.values())[len(hosts) - count:] if count else []


def check(count: int, *, hosts: int, nodes_left: int, nodes_per_spare: list[int], min_nodes: int) -> None:
    """--spares against the job: bad input where it is the job's hosts or more (the head's host is never a spare);
    TooFewNodes where too few healthy worker hosts are left for them, or too few Ray nodes start without them."""
    if count >= hosts:
        raise ConfigError(f"--spares {count} is as many as this job's {hosts} hosts or more: the head's host is never a "
                          f"spare, so give at most {hosts - 1}")
    if len(nodes_per_spare) < count:
        raise TooFewNodes(f"--spares {count}: only {len(nodes_per_spare)} healthy worker hosts are left after the "
                          "pre-flight to keep as spares")
    starting = nodes_left - sum(nodes_per_spare)
    if starting < min_nodes:
        raise TooFewNodes(f"--spares {count} leaves {starting} Ray nodes to start, fewer than --min-nodes {min_nodes}")


class Spares:
    """Rank 0's spare hosts while the job runs: which wait, which were started and when."""

    def __init__(self, me: Rank, waiting: list[list[int]]):
        self.me = me
        self.waiting = list(waiting)
        self.activated: dict[int, float] = {}  # rank -> time.monotonic() of its ACTIVATE, until it reports

    def node_lost(self, rank: int) -> list[int]:
        """A worker's node was lost: start the next spare host, if one waits; its ranks (none if none waits)."""
        me = self.me
        if not self.waiting:
            if me.config.spares:
                me.log.event("no_spare_left", peer=rank)
            return []
        ranks = self.waiting.pop(0)
        for spare in ranks:
            me.comm.send(None, spare, ACTIVATE)
            self.activated[spare] = time.monotonic()
        me.log.event("spare_activated", peer=rank, ranks=ranks, left=len(self.waiting))
        return ranks

    def waits(self, rank: int) -> bool:
        return any(rank in ranks for ranks in self.waiting)

    def forget(self, ranks: list[int]) -> None:
        """A waiting spare host is gone (its Beacon silent): never started."""
        self.waiting = [host for host in self.waiting if not set(host) & set(ranks)]

    def reported(self, report: Report) -> bool:
        """A started spare's report: its node joined (True), or why it did not."""
        since = self.activated.pop(report.rank, time.monotonic())
        if report.error:
            self.me.log.event("spare_failed", peer=report.rank, peer_host=report.host, message=report.error)
            return False
        if report.node_id:
            self.me.log.event("spare_joined", peer=report.rank, peer_host=report.host, ip=report.node_ip,
                              node_id=report.node_id, seconds=round(time.monotonic() - since, 3))
        return bool(report.node_id)
