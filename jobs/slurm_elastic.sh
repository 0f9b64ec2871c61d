#!/bin/bash
# An elastic Ray cluster on Slurm: this job is the head (and 1 node); Ray's own autoscaler adds worker
# jobs (one Ray node each, from jobs/slurm_worker_template.sh) while its demand needs more, up to
# MAX_NODES, and cancels them after COOLDOWN idle seconds. When this job ends, however it ends, so do
# its worker jobs (a SIGKILLed head's workers notice within a minute and leave).
#
#   cd /where/logs/should/go && sbatch /path/to/jobs/slurm_elastic.sh
#   mpiray list                      # the cluster, its nodes and worker jobs
#   mpiray logs JOB_ID --png t.png   # every decision of the autoscaler, and nodes over time
#
#SBATCH --job-name=ray-elastic
#SBATCH --account=myproject
#SBATCH --partition=standard
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=36
#SBATCH --time=04:00:00
#SBATCH --signal=TERM@120
#SBATCH --output=%x-%j.out

# ---- settings: edit them here, or set them in the environment you run sbatch from ------------
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
MIN_NODES=${MIN_NODES:-1}          # this job's own node included
MAX_NODES=${MAX_NODES:-8}
# What rank 0 runs: by default a trainer that uses the nodes that arrive, MAX_NODES trials (each its own
# random seed, each the head node's size): the first starts at once, the others wait for nodes, and Ray's
# autoscaler asks for worker jobs to run them. A driver sized to the cluster at its start would give
# Ray no demand, and the cluster would never grow past MIN_NODES.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --num-samples $MAX_NODES --stop-timesteps 5000000"}
COOLDOWN=${COOLDOWN:-300}          # idle seconds before a worker job is cancelled
WORKER_CPUS=${WORKER_CPUS:-36}     # each worker job's node (one Slurm task of this many CPUs)
# Each worker job's #SBATCH lines (partition, account, qos, walltime) and setup lines (a venv).
WORKER_TEMPLATE=${WORKER_TEMPLATE:-$MPIRAY_DIR/jobs/slurm_worker_template.sh}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1
code=0
srun --mpi=pmi2 --ntasks=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" \
     python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs" \
        --autoscale "$MIN_NODES:$MAX_NODES" --cooldown "$COOLDOWN" \
        --worker-cpus "$WORKER_CPUS" --worker-job "$WORKER_TEMPLATE" || code=$?
echo "job $SLURM_JOB_ID: exit code $code; logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"
