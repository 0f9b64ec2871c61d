"""Fixtures of the PBS tests: the testbed, brought up once and down at the end (a session fixture), and
each test's jobs, with a submit dir of the ordinary user's, deleted and waited for at its end.

tests/real/conftest.py imports them (`from pbs.fixture import pbs_jobs, pbs_testbed`).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from . import testbed
from lifecycle import KEEP_ENV

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
GONE_TIMEOUT_S = testbed.KILL_DELAY_S + 60  # PBS's SIGKILL comes kill_delay after a qdel


def user_cannot_run_reason(user: str) -> str | None:
    """Why the testbed's user cannot run this checkout with this Python (PBS runs no job of root), or None."""
    runuser = shutil.which("runuser")
    if runuser is None:
        return "runuser (util-linux) is missing"
    result = subprocess.run([runuser, "-u", user, "--", PYTHON, "-c", "import mpiray, ray, mpi4py"], cwd="/",
                            capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    if result.returncode != 0:
        return (f"the PBS testbed's user {user} cannot run {PYTHON} on this checkout ({result.stderr.strip()[-300:]}): "
                f"run the PBS tests with `bash tests/envs.sh pbs` (an environment of Debian's Python, which every "
                f"user may run), from a checkout every user may read")
    return None


@pytest.fixture(scope="session")
def pbs_testbed():
    """The running testbed (a testbed.Testbed); left up at the end if MPIRAYTEST_KEEP_TESTBED=1. Skipped, in one
    line that says why, where no PBS is installed (testbed.unavailable_reason, as tests/run.sh decides)."""
    reason = testbed.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    user = testbed.describe().user
    testbed.prepare(user)  # its runtime packages and the job user, where PBS is installed
    reason = user_cannot_run_reason(user)
    if reason is not None:
        pytest.skip(reason)
    bed = testbed.up()  # any other failure is an error: the machine can host the testbed
    try:
        yield bed
    finally:
        if os.environ.get(KEEP_ENV) != "1":
            testbed.down(bed.state_dir)


class PbsJobs:
    """The jobs of one test, and a submit dir (PBS_O_WORKDIR) the testbed's user owns."""

    def __init__(self, bed: testbed.Testbed):
        self.bed = bed
        self.ids: list[str] = []
        account = pwd.getpwnam(bed.user)
        self.workdir = Path(tempfile.mkdtemp(prefix="pbs-test-"))
        os.chown(self.workdir, account.pw_uid, account.pw_gid)

    def variables(self, driver: list[str] | None = None, **extra: str) -> dict[str, str]:
        """qsub -v for the scripts in jobs/: this checkout, this Python's environment, the driver."""
        # MPIRAY_STOP_GRACE 8: the grace the PBS tier ran with on a real OpenPBS (2026-11-25), inside the testbed
        # queue's kill_delay 30; the scripts' own default is 60 (the walltime stop gets it all).
        variables = {"MPIRAY_DIR": str(ROOT), "ENV_SETUP": f"source {shlex.quote(str(Path(PYTHON).parent / 'activate'))}",
                     "MPIRAY_STOP_GRACE": "8", **extra}
        if driver is not None:
            variables["MPIRAY_DRIVER"] = shlex.join(driver)
        return variables

    def submit(self, script: Path, *options: str, variables: dict[str, str] | None = None) -> str:
        assert not any("," in value for value in (variables or {}).values()), "qsub -v splits values at commas"
        job_id = self.bed.submit(script, *options, workdir=self.workdir, variables=variables)
        self.ids.append(job_id)
        return job_id

    def wait_until_gone(self, job_id: str, timeout: float = GONE_TIMEOUT_S) -> None:
        """Fail unless every process of the job (its script, mpiexec, ranks, Ray, driver) has ended."""
        deadline = time.monotonic() + timeout
        while (left := testbed.job_processes(self.bed, job_id)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"processes of job {job_id} still running:\n" + "\n".join(
            f"  {pid} {command[:150]}" for pid, command in sorted(left.items()))

    def delete_all(self) -> None:
        running = [job_id for job_id in self.ids if (self.bed.job(job_id) or {}).get("job_state") != testbed.FINISHED]
        if running:
            self.bed.run(["qdel", *running], timeout=60)
        for job_id in self.ids:
            self.wait_until_gone(job_id)
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def pbs_jobs(pbs_testbed):
    tracked = PbsJobs(pbs_testbed)
    yield tracked
    tracked.delete_all()
