"""A watch on another host's port (knock.PortWatch: a worker's on the head's GCS, rank 0's on a worker's raylet), with a
clock and answers the test sets."""

from __future__ import annotations

import socket

from mpiray.rank.knock import KNOCK_EVERY, SILENT_FOR, Beacon, PortWatch, host_answers
from mpiray.raynode.gcs import gcs_answers


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watched(answers: list[bool]) -> tuple[PortWatch, Clock, list[str]]:
    """A watch whose knocks get answers in turn (the last one ever after), and the addresses it knocked on."""
    clock, knocked = Clock(), []

    def answer(address: str, timeout: float) -> bool:
        knocked.append(address)
        assert timeout <= KNOCK_EVERY  # a knock never holds the rank's loop longer than its interval
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return PortWatch("10.0.0.1:6379", answer, clock), clock, knocked


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
    watch = PortWatch("10.0.0.2:6380", lambda address, timeout: knocked.append(address) or False, clock, armed=True)
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


def test_a_host_answers_a_knock_it_accepts_or_refuses_and_not_one_that_gets_no_answer():
    # Refused: the host's kernel is there, only its listener is gone (a raylet a stop signal ended: its rank lives).
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    held = []
    try:
        assert host_answers(address, 1.0)
        # A full accept queue drops further SYNs unanswered: a knock there times out, as on a host powered off.
        for _ in range(4):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", listener.getsockname()[1]))
            held.append(client)
        assert not host_answers(address, 0.5)
    finally:
        for client in held:
            client.close()
        listener.close()
    assert host_answers(address, 1.0)
