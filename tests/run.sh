#!/usr/bin/env bash
# Set up everything clusterkit's test suite needs on a fresh Debian/Ubuntu machine, then run it.
#
#   bash tests/run.sh [pytest args...]
#
# Installs (as root, only what is missing): Slurm (slurmctld, slurmd, client) + munge for the
# local Slurm test cluster, OpenSSH server for the SSH test nodes, shellcheck for rendered
# scripts, pdsh and clustershell for the preflight benchmark; then clusterkit itself with its
# test and example extras (torch CPU build, deepspeed with DS_BUILD_OPS=0,
# accelerate, transformers). The Slurm test cluster and the SSH lab are started
# and stopped by the tests' own fixtures. Tests that need root skip, with the reason, without it.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
PKGS=(slurmctld slurmd slurm-client munge openssh-server openssh-client shellcheck pdsh clustershell iproute2 procps util-linux)

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "tests/run.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
else
  echo "tests/run.sh: not root (or no apt-get): system packages not installed; Slurm/SSH tests will skip" >&2
fi

# DS_BUILD_OPS=0: deepspeed's CUDA/C++ ops are not compiled at install (the tests run it on CPU)
DS_BUILD_OPS=0 "$PY" -m pip install -q --disable-pip-version-check ".[test,examples,doctor]"
exec "$PY" -m pytest "$@"
