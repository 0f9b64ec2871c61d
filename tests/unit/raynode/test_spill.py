"""The job's spill dir on each host (mpiray/raynode/spill.py): private, the same path on every host, taken over
only when it is this user's own, removed once no node's objects are left."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from mpiray.errors import ConfigError
from mpiray.raynode import spill


def test_the_spill_dir_is_private_made_once_and_removed_when_empty(tmp_path):
    path = spill.job_spill_dir(tmp_path, "4711")
    assert path.name == f"mpiray-{os.getuid()}-spill-4711"
    assert spill.make(path) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o700 and spill.ray_spill_dir(path).is_dir()
    assert spill.make(path) is False  # another host on a shared file system: taken as it is, ours
    ours, theirs = (spill.ray_spill_dir(path) / f"ray_spilled_objects_{node}" for node in ("aa", "bb"))
    for node_dir in (ours, theirs):
        node_dir.mkdir()
        (node_dir / "object").write_bytes(b"x")
    spill.remove_node(path, "aa")
    assert not ours.exists() and theirs.exists()  # another node's objects stay
    spill.remove_node(path, "bb")
    assert not path.exists()  # the last one removes the dir


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="attacks as a second user need root")
@pytest.mark.parametrize("planted", ["dir", "symlink"])
def test_a_spill_dir_another_user_planted_is_refused_never_used(tmp_path, planted):
    shared = Path(tempfile.mkdtemp(prefix="sp", dir="/tmp"))  # as /tmp itself: anyone may create entries
    try:
        shared.chmod(0o1777)
        path = spill.job_spill_dir(shared, "4711")
        target = tmp_path / "victim"
        target.mkdir()
        attack = ["mkdir", "-m", "0777", str(path)] if planted == "dir" else ["ln", "-s", str(target), str(path)]
        subprocess.run(["runuser", "-u", "nobody", "--", *attack], check=True, timeout=30)
        with pytest.raises(ConfigError, match="not a private directory of this user's") as refused:
            spill.make(path)
        assert refused.value.cause == "dir_unwritable"
        assert list(target.iterdir()) == []  # nothing written through the link
    finally:
        shutil.rmtree(shared)
