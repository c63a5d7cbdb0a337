"""Where detect_planes spends its time: torch.profiler's kernel table for bench.py's cases.

    python tools/profile_detect.py [--rows 15]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pointops  # noqa: E402
from tools.bench import DETECT_CASES  # noqa: E402
from pointops.scenes import lidar  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=15)
    args = parser.parse_args()
    for b, n, k, _, options in DETECT_CASES:
        scans = [lidar.lidar_scan(lidar.make_scene(s), range_noise=0.02, clutter=0.1, seed=s).points for s in range(b)]
        points = torch.stack([s.repeat((n + len(s) - 1) // len(s), 1)[:n] for s in scans]).cuda()
        run = lambda: pointops.detect_planes(points, k, **options)  # noqa: E731
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
    main()
