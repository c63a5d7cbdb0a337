#!/usr/bin/env bash
# Build pointops on a GPU machine, run every test, then the benchmarks; logs go to $OUT (or ./out).
#   PYTEST_ARGS  extra pytest arguments (default: -q)
#   BENCH_ARGS   extra tools/bench.py arguments
# Usage: bash tools/gpu_check.sh [--build-only]

# --help: the comment block above, at once
case "${1:-}" in -h|--help) sed -n -E '2,/^([^#]|$)/s/^# ?//p' "$0"; exit 0 ;; esac
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
# --build-only: just the build, for a command that runs its own scripts next
if [ "${1:-}" = "--build-only" ]; then exit 0; fi
$PY -m pytest ${PYTEST_ARGS:--q} tests 2>&1 | tee "$OUT/tests.log" | tail -25
tests_rc=${PIPESTATUS[0]}
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
echo "tests exit code: $tests_rc"
exit "$tests_rc"
