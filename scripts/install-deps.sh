#!/usr/bin/env bash
# Installs every build and test dependency: Debian 12 packages, then the project's Python
# environment (.venv/ in the repository root: torch 2.13, whose LibTorch pprun links, and the
# pinned packages of scripts/requirements.txt). Used by the README's commands and by .ci/run.
# Safe to re-run: it installs only what is missing and rebuilds .venv/ only when
# scripts/requirements.txt changed. Needs root for apt (uses sudo when run as a normal user).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# libgloo-dev: headers only. PyTorch's wheels ship no gloo/ headers but c10d's ProcessGroupGloo.hpp
# includes some; pprun never links Debian's libgloo (cmake/torch.cmake, docs/pprun.md).
PKGS=(
  cmake g++ ninja-build git ca-certificates
  python3 python3-venv libgloo-dev uuid-dev
  antlr4 libantlr4-runtime-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  graphviz librsvg2-bin libexpat1-dev
  hyperfine time
  clang-14 libclang-rt-14-dev
  slurmd slurmctld slurm-client munge iproute2   # the cluster tests: a SLURM cluster, test hosts
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} Debian packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Python environment, made with Debian's interpreter (not whichever python3 is first on PATH).
VENV=.venv
REQ=scripts/requirements.txt
want=$(sha256sum <"$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" = "$want" ]; then
  echo "install-deps: $VENV up to date ($REQ)"
  exit 0
fi
echo "install-deps: making $VENV from $REQ (torch $(sed -n 's/^torch==//p' "$REQ"))"
rm -rf "$VENV"
/usr/bin/python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ"
echo "$want" >"$VENV/.requirements.sha256"
echo "install-deps: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
