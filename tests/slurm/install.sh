#!/usr/bin/env bash
# Installs the Debian 12 packages the Slurm testbed (tests/slurm/testbed.py) needs, and the Prometheus server that
# scrapes a cluster on it (tests/real/slurm/test_metrics_targets.py; no service is started: the test runs its own).
# Idempotent: does nothing, not even `apt-get update`, when they are all installed.
set -euo pipefail

# slurm-wlm is just these three; --no-install-recommends skips ~20 plugin/-dev packages.
# libpmix-dev: Slurm's mpi/pmix plugin (srun --mpi=pmix) dlopens libpmix.so, which only the -dev
# package provides; slurmd loads it when it starts, so install it before `testbed.py up`.
# sshfs and openssh-server: a real network file system (tests/real/local/test_preflight.py mounts one from an sshd
# of its own; no service is started here, and this kernel has no NFS). faketime: a testbed host's clock set off
# (testbed.set_clock preloads its libfaketime in that host's job tasks).
packages=(slurmctld slurmd slurm-client munge iproute2 util-linux hostname libpmix-dev prometheus sshfs openssh-server
          faketime)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if ((${#missing[@]} == 0)); then
    echo "slurm testbed packages already installed"
    exit 0
fi
if ((EUID != 0)); then
    echo "install.sh: needs root to install: ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
