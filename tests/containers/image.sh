#!/usr/bin/env bash
# The container tests' image, built here from Debian's packages and PyPI's, never pulled from an image registry;
# built once per clone (.envs/images/RUNTIME) and reused while its recipe is the same. Prints its reference as the
# last line of output: for charliecloud, the directory image; for podman, the image's name in podman's storage
# (the same root file system, imported: `podman import`, never pulled).
#   bash tests/containers/image.sh charliecloud
#   CONTAINERS_CONF=tests/containers/containers.conf bash tests/containers/image.sh podman
#   bash tests/containers/image.sh apptainer     # where Apptainer (or Singularity) is installed: a SIF; exit 3 without
# Needs root where Debian's mmdebstrap or Charliecloud are not installed yet (apt-get installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
runtime=${1:?usage: bash tests/containers/image.sh charliecloud|podman}
case "$runtime" in
  charliecloud) tools=(mmdebstrap ch-run) packages=(mmdebstrap charliecloud-runtime) ;;
  podman)
    # The same root file system, imported into podman's storage under a name of its recipe's.
    if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then  # runc: this machine's cgroups v1
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc >/dev/null
    fi
    root=$(bash "$0" charliecloud | tail -n 1)
    name=localhost/mpiray-test:ray-2.60
    if [ "$(cat "$root.podman" 2>/dev/null)" != "$(cat "$root.recipe")" ] || ! podman image exists "$name"; then
      tar -C "$root" -c . | podman import --quiet - "$name" >&2
      cp "$root.recipe" "$root.podman"
    fi
    echo "$name"
    exit 0
    ;;
  apptainer | singularity)
    # Not in Debian 12: only where the site installed it. The same root file system, as a SIF file.
    command -v "$runtime" >/dev/null || { echo "tests/containers/image.sh: $runtime is not installed here" >&2; exit 3; }
    root=$(bash "$0" charliecloud | tail -n 1)
    sif=$root-$runtime.sif
    if [ "$(cat "$sif.recipe" 2>/dev/null)" != "$(cat "$root.recipe")" ] || [ ! -f "$sif" ]; then
      "$runtime" build --force "$sif" "$root" >&2
      cp "$root.recipe" "$sif.recipe"
    fi
    echo "$sif"
    exit 0
    ;;
  *) echo "tests/containers/image.sh: no test image for $runtime here (charliecloud, podman, apptainer, singularity)" >&2
     exit 2 ;;
esac
# Debian 12's Python 3.11 with Ray installed into it from PyPI by the venv's pip (the same cp311 wheels), and
# what the default trainer (train/) needs: RLlib and the CPU torch the venv has (jobs/setup_env.sh's pin).
ray_requirement="ray[default,rllib]==2.60.0"
trainer_requirements=(torch==2.13.0 "gymnasium>=1.0")
recipe="mmdebstrap --variant=minbase --include=python3 bookworm; pip --target $ray_requirement ${trainer_requirements[*]} psutil"
image=$PWD/.envs/images/$runtime
if [ -x "$image/usr/bin/python3" ] && [ "$(cat "$image.recipe" 2>/dev/null)" = "$recipe" ]; then
  echo "$image"
  exit 0
fi
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "tests/containers/image.sh: ${missing[*]} missing: apt-get install ${packages[*]} (as root)" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >/dev/null
fi
.venv/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
  { echo "tests/containers/image.sh: .venv's Python is not 3.11, the image's: its wheels would not fit" >&2; exit 1; }
rm -rf "$image" "$image.recipe"
mkdir -p "$(dirname "$image")"
started=$SECONDS
mmdebstrap --quiet --variant=minbase --include=python3 bookworm "$image" >&2
.venv/bin/python -m pip install -q --target "$image/usr/local/lib/python3.11/dist-packages" "$ray_requirement" "${trainer_requirements[@]}" psutil \
  2>&1 | grep -v "^WARNING: Location" >&2 || true
[ -d "$image/usr/local/lib/python3.11/dist-packages/ray" ] || { echo "tests/containers/image.sh: Ray did not install" >&2; exit 1; }
echo "$recipe" > "$image.recipe"
echo "tests/containers/image.sh: $runtime image built in $((SECONDS - started)) s" >&2
echo "$image"
