"""One warm call of each named bench case between cudaProfilerStart/Stop, for Nsight Compute.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        python tools/profile_kernels.py bev_a hough_1m fps_b16

Every case runs once before profiling starts, so the profiled call is a warm one. With
--kernel-times, each case instead runs 20 times under torch.profiler and the mean time of each
kernel (and memset) is printed: warm caches, as in tools/bench.py, which ncu's cache flushes
between kernels are not. Needs a GPU.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def bev_case(b, n, preset, channels):
    points = lidar_clouds(b, n, "cuda")
    point_range, cell_size = pointops.bev_preset(preset)
    return lambda: pointops.bev_rasterize(points, channels, None, point_range, cell_size)


def hough_case(n):
    g = torch.Generator(device="cuda").manual_seed(0)
    points = torch.rand(1, n, 3, device="cuda", generator=g) * 20 - 10
    return lambda: pointops.hough_planes(points, 35.0 / 256, 17.5, n_phi=180, n_theta=180)


def fps_case(b, n, k):
    g = torch.Generator(device="cuda").manual_seed(0)
    points = torch.rand(b, n, 3, device="cuda", generator=g)
    return lambda: torch.ops.pointops.fps(points, None, None, k)


CASES = {
    "bev_a": lambda: bev_case(8, 120_000, "kitti_bev", ["max_z", "top_feature", "density"]),
    "bev_b": lambda: bev_case(
        8,
        300_000,
        "long_range_1024",
        ["max_z", "min_z", "mean_z", "count", "density", "max_feature", "mean_feature", "top_feature"],
    ),
    "hough_1m": lambda: hough_case(1_000_000),
    "hough_23m": lambda: hough_case(23_000_000),
    "fps_b16": lambda: fps_case(16, 16_384, 4096),
    "fps_b32": lambda: fps_case(32, 1024, 512),
}


def kernel_times(name, call, reps=20):
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    total = 0.0
    print(f"{name}:")
    for event in prof.key_averages():
        if event.device_time_total <= 0:
            continue
        us = event.device_time_total / reps
        total += us
        print(f"  {us:9.2f} us  {event.key[:100]}")
    print(f"  {total:9.2f} us  per call, summed")


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("cases", nargs="+", choices=sorted(CASES), help="bench cases to profile")
    parser.add_argument(
        "--kernel-times",
        action="store_true",
        help="print each kernel's mean time over 20 calls instead of profiling for ncu",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
import pointops
from bench_bev import lidar_clouds


def main(args):
    if not torch.cuda.is_available():
        sys.exit("tools/profile_kernels.py profiles CUDA kernels: it needs a GPU")
    calls = [CASES[name]() for name in args.cases]
    if args.kernel_times:
        for name, call in zip(args.cases, calls):
            kernel_times(name, call)
        return
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(ARGS)
