"""The head lost as a user loses it (tests/drivers/head_loss.py), under each front end: what every rank's process
really exited with as its launcher saw it, beside what it logged. A rank that logged `exit code 1` and was then
SIGKILLed on its way out (Hydra's proxy does so to a host's remaining ranks when one leaves without MPICH's exit
handlers) shows only here: mpirun may still return 1, with the killed ranks' statuses set to 0. Used by
tests/real/local/test_library.py and tests/real/slurm/test_slurm.py (once per shape) and by
tests/benchmarks/repeat_head_loss.py (20 times per shape, its report kept)."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import BIN, PYTHON, ROOT, START_RAY, exit_codes

DRIVER = ROOT / "tests" / "drivers" / "head_loss.py"
RANKS = 3
# The shapes users run it in: their script on mpiray.init() under plain python and under `python -m mpiray`, and a
# command line's driver that does the same. Each takes the log dir. The GCS is not started again (gcs_restarts=0 in
# the script's init(), --gcs-restarts 0 here): its death is then the head's loss, as where Ray keeps no GCS store
# (2.52) or the restarts are spent.
SHAPES = {
    "script": lambda logs: [PYTHON, str(DRIVER), "init", str(logs)],
    "python -m mpiray": lambda logs: [PYTHON, "-m", "mpiray", str(DRIVER), "init", str(logs)],
    "command line": lambda logs: [PYTHON, str(START_RAY), "--log-dir", str(logs), "--gcs-restarts", "0", "--",
                                       PYTHON, str(DRIVER), "driver"],
}


@dataclass(frozen=True)
class Outcome:
    returncode: int  # the launcher's
    statuses: list[int] | None  # each rank's, as the launcher saw it: an exit code, or -N for signal N
    logged: list[int | None]  # each rank's `exit` event
    seconds: float  # the launcher's start to its end
    stdout: str
    stderr: str
    job_dir: Path

    def every_rank_exited_with(self, code: int) -> bool:
        return self.returncode == code and self.statuses == [code] * RANKS and self.logged == [code] * RANKS

    def describe(self) -> str:
        return f"launcher {self.returncode}, ranks' statuses {self.statuses}, logged {self.logged}"


def hydra_statuses(output: str) -> list[int] | None:
    """Each rank's status from Hydra's `-print-all-exitcodes` line ("Exit codes: [vm] 256,0,0": wait statuses):
    its exit code, or -N where signal N ended it. None: no such line."""
    found = re.search(r"Exit codes: \[[^]]*\] ([0-9,]+)", output)
    if found is None:
        return None
    return [status >> 8 if status & 0x7F == 0 else -(status & 0x7F) for status in map(int, found[1].split(","))]


def under_hydra(shape: str, work: Path, timeout: float = 240) -> Outcome:
    """One run of shape with 3 ranks on this host under the PyPI MPICH wheel's mpirun (Hydra)."""
    logs = work / "logs"
    argv = [str(BIN / "mpirun"), "-print-all-exitcodes", "-np", str(RANKS), *SHAPES[shape](logs)]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=timeout)
    (job_dir,) = logs.iterdir()
    return Outcome(result.returncode, hydra_statuses(result.stdout), exit_codes(job_dir, RANKS),
                   time.monotonic() - started, result.stdout, result.stderr, job_dir)


def srun_statuses(stderr: str) -> list[int]:
    """Each task's status from srun's own lines ("srun: error: HOST: task 1: Exited with exit code 1", "...: task 2:
    Killed"): an exit code, or -9/-15 for Killed/Terminated; 0 for a task srun named in none."""
    statuses = [0] * RANKS
    for task, what in re.findall(r"srun: error: \S+: tasks? ([0-9,-]+): (.+)", stderr):
        code = int(what.rsplit(" ", 1)[1]) if what.startswith("Exited with exit code") else \
            -9 if what.startswith("Killed") else -15 if what.startswith("Terminated") else -1
        for part in task.split(","):
            first, _, last = part.partition("-")
            for rank in range(int(first), int(last or first) + 1):
                statuses[rank] = code
    return statuses


def under_srun(bed, name: str, work: Path, timeout: float = 300) -> Outcome:
    """One run of the script shape with 3 tasks on the Slurm testbed's 3 hosts (bed: slurm.testbed.Testbed)."""
    logs = work / "logs"
    argv = ["srun", f"--job-name={name}", "-N3", "--ntasks-per-node=1", "--mpi=pmi2", f"--chdir={work}",
            *SHAPES["script"](logs)]
    started = time.monotonic()
    result = bed.run(argv, timeout=timeout)
    (job_dir,) = logs.iterdir()
    return Outcome(result.returncode, srun_statuses(result.stderr), exit_codes(job_dir, RANKS),
                   time.monotonic() - started, result.stdout, result.stderr, job_dir)
