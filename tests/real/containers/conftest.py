"""The container tier's images: built once per clone by tests/containers/image.sh (Debian's packages, Ray from
PyPI; never pulled), reused by every test of the session. podman reads tests/containers/containers.conf (this
machine's cgroups and limits: see the file)."""

import os
import subprocess

import pytest

from containers.images import IMAGE_SCRIPT, ROOT, runtime_env

BUILD_TIMEOUT_S = 900  # mmdebstrap (~25 s), Ray's wheels (~25 s), podman import (~12 s); apt-get on a fresh machine


@pytest.fixture(scope="session")
def images():
    """runtime -> the reference of its test image (Debian 12's Python 3.11.2 and Ray 2.60), built on first use."""
    built: dict[str, str] = {}

    def image(runtime: str) -> str:
        if runtime not in built:
            result = subprocess.run(["bash", str(IMAGE_SCRIPT), runtime],
                                    capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=ROOT,
                                    env={**os.environ, **runtime_env(runtime)})
            if result.returncode == 3:  # a runtime this machine does not have (Apptainer): its tier runs elsewhere
                pytest.skip(result.stderr.strip().splitlines()[-1])
            if result.returncode != 0 and os.geteuid() != 0:
                pytest.skip(f"no {runtime} image here: {result.stderr.strip()[-300:]}")
            assert result.returncode == 0, result.stderr[-3000:]
            built[runtime] = result.stdout.strip().splitlines()[-1]
        return built[runtime]

    return image
