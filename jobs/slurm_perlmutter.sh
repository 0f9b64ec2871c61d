#!/bin/bash
# A Ray cluster on NERSC Perlmutter's GPU nodes (Slurm), 4 NVIDIA A100s per node: one launcher rank,
# hence one Ray node, per node. Rank 0 runs the Ray head and the driver; the job's exit code is the
# driver's. --site perlmutter: each node advertises hsn0 and gets its GPUs as CUDA_VISIBLE_DEVICES
# (docs/sites.md). Outside a container: NERSC documents Ray in Shifter or podman-hpc, which mpiray
# does not support yet.
#
#   cd /where/logs/should/go && sbatch -A myproject /path/to/jobs/slurm_perlmutter.sh
#   MPIRAY_DRY_RUN=1 sbatch jobs/slurm_perlmutter.sh     # the planned cluster within seconds, no Ray
#
# sbatch's command-line options (and SBATCH_ACCOUNT, SBATCH_PARTITION in its environment) override
# the #SBATCH lines. Not run on Perlmutter yet: docs/sites.md says how the site's row was proven.
#
#SBATCH --job-name=ray-perlmutter
#SBATCH --account=myproject            # your allocation
#SBATCH --constraint=gpu               # GPU nodes (sbatch --constraint= clears it on a test bed)
#SBATCH --qos=regular
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1            # one launcher rank per node = one Ray node per host
#SBATCH --cpus-per-task=128            # 64 cores, 2 threads each, all Ray CPUs
#SBATCH --gpus-per-node=4
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to every rank 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/
#SBATCH --requeue                      # preemption or `scontrol requeue` starts the job again...
#SBATCH --open-mode=append             # ...and its output file keeps the earlier runs' lines

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI, on every node:
# docs/install.md: a venv from `module load python`, mpi4py with MPICC=cc.
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# GPUs per node, as sbatch gave them (--gpus-per-node, which Slurm may write as "h100:4"); 0 without.
gpus=${SLURM_GPUS_PER_NODE:-0}
gpus=${gpus##*:}
learners=$((${SLURM_JOB_NUM_NODES:-1} * gpus))  # the trainer's: a GPU learner per GPU of the cluster
# The site's settings (mpiray/host/sites.py: network, GPU vendor, fabric variables); MPIRAY_SITE=
# (empty) runs without. A setting of yours wins: MPIRAY_INTERFACE, MPIRAY_GPU_VENDOR, ...
export MPIRAY_SITE=${MPIRAY_SITE-perlmutter}
# srun's MPI plugin: pmi2, as mpiray's tests and elastic worker jobs use it; Cray MPICH speaks it
# (probable); cray_shasta, HPE Cray EX's own, is the site's default; `srun --mpi=list` shows them.
SRUN_MPI=${SRUN_MPI:-pmi2}
# What rank 0 runs once every node has joined (shell-style quoting works): the RLlib trainer.
# A requeued job keeps its id, and the trainer continues the experiment that id started.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --num-gpus $learners --stop-timesteps 1000000"}
# Seconds the driver gets from SIGTERM to SIGKILL to save a checkpoint; well below the 120 s notice.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-20}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1

echo "job $SLURM_JOB_ID: Ray on $SLURM_JOB_NUM_NODES nodes ($SLURM_JOB_NODELIST), $SLURM_CPUS_PER_TASK CPUs" \
     "and $gpus GPUs each, site ${MPIRAY_SITE:-none}"

# srun: --mpi makes the ranks one MPI world (without it each rank is alone, and the launcher stops
# saying so); --kill-on-bad-exit=1 ends the step when a rank dies; --cpus-per-task again, since Slurm
# 22.05 srun does not inherit it from sbatch. The job step gets the job's GPUs. No fixed waits, no
# cluster password, no `ray stop`: see jobs/slurm_multi_node.sh. `scancel --signal=TERM JOBID` gives
# the driver MPIRAY_STOP_GRACE seconds.
code=0
srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 \
     --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" \
     python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs" || code=$?

echo "job $SLURM_JOB_ID: exit code $code; per-rank logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"  # the job's ExitCode in sacct: the driver's
