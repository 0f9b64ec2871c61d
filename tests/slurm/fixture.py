"""Session fixture that brings the Slurm testbed up once and down at the end.

tests/conftest.py can import it with `from slurm.fixture import slurm_testbed`.
"""

import os

import pytest

from . import testbed


@pytest.fixture(scope="session")
def slurm_testbed():
    """The running testbed (a testbed.Testbed); left up at the end if MPIRAY_KEEP_TESTBED=1."""
    reason = testbed.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    # Any other failure is an error: the machine can host the testbed, so it must come up.
    bed = testbed.up()
    try:
        yield bed
    finally:
        if os.environ.get(testbed.KEEP_ENV) != "1":
            testbed.down(bed.state_dir)
