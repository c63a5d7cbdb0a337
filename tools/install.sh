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
# Without a GPU to ask, build for Hopper only (the product's target) instead of every arch.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-2}
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
