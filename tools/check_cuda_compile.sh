#!/usr/bin/env bash
# Compile CUDA sources on their own, with setup.py's flags, to catch build breaks without
# rebuilding the whole extension (no GPU needed). Objects go to a temporary folder.
#   bash tools/check_cuda_compile.sh csrc/geometry/knn_cuda.cu [more.cu ...]

# --help: the comment block above, at once
case "${1:-}" in -h|--help) sed -n -E '2,/^([^#]|$)/s/^# ?//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
read -r TORCH_INC PY_INC SITE < <("$PY" -c 'import os, sys, sysconfig, torch
print(os.path.join(os.path.dirname(torch.__file__), "include"), sysconfig.get_paths()["include"], os.path.dirname(os.path.dirname(torch.__file__)))')
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
extra=()
for d in "$SITE"/nvidia/*/include "$SITE"/nvidia/*/*/include; do
  [ -f "$d/cusparse.h" ] && extra+=(-isystem "$d")
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for src in "$@"; do
  echo "nvcc $src"
  "$CUDA_HOME/bin/nvcc" -c "$src" -o "$out/$(basename "$src").o" -Icsrc -I"$TORCH_INC" \
    -I"$TORCH_INC/torch/csrc/api/include" -I"$CUDA_HOME/include" -I"$PY_INC" "${extra[@]}" \
    -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ \
    -D__CUDA_NO_HALF2_OPERATORS__ -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C \
    --expt-relaxed-constexpr -O3 -lineinfo --compiler-options -fPIC -std=c++20 \
    -gencode=arch=compute_90,code=sm_90
done
echo "compiled: $*"
