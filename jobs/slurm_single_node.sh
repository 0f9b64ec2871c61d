#!/bin/bash
# A Ray cluster on one whole Slurm node (NREL Kestrel style; Eagle, retired, ran the same): every core of the node is a
# Ray CPU. One launcher rank by default; with RANKS_PER_NODE=N the node is split into N Ray nodes
# (e.g. one per NUMA domain or GPU), and the launcher makes sure they never count a core twice.
# The job's exit code is the driver's.
#
#   cd /where/logs/should/go && sbatch /path/to/jobs/slurm_single_node.sh
#   RANKS_PER_NODE=4 sbatch jobs/slurm_single_node.sh
#
# sbatch's command-line options (and SBATCH_ACCOUNT, SBATCH_PARTITION in its environment) override
# the #SBATCH lines: `sbatch -A myproject -p debug jobs/slurm_single_node.sh`.
#
#SBATCH --job-name=ray-single-node
#SBATCH --account=myproject            # your allocation
#SBATCH --partition=standard           # e.g. short, standard, debug
#SBATCH --nodes=1
#SBATCH --exclusive                    # the whole node: all its cores (Kestrel 104; retired Eagle: 36)
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to the launcher 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
# The mpiray checkout (start_ray.py).
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI: a venv, or e.g.
# "module load conda && conda activate ray".
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# What rank 0 runs once the cluster is up (shell-style quoting works); the RLlib trainer here.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --stop-timesteps 1000000"}
# Launcher ranks (Ray nodes) on the node; the node's cores are divided evenly between them.
RANKS_PER_NODE=${RANKS_PER_NODE:-1}
# Seconds the driver gets from SIGTERM to SIGKILL, e.g. to save a checkpoint (Ray's own
# processes then get at most 5 s more). Keep it well below the 120 s notice above.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-20}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1

cpus_per_rank=$((SLURM_CPUS_ON_NODE / RANKS_PER_NODE))
echo "job $SLURM_JOB_ID: Ray on $(hostname): $RANKS_PER_NODE Ray node(s) of $cpus_per_rank CPUs"

# Why srun for a single node: it puts the launcher in a job step, so that the --signal notice
# and scancel reach it, and it binds each rank to its own cores. Without --cpus-per-task a
# step's task gets one CPU, and Ray would see one CPU.
#
# What this job does not need: no fixed waits (each rank waits for its own Ray node to be
# registered), no cluster password (the launcher makes a per-job token), no `ray stop` (each rank
# stops exactly what it started; `ray stop` would also kill your other jobs' Ray on this node).
#
# Stopping early: `scancel --signal=TERM JOBID` gives the driver MPIRAY_STOP_GRACE seconds, then
# the job ends by itself with code 143; a plain `scancel` follows SIGTERM with SIGKILL after
# Slurm's KillWait.
code=0
srun --mpi=pmi2 --kill-on-bad-exit=1 --ntasks="$RANKS_PER_NODE" --cpus-per-task="$cpus_per_rank" \
     python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs" || code=$?

echo "job $SLURM_JOB_ID: exit code $code; per-rank logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"  # the job's ExitCode in sacct: the driver's
