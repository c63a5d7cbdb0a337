"""Plane-detection accuracy on generated LiDAR scenes (issue 4's floor: recall >= 0.95, precision >= 0.9).

    python tools/eval_planes.py [--scenes 50] [--layouts grid ball] [--device cuda] [--json f]
                                [--preset outdoor] [--iterations 1] [--n-phi P --n-theta T --rho-step S]

Each scene: pointops.scenes.lidar.make_scene(seed) scanned by a 64-beam x 2048-step LiDAR with 0.02 m
range noise and 10 % clutter; detect_planes(k=8, iterations=1, preset="outdoor", or the given
preset, rounds and accumulator); scored with
lidar.evaluate_planes (a ground-truth plane holding >= 5 % of the points is found when a
detection's normal is within 2 degrees and its offset within 0.05 m). Recall and precision are
pooled over all scenes (found / required, correct / detections).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pointops  # noqa: E402
from pointops.scenes import lidar  # noqa: E402


def evaluate(layout, scenes, device, k=8, **options):
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
        seconds += time.perf_counter() - t0
        planes = det.planes[0].cpu()
        planes = planes[~torch.isnan(planes[:, 3])]
        score = lidar.evaluate_planes(planes, scan.planes, scan.labels)
        required += int(score.required.sum())
        found += int((score.found & score.required).sum())
        detections += len(planes)
        correct += int((score.matched >= 0).sum())
    return {"layout": layout, **options, "scenes": scenes, "device": device, "recall": found / max(required, 1),
            "precision": correct / max(detections, 1), "required": required, "found": found,
            "detections": detections, "correct": correct, "mean_detect_ms": 1e3 * seconds / scenes}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=int, default=50)
    parser.add_argument("--layouts", nargs="*", default=["grid", "ball"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json")
    parser.add_argument("--preset", default="outdoor")
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--n-phi", type=int)
    parser.add_argument("--n-theta", type=int)
    parser.add_argument("--rho-step", type=float)
    args = parser.parse_args()
    options = {"preset": args.preset, "iterations": args.iterations}
    for name in ("n_phi", "n_theta", "rho_step"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    rows = [evaluate(layout, args.scenes, args.device, **options) for layout in args.layouts]
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
