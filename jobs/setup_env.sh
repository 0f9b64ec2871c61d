#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv: Ray + RLlib, mpi4py with the
# PyPI MPICH wheel (mpirun in .venv/bin, no system MPI needed), the CPU build of torch.
#   bash jobs/setup_env.sh            # launcher + trainer
#   bash jobs/setup_env.sh test       # ... plus the test tools
# On a cluster, use its MPI rather than the wheel (its mpirun/srun and its network): load the MPI
# module first, then build mpi4py against it with
#   module load cray-mpich && MPICC=cc MPIRAY_SITE_MPI=1 bash jobs/setup_env.sh    # Cray (HPE) systems
#   module load openmpi && MPIRAY_SITE_MPI=1 bash jobs/setup_env.sh                  # mpicc on PATH
# GPUs: torch==2.13.0 is the CPU build. For a CUDA build, name the torch you want, e.g.
#   MPIRAY_TORCH=torch bash jobs/setup_env.sh     # PyPI's default Linux build (CUDA; several GB)
# or a build for your CUDA from the index pytorch.org names, installed before this script runs.
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
# torch 2.13.0 is the CPU wheel; an unpinned torch would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "${MPIRAY_TORCH:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[$extras]"
