"""A PBS worker job's script (mpiray/batch/pbs.py), as text."""

from __future__ import annotations

import shlex

from mpiray.batch import jobs, pbs

JOB = jobs.WorkerJob(cluster="1234", python="/home/u/mpiray/.venv/bin/python",
                      log_dir="/scratch/logs/1234", cpus=4, gpus=1,
                      directives=("#SBATCH --partition=debug", "#SBATCH --time=00:30:00", "#PBS -q debug"),
                      setup="module load gcc\nsource /home/u/mpiray/.venv/bin/activate",
                      env={"MPIRAY_REGISTRY": "/home/u/.mpiray/clusters", "MPIR_CVAR_CH4_NETMOD": "ofi"})


def command_of(script: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    return shlex.split(line[len("exec "):])


def test_a_pbs_worker_job_asks_for_one_chunk_of_the_nodes_shape():
    script = pbs.pbs_script(JOB, 3)
    lines = script.splitlines()
    assert "#PBS -N mpiray-1234-w3" in lines and "#PBS -l select=1:ncpus=4:ngpus=1" in lines
    assert "#PBS -q debug" in lines and "#SBATCH --partition=debug" not in script
    assert command_of(script)[:3] == ["mpiexec", "-n", "1"] and "--join" in command_of(script)
