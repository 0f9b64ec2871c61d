#!/bin/bash
# A Ray cluster on NERSC Perlmutter's GPU nodes (Slurm), 4 NVIDIA A100s per node: one launcher rank,
# hence one Ray node, per node. Rank 0 runs the Ray head and the driver; the job's exit code is the
# driver's. --site perlmutter: each node advertises hsn0 and gets its GPUs as CUDA_VISIBLE_DEVICES
# (docs/sites.md). NERSC documents Ray in podman-hpc or Shifter images: this script runs Ray from the venv
# of ENV_SETUP, or from an image given in MPIRAY_CONTAINER (`podman-hpc pull` it once on a login node), the
# ranks then on the host with mpi4py and no Ray, every Ray node and the driver in the image: its python3
# (docs/containers.md: staging an image, the host's side, what a container cluster cannot do).
#
#   cd /where/logs/should/go && sbatch -A myproject /path/to/jobs/slurm_perlmutter.sh
#   MPIRAY_DRY_RUN=1 sbatch jobs/slurm_perlmutter.sh     # the planned cluster within seconds, no Ray
#   MPIRAY_CONTAINER=podman-hpc:docker.io/you/ray:2.60 MPIRAY_CONTAINER_FLAGS=--gpu \
#       MPIRAY_DRIVER="python3 -m train --num-gpus 8 --stop-timesteps 1000000" sbatch jobs/slurm_perlmutter.sh
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
# docs/install.md: a venv from `module load python`, mpi4py with MPICC=cc. With MPIRAY_CONTAINER, Ray is
# the image's and this needs none (docs/containers.md, "The host's side: no Ray").
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# The site's settings (mpiray/host/sites.py: network, GPU vendor, fabric variables); MPIRAY_SITE=
# (empty) runs without. A setting of yours wins: MPIRAY_INTERFACE, MPIRAY_GPU_VENDOR, ...
export MPIRAY_SITE=${MPIRAY_SITE-perlmutter}
# The rest (the GPUs, the trainer's learners, the driver, srun's MPI plugin, the srun line), every site's:
source "$MPIRAY_DIR/jobs/slurm_site.sh"
