"""The link check's verdict across hosts, as pure functions: the ring, each host's figure, who is refused."""

from __future__ import annotations

from mpiray.host.linkprobe import Figures
from mpiray.rank.linkcheck import judge, rate, ring

FAST, SLOW = 3000.0, 4.0  # Mbit/s: a veth of the test bed, and its tc-throttled host


def figures_of(received: dict[str, dict[str, float]]) -> dict[str, Figures]:
    return {host: Figures(dict(got), {peer: 0.05 for peer in got}) for host, got in received.items()}


def test_each_host_sends_to_the_hosts_before_and_after_it():
    assert ring(["a", "b", "c", "d"]) == {"a": ["b", "d"], "b": ["a", "c"], "c": ["b", "d"], "d": ["a", "c"]}
    assert ring(["a", "b"]) == {"a": ["b"], "b": ["a"]}
    assert ring(["a"]) == {}


def test_a_host_whose_sends_are_throttled_is_refused_and_its_peers_are_not():
    # t2's sends arrive slowly at both its peers; what t1 and t3 send each other and t2 arrives at full speed.
    sends = ring(["t1", "t2", "t3"])
    measured = figures_of({"t1": {"t2": SLOW, "t3": FAST}, "t2": {"t1": FAST, "t3": FAST},
                           "t3": {"t1": FAST, "t2": SLOW}})
    table, refused = judge(measured, sends, 0.25)
    assert set(refused) == {"t2"}
    assert "sends at 4.0 Mbit/s" in refused["t2"] and "median 3.0 Gbit/s" in refused["t2"]
    assert table["t2"]["send_mbit"] == SLOW and table["t2"]["receive_mbit"] == FAST
    assert table["t1"]["send_mbit"] == FAST and table["t1"]["receive_mbit"] == FAST  # its best receive


def test_a_host_whose_receives_are_throttled_is_refused():
    sends = ring(["t1", "t2", "t3"])
    measured = figures_of({"t1": {"t2": FAST, "t3": FAST}, "t2": {"t1": SLOW, "t3": SLOW},
                           "t3": {"t1": FAST, "t2": FAST}})
    _, refused = judge(measured, sends, 0.25)
    assert set(refused) == {"t2"} and "receives at 4.0 Mbit/s" in refused["t2"]


def test_a_host_slow_both_ways_is_refused_with_both_figures_sends_first():
    # A host whose sends are choked also receives slowly: its acknowledgements wait behind its own stream.
    sends = ring(["t1", "t2", "t3"])
    measured = figures_of({"t1": {"t2": 5.0, "t3": FAST}, "t2": {"t1": SLOW, "t3": 3.0},
                           "t3": {"t1": FAST, "t2": 5.0}})
    _, refused = judge(measured, sends, 0.25)
    assert set(refused) == {"t2"}
    assert refused["t2"].startswith("its link sends at 5.0 Mbit/s and receives at 4.0 Mbit/s, below"), refused


def test_a_host_no_peer_reached_is_refused_with_what_its_peers_saw():
    sends = ring(["t1", "t2", "t3"])
    measured = figures_of({"t1": {"t3": FAST}, "t2": {}, "t3": {"t1": FAST}})
    measured["t1"].errors["t2"] = "ConnectionRefusedError: [Errno 111] Connection refused"
    measured["t3"].errors["t2"] = "TimeoutError: timed out"
    table, refused = judge(measured, sends, 0.25)
    assert set(refused) == {"t2"}
    assert refused["t2"].startswith("no link from its peers") and "t1: ConnectionRefusedError" in refused["t2"]
    assert table["t2"]["receive_mbit"] is None


def test_two_hosts_are_shown_but_not_judged():
    sends = ring(["t1", "t2"])
    table, refused = judge(figures_of({"t1": {"t2": SLOW}, "t2": {"t1": FAST}}), sends, 0.25)
    assert refused == {} and table["t2"]["send_mbit"] == SLOW


def test_even_peers_within_the_floor_are_all_kept():
    sends = ring(["a", "b", "c", "d"])
    measured = figures_of({"a": {"b": 900, "d": 1000}, "b": {"a": 1000, "c": 800}, "c": {"b": 1000, "d": 950},
                           "d": {"a": 700, "c": 1000}})
    assert judge(measured, sends, 0.25)[1] == {}


def test_rates_read_as_a_person_writes_them():
    assert (rate(3.94), rate(940.0), rate(9400.0)) == ("3.9 Mbit/s", "940.0 Mbit/s", "9.4 Gbit/s")
