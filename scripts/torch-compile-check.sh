#!/usr/bin/env bash
# Compiles the whole project (every object file; the programs the tests depend on get linked too)
# against a LibTorch that this machine does not run: by default the CUDA build of torch 2.11.0 from
# the Python package index (cu130), with NCCL's headers (nvidia-nccl-cu13 at the version that torch
# requires) and the CUDA toolkit's headers in /usr/local/cuda, so that the NCCL transport compiles
# too. No GPU and no CUDA library are needed: the two wheels are installed --no-deps into a scratch
# environment whose interpreter is never asked about torch (importing a CUDA torch without the CUDA
# libraries fails); a stand-in answers the two questions cmake/torch.cmake asks. It catches a build
# broken for GPU users (issue 38: torch 2.11's Edge::function) before any GPU time is spent.
# docs/building.md ("Which LibTorch") gives its cost; ctest runs it as torch_compat.cuda_2_11
# (label torch_compat) only when asked: PP_TORCH_COMPAT=1.
#
#   scripts/torch-compile-check.sh [TORCH_VERSION]       (default 2.11.0)
#
# Environment:
#   PP_TORCH_COMPAT_CACHE  the wheels and the environment, kept between runs
#                          (default ~/.cache/pprun-torch-compat: 730 MB of wheels, 1.4 GB installed)
#   PP_TORCH_COMPAT_BUILD  the build directory (default build-torch-VERSION/, ignored by git; kept)
#   CUDA_HOME              the CUDA toolkit (default /usr/local/cuda): its headers and nvcc
#   TORCH_CUDA_ARCH_LIST   default 9.0 (Hopper); any value spares torch's configure a GPU probe
#   JOBS                   parallel compiles (default: the cores)
# Exit status: 0 every object compiled; 1 one did not (its errors are printed); 2 it could not be
# set up (no network for the wheels, no CUDA headers); 77 with --if-asked and PP_TORCH_COMPAT unset.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ "${1:-}" = --if-asked ]; then
  shift
  if [ "${PP_TORCH_COMPAT:-0}" != 1 ]; then
    echo "torch-compile-check: skipped (set PP_TORCH_COMPAT=1 to run it: it downloads 730 MB once)"
    exit 77
  fi
fi
VERSION=${1:-2.11.0}
CACHE=${PP_TORCH_COMPAT_CACHE:-$HOME/.cache/pprun-torch-compat}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
JOBS=${JOBS:-$(nproc)}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
PY=$(command -v python3)
say() { echo "torch-compile-check: $*"; }
die() { say "$*" >&2; exit 2; }
start=$(date +%s)

[ -f "$CUDA_HOME/include/cuda_runtime.h" ] && [ -x "$CUDA_HOME/bin/nvcc" ] ||
  die "no CUDA toolkit at $CUDA_HOME (its headers and nvcc; set CUDA_HOME)"
[ -n "$PY" ] || die "no python3 on PATH (for pip)"

# ---- the wheels ---------------------------------------------------------------------------------
WHEELS=$CACHE/wheels-$VERSION
mkdir -p "$WHEELS"
torch_whl() { ls "$WHEELS"/torch-"$VERSION"-*.whl 2>/dev/null | head -1; }
if [ -z "$(torch_whl)" ]; then
  say "downloading torch==$VERSION (the package index's build: CUDA)"
  "$PY" -m pip download -q --no-deps "torch==$VERSION" -d "$WHEELS" || die "pip download torch==$VERSION failed"
fi
TORCH_WHL=$(torch_whl)
# The NCCL that this torch requires (its metadata's Requires-Dist), for the same nccl.h.
NCCL_PKG=$("$PY" - "$TORCH_WHL" <<'EOF'
import re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
for line in z.read(meta).decode().splitlines():
    m = re.match(r"Requires-Dist: (nvidia-nccl-cu\d+)==([\w.]+)", line)
    if m:
        print(f"{m.group(1)}=={m.group(2)}")
        break
EOF
)
[ -n "$NCCL_PKG" ] || die "$TORCH_WHL requires no nvidia-nccl package: not a CUDA build?"
nccl_whl() { ls "$WHEELS"/"$(echo "${NCCL_PKG%%==*}" | tr - _)"-"${NCCL_PKG##*==}"-*.whl 2>/dev/null | head -1; }
if [ -z "$(nccl_whl)" ]; then
  say "downloading $NCCL_PKG"
  "$PY" -m pip download -q --no-deps "$NCCL_PKG" -d "$WHEELS" || die "pip download $NCCL_PKG failed"
fi
say "wheels: $(basename "$TORCH_WHL"), $(basename "$(nccl_whl)") ($(du -sh "$WHEELS" | cut -f1))"

# ---- the scratch environment --------------------------------------------------------------------
ENV=$CACHE/env-$VERSION
if [ ! -f "$ENV/.installed" ]; then
  say "installing them --no-deps into $ENV"
  rm -rf "$ENV"
  "$PY" -m venv "$ENV" && "$ENV/bin/pip" install -q --no-deps --no-index "$TORCH_WHL" "$(nccl_whl)" ||
    die "installing the wheels failed"
  touch "$ENV/.installed"
fi
SITE=$(ls -d "$ENV"/lib/python3*/site-packages)
NCCL_DIR=$(dirname "$(ls "$SITE"/nvidia/nccl*/include/nccl.h "$SITE"/nvidia/*/include/nccl.h 2>/dev/null | head -1)")
[ -f "$NCCL_DIR/nccl.h" ] || die "no nccl.h in $SITE/nvidia"
NCCL_LIB=$(ls "$NCCL_DIR"/../lib/libnccl.so* | head -1)
# cmake/torch.cmake asks the interpreter for torch.utils.cmake_prefix_path and torch.__version__.
STANDIN=$CACHE/stand-in-python-$VERSION
cat >"$STANDIN" <<EOF
#!/bin/sh
# Stands in for $ENV/bin/python (scripts/torch-compile-check.sh): its torch cannot be imported here.
echo "$SITE/torch/share/cmake"
echo "$("$PY" -c "import sys; print(sys.argv[1].split('/')[-1].split('-')[1])" "$TORCH_WHL")"
EOF
chmod +x "$STANDIN"

# ---- configure ---------------------------------------------------------------------------------
BUILD=${PP_TORCH_COMPAT_BUILD:-$ROOT/build-torch-$VERSION}  # (in the tree: ccache then reuses build/'s objects)
args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPP_PYTHON="$STANDIN"
      -DCUDAToolkit_ROOT="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc"
      -DTORCH_CUDA_ARCH_LIST="$TORCH_CUDA_ARCH_LIST"  # (cached: a re-run of cmake by ninja needs it too)
      -DNCCL_INCLUDE_DIR="$NCCL_DIR" -DNCCL_LIBRARY="$NCCL_LIB"
      # libtorch_cuda.so's own dependencies (cuBLAS, cuDNN, ... of the nvidia wheels) are not
      # installed here: the links that the tests' targets depend on (pprun, ppcompile, ...) leave
      # their symbols to run time, and check everything else
      -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
command -v ccache >/dev/null && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# torch's CMake config wants libnvrtc, which a toolkit of headers may lack: nothing links it here.
if ! ls "$CUDA_HOME"/lib*/libnvrtc.so* >/dev/null 2>&1; then
  args+=(-DCUDA_nvrtc_LIBRARY="$(ls "$CUDA_HOME"/lib*/libcudart.so* | head -1)")
fi
say "configuring $BUILD against torch $VERSION (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
if ! PATH=$CUDA_HOME/bin:$PATH cmake "${args[@]}" >"$CACHE/configure-$VERSION.log" 2>&1; then
  tail -30 "$CACHE/configure-$VERSION.log"
  say "FAILED: configuring against torch $VERSION (log: $CACHE/configure-$VERSION.log)"
  exit 1
fi
grep -E 'LibTorch:|pprt: NCCL' "$CACHE/configure-$VERSION.log"
grep -q 'NCCL transport enabled' "$CACHE/configure-$VERSION.log" ||
  { say "FAILED: the NCCL transport was not configured"; exit 1; }

# ---- every object file --------------------------------------------------------------------------
mapfile -t objects < <(ninja -C "$BUILD" -t targets all | sed -n 's/^\(.*\.o\): CXX_COMPILER.*/\1/p')
say "compiling ${#objects[@]} object files (-j$JOBS; the programs the tests depend on are linked too)"
if ! ninja -C "$BUILD" -j"$JOBS" -k 0 "${objects[@]}" >"$CACHE/build-$VERSION.log" 2>&1; then
  grep -E 'error|FAILED' "$CACHE/build-$VERSION.log" | head -60
  say "FAILED: $(grep -c '^FAILED' "$CACHE/build-$VERSION.log") object file(s) do not compile against torch $VERSION (log: $CACHE/build-$VERSION.log)"
  exit 1
fi
say "ok: ${#objects[@]} object files compile against torch $VERSION (CUDA) and $NCCL_PKG, in $(( $(date +%s) - start )) s"
