#!/bin/bash
# The part every Slurm site script shares (jobs/slurm_kestrel.sh, slurm_frontier.sh, slurm_perlmutter.sh,
# slurm_lumi.sh, slurm_alps.sh), sourced by them once they set MPIRAY_DIR, ENV_SETUP and MPIRAY_SITE: the
# GPUs sbatch gave, the trainer's learners, the driver, the grace, and the srun line. Not a job script itself.
# GPUs per node, as sbatch gave them: --gpus-per-node sets SLURM_GPUS_PER_NODE (which Slurm may write as
# "h100:4"); every other form (--gres=gpu:h100:4, --gpus, -G) only the batch step's count, SLURM_GPUS_ON_NODE.
# 0 without.
gpus=${SLURM_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-0}}
gpus=${gpus##*:}
learners=$((${SLURM_JOB_NUM_NODES:-1} * gpus))  # the trainer's: a GPU learner per GPU of the cluster
# srun's MPI plugin: pmi2, as mpiray's tests and elastic worker jobs use it; Cray MPICH speaks it
# (probable; NREL documents it on Kestrel); cray_shasta, HPE Cray EX's own, is often the site's default;
# `srun --mpi=list` shows them.
SRUN_MPI=${SRUN_MPI:-pmi2}
# What rank 0 runs once every node has joined (shell-style quoting works): the RLlib trainer.
# A requeued job keeps its id, and the trainer continues the experiment that id started.
export MPIRAY_DRIVER=${MPIRAY_DRIVER:-"python -m train --num-gpus $learners --stop-timesteps 1000000"}
# Seconds the driver gets from SIGTERM to SIGKILL to save a checkpoint; well below the 120 s notice.
export MPIRAY_STOP_GRACE=${MPIRAY_STOP_GRACE:-20}

set -uo pipefail
eval "$ENV_SETUP"
cd "$SLURM_SUBMIT_DIR" || exit 1

echo "job $SLURM_JOB_ID: Ray on $SLURM_JOB_NUM_NODES nodes ($SLURM_JOB_NODELIST), $SLURM_CPUS_PER_TASK CPUs" \
     "and $gpus GPUs each, site ${MPIRAY_SITE:-none}"

# srun: --mpi makes the ranks one MPI world (without it each rank is alone, and the launcher stops
# saying so); --kill-on-bad-exit=1 ends the step when a rank exits with an error; --no-kill keeps it
# past a host that dies outright (sbatch --no-kill keeps the job: see jobs/slurm_multi_node.sh);
# --cpus-per-task again, since Slurm 22.05 srun does not inherit it from sbatch. The job step gets
# the job's GPUs. No fixed waits, no cluster password, no `ray stop`: see jobs/slurm_multi_node.sh.
# `scancel --signal=TERM JOBID` gives the driver MPIRAY_STOP_GRACE seconds.
code=0
srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 --no-kill \
     --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" \
     python "$MPIRAY_DIR/start_ray.py" --log-dir "$SLURM_SUBMIT_DIR/logs" || code=$?

echo "job $SLURM_JOB_ID: exit code $code; per-rank logs in $SLURM_SUBMIT_DIR/logs/$SLURM_JOB_ID/"
exit "$code"  # the job's ExitCode in sacct: the driver's
