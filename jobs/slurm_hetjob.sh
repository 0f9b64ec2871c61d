#!/bin/bash
# One Ray cluster over two kinds of nodes, as a Slurm heterogeneous job: a GPU node for the
# learner and CPU nodes for the rollout workers (env runners). The launcher's ranks span both
# components in one MPI world; rank 0 (Ray head and driver) is on the GPU node. The job's exit
# code is the driver's.
#
#   cd /where/logs/should/go && sbatch /path/to/jobs/slurm_hetjob.sh
#   sbatch jobs/slurm_hetjob.sh python my_driver.py --its-flags   # a driver of yours, not the trainer
#
# Component 0 is everything before `#SBATCH hetjob`, component 1 what follows. sbatch options
# override them per component, separated by ':' (`sbatch -p gpu-debug : -p debug jobs/...`).
#
#SBATCH --job-name=ray-hetjob
#SBATCH --account=myproject            # your allocation
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to every rank 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/
#SBATCH --requeue                      # preemption or `scontrol requeue`: the trainer continues
#SBATCH --open-mode=append             # its experiment from the last checkpoint, same output file
# -- component 0: the learner, one GPU node
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --gpus-per-node=2
#SBATCH hetjob
# -- component 1: the rollout workers, CPU nodes
#SBATCH --account=myproject
#SBATCH --time=01:00:00
#SBATCH --partition=standard
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=36

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI, on every node: a venv, or e.g.
# "module load conda && conda activate ray".
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# GPUs the learner node's Ray node offers: by default what component 0 got (--gpus-per-node,
# which Slurm may write as "a100:2"). The rollout nodes offer none.
allocated_gpus=${SLURM_GPUS_PER_NODE_HET_GROUP_0:-0}
LEARNER_GPUS=${LEARNER_GPUS:-${allocated_gpus##*:}}
# What rank 0 runs once every node has joined (shell-style quoting works). The trainer's
# --num-gpus N asks for N learners of one GPU each: only the learner node's Ray node has GPUs and
# learner slots (one per GPU; the rollout nodes offer none: --learner-slots 0), so they all land
# there; --env-runners-on rollout puts the env runners on the rollout nodes only (the role each
# component's nodes get below: --role), one per CPU of theirs.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --num-gpus $LEARNER_GPUS --env-runners-on rollout --stop-timesteps 1000000"}
# A driver given after the script's name on sbatch's line wins over both.
if [ $# -gt 0 ]; then
  MPIRAY_DRIVER=$(printf '%q ' "$@")
fi
# Seconds the driver gets from SIGTERM to SIGKILL, e.g. to save a checkpoint (Ray's own
# processes then get at most 5 s more). Keep it well below the 120 s notice above.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-20}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1

echo "job $SLURM_JOB_ID: learner $SLURM_JOB_NODELIST_HET_GROUP_0 ($LEARNER_GPUS GPUs)," \
     "rollouts $SLURM_JOB_NODELIST_HET_GROUP_1"

# One srun step over both components: `srun --het-group=0,1 CMD` would run the same command
# line on both; here each component gets its own (after ':'): the learner node's Ray node offers
# its GPUs (and a learner slot for each), the rollout nodes' neither, and each offers its
# component's CPUs. Each component's nodes are a pool Ray can address by role: the label
# mpiray.io/role (label_selector={"mpiray.io/role": "rollout"}) and the resource mpiray_role_rollout. (--num-cpus because
# Slurm 22.05 hands every task of a hetjob step the same SLURM_CPUS_PER_TASK; --cpus-per-task
# because srun no longer inherits it from sbatch.) --mpi=pmi2 makes one MPI world of all ranks,
# component 0's first.
#
# What this job does not need: no fixed waits (each rank waits for its own Ray node to be
# registered), no cluster password (the launcher makes a per-job token), no `ray stop` (each rank
# stops exactly what it started).
#
# Stopping early: `scancel --signal=TERM JOBID` gives the driver MPIRAY_STOP_GRACE seconds, then
# the job ends by itself with code 143; a plain `scancel` follows SIGTERM with SIGKILL after
# Slurm's KillWait.
launcher=(python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs")
learner_cpus=$SLURM_CPUS_PER_TASK_HET_GROUP_0
rollout_cpus=$SLURM_CPUS_PER_TASK_HET_GROUP_1
code=0
srun --mpi=pmi2 \
     --het-group=0 --kill-on-bad-exit=1 --cpus-per-task="$learner_cpus" \
         "${launcher[@]}" --num-cpus "$learner_cpus" --num-gpus "$LEARNER_GPUS" --role trainer : \
     --het-group=1 --kill-on-bad-exit=1 --cpus-per-task="$rollout_cpus" \
         "${launcher[@]}" --num-cpus "$rollout_cpus" --num-gpus 0 --learner-slots 0 --role rollout || code=$?

echo "job $SLURM_JOB_ID: exit code $code; per-rank logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"  # the job's ExitCode in sacct: the driver's
