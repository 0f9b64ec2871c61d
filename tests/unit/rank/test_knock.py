"""A watch on another host's port (knock.PortWatch: a worker's on the head's GCS, rank 0's on a worker's raylet), with a
clock and answers the test sets; a real knock (knock.Knock) on a real listener."""

from __future__ import annotations

import socket
import time

from mpiray.rank.knock import KNOCK_EVERY, SILENT_FOR, Beacon, Knock, PortWatch
from mpiray.raynode.gcs import gcs_answers


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Heard:
    """A knock whose answer is there at once (None: one that never comes)."""

    def __init__(self, answer: bool | None):
        self.answer = answer
        self.closed = False

    def answered(self) -> bool | None:
        return self.answer

    def wait(self, timeout: float) -> bool | None:
        assert timeout <= KNOCK_EVERY  # an out-of-turn knock never holds the rank longer than the interval
        return self.answer

    def close(self) -> None:
        self.closed = True


def watched(answers: list[bool | None]) -> tuple[PortWatch, Clock, list[str]]:
    """A watch whose knocks get answers in turn (the last one ever after), and the addresses it knocked on."""
    clock, knocked = Clock(), []

    def knock(address: str) -> Heard:
        knocked.append(address)
        return Heard(answers.pop(0) if len(answers) > 1 else answers[0])

    return PortWatch("10.0.0.1:6379", knock, clock), clock, knocked


def run_for(watch: PortWatch, clock: Clock, seconds: float, step: float = 0.2) -> list[float]:
    """What silent() said while the clock went on by step, as the rank's loop polls it."""
    said = []
    end = clock.now + seconds
    while clock.now < end:
        if (silent := watch.silent()) is not None:
            said.append(silent)
        clock.now += step
    return said


def test_a_head_that_answers_is_never_taken_for_gone_and_is_knocked_on_once_per_interval():
    watch, clock, knocked = watched([True])
    assert run_for(watch, clock, 60) == []
    assert abs(len(knocked) - 60 / KNOCK_EVERY) <= 1 and set(knocked) == {"10.0.0.1:6379"}


def test_a_head_silent_after_answering_is_gone_once_the_silence_lasts():
    watch, clock, _ = watched([True, True] + [False])
    said = run_for(watch, clock, 4 + SILENT_FOR + KNOCK_EVERY)
    assert said and SILENT_FOR <= said[0] < SILENT_FOR + KNOCK_EVERY


def test_knocks_whose_answers_never_come_are_silence_as_those_refused_by_no_route():
    # A host powered off: no SYN-ACK, no refusal; each knock given up after its interval, not waited for.
    watch, clock, knocked = watched([True, None])
    said = run_for(watch, clock, 4 + SILENT_FOR + KNOCK_EVERY)
    assert said and SILENT_FOR <= said[0] < SILENT_FOR + 2 * KNOCK_EVERY
    assert abs(len(knocked) - (4 + SILENT_FOR + KNOCK_EVERY) / KNOCK_EVERY) <= 1


def test_a_gcs_restart_shorter_than_the_limit_is_not_a_loss():
    # Answers, 3 knocks unanswered (6 s: a GCS started again takes ~1 s), answers again, then silent for a while.
    watch, clock, _ = watched([True, False, False, False, True, False, False, False, True])
    assert run_for(watch, clock, 60) == []


def test_a_head_never_answered_is_not_watched_yet():
    # An idle rank waits before the head is up: its silence then is the start-up's, which rank 0 times.
    watch, clock, _ = watched([False])
    assert run_for(watch, clock, 3 * SILENT_FOR) == []


def test_a_knock_out_of_turn_says_at_once_that_a_port_which_answered_is_silent():
    # Before a message goes to the host (the exit code): a send to a rank whose host is gone can block for good.
    watch, clock, knocked = watched([True, False])
    assert watch.silent() is None and watch.answers_now() is False and watch.silence() == 0.0
    clock.now += 1
    assert watch.silent() is None and watch.silence() == 0.0  # not its turn yet: no knock, no silence begun
    clock.now += KNOCK_EVERY
    assert watch.silent() is None and watch.answers_now() is False
    clock.now += 3
    assert watch.silence() == 3 and len(knocked) == 4


def test_a_port_never_answered_is_not_judged_out_of_turn_either():
    watch, _, _ = watched([False])
    assert watch.answers_now() is True


def test_a_port_known_to_listen_is_judged_from_its_first_knock():
    # A raylet whose node reported ALIVE: its host may die before rank 0's first knock.
    clock, knocked = Clock(), []
    watch = PortWatch("10.0.0.2:6380", lambda address: knocked.append(address) or Heard(False), clock, armed=True)
    assert watch.answers_now() is False
    said = run_for(watch, clock, SILENT_FOR + KNOCK_EVERY)
    assert said and abs(said[0] - SILENT_FOR) < 1e-6, said


def test_a_beacon_answers_every_knock_as_long_as_its_queue_is_emptied_and_none_once_closed():
    # A waiting spare's: rank 0 knocks every 2 s for as long as the job runs, far more often than its backlog.
    beacon = Beacon("127.0.0.1")
    address = f"{beacon.ip}:{beacon.port}"
    try:
        for _ in range(3):
            assert all(gcs_answers(address, 1.0) for _ in range(50))
            beacon.take()
    finally:
        beacon.close()
    assert not gcs_answers(address, 1.0)


def answer(address: str, timeout: float) -> bool | None:
    knock = Knock(address)
    try:
        return knock.wait(timeout)
    finally:
        knock.close()


def test_a_host_answers_a_knock_it_accepts_or_refuses_and_not_one_that_gets_no_answer():
    # Refused: the host's kernel is there, only its listener is gone (a raylet a stop signal ended: its rank lives).
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    held = []
    try:
        assert answer(address, 1.0) is True
        # A full accept queue drops further SYNs unanswered: a knock there gets none, as on a host powered off.
        for _ in range(4):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", listener.getsockname()[1]))
            held.append(client)
        assert answer(address, 0.5) is None
        # Looked at in the rank's loop, such a knock costs no wait.
        watch = PortWatch(address, armed=True)
        started = time.monotonic()
        for _ in range(20):
            assert watch.silent() is None
        assert time.monotonic() - started < 0.2
        watch.close()
    finally:
        for client in held:
            client.close()
        listener.close()
    assert answer(address, 1.0) is True
