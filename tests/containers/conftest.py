"""The container tier's image: built once per clone by tests/containers/image.sh (Debian's packages, Ray from
PyPI; never pulled), reused by every test of the session."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 900  # mmdebstrap (~25 s) and Ray's wheels (~25 s) on an idle machine; apt-get on a fresh one


@pytest.fixture(scope="session")
def charliecloud_image() -> str:
    """The Charliecloud directory image with Debian 12's Python and Ray 2.60 in it."""
    result = subprocess.run(["bash", str(ROOT / "tests" / "containers" / "image.sh"), "charliecloud"],
                            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=ROOT)
    if result.returncode != 0 and os.geteuid() != 0:
        pytest.skip(f"no Charliecloud image here: {result.stderr.strip()[-300:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]
