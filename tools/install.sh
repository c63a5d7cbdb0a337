#!/usr/bin/env bash
# Set up pointops from nothing, or bring a checkout up to date: a virtual environment in .venv
# with a pinned torch, the extension built in place, and pointops installed editable in .venv.
#
# The first build compiles every source (CUDA ones too when a CUDA toolkit is found; see setup.py
# and docs/install.md). The objects stay in build/ and ninja recompiles only the sources that
# changed, so running this again after a build takes seconds.
#   POINTOPS_NO_CUDA=1      CPU-only build (a few minutes on 2 cores)
#   TORCH_CUDA_ARCH_LIST    GPU targets (default: the visible GPUs, else 9.0+PTX for Hopper)
#   MAX_JOBS                parallel compile jobs (default: the number of cores)
#   PYTHON                  the interpreter that makes .venv (default python3)
#   POINTOPS_TORCH_VERSION  the torch to pin (default 2.14.1)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip_install() { .venv/bin/python -m pip install -q --disable-pip-version-check "$@"; }
# An exact torch: a floating one pulls the newest multi-GB build. 2.14.1 is the CUDA 13 build,
# which carries the CUDA headers the extension compiles against (it runs on CPU-only machines).
pip_install "torch==${POINTOPS_TORCH_VERSION:-2.14.1}" numpy pytest ninja "setuptools>=64" wheel
# The optional extras the tests and the demo use (setup.py's EXTRAS, same pins): pointops.io's
# format libraries, matplotlib for the demo's pictures, and the test references (scikit-image,
# SciPy, PyYAML). POINTOPS_EXTRAS=0 leaves them out; the tests that need them then skip.
if [ "${POINTOPS_EXTRAS:-1}" != 0 ]; then
  pip_install $(.venv/bin/python - <<'PYEOF'
import ast, re
source = open("setup.py").read()
extras = ast.literal_eval(re.search(r"^EXTRAS = (\{.*?^\})", source, re.M | re.S).group(1))
print(" ".join(sorted({p for name in ("io", "demo", "test") for p in extras[name]})))
PYEOF
)
fi
export MAX_JOBS=${MAX_JOBS:-$(nproc 2>/dev/null || echo 2)}

# Build in place, printing one line per source that ninja compiles (none when all are up to date).
mkdir -p build
echo "pointops: building the extension (MAX_JOBS=$MAX_JOBS; full log in build/install.log)"
start=$SECONDS
set +e
.venv/bin/python setup.py build_ext --inplace 2>&1 | tee build/install.log |
  sed -u -n -E -e "s#^(\[[0-9]+/[0-9]+\]) .* -c ($PWD/)?([^ ]+\.(cpp|cu)) .*#  \1 \3#p" -e '/^pointops: /p'
status=${PIPESTATUS[0]}
set -e
if [ "$status" != 0 ]; then
  tail -n 60 build/install.log
  echo "pointops: the build failed (full log in build/install.log)" >&2
  exit "$status"
fi
echo "pointops: extension up to date after $((SECONDS - start)) s"

# Register the checkout in .venv (an editable install): it relinks from the objects above and
# compiles nothing.
pip_install --no-build-isolation --no-deps -e .
