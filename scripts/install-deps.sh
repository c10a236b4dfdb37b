#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages. Used by the README and by .ci/run.
# Safe to re-run. Needs root (uses sudo when run as a normal user).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(
  cmake g++ ninja-build git ca-certificates
  libtorch-dev python3-torch libgloo-dev libopenblas0-pthread uuid-dev
  antlr4 libantlr4-runtime-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  graphviz librsvg2-bin python3 libexpat1-dev
  hyperfine time
  clang-14 libclang-rt-14-dev
  slurmd slurmctld slurm-client munge iproute2   # the cluster tests: a SLURM cluster, test hosts
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
