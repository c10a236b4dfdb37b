#!/usr/bin/env bash
# Packs files into the archive format of fuzz/fuzz_files.h (the input of the checkpoint and
# token_file targets), on stdout:
#   fuzz/pack-files.sh DIR             every file under DIR (at most two levels), named relative
#                                      to DIR: `latest` and other top-level files first
#   fuzz/pack-files.sh NAME=FILE ...   the given files under the given names, in this order
# Fails if a file holds the separator "\n=== " (it would split there).
set -euo pipefail
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
