"""Recall of PPFMatcher, and of OpenCV's PPF3DDetector on the same scenes, by occlusion.

Scenes come from pointops.scenes.tabletop: a CGAL mesh (diameter 1) at a random rotation on a table
among other meshes and boxes, an occluding box slid in front of it until a requested share of it is
hidden (cycling 0, 10, ..., 70 %), a depth camera's returns with noise along the rays. Each method
gets the model as a dense surface sample with exact normals, and the scene as the matcher
downsamples it (voxels of the model's distance step) with normals estimated there (PCA of 10
neighbours, turned towards the camera; the meshes' exact normals with --exact-normals), and
returns its best pose of the target. A pose is correct when

  * ADD-S < 0.1 diameter (mean distance from each model point under the found pose to the
    nearest model point under the true pose), the usual criterion; and, reported beside it,
  * rotation error < 12 degrees and translation error < 0.1 diameter.

Recall is reported per occlusion bucket (measured occlusion: the share of the target's pixels the
rest of the scene hides), with the time per lookup (match) and per model build (train). One JSON
line per (model, scene, method) as it is measured, with an estimate of the time left on stderr;
then the table of recall by occlusion. The CGAL meshes come from Debian's libcgal-demo.

Sensors (``--sensors clean realistic``): ``clean`` is the Gaussian noise along the rays above
(``--noise``, 320 x 240 frames); ``realistic`` is pointops.scenes.tabletop.DepthSensor (depth noise growing
with the square of the range, quantised depth, missing returns at grazing angles and on dark
surfaces, a reflectivity per object) on 640 x 480 frames. With ``--instances K`` each frame holds K
copies of the target, the methods return K poses, and recall counts instances (an instance is found
when one of the K poses is correct for it), by each instance's own occlusion; times are per frame.

    python tools/eval_ppf.py [--models bunny00 elephant ...] [--scenes 20] [--opencv] [--device cpu]
                             [--exact-normals] [--preset default] [--json out.jsonl] [--seed 0]
                             [--sensors clean realistic] [--instances 1] [--width W --height H]
"""

import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--models",
        nargs="*",
        default=["bunny00", "elephant", "camel", "cow", "dino"],
        help="CGAL meshes to look for, one after another",
    )
    parser.add_argument("--scenes", type=int, default=20, help="scenes per model")
    parser.add_argument("--opencv", action="store_true", help="also run cv2.ppf_match_3d.PPF3DDetector")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--exact-normals", action="store_true", help="give both methods the meshes' exact normals")
    parser.add_argument("--preset", default="default", help="PPFMatcher preset (default, fast)")
    parser.add_argument("--model-samples", type=int, default=20000, help="surface samples of a model")
    parser.add_argument("--noise", type=float, default=0.005, help="depth noise in diameters")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write one JSON line per (model, scene, method) here")
    parser.add_argument(
        "--scene-cache", help="load the scenes from this torch.save file if it exists, else save them there"
    )
    parser.add_argument("--config", default="{}", help="PPFMatcher options over the preset, as JSON")
    parser.add_argument(
        "--sensors",
        nargs="*",
        default=["clean"],
        choices=["clean", "realistic"],
        help="clean: Gaussian noise along the rays; realistic: the tabletop scenes' DepthSensor",
    )
    parser.add_argument("--instances", type=int, default=1, help="copies of the target per frame")
    parser.add_argument("--width", type=int, default=None, help="frame width (default 320 clean, 640 realistic)")
    parser.add_argument("--height", type=int, default=None, help="frame height (default 240 clean, 480 realistic)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
from pointops import scenes
from pointops.scenes import tabletop
from pointops.ppf.matcher import PPFMatcher

BUCKETS = [(0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 1.01)]


def bucket_name(lo, hi):
    return f"{int(lo * 100)}-{min(int(hi * 100), 100)}%"


def add_s(model_points: torch.Tensor, found: torch.Tensor, truth: torch.Tensor) -> float:
    """Mean over model points of the distance from the found placement to the nearest point of the
    true placement (symmetric objects get no penalty for equivalent poses)."""
    if not torch.isfinite(found).all():
        return math.inf
    a = model_points @ found[:3, :3].T + found[:3, 3]
    b = model_points @ truth[:3, :3].T + truth[:3, 3]
    return float(torch.cdist(a, b).amin(1).mean())


def pose_errors(found: torch.Tensor, truth: torch.Tensor):
    if not torch.isfinite(found).all():
        return math.inf, math.inf
    rel = found[:3, :3] @ truth[:3, :3].T
    angle = math.degrees(math.acos(max(-1.0, min(1.0, (float(rel.trace()) - 1) / 2))))
    return angle, float((found[:3, 3] - truth[:3, 3]).norm())


class OpenCVDetector:
    """cv2.ppf_match_3d.PPF3DDetector with its documented defaults (sampling 0.05 of the model's
    extent, 30 angles; scene sampled every 5th point at 0.05 of the scene's extent)."""

    def __init__(self, points: torch.Tensor, normals: torch.Tensor):
        import cv2
        import numpy as np

        self.cv2, self.np = cv2, np
        self.detector = cv2.ppf_match_3d.PPF3DDetector(0.05, 0.05)
        t0 = time.perf_counter()
        self.detector.trainModel(np.ascontiguousarray(torch.cat([points, normals], 1).numpy().astype(np.float32)))
        self.train_s = time.perf_counter() - t0

    def match(self, points: torch.Tensor, normals: torch.Tensor, count: int = 1) -> torch.Tensor:
        """(count, 4, 4): its best poses, NaN where it has fewer."""
        np = self.np
        scene = np.ascontiguousarray(torch.cat([points, normals], 1).numpy().astype(np.float32))
        results = self.detector.match(scene, 1.0 / 5.0, 0.05)
        out = torch.full((count, 4, 4), float("nan"))
        for k, result in enumerate(results[:count]):
            out[k] = torch.tensor(np.asarray(result.pose), dtype=torch.float32)
        return out


def main(args):
    if not scenes.mesh.cgal_available():
        sys.exit(f"{scenes.mesh.CGAL_DATA} is missing: install Debian's libcgal-demo")

    config = json.loads(args.config)
    cache = {}
    if args.scene_cache and os.path.isfile(args.scene_cache):
        cache = torch.load(args.scene_cache, weights_only=False)
    meshes = {name: scenes.load_mesh(name) for name in args.models}
    others = [scenes.load_mesh(name) for name in scenes.mesh.EVAL_MESHES if name not in args.models][:3]
    rows = []
    progress = cli.Progress(len(args.models) * args.scenes * len(args.sensors), "frames")
    for mi, name in enumerate(args.models):
        mesh = meshes[name]
        model_p, model_n, _ = scenes.sample_surface(mesh, args.model_samples, seed=args.seed + mi)
        model_p, model_n = model_p.float(), model_n.float()
        t0 = time.perf_counter()
        matcher = PPFMatcher(model_p.to(args.device), model_n.to(args.device), preset=args.preset, **config)
        build_s = time.perf_counter() - t0
        eval_points = matcher.model.points[0, : int(matcher.model.lengths[0])].cpu() + matcher.center[0].cpu()
        cv = OpenCVDetector(model_p, model_n) if args.opencv else None
        distractors = [meshes[o] for o in args.models if o != name][:2] + others[:1]
        for sensor_name in args.sensors:
            realistic = sensor_name == "realistic"
            width = args.width or (640 if realistic else 320)
            height = args.height or (480 if realistic else 240)
            for s in range(args.scenes):
                seed = args.seed * 100003 + mi * 1000 + s
                requested = (s % 8) * 0.1
                key = (
                    (name, seed, requested, args.noise)
                    if not realistic and args.instances == 1 and (width, height) == (320, 240)
                    else (name, seed, requested, args.noise, sensor_name, args.instances, width, height)
                )
                if key not in cache:
                    cache[key] = tabletop.make_ppf_scene(
                        seed,
                        mesh,
                        distractors,
                        occlusion=requested,
                        noise=args.noise,
                        width=width,
                        height=height,
                        instances=args.instances,
                        sensor=tabletop.DepthSensor() if realistic else None,
                    )
                scene = cache[key]
                truths = scene.poses if scene.poses is not None else scene.pose[None]
                occlusions = scene.occlusions.tolist() if scene.occlusions is not None else [scene.occlusion]
                # normals: the meshes' exact ones, or estimated by the matcher on its downsampled scene
                # (PCA of 10 neighbours, turned towards the camera); OpenCV gets that same downsampled,
                # oriented scene (it samples scenes itself at 0.05 of their extent)
                normals = scene.normals if args.exact_normals else None
                prepared = matcher.prepare_scene(
                    scene.points.to(args.device), None if normals is None else normals.to(args.device)
                )
                cv_points = prepared[0][0, : int(prepared[2][0])].cpu()
                cv_normals = prepared[1][0, : int(prepared[2][0])].cpu()
                methods = [("pointops", None)] + ([("opencv", cv)] if cv is not None else [])
                for method, detector in methods:
                    t0 = time.perf_counter()
                    if detector is None:
                        out = matcher.match(
                            scene.points.to(args.device),
                            None if normals is None else normals.to(args.device),
                            max_instances=args.instances,
                        )
                        if args.device == "cuda":
                            torch.cuda.synchronize()
                        found = out.poses[0, 0].cpu()  # (K, 4, 4)
                    else:
                        found = detector.match(cv_points, cv_normals, args.instances)
                    seconds = time.perf_counter() - t0
                    for k, truth in enumerate(truths):
                        errors = [add_s(eval_points, f, truth) for f in found]
                        best = min(range(len(errors)), key=lambda q: errors[q])
                        rot, trans = pose_errors(found[best], truth)
                        row = {
                            "model": name,
                            "scene": s,
                            "seed": seed,
                            "method": method,
                            "sensor": sensor_name,
                            "instance": k,
                            "instances": len(truths),
                            "occlusion": occlusions[k],
                            "requested_occlusion": requested,
                            "scene_points": int(scene.points.shape[0]),
                            "add_s": errors[best],
                            "rotation_deg": rot,
                            "translation": trans,
                            "correct": errors[best] < 0.1,
                            "correct_rt": rot < 12.0 and trans < 0.1,
                            "match_s": seconds,
                            "build_s": build_s if detector is None else detector.train_s,
                        }
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                progress.step(
                    f"{name} {sensor_name} scene {s} ({occlusions[0]:.0%} occluded): "
                    + ", ".join(
                        f"{r['method']} {'right' if r['correct'] else 'wrong'} in {r['match_s']:.2f} s"
                        for r in rows[-len(methods) * len(truths) :]
                    )
                )
    if args.scene_cache:
        torch.save(cache, args.scene_cache)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)

    methods = sorted({r["method"] for r in rows})
    for sensor_name in args.sensors:
        print(
            f"\n{sensor_name} sensor: recall by occlusion (ADD-S < 0.1 d  |  rotation < 12 deg and translation "
            f"< 0.1 d), per instance"
        )
        for lo, hi in BUCKETS:
            line = f"{bucket_name(lo, hi):>8}"
            for method in methods:
                sel = [
                    r
                    for r in rows
                    if r["method"] == method and r["sensor"] == sensor_name and lo <= r["occlusion"] < hi
                ]
                if sel:
                    a = sum(r["correct"] for r in sel) / len(sel)
                    b = sum(r["correct_rt"] for r in sel) / len(sel)
                    line += f"  {method}: {a:.2f} | {b:.2f} (n={len(sel)})"
            print(line)
        for method in methods:
            sel = [r for r in rows if r["method"] == method and r["sensor"] == sensor_name]
            if not sel:
                continue
            low = [r for r in sel if r["occlusion"] <= 0.5]
            frames = {(r["model"], r["scene"]): r["match_s"] for r in sel}
            print(
                f"{method} ({sensor_name}): recall {sum(r['correct'] for r in sel) / len(sel):.3f} overall, "
                f"{sum(r['correct'] for r in low) / max(len(low), 1):.3f} at occlusion <= 50 %; "
                f"match median {statistics.median(frames.values()) * 1e3:.1f} ms per frame, "
                f"build median {statistics.median(r['build_s'] for r in sel):.2f} s ({args.device})"
            )


if __name__ == "__main__":
    main(ARGS)
