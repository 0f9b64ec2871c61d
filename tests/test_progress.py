"""Rank 0's live start-up line: on the terminal that mpirun writes to, never in piped or batch output."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from mpiray import progress
from mpiray.progress import Progress

from conftest import ROOT, launch, launcher_argv, new_job_id


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


def run_in_a_terminal(argv: list[str], timeout: float) -> tuple[int, str]:
    """argv with a pseudo-terminal as stdin/stdout/stderr, as a user's shell runs mpirun."""
    main, child = pty.openpty()
    process = subprocess.Popen(argv, cwd=ROOT, stdin=child, stdout=child, stderr=child, start_new_session=True)
    os.close(child)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), output.decode(errors="replace")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)
        os.close(main)


@pytest.mark.slow
def test_mpirun_in_a_terminal_shows_the_live_line_and_erases_it_before_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    job_id = new_job_id("progress")
    argv = launcher_argv(3, ["--log-dir", str(tmp_path / "logs"), "--job-id", job_id], [sys.executable, "-c", "pass"])
    code, text = run_in_a_terminal(argv, timeout=120)
    assert code == 0, text[-3000:]
    assert re.search(r"\rmpiray: 1/3 ranks ready, 2 joining \(\d+\.\d s\)\x1b\[K", text), repr(text[:2000])
    # Erased (on the same stream) right before the cluster table, which starts a clean line.
    assert re.search(rf"\x1b\[K\r\x1b\[Kmpiray: job {job_id}: 3 Ray nodes", text), repr(text[:2000])


@pytest.mark.slow
def test_piped_output_has_no_live_line(tmp_path):
    run = launch(tmp_path, 3, driver=[sys.executable, "-c", "pass"], tag="noprogress", timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ranks ready" not in run.stdout + run.stderr and "\r" not in run.stdout
    assert re.search(r"^mpiray: job \S+: 3 Ray nodes", run.stdout, re.M)
