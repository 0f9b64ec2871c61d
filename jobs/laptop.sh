#!/usr/bin/env bash
# The main job on one machine: 4 MPI ranks -> a 4-node Ray cluster -> RLlib PPO on CartPole-v1.
#   bash jobs/laptop.sh [launcher options] [-- DRIVER COMMAND ...]
#   bash jobs/laptop.sh -- python -m train --stop-iters 1     # one iteration: a first check in about a minute
# The default trains until CartPole-v1 is solved (return 475) or 1,000,000 env steps. `python` here is .venv's.
# No sleeps: each worker starts as soon as rank 0 has shared the head's address, and counts as
# connected only once its node is ALIVE in the GCS. The exit code is the driver's.
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-4}
[ -x .venv/bin/mpirun ] || bash jobs/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH"  # the driver's `python` is the venv's, activated or not
# Open MPI's mpirun refuses root without this; MPICH ignores it.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec .venv/bin/mpirun -np "$RANKS" .venv/bin/python start_ray.py "$@"
