"""Where detect_planes spends its GPU time: torch.profiler's kernel table for bench.py's cases.

For each detect_planes case of tools/bench.py (1M-point and 16 x 120k-point LiDAR clouds, with the
outdoor presets and a 180 x 180 x 256 vote grid): one warm call under torch.profiler, and its
kernels sorted by their own CUDA time. Needs a GPU.

    python tools/profile_detect.py [--rows 15]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("--rows", type=int, default=15, help="kernels shown per case")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
import pointops
from tools.bench import DETECT_CASES
from pointops.scenes import lidar


def main(args):
    if not torch.cuda.is_available():
        sys.exit("tools/profile_detect.py profiles CUDA kernels: it needs a GPU")
    for b, n, k, _, options in DETECT_CASES:
        scans = [lidar.lidar_scan(lidar.make_scene(s), range_noise=0.02, clutter=0.1, seed=s).points for s in range(b)]
        points = torch.stack([s.repeat((n + len(s) - 1) // len(s), 1)[:n] for s in scans]).cuda()
        run = lambda: pointops.detect_planes(points, k, **options)  # noqa: E731  (a one-line closure to time)
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        print(f"== B={b} N={n} k={k} {options}")
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=60))


if __name__ == "__main__":
    main(ARGS)
