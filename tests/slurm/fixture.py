"""Fixtures of the Slurm tests: the testbed, brought up once and down at the end (a session fixture),
and each test's jobs, all named alike, cancelled and waited for at its end.

tests/real/conftest.py imports them (`from slurm.fixture import jobs, slurm_testbed`).
"""

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mpiray.logs.events import read_events

from . import testbed
from lifecycle import KEEP_ENV
from netns import machine_pids

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
START_RAY = ROOT / "start_ray.py"
# Slurm's SIGKILL comes KillWait (10 s) after a cancel; then the nodes need a moment.
GONE_TIMEOUT_S = testbed.KILL_WAIT_S + 50


@pytest.fixture(scope="session")
def slurm_testbed():
    """The running testbed (a testbed.Testbed); left up at the end if MPIRAYTEST_KEEP_TESTBED=1."""
    reason = testbed.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    # Any other failure is an error: the machine can host the testbed, so it must come up.
    bed = testbed.up()
    try:
        yield bed
    finally:
        if os.environ.get(KEEP_ENV) != "1":
            testbed.down(bed.state_dir)


class Jobs:
    """The jobs of one test: all named `name`, their ids as they become known."""

    def __init__(self, bed: testbed.Testbed):
        self.bed = bed
        self.name = f"mpiray-test-{secrets.token_hex(3)}"
        self.ids: list[str] = []

    def env(self, submit_dir: Path, driver: list[str], **extra: str) -> dict[str, str]:
        """Environment of sbatch for the scripts in jobs/: this checkout, its venv, the driver."""
        return self.bed.env({
            **os.environ,
            "MPIRAY_DIR": str(ROOT),
            "ENV_SETUP": f"source {shlex.quote(str(Path(PYTHON).parent / 'activate'))}",
            "MPIRAY_DRIVER": shlex.join(driver),
            **extra,
        })

    def srun(self, submit_dir: Path, nodes: int, *args: str, cpus: int = 2, no_kill: bool = False) -> list[str]:
        """The launcher on nodes hosts, a rank each (pmi2), with args (its options, then "--" and a driver): the argv
        of srun, from submit_dir, its job dir under submit_dir/logs. no_kill: the job and step outlive a host that
        dies (srun --no-kill, as jobs/slurm_multi_node.sh)."""
        kill = ["--no-kill", "--kill-on-bad-exit=1"] if no_kill else []
        return ["srun", f"--job-name={self.name}", f"-N{nodes}", f"-n{nodes}", f"--cpus-per-task={cpus}", "--mpi=pmi2",
                *kill, f"--chdir={submit_dir}", PYTHON, str(START_RAY), "--log-dir", str(submit_dir / "logs"), *args]

    def submit(self, script: Path, submit_dir: Path, env: dict[str, str], *options: str) -> str:
        """sbatch the script from submit_dir on the testbed's partition, from its login host (as a user submits);
        returns the job id."""
        result = self.bed.login(
            ["sbatch", "--parsable", f"--job-name={self.name}", f"--partition={self.bed.partition}",
             *options, str(script)],
            env=env, cwd=submit_dir, timeout=60)
        assert result.returncode == 0, result.stderr
        job_id = result.stdout.strip().split(";")[0]
        self.ids.append(job_id)
        return job_id

    def wait_until_gone(self, job_id: str, timeout: float = GONE_TIMEOUT_S) -> None:
        """Fail unless every process of the job (slurmstepd, ranks, Ray, driver) has ended."""
        deadline = time.monotonic() + timeout
        while (left := testbed.job_processes(self.bed, job_id)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"processes of job {job_id} still running:\n" + "\n".join(
            f"  {pid} {command[:150]}" for pid, command in sorted(left.items()))

    def step(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """An srun of this test's job name run to its end; one still running after timeout s fails the test with
        what each Python process of its job was doing then (py-spy), before srun is killed."""
        with subprocess.Popen(argv, env=self.bed.env(), text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                queued = self.bed.run(["squeue", "-h", f"--name={self.name}", "-o", "%i"], timeout=60)
                dumps = [stacks(self.bed, job_id) for job_id in queued.stdout.split()]
                proc.kill()
                stdout, stderr = proc.communicate(timeout=60)
                pytest.fail(f"{argv[0]} still ran after {timeout:g} s:\n{stdout[-2000:]}\n{stderr[-2000:]}\n"
                            + "\n".join(dumps))
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def ended_ids(self) -> list[str]:
        """Ids of the ended jobs with this name (srun's too), from the job completion log."""
        result = self.bed.run(["sacct", "--completion", "--noheader", "--parsable2",
                               "--format=JobID,JobName"], timeout=60, check=True)
        return [line.split("|")[0] for line in result.stdout.splitlines()
                if line.endswith(f"|{self.name}")]

    def cancel_all(self) -> None:
        self.bed.run(["scancel", f"--name={self.name}"], timeout=60)
        for job_id in dict.fromkeys(self.ids + self.ended_ids()):
            self.wait_until_gone(job_id)


@pytest.fixture
def jobs(slurm_testbed):
    tracked = Jobs(slurm_testbed)
    yield tracked
    tracked.cancel_all()


def stacks(bed, job_id: str) -> str:
    """The Python stacks (and native frames, where py-spy can) of every process of a job now (py-spy, beside this Python or in the
    project's .venv): what a step that hangs is waiting in."""
    spy = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or shutil.which("py-spy", path=str(ROOT / ".venv/bin"))
    if spy is None:
        return f"job {job_id}: no py-spy to show its stacks"
    shown = []
    for pid, command in sorted(testbed.job_processes(bed, job_id).items()):
        if "python" in command.split(" ")[1]:  # "HOST: ARGV..."
            shown.append(f"--- job {job_id}, pid {pid}: {command[:160]}")
            for native in ([], ["--native"]):  # py-spy's native frames fail on some builds: the Python ones first
                dump = subprocess.run([spy, "dump", *native, "--pid", str(pid)], capture_output=True, text=True,
                                      timeout=60)
                shown.append(dump.stdout[-4000:] if dump.returncode == 0 else f"py-spy {native}: {dump.stderr[:200]}")
    return "\n".join(shown) or f"job {job_id}: no Python process left"


def start(bed, argv: list[str], out: Path) -> subprocess.Popen:
    """A Slurm client command (srun, sbatch) against the testbed, in the background, its output into out."""
    with open(out, "w") as sink:
        return subprocess.Popen(argv, env=bed.env(dict(os.environ)), stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> int:
    """proc's exit code, once it ended within timeout; else it is killed (its whole session) and the wait fails."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def raylet_of(bed, job_dir: Path, rank: int, name: str = "raylet") -> psutil.Process:
    """The raylet (or another process by name: the head's gcs_server) of a rank's Ray node, by the machine's PID:
    the rank logs its host's PIDs (node_pids), and each testbed host numbers its processes itself."""
    for record in read_events(job_dir / f"rank-{rank:04d}.jsonl"):
        if record["event"] != "node_pids":
            continue
        (node,) = [node for node in bed.nodes if node.name == record["host"]]
        on_host = machine_pids(node)
        for pid in record["fields"]["pids"]:
            try:
                process = psutil.Process(on_host[pid])
                if process.name() == name:
                    return process
            except (KeyError, psutil.Error):
                continue
    pytest.fail(f"no {name} among the processes rank {rank} logged in {job_dir}")
