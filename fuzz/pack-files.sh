#!/usr/bin/env bash
# Packs files into the archive format of fuzz/fuzz_files.h (the input of the checkpoint and
# token_file targets), on stdout:
#   fuzz/pack-files.sh DIR             every file under DIR (at most two levels), named relative
#                                      to DIR: `latest` and other top-level files first
#   fuzz/pack-files.sh NAME=FILE ...   the given files under the given names, in this order
#   fuzz/pack-files.sh --unpack ARCHIVE DIR   the other way: writes the files of ARCHIVE (a seed,
#                                      a finding) under DIR, to rerun them with the tool itself
# Fails if a file holds the separator "\n=== " (it would split there).
set -euo pipefail
if [ "${1:-}" = "--unpack" ]; then
  exec python3 - "${2:?usage: pack-files.sh --unpack ARCHIVE DIR}" "${3:?usage: pack-files.sh --unpack ARCHIVE DIR}" <<'PY'
import os, sys
data = open(sys.argv[1], "rb").read()
if not data.startswith(b"=== "):
    sys.exit("pack-files.sh: not an archive (no '=== NAME' line first)")
for part in data[4:].split(b"\n=== "):
    name, _, body = part.partition(b"\n")
    path = os.path.join(sys.argv[2], name.decode())
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    open(path, "wb").write(body)
PY
fi
entries=()
if [ $# -eq 1 ] && [ -d "$1" ]; then
  dir=${1%/}
  while IFS= read -r f; do entries+=("${f#"$dir"/}=$f"); done < <(
    find "$dir" -mindepth 1 -maxdepth 1 -type f | LC_ALL=C sort
    find "$dir" -mindepth 2 -maxdepth 2 -type f | LC_ALL=C sort)
else
  entries=("$@")
fi
first=1
for e in "${entries[@]}"; do
  name=${e%%=*} file=${e#*=}
  if grep -qzP '\n=== ' "$file"; then
    echo "pack-files.sh: $file holds the separator '\\n=== '" >&2
    exit 1
  fi
  [ $first = 1 ] || printf '\n'
  printf '=== %s\n' "$name"
  cat "$file"
  first=0
done
