#!/usr/bin/env bash
# Copy OpenPCDet's pointnet2_stack sources (the CUDA extension behind its stacked PointNet++ and
# PV-RCNN++'s vector pool: src/*.cpp, *.cu, *.h and pointnet2_utils.py) out of a local OpenPCDet
# checkout or git directory into DEST, with the commit they came from in DEST/COMMIT, for
# `python tools/bench_compat.py --openpcdet DEST` to build and time against (a GPU is needed).
# DEST (default .gpu/openpcdet) is git-ignored: the files stay out of this repository.
#   bash tools/fetch_openpcdet_ops.sh SOURCE [DEST]
#   SOURCE: an OpenPCDet work tree, or its git directory (bare or .git), read at REV (default HEAD)

# --help: the comment block above, at once
case "${1:-}" in -h|--help) sed -n -E '2,/^([^#]|$)/s/^# ?//p' "$0"; exit 0 ;; esac
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: bash tools/fetch_openpcdet_ops.sh SOURCE [DEST]  (--help says more)" >&2
  exit 2
fi
src=$1
dest=${2:-.gpu/openpcdet}
rev=${REV:-HEAD}
stack=pcdet/ops/pointnet2/pointnet2_stack

if [ -d "$src/$stack/src" ] && [ "$rev" = HEAD ]; then  # a work tree: the files as they are there
  commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "unknown (not a git work tree)")
  files=$(cd "$src" && ls "$stack"/src/*.cpp "$stack"/src/*.cu "$stack"/src/*.h "$stack"/pointnet2_utils.py)
  read_file() { cat "$src/$1"; }
else  # a git directory (a mirror or a .git folder): the files at REV
  gitdir=$src
  [ -d "$src/.git" ] && gitdir=$src/.git
  commit=$(git --git-dir="$gitdir" rev-parse "$rev^{commit}")
  files=$(git --git-dir="$gitdir" ls-tree -r --name-only "$commit" -- "$stack/src" "$stack/pointnet2_utils.py" |
    grep -E '\.(cpp|cu|h|py)$' || true)
  read_file() { git --git-dir="$gitdir" show "$commit:$1"; }
fi
[ -n "$files" ] || { echo "no $stack sources in $src" >&2; exit 1; }

# replaces an earlier copy's sources (and keeps its build folder: ninja rebuilds what changed)
rm -rf "$dest/src"
mkdir -p "$dest/src"
n=0
for f in $files; do
  case "$f" in
    */src/*) read_file "$f" > "$dest/src/$(basename "$f")" ;;
    *) read_file "$f" > "$dest/$(basename "$f")" ;;
  esac
  n=$((n + 1))
done
printf '%s\n' "$commit" > "$dest/COMMIT"
printf 'OpenPCDet %s, %s\n' "$commit" "$stack" > "$dest/SOURCE"
echo "copied $n files of OpenPCDet $commit ($stack) into $dest"
