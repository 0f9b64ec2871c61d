"""A rank's node outlives neither a rank that dies (its Guard) nor one that stops it; its private dir neither."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from mpiray.host import guard

from helpers import ROOT, alive_pids

# A stand-in rank: makes its private dir with a Ray session's logs in it, starts a group whose
# grandchildren are orphaned when their parent dies (as Ray's agents are when raylet dies), guards
# both, prints the PIDs, then waits to be killed or told to release the guard.
RANK = """
import json, os, subprocess, sys, time
import psutil
from pathlib import Path
from mpiray.host import processes
from mpiray.raynode.private import PrivateDir
private = PrivateDir.create(Path(sys.argv[1]), "r0")
logs = private.ray_dir / "session_2026-11-23_10-00-00_000000_1" / "logs"
logs.mkdir(parents=True)
os.chmod(logs, 0o777)  # as Ray leaves it
(logs / "raylet.out").write_text("raylet says hello")
node = processes.start(["sh", "-c", "sleep 120 & sleep 120 & wait"], env={"PATH": "/usr/bin:/bin"},
                        stdout=subprocess.DEVNULL)
# A Ray worker of the node, started by raylet in a session of its own (outside the group), that makes the session's
# dirs again while it starts: it knows the private dir from its environment only (RAY_TMPDIR).
stray = subprocess.Popen(["sh", "-c", 'while sleep 0.1; do mkdir -p "$RAY_TMPDIR/ray/session_x/sockets"; done'],
                         env={"PATH": "/usr/bin:/bin", "RAY_TMPDIR": str(private.path)}, start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
guard = processes.Guard(private.path, Path(sys.argv[2]))
group = node.pid if sys.argv[3] == "real" else int(sys.argv[3])
if sys.argv[3] == "real":
    guard.watch_group(node)
else:  # a group id whose leader has another start time: the id was recycled
    guard._say(f"group {group} 1")
time.sleep(0.3)
print(json.dumps({"node": node.pid, "guard": guard.proc.pid, "private": str(private.path), "stray": stray.pid,
                  "group": [p.pid for p in psutil.Process(node.pid).children()]}), flush=True)
if sys.stdin.readline().strip() == "release":
    guard.release()
    print("released", guard.proc.returncode, flush=True)
"""


def start_rank(tmp_path, temp_root, group="real"):
    kept = tmp_path / "logs" / "ray-rank-0000"
    kept.parent.mkdir()  # the job dir, where the rank's own log already is
    rank = subprocess.Popen([sys.executable, "-c", RANK, str(temp_root), str(kept), str(group)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pids = json.loads(rank.stdout.readline())
    assert len(pids["group"]) == 2
    return rank, pids, kept


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while alive_pids(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive_pids(pids)


def kill_all(pids):
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def test_a_rank_killed_by_sigkill_takes_its_node_and_private_dir_with_it(tmp_path, short_tmp):
    rank, pids, kept = start_rank(tmp_path, short_tmp)
    everything = [pids["node"], *pids["group"], pids["guard"], pids["stray"]]
    try:
        os.kill(rank.pid, signal.SIGKILL)
        rank.wait(timeout=10)
        # Without the guard the two sleeps would be orphans of init for 120 s, and the dir would stay; without
        # its look beyond the group, the stray would make the dir again after the guard removed it.
        assert not wait_gone(everything, 5)
        time.sleep(0.5)
        assert not os.path.exists(pids["private"])
        # Ray's logs were kept, with nothing group- or world-writable left in them.
        assert (kept / "raylet.out").read_text() == "raylet says hello"
        for path in [kept, *kept.rglob("*")]:
            assert not os.lstat(path).st_mode & 0o022, path
    finally:
        kill_all(everything)  # only if an assertion failed


def test_a_released_guard_kills_and_removes_nothing(tmp_path, short_tmp):
    # A rank releases its guard once it stopped the group itself: the group's id may be reused then.
    rank, pids, _ = start_rank(tmp_path, short_tmp)
    group = pids["group"]
    try:
        out, _ = rank.communicate("release\n", timeout=20)
        assert "released 0" in out and rank.returncode == 0
        time.sleep(1)
        assert len(alive_pids(group)) == 2  # the rank exited; the guard let them be
        assert os.path.isdir(pids["private"])
        assert alive_pids([pids["stray"]])  # nor the node's processes outside its group
    finally:
        kill_all([*group, pids["stray"]])


def test_the_guard_never_kills_a_recycled_group_id(tmp_path, short_tmp):
    # Someone else's group leader now has the id the guard was told (its start time differs).
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    pids = {"node": None, "group": []}
    try:
        rank, pids, _ = start_rank(tmp_path, short_tmp, group=other.pid)
        os.kill(rank.pid, signal.SIGKILL)
        rank.wait(timeout=10)
        assert not wait_gone([pids["guard"]], 10)  # the guard finished its work...
        assert other.poll() is None  # ...and left the other group alone
        assert not os.path.exists(pids["private"])
    finally:
        other.kill()
        other.wait(timeout=10)
        kill_all([pid for pid in [pids["node"], *pids["group"], pids.get("stray")] if pid])


def test_kept_logs_never_overwrite_an_earlier_runs(tmp_path):
    target = tmp_path / "job" / "ray-rank-0000"
    (tmp_path / "job").mkdir()
    for run in (1, 2, 3):
        logs = tmp_path / f"run{run}" / "session_2026-11-23_10-00-00_000000_1" / "logs"
        logs.mkdir(parents=True)
        (logs / "gcs_server.out").write_text(f"run {run}")
        assert guard.keep_ray_logs(tmp_path / f"run{run}", target).name == \
            ("ray-rank-0000" if run == 1 else f"ray-rank-0000.{run}")
    assert (target / "gcs_server.out").read_text() == "run 1"
    assert (target.with_name("ray-rank-0000.3") / "gcs_server.out").read_text() == "run 3"
    assert guard.keep_ray_logs(tmp_path / "nothing-here", target) is None


def test_kept_logs_do_not_recreate_a_log_dir_that_was_removed(tmp_path):
    # A joined worker job can end after the cluster's job dir was cleaned up: it must not come back.
    logs = tmp_path / "run" / "session_2026-11-23_10-00-00_000000_1" / "logs"
    logs.mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="is gone"):
        guard.keep_ray_logs(tmp_path / "run", tmp_path / "removed-job" / "join-75-ray-rank-0000")
    assert not (tmp_path / "removed-job").exists()


def test_group_members_and_start_times_come_from_proc():
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert guard.group_members(child.pid) == [child.pid]
        ticks = int(guard.start_time(child.pid)) / os.sysconf("SC_CLK_TCK")
        assert abs(psutil.boot_time() + ticks - psutil.Process(child.pid).create_time()) < 0.05
    finally:
        child.kill()
        child.wait(timeout=10)
    assert guard.start_time(child.pid) is None
    assert guard.group_members(child.pid) == []


def test_a_stop_signal_during_mpi_finalize_leaves_a_finished_rank_alive():
    # mpi4py runs MPI_Finalize among the interpreter's last exit functions, after Python put the
    # default action back for the signals it handled. Here the exit function is pause(): a SIGTERM
    # (srun --kill-on-bad-exit, once another rank exited non-zero) must not kill the rank there.
    script = (
        "import ctypes, sys\n"
        "from mpiray.rank import signals\n"
        "signals.StopRequest().install()\n"  # as every rank does at its start
        "signals.ignore_from_now_on()\n"  # as driver.run does once the exit code is decided
        "ctypes.pythonapi.Py_AtExit(ctypes.cast(ctypes.CDLL(None).pause, ctypes.c_void_p))\n"
        "print('exiting', flush=True)\n"
        "sys.exit(3)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "exiting\n"
        time.sleep(1)  # into the exit functions
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # still there: SIGTERM did not end it
    finally:
        proc.kill()
        proc.wait(timeout=10)
