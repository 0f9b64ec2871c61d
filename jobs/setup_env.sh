#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv: Ray + RLlib, mpi4py with the
# PyPI MPICH wheel (mpirun in .venv/bin, no system MPI needed), torch (MPIRAY_TORCH, below).
#   bash jobs/setup_env.sh            # launcher + trainer
#   bash jobs/setup_env.sh test       # ... plus the test tools
# On Debian/Ubuntu, python3 -m venv needs the python3-venv package. PYTHON=... names another interpreter.
# On a cluster, use its MPI rather than the wheel (its mpirun/srun and its network): load the MPI
# module first, then build mpi4py against it with
#   module load cray-mpich && MPICC=cc MPIRAY_SITE_MPI=1 bash jobs/setup_env.sh    # Cray (HPE) systems
#   module load openmpi && MPIRAY_SITE_MPI=1 bash jobs/setup_env.sh                  # mpicc on PATH
# torch: MPIRAY_TORCH (default torch==2.13.0). Which build that pin gets depends on pip's indexes (a local
# wheel dir with 2.13.0+cpu, as the project's machines have: the CPU build; PyPI on Linux x86_64: a CUDA
# build, several GB). Name the build to be sure (docs/install.md, "torch: CPU or CUDA"):
#   MPIRAY_TORCH=torch==2.13.0+cpu PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu bash jobs/setup_env.sh
#   MPIRAY_TORCH=torch==2.13.0+cuXYZ PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cuXYZ bash jobs/setup_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
extras="train"
[ "${1:-}" = "test" ] && extras="train,test"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "${MPIRAY_SITE_MPI:-0}" = "1" ]; then
  mpicc=${MPICC:-mpicc}
  if ! command -v "$mpicc" >/dev/null; then
    echo "jobs/setup_env.sh: MPIRAY_SITE_MPI=1, but there is no $mpicc: load your site's MPI module first" \
         "(or set MPICC to its compiler wrapper, e.g. MPICC=cc on Cray)" >&2
    exit 2
  fi
  # Built here against that MPI, never taken from pip's cache (a wheel built against another MPI).
  MPICC=$mpicc .venv/bin/python -m pip install -q --no-cache-dir --no-binary=mpi4py "mpi4py>=4.0"
else
  extras="$extras,mpich"
fi
# Pinned: an unpinned torch takes the newest build of the index, on PyPI a multi-GB CUDA one.
.venv/bin/python -m pip install -q "${MPIRAY_TORCH:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[$extras]"
