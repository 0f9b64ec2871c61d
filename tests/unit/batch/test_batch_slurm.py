"""A Slurm worker job's script and its states (mpiray/batch/slurm.py), as text and data."""

from __future__ import annotations

import shlex

import pytest

from mpiray.batch import jobs, slurm
from mpiray.package import module_command


def command_of(script: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    return shlex.split(line[len("exec "):])


def test_a_slurm_worker_job_is_one_rank_that_joins_the_cluster_as_its_node(worker_job):
    script = slurm.slurm_script(worker_job, 7)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("#SBATCH --job-name=mpiray-1234-w7", "#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=4",
                      "#SBATCH --export=NONE", "#SBATCH --signal=TERM@60", "#SBATCH --gpus=1",
                      "#SBATCH --output=/scratch/logs/1234/mpiray-1234-w7-%j.out",
                      "#SBATCH --partition=debug", "#SBATCH --time=00:30:00"):
        assert directive in lines, directive
    assert "#PBS -q debug" not in script  # the other scheduler's lines of the template are left out
    assert "export MPIRAY_REGISTRY=/home/u/.mpiray/clusters" in lines and "module load gcc" in lines
    command = command_of(script)
    assert command[:5] == ["srun", "--export=ALL", "--mpi=pmi2", "--ntasks=1", "--cpus-per-task=4"]
    assert command[5:] == [*module_command("mpiray", "/home/u/mpiray/.venv/bin/python"), "run", "--join", "1234",
                           "--num-cpus", "4", "--num-gpus", "1", "--resources", '{"NODE_ID_AS_RESOURCE": 7}',
                           "--market-type", "spot", "--log-dir", "/scratch/logs"]
    assert "token" not in script.lower()  # it comes from the registry, never through the script


def test_a_worker_job_drains_with_the_head_jobs_stop_grace(worker_job):
    """Under PBS a worker job drains --stop-grace + 30 s before its walltime: the head's grace, not the default."""
    from dataclasses import replace

    command = command_of(slurm.slurm_script(replace(worker_job, stop_grace=8.0), 7))
    assert command[-2:] == ["--stop-grace", "8"]


@pytest.mark.parametrize("state, expected", [
    ("PENDING", jobs.PENDING), ("CONFIGURING", jobs.PENDING), ("RUNNING", jobs.RUNNING),
    ("COMPLETING", jobs.RUNNING), ("COMPLETED", jobs.GONE), ("CANCELLED", jobs.GONE), ("", jobs.GONE),
])
def test_slurm_states_are_pending_running_or_gone(state, expected):
    assert slurm.slurm_state(state) == expected
