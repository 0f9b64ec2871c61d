"""Ray internals mpiray relies on beyond Ray's public API, in one place (a new Ray release breaks this file)."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path


@functools.cache
def ray_version() -> str:
    """The installed Ray's version, without importing Ray (seconds) or importlib.metadata (~40 ms a rank)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        return "not installed"
    try:
        text = Path(spec.origin).with_name("_version.py").read_text()
        return re.search(r'^version = "([^"]+)"', text, re.M).group(1)
    except (OSError, AttributeError):
        from importlib.metadata import version

        return version("ray")


def reload_auth_settings() -> None:
    """Have this process's Ray read RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH again.

    Ray's C++ config reads them when ray is imported; a script that imported ray before mpiray set
    them would call its own cluster without the token. Ray's own _enable_token_auth does the same.
    """
    if "ray._raylet" in sys.modules:
        from ray._raylet import Config

        Config.initialize("")
