"""Join slots (mpiray/rank/slots.py): how many workers register with the GCS at once."""

from __future__ import annotations

from mpiray.rank.slots import FAST_JOIN, FIRST_WINDOW, SLOW_JOIN, Joins, JoinWindow


def test_the_window_starts_small_grows_on_fast_joins_and_halves_on_slow_ones():
    window = JoinWindow(limit=64)
    assert window.size == FIRST_WINDOW
    for _ in range(100):
        window.record(FAST_JOIN / 2)
    assert window.size == 64  # never past --join-window
    window.record(SLOW_JOIN + 1)
    assert window.size == 32
    for _ in range(10):
        window.record(SLOW_JOIN + 1)
    assert window.size == 1  # never below one
    window.record((FAST_JOIN + SLOW_JOIN) / 2)
    assert window.size == 1  # a middling join changes nothing
    assert JoinWindow(limit=3).size == 3


def test_slots_go_out_in_rank_order_and_come_back_with_each_report():
    joins = Joins(list(range(1, 11)), JoinWindow(limit=4, size=2))
    assert joins.grants(now=0) == [1, 2]
    assert joins.grants(now=0) == []  # the window is full
    joins.joined(2, now=1)  # fast: the window grows to 3
    assert joins.window.size == 3 and joins.grants(now=1) == [3, 4]
    joins.joined(5, started_a_node=False, now=1)  # an idle rank reported before its turn: no slot, no measure
    joins.joined(1, now=30)  # slow: halved
    assert joins.window.size == 1 and joins.grants(now=30) == []
    joins.joined(3, now=31)
    joins.joined(4, now=31)
    assert joins.grants(now=31) == [6]  # 5 already reported
