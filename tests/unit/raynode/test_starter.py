"""The starter (mpiray/raynode/starter.py): `ray start` held until released, and its watch of the GCS."""

import subprocess
import sys
import threading
import time

import pytest

from mpiray.errors import QueryHung
from mpiray.raynode import commands, starter
from mpiray.raynode.raycompat import ray_version


@pytest.mark.parametrize("niced_import", [False, True])
def test_the_starter_runs_ray_once_released(niced_import):
    result = subprocess.run([*commands.ray_command(niced_import), "--version"], input="go\n",
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"version {ray_version()}" in result.stdout  # the installed Ray's CLI, whichever release it is


def test_the_starters_ray_cli_loads_no_group_ray_start_does_not_use():
    # Each node's starter lives as long as its node: Serve's CLI alone would add pandas, pyarrow and FastAPI to it.
    code = ("import sys; from mpiray.raynode import starter; main = starter.load_cli(False); "
            "print(sorted({'pandas', 'pyarrow', 'fastapi', 'ray.serve'} & set(sys.modules)), "
            "'start' in main.__globals__['cli'].commands)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "True"]


def test_the_starter_starts_nothing_if_the_rank_exits_first():
    # End of file on stdin: the rank that would release it is gone, so no node may start.
    result = subprocess.run([*commands.ray_command(), "start", "--head"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "exited before it let `ray start` go" in result.stderr
    assert "Ray runtime started" not in result.stdout + result.stderr


class _HangingGcs:
    """Stands in for a GCS client whose query never returns (as Ray's could, once, in CI)."""

    def __init__(self):
        self.release = threading.Event()

    def find(self, name, temp_dir, timeout):
        self.release.wait(30)
        return None


def test_a_hung_gcs_query_is_abandoned_at_its_deadline():
    gcs = _HangingGcs()
    started = time.monotonic()
    with pytest.raises(QueryHung, match="did not return within 0.3 s"):
        starter.find_once(gcs, "vm-rank1", "/tmp/x", hung_after=0.3)
    assert time.monotonic() - started < 2
    gcs.release.set()


def test_a_failing_gcs_query_raises_its_own_error():
    class Refusing:
        def find(self, name, temp_dir, timeout):
            raise ConnectionRefusedError("GCS not up")

    with pytest.raises(ConnectionRefusedError, match="GCS not up"):
        starter.find_once(Refusing(), "vm-rank1", "/tmp/x", hung_after=5)


def test_a_gcs_that_refuses_the_token_ends_the_watch_at_once():
    # What Ray's GCS client raises when the token is not the cluster's (seen with Ray 2.60).
    class AuthenticationError(Exception):
        pass

    assert starter.refused(AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing"))
    assert starter.refused(RuntimeError("Failed to get cluster ID from GCS server: Unauthenticated: ..."))
    assert not starter.refused(ConnectionRefusedError(111, "Connection refused"))  # not up yet: ask again
    assert not starter.refused(TimeoutError("timed out"))
