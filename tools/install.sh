#!/usr/bin/env bash
# Set up pointops from nothing: a virtual environment in .venv with a pinned torch, then the
# extension built in place (CUDA sources too when a CUDA toolkit is found; see setup.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# An exact torch: a floating one pulls the newest multi-GB build. 2.14.1 is the CUDA 13 build,
# which carries the CUDA headers the extension compiles against (it runs on CPU-only machines).
.venv/bin/python -m pip install -q --disable-pip-version-check \
  "torch==${POINTOPS_TORCH_VERSION:-2.14.1}" numpy pytest ninja "setuptools>=64" wheel
# pointops.io's format libraries (the io extra; setup.py's IO_REQUIRES, same pins): pure Python
# or binary wheels, none needed by the core. POINTOPS_IO=0 leaves them out.
if [ "${POINTOPS_IO:-1}" != 0 ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    "plyfile==1.1.5" "pypcd4==1.5.1" "laspy==2.7.0" "lazrs==0.8.2" "trimesh==5.2.0"
fi
# Without a GPU to ask, build for Hopper only (the product's target) instead of every arch.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-2}
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
