#!/bin/bash
# A Ray cluster over the nodes of a PBS job (PBS Professional or OpenPBS, without Cray's PALS: for
# PALS see pbs_polaris.sh): one launcher rank, hence one Ray node, per node, started through PBS's TM
# interface so that PBS accounts for every rank and ends it with the job. Rank 0 runs the Ray head and
# the driver; the job's Exit_status is the driver's exit code.
#
#   cd /where/logs/should/go && qsub /path/to/jobs/pbs_multi_node.sh
#   qsub -l select=8:ncpus=64 jobs/pbs_multi_node.sh     # more nodes: nothing else to change
#
# qsub's options override the #PBS lines: `qsub -A myproject -q debug -l walltime=00:30:00 ...`.
#
#PBS -N ray-multi-node
#PBS -A myproject
#PBS -q workq
#PBS -l select=3:ncpus=64
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -j oe
#PBS -r y
# select: 3 chunks of 64 CPUs, and place=scatter puts each on a node of its own: 1 head + 2 workers.
#   Without ncpus PBS gives a chunk 1 CPU, and its Ray node offers 1 (mpiray logs says so).
# -r y: rerunnable. `qrerun` (or a node's failure) starts the job again under the same id, and the
#   trainer continues its experiment from the last checkpoint.

# ---- settings: edit them here, or pass them with `qsub -v NAME=value,...` (or qsub -V) -------
# (`NAME=value qsub ...` alone passes nothing: PBS gives a job little of qsub's environment.)
# The mpiray checkout (start_ray.py, jobs/pbs_tmrsh.sh), on a filesystem that every node sees.
MPIRAY_DIR=${MPIRAY_DIR:-$HOME/mpiray}
# How to enter the Python environment with Ray, mpi4py and MPI, on every node.
ENV_SETUP=${ENV_SETUP:-"source $MPIRAY_DIR/.venv/bin/activate"}
# What rank 0 runs once every node has joined (shell-style quoting works); the RLlib trainer here.
# Empty (qsub -v MPIRAY_DRIVER=,MPIRAY_JOIN=4711): none, for a job whose nodes join cluster 4711 and serve.
export MPIRAY_DRIVER=${MPIRAY_DRIVER-"python -m train --stop-timesteps 1000000"}
# Seconds the driver gets from SIGTERM to SIGKILL to save a checkpoint (the trainer: this less 2 s, at the
# end of its current iteration). PBS warns no job before its walltime: mpiray reads the walltime from qstat
# and stops the driver this long plus 30 s before it ends (--walltime-margin), so the walltime stop gets the
# whole grace. A qdel gives only the queue's kill_delay (PBS's default: 10 s; `qstat -Qf QUEUE`) from its
# SIGTERM to its SIGKILL, which mpiray cannot lengthen: rank 0 reads it and says so at the start when it is
# shorter than this grace.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-60}
# ---------------------------------------------------------------------------------------------

set -uo pipefail
eval "$ENV_SETUP"
cd "$PBS_O_WORKDIR" || exit 1

nodes=$(sort -u "$PBS_NODEFILE" | wc -l)
job_id=${PBS_JOBID%%.*}  # "1234.pbs-server" -> "1234", as the launcher names logs/JOB_ID
# One rank per node, each started by pbs_tmrsh on its node (through jobs/pbs_tmrsh.sh, which gives it
# the shell these launchers expect). MPICH's mpiexec (hydra), e.g. the PyPI wheel's, by default; for
# Open MPI: MPIEXEC='mpirun --mca plm_rsh_agent "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" --hostfile "$PBS_NODEFILE"
# -np $nodes --map-by ppr:1:node' (single quotes: it is expanded here, in the job).
MPIEXEC=${MPIEXEC:-'mpiexec -launcher rsh -launcher-exec "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" -f "$PBS_NODEFILE" -n $nodes -ppn 1'}
eval "launcher=($MPIEXEC)"  # its variables expanded, its words split as the shell would
echo "job $job_id: Ray on $nodes nodes, 1 head + $((nodes - 1)) workers"

# What this job does not need:
# - no fixed waits: each rank waits until the GCS lists its own Ray node, then rank 0 starts the
#   driver; a node that never joins is named in rank 0's log at --startup-timeout;
# - no cluster password: the launcher makes a per-job token that only this job's ranks know;
# - no --time-limit: the launcher reads the walltime from PBS and stops the driver in time;
# - no `ray stop` at the end: each rank stops exactly the processes it started.
# The environment's python by its full path: Open MPI's daemons on the other hosts look a bare `python` up
# in their own PATH, which ENV_SETUP did not set there ("unable to find the specified executable").
python=$(command -v python)
code=0
"${launcher[@]}" "$python" "$MPIRAY_DIR/start_ray.py" --log-dir "$PBS_O_WORKDIR/logs" || code=$?

echo "job $job_id: exit code $code; per-rank logs in $PBS_O_WORKDIR/logs/$job_id/ (mpiray logs $job_id)"
exit "$code"  # the job's Exit_status in `qstat -fx`: the driver's
