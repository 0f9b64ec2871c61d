"""Worker jobs' scripts and the autoscaler's config (mpiray/batch.py, mpiray/autoscale.py), as text and data."""

from __future__ import annotations

import json
import shlex

import pytest

from mpiray import batch
from mpiray.autoscale import active_jobs, parse_bounds

JOB = batch.WorkerJob(cluster="1234", mpiray_dir="/home/u/mpiray", python="/home/u/mpiray/.venv/bin/python",
                      log_dir="/scratch/logs/1234", cpus=4, gpus=1,
                      directives=("#SBATCH --partition=debug", "#SBATCH --time=00:30:00", "#PBS -q debug"),
                      setup="module load gcc\nsource /home/u/mpiray/.venv/bin/activate",
                      env={"MPIRAY_REGISTRY": "/home/u/.mpiray/clusters", "MPIR_CVAR_CH4_NETMOD": "ofi"})


def command_of(script: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    return shlex.split(line[len("exec "):])


def test_a_slurm_worker_job_is_one_rank_that_joins_the_cluster_as_its_node():
    script = batch.slurm_script(JOB, 7)
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
    assert command[5:] == ["/home/u/mpiray/.venv/bin/python", "/home/u/mpiray/start_ray.py", "--join", "1234",
                           "--num-cpus", "4", "--num-gpus", "1", "--resources", '{"NODE_ID_AS_RESOURCE": 7}',
                           "--log-dir", "/scratch/logs"]
    assert "token" not in script.lower()  # it comes from the registry, never through the script


def test_a_pbs_worker_job_asks_for_one_chunk_of_the_nodes_shape():
    script = batch.pbs_script(JOB, 3)
    lines = script.splitlines()
    assert "#PBS -N mpiray-1234-w3" in lines and "#PBS -l select=1:ncpus=4:ngpus=1" in lines
    assert "#PBS -q debug" in lines and "#SBATCH --partition=debug" not in script
    assert command_of(script)[:3] == ["mpiexec", "-n", "1"] and "--join" in command_of(script)


@pytest.mark.parametrize("state, expected", [
    ("PENDING", batch.PENDING), ("CONFIGURING", batch.PENDING), ("RUNNING", batch.RUNNING),
    ("COMPLETING", batch.RUNNING), ("COMPLETED", batch.GONE), ("CANCELLED", batch.GONE), ("", batch.GONE),
])
def test_slurm_states_are_pending_running_or_gone(state, expected):
    assert batch._slurm_state(state) == expected


def test_autoscale_bounds_count_every_node_and_bad_ones_say_so():
    assert parse_bounds("1:3") == (1, 3) and parse_bounds("4:4") == (4, 4)
    for text in ("3", "0:2", "3:1", "a:b", "1:"):
        with pytest.raises(ValueError):
            parse_bounds(text)


def test_the_jobs_still_to_cancel_are_those_not_known_to_have_ended():
    state = {"jobs": {"1": {"job": "11", "state": batch.RUNNING}, "2": {"job": "12", "state": batch.GONE},
                      "3": {"job": "13", "state": batch.PENDING}}}
    assert active_jobs(json.loads(json.dumps(state))) == {"1": "11", "3": "13"}
    assert active_jobs({}) == {}
