#!/bin/bash
# A Ray cluster over Cray XC nodes under Cobalt and ALPS (ALCF Theta, retired in 2023;
# Polaris and Aurora, its successors, run PBS: pbs_polaris.sh, pbs_aurora.sh): one launcher rank, hence
# one Ray node, per node, started by aprun from the job's service (MOM) node. Rank 0 runs the Ray
# head and the driver; the job's exit code is the driver's.
#
#   cd /where/logs/should/go && qsub /path/to/jobs/alps_theta.sh
#   qsub -n 16 jobs/alps_theta.sh                 # more nodes: nothing else to change
#
#COBALT -n 4
#COBALT -t 60
#COBALT -q debug-cache-quad
#COBALT -A myproject
#COBALT --attrs filesystems=home,theta-fs0
#COBALT -O ray-theta

# ---- settings: edit them here (Cobalt's qsub --env NAME=value may pass them: not tried) ---------
# The mpiray checkout (start_ray.py), on a filesystem the compute nodes see (not /home on some
# systems: use the project filesystem).
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray and an mpi4py built against Cray MPICH.
# What the environment ENV_SETUP enters must hold: Ray 2.54-2.60 with its dashboard agent and RLlib,
# psutil, and mpi4py built against the site's MPI; for the default driver (the trainer, train/ beside
# start_ray.py: found by path, nothing of mpiray need be installed) torch and gymnasium too. In one line,
# with the site's MPI loaded: MPICC=cc pip install --no-cache-dir --no-binary mpi4py "$MPIRAY_DIR[train]" (or
# `MPIRAY_SITE_MPI=1 MPICC=cc bash jobs/setup_env.sh` for a venv of the checkout's own).
ENV_SETUP=${ENV_SETUP:-"module load conda/2021-09-22 && conda activate ray"}
# What rank 0 runs once every node has joined (shell-style quoting works); the RLlib trainer here.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --stop-timesteps 1000000"}
# Cores per rank: a KNL node has 64 (4 hardware threads each; -j 1 uses one per core).
DEPTH=${DEPTH:-64}
# The network the Ray nodes talk over: the Aries interface.
export MPIRAY_INTERFACE=${MPIRAY_INTERFACE:-ipogif0}
# Cobalt sends no notice before the walltime, and mpiray reads no walltime from Cobalt, so the
# launcher stops the driver itself this many seconds after the driver started (once every node is
# up; SIGTERM, MPIRAY_STOP_GRACE seconds to save a checkpoint, SIGKILL; the job then ends with code
# 124). The -t above is 3600 s: 3300 leaves 300 s for the start-up (at most --startup-timeout, 120 s),
# the grace (60 s) and the teardown.
export MPIRAY_TIME_LIMIT=${MPIRAY_TIME_LIMIT:-3300}
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-60}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
submit_dir=$PWD  # Cobalt starts the script where qsub ran

nodes=$COBALT_PARTSIZE
echo "job $COBALT_JOBID: Ray on $nodes nodes, 1 head + $((nodes - 1)) workers;" \
     "the driver stops after $MPIRAY_TIME_LIMIT s"

# What this job does not need:
# - no fixed waits: each rank waits until the GCS lists its own Ray node, then rank 0 starts the
#   driver; a node that never joins is named in rank 0's log at --startup-timeout;
# - no cluster password: the launcher makes a per-job token that only this job's ranks know;
# - no `ray stop` at the end: each rank stops exactly the processes it started.
#
# aprun options: -n ranks in all, -N 1 one rank per node, -d/-cc depth bind each rank to DEPTH
# cores (the launcher offers them to Ray as CPUs), -j 1 one hardware thread per core,
# -b: python is not copied to the nodes. `qdel JOBID` sends SIGTERM, which aprun passes on:
# rank 0 gives the driver MPIRAY_STOP_GRACE seconds.
code=0
aprun -n "$nodes" -N 1 -d "$DEPTH" -j 1 -cc depth -b \
    python "$MPIRAY_DIR/start_ray.py" --log-dir "$submit_dir/logs" || code=$?

echo "job $COBALT_JOBID: exit code $code; per-rank logs in $submit_dir/logs/$COBALT_JOBID/"
exit "$code"  # the job's exit status in the .cobaltlog: the driver's
