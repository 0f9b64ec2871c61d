#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run the whole suite:
# Debian's Slurm + munge for the 3-host testbed (root), the venv, then pytest.
#   bash tests/run.sh [pytest args]      e.g. bash tests/run.sh -m "not slurm and not train"
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  bash tests/slurm/install.sh
else
  echo "tests/run.sh: not root: the Slurm testbed tests will be skipped" >&2
fi
bash jobs/setup_env.sh test
exec .venv/bin/python -m pytest "$@"
