"""The first commands a new user runs, exactly as the pages print them: the README's laptop job (shortened to one
iteration by the form jobs/laptop.sh's usage gives) and jobs/init_example.py under mpirun, as its docstring has it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, Launch, assert_nothing_left

TRAIN_TIMEOUT_S = 420


def as_printed(path: Path, command: str) -> list[str]:
    """command's argv, once the page at path is seen to print it as is."""
    assert command in path.read_text(), f"{path.relative_to(ROOT)} no longer prints: {command}"
    return shlex.split(command)


def only_job_dir(log_root: Path) -> Path:
    (job_dir,) = [path for path in log_root.iterdir() if path.is_dir()]
    return job_dir


@pytest.mark.train
def test_the_laptop_job_trains_one_iteration_on_four_nodes_and_keeps_its_checkpoint(tmp_path):
    argv = as_printed(ROOT / "jobs" / "laptop.sh", "bash jobs/laptop.sh -- python -m train --stop-iters 1")
    env = {**os.environ, "MPIRAY_LOG_DIR": str(tmp_path / "logs")}  # the trainer's results/ goes beside it
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r": 4 Ray nodes on 1 host ready in", result.stdout), result.stdout[-3000:]
    assert "iter 1 |" in result.stdout + result.stderr
    assert list((tmp_path / "results").rglob("checkpoint_*")), "no checkpoint kept"
    assert_nothing_left(Launch(result.returncode, result.stdout, result.stderr, only_job_dir(tmp_path / "logs"), 0))


@pytest.mark.parametrize("command", ["mpirun -np 4 .venv/bin/python jobs/init_example.py",
                                     "mpirun -np 4 .venv/bin/python -m mpiray jobs/init_example.py"],
                         ids=["plain", "wrapped"])
def test_the_init_example_runs_under_mpirun_as_its_docstring_says(tmp_path, command):
    argv = as_printed(ROOT / "jobs" / "init_example.py", command)
    argv[0] = str(ROOT / ".venv" / "bin" / "mpirun")  # the venv's MPI, as the quick start puts it on PATH
    env = {**os.environ, "MPIRAY_LOG_DIR": str(tmp_path / "logs")}
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.search(r": 4 Ray nodes, (\d+) CPUs;", result.stdout)
    assert found, result.stdout
    cpus = int(found[1])
    assert f"sum of squares: {sum(x * x for x in range(4 * cpus))}" in result.stdout
    assert_nothing_left(Launch(result.returncode, result.stdout, result.stderr, only_job_dir(tmp_path / "logs"), 0))
