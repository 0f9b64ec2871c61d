#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run the whole suite:
# Debian's Slurm + munge for the 3-host testbed (root), the venv, then pytest; then, with no
# arguments (as CI runs it), the smoke set in each extra environment (tests/envs.sh: Ray 2.52, the
# Open MPI wheel, Debian's MPICH; each built once into .envs/ and kept).
#   bash tests/run.sh [pytest args]      e.g. bash tests/run.sh -m "not slurm and not train"
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  bash tests/slurm/install.sh
else
  echo "tests/run.sh: not root: the Slurm testbed tests will be skipped" >&2
fi
bash jobs/setup_env.sh test
extra_envs=()
[ $# -eq 0 ] && extra_envs=(ray-2.52 openmpi system-mpich)
keep_testbed=${MPIRAY_KEEP_TESTBED:-0}
# The Slurm testbed stays up from one pytest run to the next; the last one takes it down (unless kept).
[ ${#extra_envs[@]} -gt 0 ] && export MPIRAY_KEEP_TESTBED=1
status=0
.venv/bin/python -m pytest "$@" || status=$?
for i in "${!extra_envs[@]}"; do
  name=${extra_envs[$i]}
  [ "$i" -eq $((${#extra_envs[@]} - 1)) ] && export MPIRAY_KEEP_TESTBED=$keep_testbed
  started=$SECONDS
  echo "tests/run.sh: the smoke set on $name (bash tests/envs.sh $name)" >&2
  bash tests/envs.sh "$name" || status=$((status ? status : $?))
  echo "tests/run.sh: $name took $((SECONDS - started)) s" >&2
done
exit "$status"
