"""Join slots: how many workers rank 0 lets run `ray start` against the GCS at once.

At 1,000 nodes every raylet registering at the same moment overloads the GCS; on a small machine
24 raylets starting together starve each other of CPU. Either way Ray gives a node 30 s to register
(ray/_private/node.py), then fails its `ray start`. So rank 0 hands out join slots: a window that
starts small, grows by one for each join faster than FAST_JOIN (slow start: it doubles per round of
fast joins) and halves on a join slower than SLOW_JOIN, between 1 and --join-window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

FAST_JOIN = 5.0  # seconds from slot to ALIVE: a join on an idle host takes ~3 s
SLOW_JOIN = 15.0  # half of the 30 s Ray gives a raylet to register
FIRST_WINDOW = 8


@dataclass
class JoinWindow:
    limit: int  # --join-window
    size: int = 0

    def __post_init__(self) -> None:
        self.size = self.size or min(FIRST_WINDOW, self.limit)

    def record(self, seconds: float) -> None:
        if seconds > SLOW_JOIN:
            self.size = max(1, self.size // 2)
        elif seconds < FAST_JOIN:
            self.size = min(self.limit, self.size + 1)


@dataclass
class Joins:
    """Rank 0's bookkeeping: which workers wait for a slot, which hold one and since when."""

    waiting: list[int]  # worker ranks, in the order they get slots
    window: JoinWindow
    granted: dict[int, float] = field(default_factory=dict)  # rank -> time.monotonic() of its slot
    done: set[int] = field(default_factory=set)

    def grants(self, now: float | None = None) -> list[int]:
        """The ranks to give a slot now (and mark as holding one)."""
        now = time.monotonic() if now is None else now
        given = []
        while self.waiting and len(self.granted) < self.window.size:
            rank = self.waiting.pop(0)
            if rank not in self.done:
                self.granted[rank] = now
                given.append(rank)
        return given

    def joined(self, rank: int, started_a_node: bool = True, now: float | None = None) -> None:
        """rank reported (its node ALIVE, or no node to start): its slot is free again."""
        now = time.monotonic() if now is None else now
        self.done.add(rank)
        started = self.granted.pop(rank, None)
        if started is not None and started_a_node:
            self.window.record(now - started)
