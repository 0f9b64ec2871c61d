"""A worker job of an elastic cluster, as the batch back ends' tests script it."""

import pytest

from mpiray.batch.jobs import WorkerJob


@pytest.fixture
def worker_job() -> WorkerJob:
    """Cluster 1234's worker jobs: 4 CPUs and a GPU each, a template with both schedulers' directives."""
    return WorkerJob(cluster="1234", python="/home/u/mpiray/.venv/bin/python", log_dir="/scratch/logs/1234", cpus=4,
                     gpus=1, directives=("#SBATCH --partition=debug", "#SBATCH --time=00:30:00", "#PBS -q debug"),
                     setup="module load gcc\nsource /home/u/mpiray/.venv/bin/activate",
                     env={"MPIRAY_REGISTRY": "/home/u/.mpiray/clusters", "MPIR_CVAR_CH4_NETMOD": "ofi"})
