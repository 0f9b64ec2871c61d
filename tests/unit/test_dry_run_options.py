"""--dry-run is the command line's only: the library refuses it."""

from __future__ import annotations

import subprocess
import sys

from helpers import (
    ROOT,
)


def test_dry_run_is_the_command_lines_only():
    script = "import mpiray; mpiray.init(dry_run=True)"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "mpiray.init() does not take dry_run=" in result.stderr
