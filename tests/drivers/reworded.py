"""start_ray.py with every human log message reworded (tests/support/reword.py): `python reworded.py [start_ray.py args]`."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(TESTS / "support")]

from mpiray.cli import run  # noqa: E402

from reword import reword  # noqa: E402

reword()
sys.exit(run(sys.argv[1:], prog="reworded.py"))
