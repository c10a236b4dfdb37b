#!/usr/bin/env bash
# Gathers into .gpu-carry/ (ignored by git) what scripts/gpu-check.sh needs to build pprun on a GPU
# machine that has CUDA, PyTorch, cmake, ninja and g++ but none of the project's Debian build
# dependencies and no network (docs/gpu.md):
#   root/      the Debian 12 packages of the build dependencies (apt-get download), unpacked with
#              dpkg -x: fmt, nlohmann-json, CLI11, the gloo headers, the ANTLR C++ runtime, libuuid;
#   antlr/     the layout parser generated here by the real ANTLR tool from grammar/Layout.g4 (the
#              tool needs Java, which such a machine lacks), with the grammar's checksum;
#   antlr4-pregenerated  stands in for the ANTLR tool there: it copies antlr/ into the build, and
#              refuses when grammar/Layout.g4 is not the grammar it was generated from.
# gpu-check.sh uses .gpu-carry/ when it is there. Run here, as root or with apt-get download
# allowed; prints the folder's size (the device machine takes 64 MiB of working tree in all).
#
#   scripts/gpu-carry.sh [DEST]          (default .gpu-carry)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpu-carry}
PKGS=(libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libgloo-dev
      libantlr4-runtime-dev libantlr4-runtime4.9 uuid-dev libuuid1)
command -v antlr4 >/dev/null || { echo "gpu-carry: needs the ANTLR tool (scripts/install-deps.sh)" >&2; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST/debs" "$DEST/root"
echo "gpu-carry: downloading ${PKGS[*]}"
(cd "$DEST/debs" && apt-get download -q "${PKGS[@]}" >/dev/null)
for f in "$DEST"/debs/*.deb; do dpkg -x "$f" "$DEST/root"; done
ls "$DEST/debs" >"$DEST/packages.txt"
rm -rf "$DEST/debs" "$DEST/root/usr/share/doc" "$DEST/root/usr/share/man" "$DEST/root/usr/share/lintian"
# The packages' .so links are absolute (/lib/...): point them into the folder.
LIB=$DEST/root/usr/lib/x86_64-linux-gnu
for l in "$LIB"/*.so; do
  [ -L "$l" ] || continue
  target=$(basename "$(readlink "$l")")
  ln -sfn "$target" "$l"
  [ -e "$l" ] || { [ -e "$DEST/root/lib/x86_64-linux-gnu/$target" ] && ln -sfn "../../../lib/x86_64-linux-gnu/$target" "$l"; }
  [ -e "$l" ] || { echo "gpu-carry: $l points nowhere" >&2; exit 1; }
done
# The layout parser, generated as grammar/CMakeLists.txt's custom command does.
antlr4 -Dlanguage=Cpp -no-listener -no-visitor -package ppgrammar -o "$DEST/antlr" \
  -Xexact-output-dir grammar/Layout.g4
sha256sum <grammar/Layout.g4 | cut -d' ' -f1 >"$DEST/antlr/Layout.g4.sha256"
cat >"$DEST/antlr4-pregenerated" <<'EOF'
#!/usr/bin/env bash
# Stands in for the ANTLR tool (see scripts/gpu-carry.sh): the same arguments, the files it made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="" grammar=""
while [ $# -gt 0 ]; do
  case $1 in -o) out=$2; shift ;; *.g4) grammar=$1 ;; esac
  shift
done
[ -n "$out" ] && [ -n "$grammar" ] || { echo "antlr4-pregenerated: needs -o DIR and a .g4 file" >&2; exit 2; }
if [ "$(sha256sum <"$grammar" | cut -d' ' -f1)" != "$(cat "$here/antlr/Layout.g4.sha256")" ]; then
  echo "antlr4-pregenerated: $grammar is not the grammar of $here/antlr: run scripts/gpu-carry.sh again" >&2
  exit 1
fi
mkdir -p "$out"
cp "$here"/antlr/*.cpp "$here"/antlr/*.h "$out"/
EOF
chmod +x "$DEST/antlr4-pregenerated"
echo "gpu-carry: $DEST holds $(du -sh "$DEST" | cut -f1) ($(du -sb "$DEST" | cut -f1) bytes): $(tr '\n' ' ' <"$DEST/packages.txt")"
