#!/bin/bash
# A Ray cluster over PBS Pro nodes (ALCF Polaris): one launcher rank, hence one Ray node, per
# node, started by Cray's PALS mpiexec. Rank 0 runs the Ray head and the driver; the job's exit
# code is the driver's. --site polaris (MPIRAY_SITE): each node advertises its Slingshot address
# ($(hostname).hsn.cm.polaris.alcf.anl.gov) and gets its 4 A100s as CUDA_VISIBLE_DEVICES (docs/sites.md).
#
#   cd /where/logs/should/go && qsub /path/to/jobs/pbs_polaris.sh
#   qsub -l select=8:system=polaris jobs/pbs_polaris.sh     # more nodes: nothing else to change
#   qsub -v MPIRAY_DRY_RUN=1 jobs/pbs_polaris.sh            # the planned cluster, no Ray
#
# qsub refuses a Polaris job without -l filesystems= (name the file systems your job uses).
#
#PBS -N ray-polaris
#PBS -A myproject
#PBS -q debug-scaling
#PBS -l select=4:system=polaris
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -l filesystems=home:eagle
#PBS -j oe

# ---- settings: edit them here, or pass them with `qsub -v NAME=value,...` (or qsub -V) -------
# (`NAME=value qsub ...` alone passes nothing: PBS gives a job little of qsub's environment.)
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment: the checkout's venv, made once on a login node from the conda
# module's Python, with mpi4py built against Cray MPICH (docs/install.md, "Polaris"):
#   module use /soft/modulefiles && module load conda && conda activate base
#   PYTHON=python3 MPIRAY_SITE_MPI=1 MPICC=cc bash jobs/setup_env.sh
ENV_SETUP=${ENV_SETUP:-"module use /soft/modulefiles && module load conda && source $MPIRAY_DIR/.venv/bin/activate"}
# The site's settings (mpiray/host/sites.py); MPIRAY_SITE= (empty) runs without. A setting of yours wins:
# MPIRAY_INTERFACE=hsn0 (or MPIRAY_ADDRESS_RULE) replaces its network, MPIRAY_GPU_VENDOR its vendor.
export MPIRAY_SITE=${MPIRAY_SITE-polaris}
# What rank 0 runs once every node has joined (shell-style quoting works); the RLlib trainer here.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --num-gpus 4 --stop-timesteps 1000000"}
# Hardware threads per rank (a Polaris node has 64) and GPUs per Ray node (4 A100s).
DEPTH=${DEPTH:-64}
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
# Seconds the driver gets from SIGTERM to SIGKILL to save a checkpoint (the trainer: this less 2 s, at the
# end of its current iteration). PBS warns no job before its walltime: mpiray reads the walltime from qstat
# and stops the driver this long plus 30 s before it ends (--walltime-margin), so the walltime stop gets the
# whole grace. A qdel gives only the queue's kill_delay (PBS's default: 10 s; `qstat -Qf QUEUE`) from its
# SIGTERM to its SIGKILL, which mpiray cannot lengthen: rank 0 reads it and says so at the start when it is
# shorter than this grace.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-60}
# The launcher: Cray's PALS mpiexec, one rank per node with DEPTH hardware threads each. The one line
# that needs PALS: where PBS runs without it, start the ranks through pbs_tmrsh instead, as
# jobs/pbs_multi_node.sh does (e.g. MPIEXEC='mpiexec -launcher rsh -launcher-exec
# "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" -f "$PBS_NODEFILE" -n $nodes -ppn 1' for MPICH).
MPIEXEC=${MPIEXEC:-'mpiexec -n $nodes --ppn 1 --depth $DEPTH --cpu-bind depth'}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$PBS_O_WORKDIR" || exit 1

nodes=$(sort -u "$PBS_NODEFILE" | wc -l)
job_id=${PBS_JOBID%%.*}  # "1234.polaris-pbs-01..." -> "1234", as the launcher names logs/JOB_ID
echo "job $job_id: Ray on $nodes nodes, 1 head + $((nodes - 1)) workers (site ${MPIRAY_SITE:-none})"

# What this job does not need:
# - no fixed waits: each rank waits until the GCS lists its own Ray node, then rank 0 starts the
#   driver; a node that never joins is named in rank 0's log at --startup-timeout;
# - no cluster password: the launcher makes a per-job token that only this job's ranks know;
# - no --time-limit: the launcher reads the walltime from PBS and stops the driver in time;
# - no `ray stop` at the end: each rank stops exactly the processes it started.
#
# mpiexec options (PALS): -n ranks in all, --ppn 1 one rank per node, --depth/--cpu-bind depth
# give each rank DEPTH hardware threads, which the launcher offers to Ray as CPUs.
# `qdel JOBID` sends SIGTERM, which mpiexec passes on: rank 0 gives the driver
# MPIRAY_STOP_GRACE seconds; PBS kills what is left after its kill_delay.
code=0
eval "launcher=($MPIEXEC)"  # its variables expanded, its words split as the shell would
"${launcher[@]}" python "$MPIRAY_DIR/start_ray.py" --log-dir "$PBS_O_WORKDIR/logs" --num-gpus "$GPUS_PER_NODE" \
    || code=$?

echo "job $job_id: exit code $code; per-rank logs in $PBS_O_WORKDIR/logs/$job_id/"
exit "$code"  # the job's Exit_status in `qstat -fx`: the driver's
