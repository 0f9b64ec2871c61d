"""Stale private dirs (raynode/private.py remove_stale): a killed rank's are removed, and nothing else, whatever
a second user planted beside them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from helpers import (
    as_another_user,
    make_private_dir_in_a_process_that_ends,
)


@as_another_user
def test_stale_private_dirs_of_killed_ranks_are_removed_and_nothing_else(tmp_path, short_tmp):
    from mpiray.host.guard import start_time
    from mpiray.raynode.private import PrivateDir, remove_stale

    root = short_tmp
    root.chmod(0o1777)  # like /tmp: anyone may create entries
    stale = make_private_dir_in_a_process_that_ends(root)
    live = PrivateDir.create(root, "r1").path  # this process's: alive
    other_host = PrivateDir.create(root, "r2").path
    (other_host / "owner").write_text("another-host same-boot same-pid-namespace 1 1\n")
    being_tidied = make_private_dir_in_a_process_that_ends(root)  # its guard still at work: ours, alive
    (being_tidied / "guard").write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    half_made = root / f"mpiray-{os.getuid()}-r3-abcdef"  # made, owner file not yet written
    half_made.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    # Another user plants what looks like ours: a dir with a dead owner, and a symlink to our data.
    planted = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-I", "-c",
         "import os, sys; d = sys.argv[1] + '/mpiray-%d-r4-planted' % int(sys.argv[3]); "
         "os.mkdir(d, 0o700); open(d + '/owner', 'w').write('%s 999999 0' % os.uname().nodename); "
         "os.symlink(sys.argv[2], sys.argv[1] + '/mpiray-%d-r5-link' % int(sys.argv[3]))",
         str(root), str(victim), str(os.getuid())], capture_output=True, text=True, timeout=60)
    assert planted.returncode == 0, planted.stderr  # named after our uid, as an attacker would

    removed = remove_stale(root)
    assert removed == [stale] and not stale.exists()
    assert live.exists() and other_host.exists() and half_made.exists() and being_tidied.exists()
    assert (victim / "keep").read_text() == "mine"
    assert (root / f"mpiray-{os.getuid()}-r4-planted").exists()  # another user's: never ours to remove
    assert (root / f"mpiray-{os.getuid()}-r5-link").is_symlink()  # not followed, not removed


def make_skeleton(root: Path, label: str, age: float, extra: str = "") -> Path:
    """What a late driver's ray.init() made of a removed private dir (found in /tmp: 0755, Ray's 0777 session
    dirs and its session_latest link, no file), last changed age seconds ago."""
    path = root / f"mpiray-{os.getuid()}-{label}-abcdef"
    session = path / "ray" / "session_2026-11-26_05-39-02_543113_25584"
    for sub in ("sockets", "runtime_resources", "logs/old"):
        (session / sub).mkdir(parents=True)
    (path / "ray" / "session_latest").symlink_to(session)
    if extra:
        (session / "logs" / extra).write_text("a log line\n")
    path.chmod(0o755)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_a_private_dirs_tree_that_a_late_driver_made_again_is_swept_once_old(short_tmp):
    from mpiray.raynode.private import SKELETON_AFTER_S, remove_stale

    old = make_skeleton(short_tmp, "r0", SKELETON_AFTER_S + 60)
    fresh = make_skeleton(short_tmp, "r1", 0)  # maybe a rank's dir in the making: left
    with_a_file = make_skeleton(short_tmp, "r2", SKELETON_AFTER_S + 60, extra="raylet.out")  # something to keep
    deep = make_skeleton(short_tmp, "r3", SKELETON_AFTER_S + 60)
    (deep / "ray" / "a" / "b" / "c" / "d" / "e" / "f").mkdir(parents=True)  # deeper than Ray's: not its tree
    os.utime(deep, (time.time() - SKELETON_AFTER_S - 60,) * 2)
    assert remove_stale(short_tmp) == [old] and not old.exists()
    assert fresh.exists() and with_a_file.exists() and deep.exists()
