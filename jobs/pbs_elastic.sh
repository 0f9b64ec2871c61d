#!/bin/bash
# An elastic Ray cluster on PBS Pro: this job is the head; Ray's autoscaler adds worker jobs (qsub, one
# Ray node each, from jobs/pbs_worker_template.sh) while its demand needs more, and cancels (qdel) them
# after COOLDOWN idle seconds. Some PBS sites allow qsub only from login nodes: there, this cannot work
# (the head runs on a compute node), and `mpiray logs` says why (the worker jobs' submits fail).
#
#   cd /where/logs/should/go && qsub /path/to/jobs/pbs_elastic.sh
#
# On Polaris (untested there: whether its compute nodes may qsub is not known), the head job needs the
# site's own lines, and MPIRAY_SITE=polaris gives each worker job -l filesystems=home:eagle and the
# head's network (docs/sites.md):
#   qsub -q debug -l select=1:system=polaris -l filesystems=home:eagle -v MPIRAY_SITE=polaris jobs/pbs_elastic.sh
#
#PBS -N ray-elastic
#PBS -A myproject
#PBS -q workq
#PBS -l select=1:ncpus=64
#PBS -l walltime=04:00:00
#PBS -j oe

# ---- settings: edit them here, or pass them with `qsub -v NAME=value,...` (or qsub -V) -------
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment (the worker jobs enter it too: jobs/pbs_worker_template.sh): the
# checkout's venv, made once on a login node with mpi4py built against the site's MPI (docs/install.md;
# on Polaris, from the conda module's Python with Cray MPICH's `cc`, its section "Polaris"):
#   module use /soft/modulefiles && module load conda && conda activate base
#   PYTHON=python3 MPIRAY_SITE_MPI=1 MPICC=cc bash jobs/setup_env.sh
ENV_SETUP=${ENV_SETUP:-"module use /soft/modulefiles && module load conda && source $MPIRAY_DIR/.venv/bin/activate"}
MIN_NODES=${MIN_NODES:-1}
MAX_NODES=${MAX_NODES:-8}
# What rank 0 runs: by default a trainer that uses the nodes that arrive, MAX_NODES trials (each its own
# random seed, each the head node's size): the first starts at once, the others wait for nodes, and Ray's
# autoscaler asks for worker jobs to run them (a driver sized to the cluster at its start would not).
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --num-samples $MAX_NODES --stop-timesteps 5000000"}
COOLDOWN=${COOLDOWN:-300}
WORKER_CPUS=${WORKER_CPUS:-64}
WORKER_TEMPLATE=${WORKER_TEMPLATE:-$MPIRAY_DIR/jobs/pbs_worker_template.sh}
# Seconds the driver gets from SIGTERM to SIGKILL to save a checkpoint (the trainer: this less 2 s, at the
# end of its current iteration). PBS warns no job before its walltime: mpiray reads the walltime from qstat
# and stops the driver this long plus 30 s before it ends (--walltime-margin), so the walltime stop gets the
# whole grace. A qdel gives only the queue's kill_delay (PBS's default: 10 s; `qstat -Qf QUEUE`) from its
# SIGTERM to its SIGKILL, which mpiray cannot lengthen: rank 0 reads it and says so at the start when it is
# shorter than this grace.
# Each worker job drains its node the same margin before its own walltime.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-60}

set -uo pipefail
eval "$ENV_SETUP"
cd "$PBS_O_WORKDIR" || exit 1
job_id=${PBS_JOBID%%.*}
code=0
# One rank on this job's one node: any mpiexec does (PALS's, or MPICH's from the environment).
mpiexec -n 1 python "$MPIRAY_DIR/start_ray.py" --log-dir "$PBS_O_WORKDIR/logs" \
    --autoscale "$MIN_NODES:$MAX_NODES" --cooldown "$COOLDOWN" \
    --worker-cpus "$WORKER_CPUS" --worker-job "$WORKER_TEMPLATE" || code=$?
echo "job $job_id: exit code $code; logs in $PBS_O_WORKDIR/logs/$job_id/"
exit "$code"
