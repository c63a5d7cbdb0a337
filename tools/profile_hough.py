"""Where the 2D Hough detectors spend their GPU time: torch.profiler's kernel table
(kernel, calls, total microseconds of one call of the detector) for tools/bench_hough.py's circle and line cases.

    python tools/profile_hough.py [--rows 10]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("--rows", type=int, default=10, help="kernels shown per case")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
import pointops
from bench_hough import CIRCLE_CASES, LINE_CASE, circle_image, line_image


def profile(fn, rows):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    events.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in events)
    print(f"   {len(events)} kernels/copies, {sum(e.count for e in events)} launches, {total:.1f} us of GPU time")
    for e in events[:rows]:
        print(f"   {e.self_device_time_total:9.1f} us  x{e.count:<3d} {e.key[:110]}")


def main(args):
    if not torch.cuda.is_available():
        sys.exit("tools/profile_hough.py profiles CUDA kernels: it needs a GPU")
    for batch, size, (r_lo, r_hi), target, _ in CIRCLE_CASES:
        radii = list(range(r_lo, r_hi + 1))
        edges = torch.stack([circle_image(size, (r_lo, r_hi), target, seed=s) for s in range(batch)]).cuda()
        print(f"== detect_circles B={batch} {size}^2 radii {r_lo}-{r_hi}")
        profile(lambda: pointops.detect_circles(edges, radii, 16, min_distance=5), args.rows)
    height, width, target, _ = LINE_CASE
    edges = line_image(height, width, target).unsqueeze(0).cuda()
    print(f"== detect_lines {width}x{height}")
    profile(lambda: pointops.detect_lines(edges, 16), args.rows)


if __name__ == "__main__":
    main(ARGS)
