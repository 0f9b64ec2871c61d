"""Every wait in mpiray has a deadline: one value for it, and one polling loop that honours it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    """A point in time.monotonic(), made once and passed down; never a formula per wait."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        if not math.isfinite(seconds):
            raise ValueError(f"a deadline must be a finite number of seconds, got {seconds}")
        return cls(time.monotonic() + seconds)

    @classmethod
    def since(cls, started: float, seconds: float) -> Deadline:
        """seconds counted from started, a time.time() taken earlier (maybe by another rank)."""
        return cls.after(seconds - (time.time() - started))

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def sooner(self, seconds: float) -> Deadline:
        """This deadline or one seconds from now, whichever comes first."""
        return min(self, Deadline.after(seconds), key=lambda d: d.at)


def poll_until(
    ready: Callable[[], T],
    deadline: Deadline,
    interval: float,
    between: Callable[[], None] = lambda: None,
) -> T | None:
    """ready()'s first true value, or None at the deadline; between() runs (and may raise) between polls.

    Sleeps between polls: a waiting rank must not spin a core that the Ray nodes on its host need.
    """
    while True:
        value = ready()
        if value:
            return value
        if deadline.expired():
            return None
        between()
        time.sleep(interval)
