"""Rank 0's live start-up line: on the terminal that mpirun writes to, never in piped or batch output."""

from __future__ import annotations

import io
import re
import time

from mpiray.logs import progress
from mpiray.logs.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def event(name: str, peer: int) -> dict:
    return {"event": name, "fields": {"peer": peer}}


def test_the_line_is_drawn_from_rank_0s_events_in_place_and_erased_at_the_end():
    out = io.StringIO()
    live = Progress(out, 24, time.time())
    for peer in range(1, 9):
        live.on_event(event("join_granted", peer))  # each a redraw: 1/24 ready, 1..8 joining
    out.truncate(0)
    out.seek(0)
    live.tick()  # nothing changed, within REDRAW: not drawn again
    live.on_event(event("session_sent", 0))  # not about joins: ignored
    for peer in range(9, 20):
        live.on_event(event("worker_idle", peer))  # ready, never held a slot
    live.close()
    text = out.getvalue()
    assert re.fullmatch("".join(rf"\rmpiray: {ready}/24 ranks ready, 8 joining \(\d+\.\d s\)\x1b\[K"
                                for ready in range(2, 13)) + r"\r\x1b\[K", text), repr(text)


def test_without_a_terminal_nothing_is_written(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    live = Progress(None, 4, time.time())
    live.on_event(event("join_granted", 1))
    live.close()  # nothing to write to, and no error
    assert progress.terminal("off", FakeTerminal()) is None
    assert progress.terminal("auto", io.StringIO()) is None  # a pipe, and pytest runs under no mpirun
    assert progress.terminal("auto", FakeTerminal()) is not None
    assert progress.terminal("on", io.StringIO()) is not None
    monkeypatch.setenv("TERM", "dumb")  # cannot go back to the start of a line
    assert progress.terminal("auto", FakeTerminal()) is None


def test_a_terminal_that_goes_away_costs_the_line_only():
    class Gone(io.StringIO):
        def write(self, text):
            raise OSError(5, "Input/output error")

    live = Progress(Gone(), 4, time.time())
    live.on_event(event("join_granted", 1))
    live.on_event(event("worker_joined", 1))
    live.close()
    assert live.stream is None
