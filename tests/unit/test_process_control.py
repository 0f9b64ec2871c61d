"""The process control the tests and the benchmarks share (tests/support/process_control.py): it ends what it is given,
by PID or by the group of a child started in its own session, and every wait it does has a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from process_control import alive_pids, descendants, end_group, group_alive, terminate, wait_for

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def started(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"  # its handlers are set: the signal finds them in place
    return proc


def test_terminate_ends_what_it_is_given_by_sigterm_and_kills_what_ignores_it():
    polite = started("import time; print('ready', flush=True); time.sleep(60)")
    stubborn = started(IGNORES_SIGTERM)
    try:
        stopped = terminate([psutil.Process(polite.pid), psutil.Process(stubborn.pid)], grace=1)
        assert (stopped.stopped, stopped.killed) == (2, 1)
        assert 1 <= stopped.seconds < 1 + 5
        assert polite.wait(timeout=5) == -signal.SIGTERM
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
    finally:
        for proc in (polite, stubborn):
            proc.kill()
            proc.wait(timeout=5)


def test_end_group_ends_what_the_child_left_in_its_group():
    # The child exits at once and leaves a sleep behind in its group, as `ray start` leaves its daemons.
    child = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        left = int(child.stdout.readline())
        assert child.wait(timeout=10) == 0 and group_alive(child.pid)
        assert end_group(child, grace=5) == 0
        assert not group_alive(child.pid) and not alive_pids([left])
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_end_group_kills_a_group_that_ignores_sigterm():
    child = started(IGNORES_SIGTERM)
    assert end_group(child, grace=0.5) == -signal.SIGKILL
    assert not group_alive(child.pid)


def test_descendants_are_the_new_ones_only():
    before = {proc.pid for proc in descendants()}
    child = started("import time; print('ready', flush=True); time.sleep(60)")
    try:
        assert [proc.pid for proc in descendants(before)] == [child.pid]
    finally:
        end_group(child, grace=5)
    assert descendants(before) == []


def test_wait_for_returns_the_first_true_value_or_none_at_its_deadline():
    answers = iter([0, "", "yes"])
    assert wait_for(lambda: next(answers), timeout=5, interval=0.01) == "yes"
    calls = []
    started_at = time.monotonic()
    assert wait_for(lambda: calls.append(1), timeout=0.3, interval=0.05) is None
    assert 0.3 <= time.monotonic() - started_at < 3 and len(calls) >= 2
    assert wait_for(lambda: calls.append(1) or "asked once", timeout=0) == "asked once"
