#!/bin/bash
# A Ray cluster over several Slurm nodes: one launcher rank, hence one Ray node, per node. Rank 0
# runs the Ray head and the driver; the job's exit code is the driver's.
#
#   cd /where/logs/should/go && sbatch /path/to/jobs/slurm_multi_node.sh
#   sbatch --nodes=8 jobs/slurm_multi_node.sh      # more nodes: nothing else to change
#   sbatch -N 3 jobs/slurm_multi_node.sh python my_driver.py --its-flags   # a driver of yours, not the trainer
#
# sbatch's command-line options (and SBATCH_ACCOUNT, SBATCH_PARTITION in its environment) override
# the #SBATCH lines: `sbatch -A myproject -p debug --cpus-per-task=8 jobs/slurm_multi_node.sh`.
#
#SBATCH --job-name=ray-multi-node
#SBATCH --account=myproject            # your allocation
#SBATCH --partition=standard           # a CPU partition of your cluster
#SBATCH --nodes=3                      # 1 head + 2 worker nodes
#SBATCH --ntasks-per-node=1            # one launcher rank per node = one Ray node per host
#SBATCH --cpus-per-task=36             # a node's cores, all Ray CPUs (Kestrel: 104; retired Eagle: 36)
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to every rank 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/
#SBATCH --requeue                      # preemption or `scontrol requeue` starts the job again...
#SBATCH --open-mode=append             # ...and its output file keeps the earlier runs' lines

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI, on every node: a venv, or e.g.
# "module load conda && conda activate ray".
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# What rank 0 runs once every node has joined (shell-style quoting works); the RLlib trainer here.
# A requeued job keeps its id, and the trainer continues the experiment that id started from its
# last checkpoint (a finished one is not trained again): nothing here changes between runs. An
# empty MPIRAY_DRIVER stays empty: no driver, as for a job that joins another's cluster and serves
# it (MPIRAY_JOIN=4711 MPIRAY_ROLE=rollout MPIRAY_DRIVER= sbatch jobs/slurm_multi_node.sh).
export MPIRAY_DRIVER=${MPIRAY_DRIVER-"python -m train --stop-timesteps 1000000"}
# A driver given after the script's name on sbatch's line wins over both.
if [ $# -gt 0 ]; then
  MPIRAY_DRIVER=$(printf '%q ' "$@")
fi
# A cluster that serves Ray Jobs only (`mpiray submit JOB_ID -- ...` from a login node), up until its walltime:
#   MPIRAY_DASHBOARD=1 MPIRAY_DRIVER="sleep infinity" sbatch jobs/slurm_multi_node.sh
# Seconds the driver gets from SIGTERM to SIGKILL, e.g. to save a checkpoint (Ray's own
# processes then get at most 5 s more). Keep it well below the 120 s notice above.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-20}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1

echo "job $SLURM_JOB_ID: Ray on $SLURM_JOB_NUM_NODES nodes ($SLURM_JOB_NODELIST), 1 head +" \
     "$((SLURM_JOB_NUM_NODES - 1)) workers, $SLURM_CPUS_PER_TASK CPUs each"

# What this job does not need:
# - no fixed waits: each rank waits until the GCS lists its own Ray node, then rank 0 starts the
#   driver; a node that never joins is named in rank 0's log at --startup-timeout;
# - no cluster password: the launcher makes a per-job token that only this job's ranks know;
# - no `ray stop` at the end: it would kill every Ray of yours on the node; each rank stops
#   exactly the processes it started.
#
# srun options:
# --mpi=pmi2             the ranks form one MPI world. Without it (and no MpiDefault in
#                        slurm.conf) each rank is alone and the launcher stops with an
#                        explanation. `srun --mpi=list` shows what your Slurm has.
#                        MPICH over UCX under pmi2 can fail in MPI_Init with "mpi/pmi2: invalid
#                        client request": on the PyPI MPICH wheel mpiray picks the ofi netmod by
#                        itself; for a site MPICH see docs/troubleshooting.md, mpi_init.
# --kill-on-bad-exit=1   a rank that exits with an error ends the step, rather than leaving
#                        the others to wait for it.
# --no-kill              a host that dies outright (power, crash) does not end the step: mpiray
#                        finds it gone (host_lost), leaves it out, and starts a spare in its place.
#                        The job itself outlives the host only when submitted with sbatch's
#                        --no-kill too; without it Slurm ends it once the host is down (SlurmdTimeout)
#                        and, with --requeue, starts it again. Use both with MPIRAY_SPARES=1 or more.
# --cpus-per-task        repeated: since Slurm 22.05 srun no longer inherits it from sbatch.
#
# Stopping early: `scancel --signal=TERM JOBID` gives the ranks the same notice as the time
# limit: rank 0 sends SIGTERM to the driver, gives it MPIRAY_STOP_GRACE seconds, then all ranks
# stop Ray, and the job ends by itself with code 143. A plain `scancel JOBID` sends SIGTERM too,
# but Slurm follows with SIGKILL after KillWait (`scontrol show config | grep KillWait`).
code=0
srun --mpi=pmi2 --kill-on-bad-exit=1 --no-kill \
     --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" \
     python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs" || code=$?

echo "job $SLURM_JOB_ID: exit code $code; per-rank logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"  # the job's ExitCode in sacct: the driver's
