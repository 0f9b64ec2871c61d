"""A worker host's watch on the head's host (worker.HeadWatch), with a clock and answers the test sets."""

from __future__ import annotations

from mpiray.rank.worker import HEAD_KNOCK_EVERY, HEAD_SILENT_FOR, HeadWatch


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watched(answers: list[bool]) -> tuple[HeadWatch, Clock, list[str]]:
    """A watch whose knocks get answers in turn (the last one ever after), and the addresses it knocked on."""
    clock, knocked = Clock(), []

    def answer(address: str, timeout: float) -> bool:
        knocked.append(address)
        assert timeout <= HEAD_KNOCK_EVERY  # a knock never holds the rank's loop longer than its interval
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return HeadWatch("10.0.0.1:6379", answer, clock), clock, knocked


def run_for(watch: HeadWatch, clock: Clock, seconds: float, step: float = 0.2) -> list[float]:
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
    assert abs(len(knocked) - 60 / HEAD_KNOCK_EVERY) <= 1 and set(knocked) == {"10.0.0.1:6379"}


def test_a_head_silent_after_answering_is_gone_once_the_silence_lasts():
    watch, clock, _ = watched([True, True] + [False])
    said = run_for(watch, clock, 4 + HEAD_SILENT_FOR + HEAD_KNOCK_EVERY)
    assert said and HEAD_SILENT_FOR <= said[0] < HEAD_SILENT_FOR + HEAD_KNOCK_EVERY


def test_a_gcs_restart_shorter_than_the_limit_is_not_a_loss():
    # Answers, 3 knocks unanswered (6 s: a GCS started again takes ~1 s), answers again, then silent for a while.
    watch, clock, _ = watched([True, False, False, False, True, False, False, False, True])
    assert run_for(watch, clock, 60) == []


def test_a_head_never_answered_is_not_watched_yet():
    # An idle rank waits before the head is up: its silence then is the start-up's, which rank 0 times.
    watch, clock, _ = watched([False])
    assert run_for(watch, clock, 3 * HEAD_SILENT_FOR) == []
