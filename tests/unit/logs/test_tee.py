"""The driver's log (logs/tee.py): a stalled or full log costs log lines, never the driver's output or its progress."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mpiray.logs.tee import Tee


def test_a_stalled_log_write_never_blocks_the_driver(tmp_path):
    # The log is a pipe nobody reads: its writes block once 64 KiB are in it, as on a hung filesystem.
    read_end, write_end = os.pipe()
    tee = Tee(os.fdopen(write_end, "wb", buffering=0), "a stalled log")
    child = subprocess.Popen([sys.executable, "-c", "import sys\nfor i in range(50000): print('x' * 40, i)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(tmp_path / "terminal", "wb") as terminal:
        tee.pump(child.stdout, terminal)
        tee.pump(child.stderr, terminal)
        assert child.wait(timeout=30) == 0  # the child never waited on the log
        started = time.monotonic()
        tee.close(timeout=1)
        assert time.monotonic() - started < 5
    assert (tmp_path / "terminal").read_text().count("\n") == 50000  # the terminal got every line
    assert tee.dropped > 0
    os.close(read_end)


def test_a_full_disk_under_the_log_costs_log_lines_only(tmp_path):
    # /dev/full fails every write with ENOSPC, as a full disk or an exceeded quota does.
    tee = Tee(open("/dev/full", "wb", buffering=0), "/dev/full")
    child = subprocess.Popen([sys.executable, "-c", "for i in range(1000): print('line', i)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(tmp_path / "terminal", "wb") as terminal:
        tee.pump(child.stdout, terminal)
        tee.pump(child.stderr, terminal)
        assert child.wait(timeout=30) == 0
        tee.close(timeout=5)
    assert (tmp_path / "terminal").read_text().count("\n") == 1000
    assert "No space left on device" in tee.error
