"""What started a rank, from the environment tables (mpiray/batch/environment.py), without a cluster."""

import time

import pytest

from mpiray.batch import environment
from mpiray.batch.environment import default_job_id, detect, singleton_error

# srun -N3 -n3 --mpi=pmi2, task 1.
SRUN_PMI2 = {
    "PMI_FD": "11", "PMI_JOBID": "2.0", "PMI_RANK": "1", "PMI_SIZE": "3",
    "SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_ID": "2", "SLURM_JOB_NUM_NODES": "3",
    "SLURM_LOCALID": "0", "SLURM_MPI_TYPE": "pmi2", "SLURM_NNODES": "3", "SLURM_NPROCS": "3",
    "SLURM_NTASKS": "3", "SLURM_PROCID": "1", "SLURM_STEPID": "0", "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
    "SLURM_TASKS_PER_NODE": "1(x3)",
}
# srun -N3 -n3 (MpiDefault=none): no PMI at all, task 2.
SRUN_NO_PMI = {
    "SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_ID": "3", "SLURM_JOB_NUM_NODES": "3",
    "SLURM_LOCALID": "0", "SLURM_NNODES": "3", "SLURM_NPROCS": "3", "SLURM_NTASKS": "3",
    "SLURM_PROCID": "2", "SLURM_STEPID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "3",
    "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
    "SLURM_TASKS_PER_NODE": "1(x3)",
}
# sbatch -N3 --ntasks-per-node=1, then `mpirun -np 6`: hydra starts 3 proxies as step 2 (one per
# node), so SLURM_STEP_NUM_TASKS and SLURM_PROCID describe the proxies. Rank 5 on the third node.
HYDRA_IN_SBATCH = {
    "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1", "PMI_FD": "6", "PMI_HOSTNAME": "mpiray-node3",
    "PMI_RANK": "5", "PMI_SIZE": "6", "SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_ID": "4",
    "SLURM_JOB_NUM_NODES": "3", "SLURM_LOCALID": "0", "SLURM_NNODES": "3", "SLURM_NPROCS": "3",
    "SLURM_NTASKS": "3", "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "2", "SLURM_STEPID": "2",
    "SLURM_STEP_ID": "2", "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NUM_TASKS": "3",
    "SLURM_STEP_TASKS_PER_NODE": "1(x3)", "SLURM_TASKS_PER_NODE": "1(x3)",
}
# The same job, `mpirun -np 1`: one proxy, one rank.
HYDRA_IN_SBATCH_NP1 = {
    "MPI_LOCALNRANKS": "1", "MPI_LOCALRANKID": "0", "PMI_FD": "5", "PMI_HOSTNAME": "mpiray-node1",
    "PMI_RANK": "0", "PMI_SIZE": "1", "SLURM_JOB_ID": "4", "SLURM_JOB_NUM_NODES": "3",
    "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_STEP_ID": "1", "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_NUM_TASKS": "1",
}
# `python start_ray.py` straight in the batch script: a Slurm job, but no launcher.
BATCH_SCRIPT = {
    "SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_ID": "5", "SLURM_JOB_NUM_NODES": "3", "SLURM_NNODES": "3",
    "SLURM_NPROCS": "3", "SLURM_NTASKS": "3", "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "0",
    "SLURM_TASKS_PER_NODE": "1(x3)",
}
# srun --mpi=pmi2 --het-group=0 -c2 ... : --het-group=1 -c1 ... over a 1+2 node hetjob, task 0: it
# was given component 1's SLURM_CPUS_PER_TASK, so that value means nothing in a hetjob.
HETJOB_STEP = {
    "PMI_FD": "11", "PMI_JOBID": "6.0", "PMI_RANK": "0", "PMI_SIZE": "3", "SLURM_HET_SIZE": "2",
    "SLURM_CPUS_PER_TASK": "1",
    "SLURM_CPUS_PER_TASK_HET_GROUP_0": "2", "SLURM_CPUS_PER_TASK_HET_GROUP_1": "1",
    "SLURM_JOB_ID": "6", "SLURM_JOB_ID_HET_GROUP_1": "7", "SLURM_MPI_TYPE": "pmi2",
    "SLURM_NTASKS": "3", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "3",
    "SLURM_STEP_NUM_TASKS": "3",
}
# srun --mpi=pmi2 --cpus-per-task=8, but mpi4py built against Open MPI: PMI offered, not taken.
SRUN_PMI2_WRONG_MPI = {
    "PMI_FD": "11", "PMI_RANK": "0", "PMI_SIZE": "4", "SLURM_JOB_ID": "77", "SLURM_MPI_TYPE": "pmi2",
    "SLURM_CPUS_PER_TASK": "8", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_TASKS": "4",
}
# sbatch -N3 --ntasks-per-node=2, then Open MPI 5's `mpirun -np 6 --map-by node`: prterun runs in
# the batch step on the first node and starts its daemons (prted) on the other two as one srun step,
# so SLURM_STEP_NUM_TASKS and SLURM_PROCID describe the daemons. Rank 2 on the third node.
OPENMPI_IN_SLURM = {
    "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "0",
    "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_UNIVERSE_SIZE": "6",
    "PMIX_NAMESPACE": "prterun-mpiray-node1-707@1", "PMIX_RANK": "2", "PRTE_LAUNCHED": "1",
    "SLURM_CPUS_ON_NODE": "2", "SLURM_JOB_ID": "9", "SLURM_LOCALID": "0", "SLURM_NNODES": "2",
    "SLURM_NODEID": "1", "SLURM_NPROCS": "2", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
    "SLURM_STEPID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2",
}
# srun -N3 --ntasks-per-node=1 --mpi=pmix (Slurm's pmix_v4 plugin, libpmix 4.2), task 1: no PMI_*,
# the rank is PMIX_RANK and the size only SLURM_STEP_NUM_TASKS.
SRUN_PMIX = {
    "PMIX_HOSTNAME": "mpiray-node2", "PMIX_NAMESPACE": "slurm.pmix.10.0", "PMIX_RANK": "1",
    "SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_ID": "10", "SLURM_LOCALID": "0", "SLURM_MPI_TYPE": "pmix",
    "SLURM_NNODES": "3", "SLURM_NODEID": "1", "SLURM_NPROCS": "3", "SLURM_NTASKS": "3",
    "SLURM_PMIX_MAPPING_SERV": "(vector,(0,3,1))", "SLURM_PROCID": "1", "SLURM_STEPID": "0",
    "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NUM_TASKS": "3",
    "SLURM_STEP_TASKS_PER_NODE": "1(x3)", "SLURM_TASKS_PER_NODE": "1(x3)",
}
# Open MPI 5's mpirun -np 2 on a workstation (PRRTE; PMIx, no PMI_*).
LOCAL_OPENMPI = {
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1",
    "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "PMIX_NAMESPACE": "prterun-vm-938@1",
    "PMIX_RANK": "1", "PRTE_LAUNCHED": "1", "PRTE_SHARED_FS": "FALSE",
}
# PBS Pro on Polaris, `mpiexec -n 4 --ppn 1 --depth 64` (PALS, Cray PMI). OMP_NUM_THREADS=1 is the
# user's, for PyTorch; NCPUS is the chunk's.
PBS_PALS = {
    "PBS_JOBID": "1234567.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov", "PBS_O_WORKDIR": "/home/u/run",
    "NCPUS": "64", "OMP_NUM_THREADS": "1", "PALS_RANKID": "3", "PALS_NODEID": "3",
    "PALS_LOCAL_RANKID": "0", "PALS_DEPTH": "64", "PMI_RANK": "3", "PMI_SIZE": "4",
    "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "1",
}
# Cobalt on Theta, `aprun -n 8 -N 1 -d 64`.
COBALT_APRUN = {
    "COBALT_JOBID": "445566", "COBALT_PARTSIZE": "8", "ALPS_APP_PE": "5", "ALPS_APP_DEPTH": "64",
    "PMI_RANK": "5", "PMI_SIZE": "8",
}
# MPICH's mpirun -np 2 on a workstation (no scheduler).
LOCAL_HYDRA = {"HYDI_CONTROL_FD": "7", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1",
               "PMI_FD": "9", "PMI_HOSTNAME": "vm", "PMI_RANK": "1", "PMI_SIZE": "2"}
# MPICH's gforker: PMI, but none of hydra's variables.
GFORKER = {"PMI_FD": "4", "PMI_RANK": "0", "PMI_SIZE": "3"}


DETECTED = [
    # environment, (scheduler, launcher, job id, launched tasks, task rank, cpus per task)
    pytest.param(SRUN_PMI2, ("slurm", "srun", "2", 3, 1, None), id="srun-pmi2"),
    pytest.param(SRUN_NO_PMI, ("slurm", "srun", "3", 3, 2, None), id="srun-no-pmi"),
    pytest.param(HYDRA_IN_SBATCH, ("slurm", "hydra", "4", 6, 5, None), id="hydra-in-sbatch"),
    pytest.param(HYDRA_IN_SBATCH_NP1, ("slurm", "hydra", "4", 1, 0, None), id="hydra-in-sbatch-np1"),
    pytest.param(BATCH_SCRIPT, ("slurm", "none", "5", None, None, None), id="batch-script"),
    pytest.param(HETJOB_STEP, ("slurm", "srun", "6", 3, 0, None), id="hetjob-step"),
    pytest.param(SRUN_PMI2_WRONG_MPI, ("slurm", "srun", "77", 4, 0, 8), id="srun-pmi2-wrong-mpi"),
    pytest.param(OPENMPI_IN_SLURM, ("slurm", "openmpi", "9", 6, 2, None), id="openmpi-in-slurm"),
    pytest.param(SRUN_PMIX, ("slurm", "srun", "10", 3, 1, None), id="srun-pmix"),
    pytest.param(LOCAL_OPENMPI, ("none", "openmpi", None, 2, 1, None), id="local-openmpi"),
    pytest.param(PBS_PALS, ("pbs", "pals", "1234567", 4, 3, 64), id="pbs-pals"),
    pytest.param(COBALT_APRUN, ("cobalt", "aprun", "445566", 8, 5, 64), id="cobalt-aprun"),
    pytest.param(LOCAL_HYDRA, ("none", "hydra", None, 2, 1, None), id="local-mpirun"),
    pytest.param(GFORKER, ("none", "pmi", None, 3, 0, None), id="gforker"),
    pytest.param({}, ("none", "none", None, None, None, None), id="plain-python"),
    pytest.param({"SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "4(x2)"},
                 ("slurm", "none", "9", None, None, 4), id="slurm-count-with-repeat"),
    pytest.param({"PBS_JOBID": "42[7].pbs01", "NCPUS": "0"},
                 ("pbs", "none", "42[7]", None, None, None), id="pbs-array-no-ncpus"),
]


@pytest.mark.parametrize("environ, expected", DETECTED)
def test_detect(environ, expected):
    env = detect(environ)
    assert (env.scheduler, env.launcher, env.job_id, env.launched_tasks, env.task_rank,
            env.cpus_per_task) == expected


SINGLETONS = [
    # environment, MPI world size the rank saw, words the message must contain (None: no error)
    pytest.param(SRUN_NO_PMI, 1, ["srun started 3 tasks", "srun --mpi=pmi2"], id="srun-no-pmi"),
    pytest.param(SRUN_PMI2, 3, None, id="srun-pmi2"),
    pytest.param(SRUN_PMI2_WRONG_MPI, 1, ["srun started 4 tasks", "SLURM_MPI_TYPE", "srun --mpi=list"],
                 id="srun-pmi2-wrong-mpi"),
    # The proxies' step has 3 tasks but 6 ranks: a healthy run, and a singleton names the 6.
    pytest.param(HYDRA_IN_SBATCH, 6, None, id="hydra-in-sbatch"),
    pytest.param(HYDRA_IN_SBATCH, 1, ["hydra started 6 tasks", "mpiexec that belongs"],
                 id="hydra-in-sbatch-wrong-mpi"),
    pytest.param(HYDRA_IN_SBATCH_NP1, 1, None, id="hydra-np1"),
    pytest.param(BATCH_SCRIPT, 1, None, id="batch-script"),
    pytest.param(HETJOB_STEP, 3, None, id="hetjob-step"),
    pytest.param(PBS_PALS, 1, ["pals started 4 tasks", "cray-pals"], id="pals-wrong-mpi"),
    pytest.param(COBALT_APRUN, 1, ["aprun started 8 tasks", "MPICC=cc"], id="aprun-wrong-mpi"),
    # The daemons' step has 2 tasks but 6 ranks: a healthy run, and a singleton names the 6.
    pytest.param(OPENMPI_IN_SLURM, 6, None, id="openmpi-in-slurm"),
    pytest.param(OPENMPI_IN_SLURM, 1, ["openmpi started 6 tasks", "mpirun that belongs"], id="openmpi-wrong-mpi"),
    pytest.param(LOCAL_OPENMPI, 2, None, id="local-openmpi"),
    pytest.param(LOCAL_OPENMPI, 1, ["openmpi started 2 tasks", "mpirun that belongs"], id="local-openmpi-wrong-mpi"),
    pytest.param(SRUN_PMIX, 3, None, id="srun-pmix"),
    # Debian's MPICH 4.0 under srun --mpi=pmix: not built with PMIx, every task a world of 1.
    pytest.param(SRUN_PMIX, 1, ["srun started 3 tasks", "SLURM_MPI_TYPE", "srun --mpi=list"], id="srun-pmix-wrong-mpi"),
    pytest.param(LOCAL_HYDRA, 2, None, id="local-mpirun"),
    pytest.param({}, 1, None, id="plain-python"),
]


@pytest.mark.parametrize("environ, mpi_size, words", SINGLETONS)
def test_singleton_error(environ, mpi_size, words):
    message = singleton_error(detect(environ), mpi_size)
    if words is None:
        assert message is None
    else:
        assert message is not None
        assert "MPI reports a world of 1 rank" in message
        for word in words:
            assert word in message


def test_job_id_is_the_schedulers_else_a_timestamp_and_pid():
    assert default_job_id(detect(SRUN_PMI2)) == "2"
    assert default_job_id(detect(PBS_PALS)) == "1234567"
    now = 1_795_000_000.0
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    assert default_job_id(detect({}), now=now, pid=4242) == f"{stamp}-4242"


def test_describe_names_scheduler_launcher_and_tasks():
    assert detect(HYDRA_IN_SBATCH).describe() == "scheduler slurm, launcher hydra, 6 tasks"
    assert detect({}).describe() == "scheduler none, launcher none"


def test_on_the_mpich_wheel_the_launcher_chooses_ofi_over_tcp_unless_a_netmod_or_another_library_was_chosen(
        tmp_path):
    prefix, site = tmp_path / "venv", tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (prefix / "lib").mkdir(parents=True)
    site.mkdir(parents=True)
    assert environment.wheel_mpi_variables({}, str(prefix), [str(site)]) == {}  # no MPICH in this environment
    (prefix / "lib" / "libmpi.so.12").touch()
    assert environment.wheel_mpi_variables({}, str(prefix), [str(site)]) == {}  # a libmpi, but not the wheel's
    (site / "mpich-5.0.2.dist-info").mkdir()
    assert environment.wheel_mpi_variables({}, str(prefix), [str(tmp_path), str(site)]) == {
        "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}
    # A provider the user chose stays theirs; the netmod is still chosen.
    assert environment.wheel_mpi_variables({"FI_PROVIDER": "sockets"}, str(prefix), [str(site)]) == {
        "MPIR_CVAR_CH4_NETMOD": "ofi"}
    for chosen in ({"MPIR_CVAR_CH4_NETMOD": "ucx"}, {"MPI4PY_LIBMPI": "/opt/cray/lib/libmpi.so"},
                   {"MPI4PY_MPIABI": "openmpi"}):
        assert environment.wheel_mpi_variables(chosen, str(prefix), [str(site)]) == {}
