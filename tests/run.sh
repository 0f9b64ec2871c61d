#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run them tier by tier:
#   1. ruff check . and mypy (lint, and the layers' contract in types)
#   2. the fast tier, tests/unit/: pure functions and the rank protocol in one process (no MPI, no Ray), seconds
#   3. the real runs, tests/real/: mpirun + Ray, attacks as a second user, the 3-host Slurm testbed (as root:
#      Debian's Slurm + munge are installed first), containers, short RLlib trainings
#   4. the smoke set in each extra environment (tests/envs.sh: Ray 2.52, the Open MPI wheel,
#      Debian's MPICH; each built once into .envs/ and kept, in the background from step 1 on; run in step 3's
#      testbed lane once its tests end), then the PBS tier in .envs/pbs (and its
#      3-host job again with Open MPI, .envs/pbs-openmpi) on the 3-host PBS testbed: only where an
#      OpenPBS 23.06 or PBS Professional is installed (MPIRAYTEST_PBS_PREFIX, default /opt/pbs) and this is
#      root; elsewhere one line says it is skipped and why, and its environments are not built
#   bash tests/run.sh                  # all of it, as CI runs it
#   bash tests/run.sh [pytest args]    # pytest alone with these, e.g. tests/unit
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
  bash tests/slurm/install.sh
else
  echo "tests/run.sh: not root: the Slurm testbed tests will be skipped" >&2
fi
bash jobs/setup_env.sh test
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
status=0
started=$SECONDS
# What the later steps use is built in the background, beside the lint and the fast tier (one core of the two) and
# then beside the real runs: the extra environments (Ray 2.52's first, which the real runs use as "another
# environment": ranks of other versions, a joining job of another Ray, the spill dir on the oldest Ray), then, as
# root, the container tests' images (tests/containers/image.sh; the tests that use them come last in the testbed
# lane, and build an image themselves only if this did not). One after another: two apt-gets would fight for
# dpkg's lock. Its exit status goes to a file, which the testbed lane waits for before its smoke sets.
builds=$(mktemp)
builds_status=$(mktemp -u)
(
  code=0
  (
    for name in ray-2.52 openmpi system-mpich; do bash tests/envs.sh "$name" --build-only || exit $?; done
    if [ "$(id -u)" = 0 ]; then
      CONTAINERS_CONF=tests/containers/containers.conf USER=${USER:-root} bash tests/containers/image.sh podman \
        || echo "tests/run.sh: the container images did not build here; their tests build them again" >&2
    fi
  ) >"$builds" 2>&1 || code=$?
  echo "$code" >"$builds_status.part" && mv "$builds_status.part" "$builds_status"
  exit "$code"
) &
builds_pid=$!
.venv/bin/ruff check . || status=1
.venv/bin/mypy || status=1  # the layers' contract in types (pyproject.toml's [tool.mypy]: mpiray/)
.venv/bin/python -m pytest tests/unit || status=$?
echo "tests/run.sh: lint and the fast tier took $((SECONDS - started)) s" >&2
# Each testbed stays up from one pytest run to the next; the last run on it takes it down (unless kept).
keep_testbed=${MPIRAYTEST_KEEP_TESTBED:-0}
# Two pytests side by side: the tests that use a testbed or the container images (marked `testbed` by
# tests/real/conftest.py: one of each on this machine, so in one pytest, in turn), mostly waiting on their
# schedulers, and the rest; the first's output follows the second's. Each lists its 30 slowest tests: where the
# time goes, in every CI log.
# The testbed lane then runs the smoke sets of the other environments (tests/envs.sh openmpi, system-mpich: a
# third of their tests are testbed jobs; ray-2.52) in the minutes it used to wait for the other, once the
# builds are done; system-mpich's takes the testbed down.
beside=$(mktemp)
(
  lane=0
  MPIRAYTEST_KEEP_TESTBED=1 .venv/bin/python -m pytest tests/real/slurm tests/real/local tests/real/pbs \
    tests/real/containers -m "not pbs and not serial and testbed" --durations=30 || lane=$?
  while [ ! -e "$builds_status" ]; do sleep 2; done
  if [ "$(cat "$builds_status")" != 0 ]; then
    echo "tests/run.sh: the extra environments did not build (below): their smoke sets are not run"
    [ "$keep_testbed" = 1 ] || .venv/bin/python tests/slurm/testbed.py down
    exit 1
  fi
  for name in openmpi ray-2.52 system-mpich; do
    case "$name" in system-mpich) keep=$keep_testbed ;; *) keep=1 ;; esac
    lane_started=$SECONDS
    echo "tests/run.sh: the smoke set on $name (bash tests/envs.sh $name), in the testbed lane"
    MPIRAYTEST_KEEP_TESTBED=$keep bash tests/envs.sh "$name" || lane=$((lane ? lane : $?))
    echo "tests/run.sh: $name took $((SECONDS - lane_started)) s (the run so far: $((SECONDS - started)) s)"
  done
  exit "$lane"
) >"$beside" 2>&1 &
beside_pid=$!
MPIRAYTEST_KEEP_TESTBED=1 .venv/bin/python -m pytest tests/real -m "not pbs and not serial and not testbed" \
  --durations=30 || status=$((status ? status : $?))
wait "$builds_pid" || status=$((status ? status : $?))
echo "tests/run.sh: what the later steps use was built beside the above:" >&2
cat "$builds" >&2
rm -f "$builds"
wait "$beside_pid" || status=$((status ? status : $?))
echo "tests/run.sh: the tests of the testbeds and the images, and three smoke sets, ran beside the above:" >&2
cat "$beside"
rm -f "$beside" "$builds_status"
# Then what needs the machine to itself (setup.cfg: serial), alone.
MPIRAYTEST_KEEP_TESTBED=1 .venv/bin/python -m pytest tests/real -m "serial" --durations=5 || status=$((status ? status : $?))
# The one decision on the PBS tier (tests/pbs/testbed.py available): its environments take minutes to
# build (torch, RLlib), so where it cannot run they are not built either.
pbs_skipped=""
extra_envs=()
if pbs=$(python3 tests/pbs/testbed.py available); then
  extra_envs+=(pbs pbs-openmpi)
else
  pbs_skipped=$pbs
fi
for name in "${extra_envs[@]}"; do
  # The last run on the PBS testbed takes it down; the Slurm one went down with system-mpich's, above.
  case "$name" in pbs-openmpi) keep=$keep_testbed ;; *) keep=1 ;; esac
  started=$SECONDS
  echo "tests/run.sh: the smoke set on $name (bash tests/envs.sh $name)" >&2
  MPIRAYTEST_KEEP_TESTBED=$keep bash tests/envs.sh "$name" || status=$((status ? status : $?))
  echo "tests/run.sh: $name took $((SECONDS - started)) s" >&2
done
[ -z "$pbs_skipped" ] || echo "tests/run.sh: the PBS tier is skipped: $pbs_skipped" >&2
exit "$status"
