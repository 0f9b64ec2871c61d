#!/bin/bash
# A Ray cluster on LUMI-G (Slurm), 8 AMD MI250X GCDs per node: one launcher rank, hence one Ray node,
# per node. Rank 0 runs the Ray head and the driver; the job's exit code is the driver's.
# --site lumi: each node advertises hsn0, NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3, and its GCDs as
# ROCR_VISIBLE_DEVICES (narrowed to its own) + HIP_VISIBLE_DEVICES (docs/sites.md).
#
#   cd /where/logs/should/go && sbatch -A myproject /path/to/jobs/slurm_lumi.sh
#   MPIRAY_DRY_RUN=1 sbatch jobs/slurm_lumi.sh     # the planned cluster within seconds, no Ray
#
# sbatch's command-line options (and SBATCH_ACCOUNT, SBATCH_PARTITION in its environment) override
# the #SBATCH lines. Not run on LUMI yet: docs/sites.md says how the site's row was proven.
#
#SBATCH --job-name=ray-lumi
#SBATCH --account=myproject            # your allocation (project_...)
#SBATCH --partition=standard-g         # whole GPU nodes (small-g, dev-g: others)
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1            # one launcher rank per node = one Ray node per host
#SBATCH --cpus-per-task=56             # 64 cores less 8 kept for the system (probable), all Ray CPUs
#SBATCH --gpus-per-node=8              # Slurm binds them with ROCR_VISIBLE_DEVICES
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to every rank 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/
#SBATCH --requeue                      # preemption or `scontrol requeue` starts the job again...
#SBATCH --open-mode=append             # ...and its output file keeps the earlier runs' lines

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI, on every node:
# docs/install.md: mpi4py built against Cray MPICH, MPICC=cc; torch's ROCm build.
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# The site's settings (mpiray/host/sites.py: network, GPU vendor, fabric variables); MPIRAY_SITE=
# (empty) runs without. A setting of yours wins: MPIRAY_INTERFACE, MPIRAY_GPU_VENDOR, ...
export MPIRAY_SITE=${MPIRAY_SITE-lumi}
# The rest (the GPUs, the trainer's learners, the driver, srun's MPI plugin, the srun line), every site's:
source "$MPIRAY_DIR/jobs/slurm_site.sh"
