"""The node's process group outlives neither a rank that dies (GroupGuard) nor one that stops it."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from conftest import ROOT, alive_pids

# A stand-in rank: starts a group whose grandchildren are orphaned when their parent dies (as Ray's
# agents are when raylet dies), guards it, prints the PIDs, then waits to be killed or told to stop.
RANK = """
import json, subprocess, sys, time
from mpiray import processes
node = processes.start(["sh", "-c", "sleep 120 & sleep 120 & wait"], env={"PATH": "/usr/bin:/bin"},
                        stdout=subprocess.DEVNULL)
guard = processes.GroupGuard(node)
time.sleep(0.3)
print(json.dumps({"node": node.pid, "guard": guard.proc.pid,
                  "group": [p.pid for p in processes.psutil.Process(node.pid).children()]}), flush=True)
if sys.stdin.readline().strip() == "release":
    guard.release()
    print("released", guard.proc.returncode, flush=True)
"""


def start_rank():
    rank = subprocess.Popen([sys.executable, "-c", RANK], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    pids = json.loads(rank.stdout.readline())
    assert len(pids["group"]) == 2
    return rank, pids


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while alive_pids(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive_pids(pids)


def test_a_rank_killed_by_sigkill_takes_its_nodes_orphans_with_it():
    rank, pids = start_rank()
    try:
        os.kill(rank.pid, signal.SIGKILL)
        rank.wait(timeout=10)
        # Without the guard the two sleeps would be orphans of init for 120 s.
        assert not wait_gone([pids["node"], *pids["group"], pids["guard"]], 5)
    finally:
        for pid in [pids["node"], *pids["group"], pids["guard"]]:  # only if the assertion failed
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


def test_a_released_guard_kills_nothing():
    # A rank releases its guard once it stopped the group itself: the group's id may be reused then.
    rank, pids = start_rank()
    group = pids["group"]
    try:
        out, _ = rank.communicate("release\n", timeout=20)
        assert "released 0" in out and rank.returncode == 0
        time.sleep(1)
        assert len(alive_pids(group)) == 2  # the rank exited; the guard let them be
    finally:
        for pid in group:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
