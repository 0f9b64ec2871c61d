#!/usr/bin/env bash
# Builds OpenPBS for the PBS testbed (tests/pbs/testbed.py) from the vendored source, once per machine:
# the Debian 12 packages it needs, then ./configure --prefix=/opt/pbs && make && make install, then
# pbs_postinstall. The build is cached by the tarball's sha256 (/opt/pbs/.mpiray-openpbs-sha256):
# nothing is done, not even `apt-get update`, when it is there. Also makes the ordinary user the
# testbed's jobs run as (PBS runs no job of root). Needs root.
#
# Where the vendored source is absent (a fresh clone elsewhere), it says where to get OpenPBS and
# exits 0: the PBS tests then skip, saying the same.
set -euo pipefail
cd "$(dirname "$0")/../.."
tarball=${MPIRAY_OPENPBS_TARBALL:-../shared/vendor/openpbs-23.06.06-cd7ab5eda.tar.gz}
prefix=/opt/pbs
stamp=$prefix/.mpiray-openpbs-sha256
user=${MPIRAY_PBS_USER:-mpiraypbs}

if [ ! -f "$tarball" ]; then
  echo "tests/pbs/install.sh: no OpenPBS source at $tarball: get it from https://github.com/openpbs/openpbs" \
       "(commit cd7ab5edaf03dcac2f1cb9e2f42d75eb117d468a, \`git archive --prefix=openpbs-23.06.06/\`);" \
       "the PBS tests are skipped without it" >&2
  exit 0
fi
if ((EUID != 0)); then
  echo "tests/pbs/install.sh: needs root (packages, /opt/pbs, a user): the PBS tests are skipped" >&2
  exit 0
fi

build=(gcc make libtool libhwloc-dev libx11-dev libxt-dev libedit-dev libical-dev libncurses-dev perl
       postgresql-server-dev-all python3-dev tcl-dev tk-dev swig libexpat1-dev libssl-dev libxext-dev
       libxft-dev autoconf automake g++ libcjson-dev pkg-config)
run=(expat libedit2 postgresql postgresql-contrib python3 tcl tk libical3 libcjson1 iproute2 util-linux)
missing=()
for package in "${build[@]}" "${run[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  # Debian's postgresql would make a cluster of its own that PBS does not use.
  if [ ! -d /etc/postgresql-common ] || ! grep -q "^create_main_cluster = false" /etc/postgresql-common/createcluster.conf 2>/dev/null; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" >>/etc/postgresql-common/createcluster.conf
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! id "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user"
fi

sha=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$sha" ]; then
  echo "OpenPBS already built ($prefix, source $sha)"
  exit 0
fi
started=$SECONDS
work=$(mktemp -d /var/tmp/mpiray-openpbs-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
cd "$work"/openpbs-*
log=$work/build.log
# Debian's python3, not a virtualenv's: PBS links its hooks' interpreter against it.
export PATH=/usr/bin:/bin:/usr/sbin:/sbin
{ ./autogen.sh && ./configure --prefix="$prefix" && make -j"$(nproc)" && make install; } >"$log" 2>&1 ||
  { tail -50 "$log" >&2; echo "tests/pbs/install.sh: the OpenPBS build failed (above)" >&2; exit 1; }
"$prefix"/libexec/pbs_postinstall >>"$log" 2>&1
chmod 4755 "$prefix"/sbin/pbs_iff "$prefix"/sbin/pbs_rcp
echo "$sha" >"$stamp"
echo "OpenPBS built into $prefix in $((SECONDS - started)) s"
