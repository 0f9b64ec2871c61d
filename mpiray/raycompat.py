"""Ray internals mpiray relies on beyond Ray's public API, in one place (a new Ray release breaks this file)."""

from __future__ import annotations

import sys


def reload_auth_settings() -> None:
    """Have this process's Ray read RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH again.

    Ray's C++ config reads them when ray is imported; a script that imported ray before mpiray set
    them would call its own cluster without the token. Ray's own _enable_token_auth does the same.
    """
    if "ray._raylet" in sys.modules:
        from ray._raylet import Config

        Config.initialize("")
