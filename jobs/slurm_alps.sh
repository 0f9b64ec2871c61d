#!/bin/bash
# A Ray cluster on CSCS Alps (Slurm), 4 NVIDIA GH200 per node (aarch64): one launcher rank, hence one
# Ray node, per node. Rank 0 runs the Ray head and the driver; the job's exit code is the driver's.
# --site alps: each node advertises hsn0, gets FI_PROVIDER=cxi and its GPUs as CUDA_VISIBLE_DEVICES
# (docs/sites.md). Outside a container: CSCS's Container Engine (srun --environment=) is not
# supported by mpiray yet.
#
#   cd /where/logs/should/go && sbatch -A myproject /path/to/jobs/slurm_alps.sh
#   MPIRAY_DRY_RUN=1 sbatch jobs/slurm_alps.sh     # the planned cluster within seconds, no Ray
#
# sbatch's command-line options (and SBATCH_ACCOUNT, SBATCH_PARTITION in its environment) override
# the #SBATCH lines. Not run on Alps yet: docs/sites.md says how the site's row was proven.
#
#SBATCH --job-name=ray-alps
#SBATCH --account=myproject            # your allocation
#SBATCH --partition=normal              # (probable)
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1            # one launcher rank per node = one Ray node per host
#SBATCH --cpus-per-task=288            # 4 Grace CPUs of 72 cores (probable), all Ray CPUs
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
# docs/install.md; aarch64 builds of Ray, torch and mpi4py (MPICC=cc).
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# The site's settings (mpiray/host/sites.py: network, GPU vendor, fabric variables); MPIRAY_SITE=
# (empty) runs without. A setting of yours wins: MPIRAY_INTERFACE, MPIRAY_GPU_VENDOR, ...
export MPIRAY_SITE=${MPIRAY_SITE-alps}
# The rest (the GPUs, the trainer's learners, the driver, srun's MPI plugin, the srun line), every site's:
source "$MPIRAY_DIR/jobs/slurm_site.sh"
