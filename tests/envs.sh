#!/usr/bin/env bash
# An extra test environment in .envs/NAME (built once, rebuilt only when its requirements change),
# then the smoke set with its python: the tests start mpirun and the launcher from the python that
# runs pytest (tests/conftest.py), so the whole run uses that environment's Ray and MPI.
#   bash tests/envs.sh ray-2.52                 # build if needed, run the smoke set
#   bash tests/envs.sh ray-2.52 -k sigterm -s   # ... with more pytest arguments
#   bash tests/envs.sh ray-2.52 --build-only
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: bash tests/envs.sh NAME [--build-only | pytest args...] (NAME: ray-2.52)}
shift
# The launcher only (no RLlib, torch): what the smoke files import.
common=("mpi4py>=4.0" "mpich" "psutil>=5.9" "pytest>=8" "pytest-timeout>=2.3")
case "$name" in
  ray-2.52) requirements=("ray[default]==2.52.0" "${common[@]}") ;;  # the oldest Ray with token auth
  *) echo "tests/envs.sh: unknown environment '$name' (known: ray-2.52)" >&2; exit 2 ;;
esac
# Files whose tests are marked smoke; each must import without RLlib/torch (pytest imports them all).
smoke_files=(tests/test_raycompat.py tests/test_launcher.py tests/test_shared_node.py tests/test_library.py tests/test_slurm.py)

env_dir=.envs/$name
PYTHON=${PYTHON:-python3}
spec="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') ${requirements[*]}"
if [ "$(cat "$env_dir/spec" 2>/dev/null)" != "$spec" ]; then
  started=$SECONDS
  echo "tests/envs.sh: building $env_dir: $spec" >&2
  rm -rf "$env_dir"
  "$PYTHON" -m venv "$env_dir"
  # pip's output goes to a file beside the env, shown only if a step fails
  log=.envs/$name.log
  { "$env_dir/bin/python" -m pip install -q "${requirements[@]}" &&
    "$env_dir/bin/python" -m pip install -q --no-deps -e .; } >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  echo "$spec" >"$env_dir/spec"  # last: a build cut short is redone next time
  echo "tests/envs.sh: $env_dir built in $((SECONDS - started)) s" >&2
fi
[ "${1:-}" = "--build-only" ] && exit 0
exec "$env_dir/bin/python" -m pytest -m smoke "${smoke_files[@]}" "$@"
