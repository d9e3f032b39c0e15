#!/usr/bin/env bash
# Set up everything clusterkit's test suite needs on a fresh Debian/Ubuntu machine, then run it.
#
#   bash tests/run.sh [pytest args...]
#   bash tests/run.sh --slurm 24.11 [pytest args...]   the Slurm tests' testbed runs Slurm 24.11, built
#                                                      once from Debian 13's slurm-wlm source into
#                                                      build/slurm-24.11 (tests/slurm/testbed.sh)
#   bash tests/run.sh --install-only                   install what the tests need, run nothing
#   bash tests/run.sh --no-install [--slurm V] ...     run with what is installed (a second session
#                                                      beside a first, as .ci/run does)
#   SLURMLAB_PREBUILD=24.11 bash tests/run.sh ...      also builds Slurm 24.11 in the background, at idle
#                                                      CPU priority, while these tests run (.ci/run: the
#                                                      22.05 session; the 24.11 one then finds it built,
#                                                      or waits on the build's lock).  Log:
#                                                      build/slurm-24.11.prebuild.log
#
# Installs (as root, only what is missing): Slurm (slurmctld, slurmd, slurmdbd, client) + munge +
# MariaDB for the local Slurm test cluster, OpenSSH server for the SSH test nodes, shellcheck for
# rendered scripts, pdsh and clustershell for the preflight benchmark; then clusterkit itself with its
# test and example extras (torch CPU build, deepspeed with DS_BUILD_OPS=0,
# accelerate, transformers), and the side directory of horovod's and colossalai's launcher code
# (below). The packages' own services are not started (policy-rc.d during the install): the Slurm
# test cluster (with its own mysqld) and the SSH lab are started and stopped by the tests' own fixtures. Tests that need root skip, with the reason, without it.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
PKGS=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server openssh-server openssh-client shellcheck pdsh clustershell iproute2 procps util-linux
      # to build the testbed's second Slurm (--slurm 24.11) from source
      gcc make pkg-config libmunge-dev libjson-c-dev libyaml-dev libmariadb-dev libhwloc-dev liblz4-dev libcurl4-openssl-dev debian-archive-keyring
      # headless Chromium: `clusterkit nodes --html`'s page, screenshotted (tests/history/test_html.py)
      chromium
      # Open MPI's mpirun (4.1): --launcher mpirun, run on the testbed and checked by its own parser
      openmpi-bin)
INSTALL=1 TESTS=1
case "${1:-}" in
  --install-only) TESTS=0; shift ;;
  --no-install) INSTALL=0; shift ;;
esac
if [ "${1:-}" = "--slurm" ]; then
  case "${2:-}" in
    22.05|24.11) export SLURMLAB_SLURM=$2 ;;
    *) echo "tests/run.sh: --slurm takes 22.05 or 24.11" >&2; exit 2 ;;
  esac
  shift 2
fi

if [ "$INSTALL" = 0 ]; then
  :   # a second session beside a first one that installed (.ci/run): pip must not reinstall under it
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "tests/run.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then   # no daemon started by the packages' install scripts
      policy=/usr/sbin/policy-rc.d
      printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"
    fi
    rc=0; apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    if [ -n "$policy" ]; then rm -f "$policy"; fi
    [ $rc = 0 ] || exit $rc
  fi
else
  echo "tests/run.sh: not root (or no apt-get): system packages not installed; Slurm/SSH tests will skip" >&2
fi

# DS_BUILD_OPS=0: deepspeed's CUDA/C++ ops are not compiled at install (the tests run it on CPU)
if [ "$INSTALL" = 1 ]; then
  DS_BUILD_OPS=0 "$PY" -m pip install -q --disable-pip-version-check ".[test,examples]"
fi

# horovod and colossalai do not install here (horovod's pip install compiles Gloo/MPI, colossalai pins an
# older torch). tests/render/test_launcher_parsers.py runs their own pure-Python launcher code instead,
# unpacked (not installed, nothing built) from these pinned releases into a git-ignored side directory:
# horovod and colossalai from their source releases; fabric, which colossalai's SSH runner imports, and
# the packages fabric needs beyond this environment, from wheels. Idempotent: redone when the pins change.
SIDE=build/side-launchers
SIDE_SRC=(horovod==0.28.1 colossalai==0.5.0)
SIDE_WHL=(fabric==3.2.2 deprecated==1.2.18 decorator==5.2.1 wrapt==1.17.3)
if [ "$INSTALL" = 1 ] && [ "$(cat "$SIDE/site/.pins" 2>/dev/null)" != "${SIDE_SRC[*]} ${SIDE_WHL[*]}" ]; then
  echo "tests/run.sh: unpacking ${SIDE_SRC[*]} ${SIDE_WHL[*]} into $SIDE" >&2
  rm -rf "$SIDE"
  mkdir -p "$SIDE/dl" "$SIDE/site"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$SIDE/dl" "${SIDE_SRC[@]}"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: -d "$SIDE/dl" "${SIDE_WHL[@]}"
  for spec in "${SIDE_SRC[@]}"; do        # only the package directory of each source release
    name=${spec%%==*} ver=${spec##*==}
    tar -xzf "$SIDE/dl/$name-$ver.tar.gz" -C "$SIDE/site" --strip-components=1 "$name-$ver/$name"
  done
  for whl in "$SIDE"/dl/*.whl; do "$PY" -m zipfile -e "$whl" "$SIDE/site"; done
  echo "${SIDE_SRC[*]} ${SIDE_WHL[*]}" > "$SIDE/site/.pins"
fi
export CK_SIDE_LAUNCHERS="$PWD/$SIDE/site"

# Slurm 24.11 for a later `--slurm 24.11` run, built meanwhile: it shares nothing with this run's
# testbed (its own cache directory; testbed.sh --build starts no daemon), and runs at idle CPU
# priority (SCHED_IDLE) so the tests here keep the cores.  A second build is not started: the
# cache's lock makes a testbed that needs it wait for this one.
if [ -n "${SLURMLAB_PREBUILD:-}" ] && [ "$(id -u)" = 0 ]; then
  case "$SLURMLAB_PREBUILD" in
    24.11) ;;
    *) echo "tests/run.sh: SLURMLAB_PREBUILD takes 24.11" >&2; exit 2 ;;
  esac
  mkdir -p build
  echo "tests/run.sh: building Slurm $SLURMLAB_PREBUILD in the background (log: build/slurm-$SLURMLAB_PREBUILD.prebuild.log)" >&2
  SLURMLAB_SLURM=$SLURMLAB_PREBUILD nohup chrt --idle 0 nice -n 19 bash tests/slurm/testbed.sh --build \
    </dev/null >"build/slurm-$SLURMLAB_PREBUILD.prebuild.log" 2>&1 &
fi

if [ "$TESTS" = 0 ]; then exit 0; fi

# Three workers (CK_TEST_WORKERS to change): the Slurm tests in two lanes, each in order on a worker of
# its own with a test cluster of its own, the other end to end tests in order on the third, the
# fast tier wherever a worker is free (tests/lanes.py).  The Slurm tests mostly wait on the
# cluster, so the two Slurm lanes share two cores.  A later -n in the arguments wins (-n 0: one
# process and one test cluster, as plain pytest).
exec "$PY" -m pytest -n "${CK_TEST_WORKERS:-3}" --dist loadgroup "$@"
