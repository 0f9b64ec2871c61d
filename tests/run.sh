#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run them tier by tier:
#   1. ruff check . (lint)
#   2. the fast tier: pure functions and the rank protocol in one process (no MPI, no Ray), seconds
#   3. the real runs: mpirun + Ray, attacks as a second user, the 3-host Slurm testbed (as root:
#      Debian's Slurm + munge are installed first), short RLlib trainings
#   4. the smoke set in each extra environment (tests/envs.sh: Ray 2.52, the Open MPI wheel,
#      Debian's MPICH; each built once into .envs/ and kept), then the PBS tier in .envs/pbs (and its
#      3-host job again with Open MPI, .envs/pbs-openmpi) on the OpenPBS testbed (as root: built once from ../shared/vendor by tests/pbs/install.sh; skipped,
#      saying where to get OpenPBS, without it)
#   bash tests/run.sh                  # all of it, as CI runs it
#   bash tests/run.sh [pytest args]    # pytest alone with these, e.g. -m "not slow and not slurm and not train and not pbs"
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  bash tests/slurm/install.sh
  bash tests/pbs/install.sh
else
  echo "tests/run.sh: not root: the Slurm and PBS testbed tests will be skipped" >&2
fi
bash jobs/setup_env.sh test
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
status=0
started=$SECONDS
.venv/bin/ruff check . || status=1
.venv/bin/python -m pytest -m "not slow and not slurm and not train and not pbs" || status=$?
echo "tests/run.sh: lint and the fast tier took $((SECONDS - started)) s" >&2
# The Slurm testbed stays up from one pytest run to the next; the last one takes it down (unless kept).
keep_testbed=${MPIRAY_KEEP_TESTBED:-0}
export MPIRAY_KEEP_TESTBED=1
.venv/bin/python -m pytest -m "(slow or slurm or train) and not pbs" || status=$((status ? status : $?))
extra_envs=(ray-2.52 openmpi system-mpich pbs pbs-openmpi)
for name in "${extra_envs[@]}"; do
  # The last run on each testbed takes it down (unless kept): system-mpich's the Slurm one, pbs-openmpi's the PBS one.
  case "$name" in system-mpich | pbs-openmpi) export MPIRAY_KEEP_TESTBED=$keep_testbed ;; esac
  started=$SECONDS
  echo "tests/run.sh: the smoke set on $name (bash tests/envs.sh $name)" >&2
  bash tests/envs.sh "$name" || status=$((status ? status : $?))
  echo "tests/run.sh: $name took $((SECONDS - started)) s" >&2
done
exit "$status"
