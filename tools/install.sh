#!/usr/bin/env bash
# Set up pointops from nothing, or bring a checkout up to date: a virtual environment in .venv
# with a pinned torch, the extension built in place, and pointops installed editable in .venv.
# One line per stage, one line per compiled source; everything pip and the compiler say goes to
# build/install.log.
#
# What is compiled (setup.py decides, and the build prints which and why): the C++ sources, plus
# the CUDA sources when a GPU is visible or FORCE_CUDA=1. The objects stay in build/ and ninja
# recompiles only the sources that changed, so running this again after a build takes seconds.
#   FORCE_CUDA=1            compile the CUDA kernels without a GPU too (CI does, to catch CUDA build breaks)
#   POINTOPS_NO_CUDA=1      never compile the CUDA kernels
#   TORCH_CUDA_ARCH_LIST    GPU targets (default: the visible GPUs, else 9.0+PTX for Hopper)
#   MAX_JOBS                parallel compile jobs (default: the number of cores)
#   PYTHON                  the interpreter that makes .venv (default python3)
#   POINTOPS_TORCH_VERSION  the torch to pin (default 2.14.1)
#   POINTOPS_EXTRAS=0       leave out the optional extras (file formats, matplotlib, test references, linters)

# --help: the comment block above, at once
case "${1:-}" in -h|--help) sed -n -E '2,/^([^#]|$)/s/^# ?//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
started=$SECONDS
mkdir -p build
: > build/install.log
say() { echo "pointops: $*"; }
# pip's output goes to the log; what it installed is shown, and on failure its last lines.
pip_install() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off "$@" > build/pip.log 2>&1; then
    cat build/pip.log >> build/install.log
    tail -n 30 build/pip.log
    say "pip install $* failed (full log in build/install.log)" >&2
    exit 1
  fi
  cat build/pip.log >> build/install.log
  sed -n -E 's/^Successfully installed (.*)/      installed: \1/p' build/pip.log | cut -c1-200
}

if [ -x .venv/bin/python ]; then
  say "[1/5] virtual environment .venv ($(.venv/bin/python -V)): already there"
else
  say "[1/5] virtual environment .venv ($("$PYTHON" -V))"
  "$PYTHON" -m venv .venv
fi

# An exact torch: a floating one pulls the newest multi-GB build. 2.14.1 is the CUDA 13 build,
# which carries the CUDA headers the extension compiles against (it runs on CPU-only machines).
torch_version=${POINTOPS_TORCH_VERSION:-2.14.1}
# CMake builds libpointops for C++ programs (docs/deploy.md); 3.26 or newer compiles C++20 with nvcc.
say "[2/5] torch $torch_version, numpy and the build tools (ninja, setuptools, wheel, cmake, pytest); a first install unpacks about 4 GB, a minute or two"
pip_install "torch==$torch_version" numpy pytest ninja "setuptools>=64" wheel "cmake==3.31.6"

# The optional extras the tests and the demo use (setup.py's EXTRAS, same pins): pointops.io's
# format libraries, matplotlib for the demo's pictures, and the test references (scikit-image,
# SciPy, PyYAML), and the linters .ci/run checks with (ruff, clang-format). POINTOPS_EXTRAS=0
# leaves them out; the tests that need them then skip.
if [ "${POINTOPS_EXTRAS:-1}" != 0 ]; then
  extras=$(.venv/bin/python - <<'PYEOF'
import ast, re
source = open("setup.py").read()
extras = ast.literal_eval(re.search(r"^EXTRAS = (\{.*?^\})", source, re.M | re.S).group(1))
print(" ".join(sorted({p for name in ("io", "demo", "test", "lint") for p in extras[name]})))
PYEOF
)
  say "[3/5] the optional extras io, demo, test and lint: $extras"
  # shellcheck disable=SC2086
  pip_install $extras
else
  say "[3/5] the optional extras: left out (POINTOPS_EXTRAS=0)"
fi
export MAX_JOBS=${MAX_JOBS:-$(nproc 2>/dev/null || echo 2)}

# A build step: its output goes to the log, and what a person wants to see to the terminal: one
# line per source that ninja compiles (none when all are up to date) and setup.py's choice of
# kernels (pass "choice"); on failure the log's last lines.
build_step() {
  local show=$1 what=$2
  shift 2
  local keep='s#^(\[[0-9]+/[0-9]+\]) .* -c ('"$PWD"'/)?([^ ]+\.(cpp|cu)) .*#      \1 \3#p'
  local choice='s/^(pointops: compiling .*)/      \1/p'
  [ "$show" = choice ] || choice='/^$/d'
  set +e
  "$@" 2>&1 | tee -a build/install.log | sed -u -n -E -e "$keep" -e "$choice"
  local status=${PIPESTATUS[0]}
  set -e
  if [ "$status" != 0 ]; then
    tail -n 60 build/install.log
    say "$what failed (full log in build/install.log)" >&2
    exit "$status"
  fi
}

say "[4/5] building the extension in place (MAX_JOBS=$MAX_JOBS; a first build compiles every source: minutes)"
start=$SECONDS
build_step choice "the build" .venv/bin/python setup.py build_ext --inplace
say "      extension up to date after $((SECONDS - start)) s"

# Register the checkout in .venv (an editable install): ninja finds every object up to date, so
# this only relinks; pip runs verbose into the log, so a source it did compile would show.
say "[5/5] registering the checkout in .venv (pip install -e .: relinks, compiles nothing)"
start=$SECONDS
build_step quiet "pip install -e ." .venv/bin/python -m pip install --disable-pip-version-check -v \
  --no-build-isolation --no-deps -e .
say "done after $((SECONDS - started)) s (the editable install $((SECONDS - start)) s); try: .venv/bin/python -m pointops.demo --out out/demo"
