#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv: Ray + RLlib, mpi4py with the
# PyPI MPICH wheel (mpirun in .venv/bin, no system MPI needed), the CPU build of torch.
#   bash jobs/setup_env.sh            # launcher + trainer
#   bash jobs/setup_env.sh test       # ... plus the test tools
# On a cluster, use the site's MPI instead of the wheel: load its module and
# `pip install --no-binary mpi4py mpi4py` before this script (it then skips the wheel if MPIRAY_SITE_MPI=1).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="train"
[ "${1:-}" = "test" ] && extras="train,test"
[ "${MPIRAY_SITE_MPI:-0}" = "1" ] || extras="$extras,mpich"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch 2.13.0 is the CPU wheel; an unpinned torch would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[$extras]"
