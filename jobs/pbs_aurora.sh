#!/bin/bash
# A Ray cluster over PBS Pro nodes (ALCF Aurora): one launcher rank, hence one Ray node, per node,
# started by PALS mpiexec. Rank 0 runs the Ray head and the driver; the job's exit code is the
# driver's. --site aurora (MPIRAY_SITE): each node advertises $(hostname).hsn.cm.aurora.alcf.anl.gov
# (probable), gets ZE_FLAT_DEVICE_HIERARCHY=FLAT and its 12 tiles (6 Max 1550 cards) as
# ZE_AFFINITY_MASK, counted with dpctl, which the environment must hold (docs/sites.md).
# Not run on Aurora yet: docs/sites.md says how the site's row was proven.
#
#   cd /where/logs/should/go && qsub /path/to/jobs/pbs_aurora.sh
#   qsub -l select=8 jobs/pbs_aurora.sh                     # more nodes: nothing else to change
#   qsub -v MPIRAY_DRY_RUN=1 jobs/pbs_aurora.sh             # the planned cluster, no Ray
#
# qsub refuses a job without -l filesystems= (name the file systems your job uses; probable on Aurora).
#
#PBS -N ray-aurora
#PBS -A myproject
#PBS -q debug
#PBS -l select=2
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -l filesystems=home:flare
#PBS -j oe

# ---- settings: edit them here, or pass them with `qsub -v NAME=value,...` (or qsub -V) -------
# (`NAME=value qsub ...` alone passes nothing: PBS gives a job little of qsub's environment.)
# The mpiray checkout (start_ray.py), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment: a venv of the checkout's own on ALCF's frameworks module, for
# its Intel torch and dpctl (probable; not worked out: docs/sites.md, "Aurora"):
#   module load frameworks && python -m venv --system-site-packages "$MPIRAY_DIR/.venv"
#   "$MPIRAY_DIR/.venv/bin/pip" install -e "$MPIRAY_DIR" 'ray[rllib]>=2.52,<2.61' gymnasium
ENV_SETUP=${ENV_SETUP:-"module load frameworks && source $MPIRAY_DIR/.venv/bin/activate"}
# The site's settings (mpiray/host/sites.py); MPIRAY_SITE= (empty) runs without. A setting of yours wins:
# MPIRAY_INTERFACE=hsn0 (or MPIRAY_ADDRESS_RULE) replaces its network, MPIRAY_GPU_VENDOR its vendor.
export MPIRAY_SITE=${MPIRAY_SITE-aurora}
# What rank 0 runs once every node has joined (shell-style quoting works); the RLlib trainer here, on
# CPUs: its GPU learners use torch.cuda, which Intel's GPUs do not answer to (probable).
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --stop-timesteps 1000000"}
# Hardware threads per rank (an Aurora node has 208; probable) and GPUs per Ray node (12 tiles).
# ALCF's Ray recipe gives Ray 64 CPUs: MPIRAY_NUM_CPUS=64 does the same.
DEPTH=${DEPTH:-208}
GPUS_PER_NODE=${GPUS_PER_NODE:-12}
# Seconds the driver gets from SIGTERM to SIGKILL to save a checkpoint (the trainer: this less 2 s, at the
# end of its current iteration). PBS warns no job before its walltime: mpiray reads the walltime from qstat
# and stops the driver this long plus 30 s before it ends (--walltime-margin), so the walltime stop gets the
# whole grace. A qdel gives only the queue's kill_delay (PBS's default: 10 s; `qstat -Qf QUEUE`) from its
# SIGTERM to its SIGKILL, which mpiray cannot lengthen: rank 0 reads it and says so at the start when it is
# shorter than this grace.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-60}
# The launcher: PALS mpiexec, one rank per node with DEPTH hardware threads each. The one line
# that needs PALS: where PBS runs without it, start the ranks through pbs_tmrsh instead, as
# jobs/pbs_multi_node.sh does (e.g. MPIEXEC='mpiexec -launcher rsh -launcher-exec
# "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" -f "$PBS_NODEFILE" -n $nodes -ppn 1' for MPICH).
MPIEXEC=${MPIEXEC:-'mpiexec -n $nodes --ppn 1 --depth $DEPTH --cpu-bind depth'}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$PBS_O_WORKDIR" || exit 1

nodes=$(sort -u "$PBS_NODEFILE" | wc -l)
job_id=${PBS_JOBID%%.*}  # "1234.aurora-pbs-01..." -> "1234", as the launcher names logs/JOB_ID
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
