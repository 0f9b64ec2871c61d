"""An in-memory communicator with mpi.Comm's methods: the rank protocol in one process, each rank a
thread, no MPI. Messages are pickled on the way, as MPI would, so no rank shares an object with another.
Job runs a whole job so (rank.life.run on each thread), ScriptedLeader stands for rank 0's leader."""

from __future__ import annotations

import pickle
import socket
import threading
import time
from collections import deque
from typing import Any, Callable, Container

from mpiray.config import Config
from mpiray.deadline import Deadline, poll_until
from mpiray.logs.events import read_events
from mpiray.rank import life as rank_life
from mpiray.rank.messages import Message
from mpiray.rank.signals import StopRequest


class World:
    """size ranks (on hosts: each rank's host, default one host for all); a message is a Message whose
    payload is still pickled, in its destination's queue."""

    def __init__(self, size: int, hosts: list[str] | None = None):
        self.size = size
        self.host_of = hosts or ["host"] * size
        self.queues = [deque() for _ in range(size)]
        self.lock = threading.Condition()
        self.arrived: dict[int, int] = {}  # collective (barrier, count) generation -> ranks that arrived
        self.counts: dict[int, int] = {}  # count generation -> the sum so far
        self.generation = [0] * size
        self.abandoned: dict[int, int] = {}  # rank -> code it exited with, without MPI_Finalize
        self.by_host: dict[str, World] = {}

    def comm(self, rank: int) -> MemoryComm:
        return MemoryComm(self, rank)


class MemoryComm:
    poll_interval = 0.005

    def __init__(self, world: World, rank: int):
        self.world, self.rank, self.size = world, rank, world.size
        self.sent = self.received = 0

    def send(self, obj: Any, dest: int, tag: int) -> None:
        self.sent += 1
        with self.world.lock:
            self.world.queues[dest].append(Message(self.rank, tag, pickle.dumps(obj)))

    def progress(self) -> None:
        pass  # sends complete at once

    def send_to_others(self, obj: Any, tag: int, skip: Container[int] = ()) -> None:
        for dest in range(self.size):
            if dest != self.rank and dest not in skip:
                self.send(obj, dest, tag)

    def poll(self, source: int | None = None, tag: int | None = None) -> Message | None:
        with self.world.lock:
            queue = self.world.queues[self.rank]
            for message in queue:
                if source in (None, -1, message.source) and tag in (None, -1, message.tag):
                    queue.remove(message)
                    self.received += 1
                    return message._replace(payload=pickle.loads(message.payload))
        return None

    def receive(self, source: int, tag: int, deadline: Deadline, between_polls: Callable[[], None] = lambda: None):
        message = poll_until(lambda: self.poll(source, tag), deadline, self.poll_interval, between_polls)
        return None if message is None else message.payload

    def receive_each(self, sources: list[int], tag: int, deadline: Deadline,
                     between_polls: Callable[[], None] = lambda: None) -> dict[int, Any]:
        got = {}

        def take_all() -> bool:
            for source in sources:
                if source not in got and (message := self.poll(source, tag)) is not None:
                    got[source] = message.payload
            return set(sources) <= got.keys()

        poll_until(take_all, deadline, self.poll_interval, between_polls)
        return got

    def barrier(self, timeout: float) -> bool:
        world = self.world
        with world.lock:
            generation = world.generation[self.rank]
            world.generation[self.rank] += 1
            world.arrived[generation] = world.arrived.get(generation, 0) + 1
            world.lock.notify_all()
            return world.lock.wait_for(lambda: world.arrived[generation] >= self.size, timeout)

    def count(self, flag: bool, timeout: float) -> int | None:
        world = self.world
        with world.lock:
            generation = world.generation[self.rank]
            world.generation[self.rank] += 1
            world.arrived[generation] = world.arrived.get(generation, 0) + 1
            world.counts[generation] = world.counts.get(generation, 0) + int(flag)
            world.lock.notify_all()
            if not world.lock.wait_for(lambda: world.arrived[generation] >= self.size, timeout):
                return None
            return world.counts[generation]

    def flush(self, timeout: float) -> None:
        pass  # sends complete at once

    def drop_pending(self) -> int:
        with self.world.lock:
            dropped = len(self.world.queues[self.rank])
            self.world.queues[self.rank].clear()
        return dropped

    def split_by_host(self) -> MemoryComm:
        """The ranks on this rank's host, as a world of their own (as MPI's split makes a new communicator)."""
        world = self.world
        host = world.host_of[self.rank]
        ranks = [rank for rank in range(world.size) if world.host_of[rank] == host]
        with world.lock:
            if host not in world.by_host:
                world.by_host[host] = World(len(ranks))
        return world.by_host[host].comm(ranks.index(self.rank))

    @staticmethod
    def library_version() -> str:
        return "in-memory communicator"

    def abandon(self, code: int) -> None:
        self.world.abandoned[self.rank] = code

    def exit_now(self, code: int) -> None:
        self.world.abandoned[self.rank] = code

    def finalize_within(self, seconds: float, code: int) -> None:
        pass  # no MPI to finalize in one process (and the ranks' life.run here gives no finalize_limit)


class ScriptedLeader:
    """rank.Leader: ends by itself with code after seconds; records how it was stopped."""

    def __init__(self, code: int = 0, seconds: float = 0.0):
        self.code, self.seconds = code, seconds
        self.running = threading.Event()
        self.stopped: tuple[float, int] | None = None
        self.cluster = None

    def start(self, me, cluster) -> None:
        self.cluster, self.ends_at, self.me = cluster, time.monotonic() + self.seconds, me
        self.running.set()

    def poll(self, timeout: float) -> int | None:
        if time.monotonic() + timeout >= self.ends_at:
            time.sleep(max(0.0, self.ends_at - time.monotonic()))
            return self.code
        time.sleep(timeout)
        return None

    def stop(self, grace: float, code: int) -> None:
        if self.cluster is not None and time.monotonic() < self.ends_at:  # a leader that ended is left alone
            self.stopped = self.stopped or (grace, code)
            self.ends_at = time.monotonic()

    def close(self, me) -> None:
        pass


class HostNames:
    """socket.gethostname() as each rank's thread sees it: the host the in-memory world puts it on (a test
    monkeypatches socket.gethostname with it, so that the ranks' logs and HELLOs name distinct hosts)."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.real = socket.gethostname

    def __call__(self) -> str:
        return getattr(self.local, "host", None) or self.real()


class Job:
    def __init__(self, tmp_path, size: int, leader, config: Config, missing=(), configs=None, hosts=None,
                 names: HostNames | None = None):
        self.size, self.leader, self.world, self.names = size, leader, World(size, hosts), names
        self.job_dir = config.log_dir / config.job_id
        self.stops = [StopRequest() for _ in range(size)]
        self.codes: dict[int, int] = {}
        self.threads = [threading.Thread(target=self._rank, args=(rank, (configs or {}).get(rank, config)), daemon=True)
                        for rank in range(size) if rank not in missing]
        for thread in self.threads:
            thread.start()

    def _rank(self, rank: int, config: Config) -> None:
        if self.names is not None:
            self.names.local.host = self.world.host_of[rank]
        self.codes[rank] = rank_life.run(config, self.leader if rank == 0 else None, self.world.comm(rank),
                                         stop=self.stops[rank])

    def wait(self, timeout: float = 30) -> dict[int, int]:
        for thread in self.threads:
            thread.join(timeout)
            assert not thread.is_alive(), "a rank never ended"
        return dict(sorted(self.codes.items()))

    def events(self, rank: int, name: str | None = None) -> list[dict]:
        records = read_events(self.job_dir / f"rank-{rank:04d}.jsonl")
        return [r for r in records if name is None or r["event"] == name]
