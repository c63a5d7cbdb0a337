"""The classic CUDA kernels the benches time pointops against (tools/baselines/*.cu: a
one-block-per-cloud FPS, one-thread-per-query kNN / ball query / three_nn), built with
torch.utils.cpp_extension into torch's extension cache, all at once in parallel.

A bench builds the one it needs on first use (a minute or more each on a GPU machine, inside the
bench's own time); tools/gpu_check.sh runs this script beside the library build, so the benches
find them built. A build cut off mid-way leaves a lock in the cache that makes the next load wait
for ever: `--clean` removes these modules' cache folders first.

    python tools/build_baselines.py           # needs nvcc; prints each module's build time
    python tools/build_baselines.py --clean
"""

import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import cli  # imports nothing heavy

BASELINES = os.path.join(TOOLS, "baselines")


def stems():
    return sorted(name[: -len(".cu")] for name in os.listdir(BASELINES) if name.endswith(".cu"))


def module_name(stem):
    return "pointops_" + stem


_loaded = {}


def baseline_module(stem):
    """tools/baselines/<stem>.cu as a Python module, built on first use (the cache reused after)."""
    if stem not in _loaded:
        from torch.utils.cpp_extension import load

        _loaded[stem] = load(
            module_name(stem), [os.path.join(BASELINES, stem + ".cu")], extra_cuda_cflags=["-O3"], verbose=False
        )
    return _loaded[stem]


def _build(stem):
    start = time.perf_counter()
    baseline_module(stem)
    return stem, time.perf_counter() - start


def main(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("--clean", action="store_true", help="remove these modules' cache folders first")
    args = parser.parse_args(argv)
    if args.clean:
        from torch.utils.cpp_extension import _get_build_directory

        for stem in stems():
            shutil.rmtree(_get_build_directory(module_name(stem), verbose=False), ignore_errors=True)
    with ProcessPoolExecutor(len(stems())) as pool:
        for stem, seconds in pool.map(_build, stems()):
            print(f"{module_name(stem)}: {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
