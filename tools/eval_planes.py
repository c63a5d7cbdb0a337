"""Plane-detection accuracy of detect_planes on generated LiDAR scenes: recall, precision and time.

    python tools/eval_planes.py [--scenes 50] [--layouts grid ball] [--device cuda] [--json f]
                                [--preset outdoor] [--iterations 1] [--n-phi P --n-theta T --rho-step S]

Each scene: pointops.scenes.lidar.make_scene(seed) scanned by a 64-beam x 2048-step LiDAR with 0.02 m
range noise and 10 % clutter (about 120k points); detect_planes(k=8, iterations=1, preset="outdoor",
or the given preset, rounds and accumulator); scored with lidar.evaluate_planes (a ground-truth
plane holding >= 5 % of the points is found when a detection's normal is within 2 degrees and its
offset within 0.05 m). Recall and precision are pooled over all scenes (found / required, correct /
detections); the target is recall >= 0.95 and precision >= 0.9. One progress line per scene (with
an estimate of the time left) goes to stderr; the result is one JSON line per layout, then a table.
On one CPU core a scene takes a few seconds: --scenes 5 for a quick look.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("--scenes", type=int, default=50, help="generated scenes per layout (seeds 0 .. scenes-1)")
    parser.add_argument("--layouts", nargs="*", default=["grid", "ball"], help="accumulator layouts to score")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when a GPU is visible)")
    parser.add_argument("--json", help="also write the JSON lines here")
    parser.add_argument("--preset", default="outdoor", help="detect_planes preset (outdoor, outdoor_fast, indoor)")
    parser.add_argument("--iterations", type=int, default=1, help="detect_planes rounds")
    parser.add_argument("--n-phi", type=int, help="orientation bins in phi (default: the preset's)")
    parser.add_argument("--n-theta", type=int, help="orientation bins in theta (default: the preset's)")
    parser.add_argument("--rho-step", type=float, help="offset bin width in metres (default: the preset's)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
import pointops
from pointops.scenes import lidar


def evaluate(layout, scenes, device, progress=None, k=8, **options):
    found = required = correct = detections = 0
    seconds = 0.0
    for seed in range(scenes):
        scan = lidar.lidar_scan(lidar.make_scene(seed), range_noise=0.02, clutter=0.1, seed=seed)
        points = scan.points[None].to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        det = pointops.detect_planes(points, k, layout=layout, **options)
        if device == "cuda":
            torch.cuda.synchronize()
        detect_s = time.perf_counter() - t0
        seconds += detect_s
        planes = det.planes[0].cpu()
        planes = planes[~torch.isnan(planes[:, 3])]
        score = lidar.evaluate_planes(planes, scan.planes, scan.labels)
        required += int(score.required.sum())
        found += int((score.found & score.required).sum())
        detections += len(planes)
        correct += int((score.matched >= 0).sum())
        if progress is not None:
            progress.step(
                f"{layout} scene {seed}: {int((score.found & score.required).sum())} of "
                f"{int(score.required.sum())} planes found, {int((score.matched >= 0).sum())} of "
                f"{len(planes)} detections right, detect_planes {1e3 * detect_s:.0f} ms"
            )
    return {
        "layout": layout,
        **options,
        "scenes": scenes,
        "device": device,
        "recall": found / max(required, 1),
        "precision": correct / max(detections, 1),
        "required": required,
        "found": found,
        "detections": detections,
        "correct": correct,
        "mean_detect_ms": 1e3 * seconds / scenes,
    }


COLUMNS = [
    ("layout", "layout", ""),
    ("preset", "preset", ""),
    ("scenes", "scenes", "d"),
    ("device", "device", ""),
    ("recall", "recall", ".3f"),
    ("precision", "precision", ".3f"),
    ("found", "found", "d"),
    ("required", "required", "d"),
    ("correct", "correct", "d"),
    ("detections", "detections", "d"),
    ("mean_detect_ms", "ms / scene", ".1f"),
]


def main(args):
    device = cli.default_device(args.device)
    options = {"preset": args.preset, "iterations": args.iterations}
    for name in ("n_phi", "n_theta", "rho_step"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    progress = cli.Progress(args.scenes * len(args.layouts), "scenes")
    rows = []
    for layout in args.layouts:
        rows.append(evaluate(layout, args.scenes, device, progress, **options))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(cli.table(rows, COLUMNS, title="plane detection (recall: found / required; precision: correct / detections)"))


if __name__ == "__main__":
    main(ARGS)
