#!/usr/bin/env bash
# Build pointops on a GPU machine, run every test, then the benchmarks; logs go to $OUT (or ./out),
# written as the steps go, so a run cut short still leaves what it did.
#   --build-only   just the build (and the benches' baseline kernels, tools/build_baselines.py),
#                  for a command that runs its own scripts next
#   --cmake        build libpointops with CMake (docs/deploy.md) and load it as the Python
#                  package's compiled extension too: one CUDA build serves Python and C++
#   --deploy       after the tests, tools/check_deploy.sh (the C++ examples on CPU and CUDA)
#   --no-bench     skip the benchmarks
#   PYTEST_ARGS    what pytest runs (default: tests; e.g. "tests/test_ppf.py -k matcher")
#   WORKERS        pytest-xdist processes (default 14 where pytest-xdist is installed, else 1);
#                  each compiles torch.compile's code on one thread, as N of them share the cores
#   TEST_SECONDS   stop the tests after this long (default: no limit), so that the logs of a
#                  run inside a time-limited call still come back
#   WHEELS         a folder of wheels to put on PYTHONPATH (the GPU machine installs nothing from
#                  a registry: `pip download --no-deps -d .gpu/wheels plyfile==1.1.5` here, carry
#                  .gpu/wheels; export_models.py writes its PLY with plyfile)
#   BENCH_ARGS     extra tools/bench.py arguments
# Usage: bash tools/gpu_check.sh [--build-only] [--cmake] [--deploy] [--no-bench]

# --help: the comment block above, at once
case "${1:-}" in -h|--help) sed -n -E '2,/^([^#]|$)/s/^# ?//p' "$0"; exit 0 ;; esac
set -uo pipefail
cd "$(dirname "$0")/.."
build_only=0 cmake=0 deploy=0 bench=1
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --cmake) cmake=1 ;;
    --deploy) deploy=1 ;;
    --no-bench) bench=0 ;;
    *) echo "gpu_check: unknown argument $arg (--help)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
# The GPU image's default CXX (/opt/gcc/bin/g++, a wrapper) links parts of libstdc++ statically
# into extensions; that second copy's iostream locale is never set up and every error message
# segfaults. The system compiler (the same GCC version there) links it dynamically.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi
# check_deploy.sh and the examples call `python`; where only python3 exists, a wrapper script (a
# symlink would lose the virtual environment python3 belongs to)
if ! command -v python > /dev/null; then
  bin=$(mktemp -d)
  printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PY")" > "$bin/python"
  chmod +x "$bin/python"
  export PATH="$bin:$PATH"
fi
if [ -n "${WHEELS:-}" ]; then
  lib=$(mktemp -d)
  for wheel in "$WHEELS"/*.whl; do $PY -m zipfile -e "$wheel" "$lib"; done
  export PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
# The benches' classic baseline kernels build beside the library (a minute or more each when a
# bench builds its own on first use, inside a time-limited call).
baselines=
if [ "$bench" = 1 ]; then
  $PY tools/build_baselines.py > "$OUT/baselines.log" 2>&1 &
  baselines=$!
fi
start=$(date +%s)
if [ "$cmake" = 1 ]; then
  ext=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  prefix=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
  rm -f pointops/_C.*.so
  ln -s ../build/prefix/lib/libpointops.so "pointops/_C$ext"
  if ! { cmake -S . -B build/cmake -DCMAKE_PREFIX_PATH="$prefix" && cmake --build build/cmake -j "$MAX_JOBS" \
      && cmake --install build/cmake --prefix build/prefix; } > "$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
  fi
elif ! $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
if [ "$build_only" = 1 ]; then
  if [ -n "$baselines" ]; then wait "$baselines" || echo "baseline kernels: build failed ($OUT/baselines.log)"; fi
  exit 0
fi

workers=${WORKERS:-}
if [ -z "$workers" ]; then
  if $PY -c 'import xdist' 2> /dev/null; then workers=14; else workers=1; fi
fi
parallel=()
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers")
  export TORCHINDUCTOR_COMPILE_THREADS=1
fi
limit=()
if [ -n "${TEST_SECONDS:-}" ]; then limit=(timeout "$TEST_SECONDS"); fi
start=$(date +%s)
# -v: one line a test as it ends, so a log cut short still names every failure so far
# shellcheck disable=SC2086
"${limit[@]}" $PY -m pytest -v -rfE --durations=20 -p no:cacheprovider "${parallel[@]}" ${PYTEST_ARGS:-tests} \
  > "$OUT/tests.log" 2>&1
tests_rc=$?
echo "tests: $(( $(date +%s) - start )) s, exit code $tests_rc (124: stopped after TEST_SECONDS)"
grep -E "(FAILED|ERROR) tests/" "$OUT/tests.log" | sed -E 's/^\[gw[0-9]+\] \[ *[0-9]+%\] //' | sort -u | head -40
tail -3 "$OUT/tests.log"
if [ "$deploy" = 1 ]; then
  if bash tools/check_deploy.sh > "$OUT/deploy.txt" 2>&1; then deploy_rc=0; else deploy_rc=1; fi
  cp build/deploy.log "$OUT/deploy.log" 2> /dev/null
  tail -30 "$OUT/deploy.txt"
  [ "$deploy_rc" = 0 ] || tests_rc=1
fi
if [ "$bench" = 1 ]; then
  wait "$baselines" || echo "baseline kernels: build failed ($OUT/baselines.log); the benches build their own"
  $PY tools/bench.py --json "$OUT/bench.jsonl" --plot "$OUT/bench.png" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v '^{'
  $PY - "$OUT/bench.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f'{"op":14} {"case":4} {"size":28} {"ms":>9} {"base ms":>9} {"ratio":>7} {"floor":>10} {"HBM":>5} {"B/pt":>5}')
for r in rows:
    if "ms" not in r:
        continue
    size = " ".join(f"{k}={r[k]}" for k in ("B", "N", "P", "k", "V", "K", "F") if k in r)
    size += f' {r["H"]}x{r["W"]}' if "H" in r else ""
    floor = "/".join(s for s in (f'{r["floor_ms"]}ms' if r.get("floor_ms") else "",
                                  f'{r["floor_ratio"]}x' if r.get("floor_ratio") else "") if s) or "-"
    print(f'{r["op"]:14} {r.get("case", ""):4} {size:28} {r["ms"]:>9.3f} '
          f'{r.get("baseline_ms", float("nan")):>9.3f} {r.get("ratio", float("nan")):>7.2f} {floor:>10} '
          f'{str(r.get("hbm_fraction", "")):>5} {r.get("scratch_bytes_per_point", ""):>5}')
PYEOF
fi
echo "tests exit code: $tests_rc"
exit "$tests_rc"
