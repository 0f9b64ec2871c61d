#!/bin/bash
# A Ray cluster over several Slurm nodes with Ray from a container image: the ranks (mpi4py, mpiray) run on the
# host, every `ray start` and the driver inside the image (docs/containers.md). The job's exit code is the driver's.
#
#   MPIRAY_CONTAINER=apptainer:/scratch/$USER/ray-2.60.sif sbatch jobs/slurm_container.sh
#   MPIRAY_CONTAINER=podman-hpc:ray:2.60 MPIRAY_CONTAINER_FLAGS=--gpu sbatch jobs/slurm_container.sh
#
# Stage the image first (podman-hpc pull, shifterimg pull, apptainer pull: docs/containers.md). On a named
# site, its own script takes the same MPIRAY_CONTAINER and keeps the site's #SBATCH lines and --site (on
# NERSC Perlmutter: jobs/slurm_perlmutter.sh).
#
#SBATCH --job-name=ray-container
#SBATCH --account=myproject            # your allocation
#SBATCH --partition=standard           # a CPU partition of your cluster
#SBATCH --nodes=3                      # 1 head + 2 worker nodes
#SBATCH --ntasks-per-node=1            # one launcher rank per node = one Ray node per host
#SBATCH --cpus-per-task=36             # a node's cores, all Ray CPUs
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to every rank 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# The host's side: Python with mpi4py and mpiray (Ray is not needed there), e.g. a venv or a module
# (docs/containers.md, "The host's side: no Ray").
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# KIND:IMAGE (apptainer, singularity, charliecloud, shifter, enroot, podman, podman-hpc) and the runtime's own
# flags: --nv or --rocm for Apptainer's GPUs, more --bind's for your data.
export MPIRAY_CONTAINER=${MPIRAY_CONTAINER:-apptainer:$HOME/ray-2.60.sif}
export MPIRAY_CONTAINER_FLAGS=${MPIRAY_CONTAINER_FLAGS:-}
# Runs inside the image: its python3, its packages (the trainer needs RLlib, torch and gymnasium there).
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python3 -m train --stop-timesteps 1000000"}
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-20}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1
echo "job $SLURM_JOB_ID: Ray from $MPIRAY_CONTAINER on $SLURM_JOB_NUM_NODES nodes ($SLURM_JOB_NODELIST)"

# Before any node starts, every rank starts the image once: a runtime or image that does not run on a node
# stops the job with exit code 2 and the runtime's words (image_failed); other Ray versions: version_skew.
code=0
srun --mpi=pmi2 --kill-on-bad-exit=1 --no-kill \
     --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" \
     python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs" || code=$?

echo "job $SLURM_JOB_ID: exit code $code; per-rank logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"
