#!/bin/bash
# A Ray cluster on NREL Kestrel (Slurm), CPU or GPU nodes: one launcher rank, hence one Ray node,
# per node. Rank 0 runs the Ray head and the driver; the job's exit code is the driver's.
# --site kestrel (CPU nodes) or kestrel-gpu (GPU nodes, picked below when the job has GPUs): each
# node advertises its Slingshot address (hsn0; Kestrel is not InfiniBand), docs/sites.md.
#
#   cd /where/logs/should/go && sbatch -A myproject /path/to/jobs/slurm_kestrel.sh
#   sbatch --gpus-per-node=4 --cpus-per-task=128 jobs/slurm_kestrel.sh   # GPU nodes: 4 H100s each
#   MPIRAY_DRY_RUN=1 sbatch jobs/slurm_kestrel.sh     # the planned cluster within seconds, no Ray
#
# sbatch's command-line options (and SBATCH_ACCOUNT, SBATCH_PARTITION in its environment) override
# the #SBATCH lines. Not run on Kestrel yet: docs/sites.md says how the site's row was proven.
#
#SBATCH --job-name=ray-kestrel
#SBATCH --account=myproject            # your allocation
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1            # one launcher rank per node = one Ray node per host
#SBATCH --cpus-per-task=104            # a CPU node's cores, all Ray CPUs (GPU nodes: 128)
# GPU nodes (--site kestrel-gpu, picked below): sbatch --gpus-per-node=4 --cpus-per-task=128, or
# uncomment this line and set 128 above (probable; NREL's pages also show --gres=gpu:h100:4):
##SBATCH --gpus-per-node=4
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120              # SIGTERM to every rank 2 minutes before the time limit
#SBATCH --output=%x-%j.out             # the driver's output; per-rank logs: logs/JOB_ID/
#SBATCH --requeue                      # preemption or `scontrol requeue` starts the job again...
#SBATCH --open-mode=append             # ...and its output file keeps the earlier runs' lines

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI, on every node:
# docs/install.md; mpi4py built against Cray MPICH: MPICC=cc.
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# GPUs per node, as sbatch gave them (--gpus-per-node: SLURM_GPUS_PER_NODE, which Slurm may write as "h100:4";
# --gres=gpu:h100:4 or --gpus: only SLURM_GPUS_ON_NODE): kestrel-gpu when the job has GPUs (NVIDIA's variables
# for each node; the same network).
gpus=${SLURM_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-0}}
site=kestrel
if [ "${gpus##*:}" != 0 ]; then site=kestrel-gpu; fi
# The site's settings (mpiray/host/sites.py: network, GPU vendor, fabric variables); MPIRAY_SITE=
# (empty) runs without. A setting of yours wins: MPIRAY_INTERFACE, MPIRAY_GPU_VENDOR, ...
export MPIRAY_SITE=${MPIRAY_SITE-$site}
# The rest (the GPUs, the trainer's learners, the driver, srun's MPI plugin, the srun line), every site's:
source "$MPIRAY_DIR/jobs/slurm_site.sh"
