#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run the whole suite:
# Debian's Slurm + munge for the 3-host testbed (root), the venv, then pytest; then, with no
# arguments (as CI runs it), the smoke set in each extra environment (tests/envs.sh: Ray 2.52).
#   bash tests/run.sh [pytest args]      e.g. bash tests/run.sh -m "not slurm and not train"
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  bash tests/slurm/install.sh
else
  echo "tests/run.sh: not root: the Slurm testbed tests will be skipped" >&2
fi
bash jobs/setup_env.sh test
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ $# -eq 0 ]; then
  for name in ray-2.52; do
    started=$SECONDS
    echo "tests/run.sh: smoke set on $name (tests/envs.sh $name)" >&2
    bash tests/envs.sh "$name" || status=$((status ? status : $?))
    echo "tests/run.sh: $name took $((SECONDS - started)) s" >&2
  done
fi
exit "$status"
