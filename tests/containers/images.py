"""The container tier's runtimes, and what their commands need in their environment on this machine."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("charliecloud", "podman")  # Debian's: installed by image.sh, run everywhere the tests run
ELSEWHERE = ("apptainer", "singularity")  # not in Debian 12: their tests run where a site installed them
PODMAN_CONF = ROOT / "tests" / "containers" / "containers.conf"  # this machine's cgroups and limits: see the file
IMAGE_SCRIPT = ROOT / "tests" / "containers" / "image.sh"


def runtime_env(runtime: str) -> dict[str, str]:
    """ch-run wants USER (a batch job has it); podman reads CONTAINERS_CONF."""
    env = {"USER": os.environ.get("USER", "root")}
    if runtime == "podman":
        env["CONTAINERS_CONF"] = str(PODMAN_CONF)
    return env
