"""Where the CUDA fps kernels' rounds spend their cycles, printed by the kernels themselves.

Needs the extension built with POINTOPS_FPS_PHASES defined (csrc/sampling/fps_kernels.cuh,
PhaseClock: what each phase spans and the line's fields); a build without it prints only this
script's own lines. nvcc reads extra flags from NVCC_APPEND_FLAGS, so on a GPU machine:

    touch csrc/sampling/fps_cuda.cu   # ninja does not see a changed environment
    NVCC_APPEND_FLAGS=-DPOINTOPS_FPS_PHASES python setup.py build_ext --inplace
    python tools/fps_phases.py [--sizes 16x16384x4096 1x1000000x4096]

(CMake: configure with -DCMAKE_CUDA_FLAGS=-DPOINTOPS_FPS_PHASES.) Touch fps_cuda.cu again and
rebuild without the variable afterwards: the instrumented kernels are slower.

Each size is a uniform cloud of torch.rand (seed 0, as tools/bench_sampling.py's fps rows) run
through the public op twice: a warm-up call, then the measured one, each followed by a
synchronize, after which the kernel's line (warp 0 of block 0, cloud 0) has been printed. Cycles
are SM clock cycles (clock64). The plan is not exposed to Python: the kernel's line names the
layout it ran (layout, parts, threads, ppt) after the launch code fitted it.
"""

import argparse
import ctypes
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SIZES = "16x16384x4096 2x120000x4096 1x1000000x4096 8x4096x1024 32x1024x512"
LIBC = ctypes.CDLL(None)


def size(text):
    try:
        b, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BxNxk") from None
    return b, n, k


def flush():
    # The device printf lands in C's stdout buffer at the synchronize; Python's print has its
    # own buffer: flush both so the lines come out in order, also into a pipe.
    import torch  # noqa: PLC0415  (loaded by main already)

    torch.cuda.synchronize()
    sys.stdout.flush()
    LIBC.fflush(None)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        type=size,
        nargs="+",
        default=[size(s) for s in DEFAULT_SIZES.split()],
        help=f"BxNxk cases (default: {DEFAULT_SIZES})",
    )
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    # after the arguments, so that --help loads neither torch nor the build
    import torch  # noqa: PLC0415

    import pointops  # noqa: F401, PLC0415  (registers the ops)

    props = torch.cuda.get_device_properties(0)
    # cycles, not microseconds: the SM clock under load is the GPU's (nvidia-smi's clocks.sm while
    # it runs); read at rest it is the idle clock
    print(f"# {props.name}, {props.multi_processor_count} SMs", flush=True)
    for b, n, k in args.sizes:
        g = torch.Generator(device="cuda").manual_seed(0)
        points = torch.rand(b, n, 3, device="cuda", generator=g)
        for call in ("warm-up", "measured"):
            print(f"# B={b} N={n} k={k} {call} call", flush=True)
            torch.ops.pointops.fps(points, None, None, k)
            flush()


if __name__ == "__main__":
    main()
