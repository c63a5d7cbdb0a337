#!/usr/bin/env bash
# Build pointops on a GPU machine, run every test, then the benchmarks; logs go to $OUT (or ./out).
#   PYTEST_ARGS  extra pytest arguments (default: -q)
#   BENCH_ARGS   extra tools/bench.py arguments
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
# The GPU image's default CXX (/opt/gcc/bin/g++, a wrapper) links parts of libstdc++ statically
# into extensions; that second copy's iostream locale is never set up and every error message
# segfaults. The system compiler (the same GCC version there) links it dynamically.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s)
if ! $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
$PY -m pytest ${PYTEST_ARGS:--q} tests 2>&1 | tee "$OUT/tests.log" | tail -25
tests_rc=${PIPESTATUS[0]}
$PY tools/bench.py --json "$OUT/bench.jsonl" --plot "$OUT/bench.png" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v '^{' 
$PY - "$OUT/bench.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f'{"op":8} {"B":>3} {"N":>8} {"k/V":>5} {"plan":>11} {"ms":>9} {"base ms":>9} {"ratio":>7} {"floor":>6} {"B/pt":>5}')
for r in rows:
    print(f'{r["op"]:8} {r["B"]:>3} {r["N"]:>8} {r.get("k", r.get("V", "")):>5} {r.get("plan",""):>11} {r["ms"]:>9.3f} '
          f'{r.get("baseline_ms", float("nan")):>9.3f} {r.get("ratio", float("nan")):>7.2f} '
          f'{str(r.get("floor_ms")):>6} {r.get("scratch_bytes_per_point", 0):>5}')
PYEOF
echo "tests exit code: $tests_rc"
exit "$tests_rc"
