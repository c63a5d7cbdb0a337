#!/usr/bin/env bash
# The C++ face from the project root, as docs/deploy.md writes it (its commands run here as
# written; .ci/run runs this after the install): libpointops built with CMake and installed, checked
# for Python symbols; the C++ examples and the C++ API's test built as projects of their own on the
# installed package (the examples linked with --as-needed); run_scripted, cloud_tool and test_api
# against Python's outputs, on the CPU and, where a GPU is visible, on CUDA too. Needs `python` and
# `cmake` on PATH (the README's .venv/bin). The whole log goes to build/deploy.log; the programs'
# findings are printed.
#   FORCE_CUDA / POINTOPS_NO_CUDA / TORCH_CUDA_ARCH_LIST   as for setup.py (CMakeLists.txt reads them)

# --help: the comment block above, at once
case "${1:-}" in -h|--help) sed -n -E '2,/^([^#]|$)/s/^# ?//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
# export_models.py imports this checkout's pointops also where it is not installed (a GPU machine)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p build
cuda=$(python -c 'import torch; print(int(torch.cuda.is_available()))')
devices=cpu
[ "$cuda" = 1 ] && devices="cpu cuda"
# The steps run in a subshell of their own with -e: as the condition of an `if`, bash would
# ignore -e inside it and run on past a failing step.
set +e
(
  set -ex
  PS4='+ [$SECONDS s] '  # each command with the seconds since the start, in the log
  cmake -S . -B build/cmake -DCMAKE_PREFIX_PATH="$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  cmake --build build/cmake -j "$(nproc)"
  cmake --install build/cmake --prefix build/prefix
  if nm -D build/prefix/lib/libpointops.so | grep -E ' (Py|_Py)'; then
    echo "libpointops.so has Python symbols" >&2
    exit 1
  fi
  cmake -S examples/cpp -B build/examples -DCMAKE_PREFIX_PATH="$PWD/build/prefix;$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed
  cmake --build build/examples -j "$(nproc)"
  python examples/cpp/export_models.py --out build/models
  build/examples/run_scripted build/models
  build/examples/cloud_tool build/models/scene.ply --save build/models/cloud_tool.pt
  python examples/cpp/export_models.py --out build/models --check-cloud build/models/cloud_tool.pt
  build/examples/cloud_tool build/models/scene.bin
  if [ "$cuda" = 1 ]; then
    build/examples/cloud_tool build/models/scene.ply --device cuda --save build/models/cloud_tool_cuda.pt
    python examples/cpp/export_models.py --out build/models --check-cloud build/models/cloud_tool_cuda.pt
  fi
  cmake -S tests/cpp -B build/api_test -DCMAKE_PREFIX_PATH="$PWD/build/prefix;$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  cmake --build build/api_test
  # shellcheck disable=SC2086
  python tests/cpp/write_api_cases.py build/api_cases.pt --device $devices
  build/api_test/test_api build/api_cases.pt
) > build/deploy.log 2>&1
status=$?
set -e
if [ "$status" != 0 ]; then
  tail -60 build/deploy.log
  echo "check_deploy: failed (build/deploy.log)" >&2
  exit 1
fi
grep -E "pointops: compiling|Python's|CPU and CUDA|cloud_tool|points|^normals|farthest point|^planes|^  [0-9]+:|ms on|C\+\+ API" build/deploy.log \
  | grep -v '^+' || true
echo "check_deploy: every check passed"
