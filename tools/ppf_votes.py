"""Votes cast by one PPF match of a whole depth frame, per model mesh and preset: the vote's work
counted rather than timed (the dense backend does one accumulator increment per vote on any
device), with the CPU vote's time beside it.

The frame is tools/profile_ppf_frame.py's (a 640 x 480 depth camera frame of the mesh among two
blobs and boxes on a table, 30 % occluded, about 250,000 returns), prepared as the matcher
prepares it (normals estimated, downsampled to the model's step); the model is 30,000 surface
samples of the mesh. Counts come from ``pointops.reference.ppf.votes_cast`` (the op's pairs and
keys, vectorized in torch).

    python tools/ppf_votes.py [--meshes blob bunny00 fandisk] [--presets default fast]
                              [--caps 0 64 256] [--config '{...}'] [--time] [--cache DIR]

``--caps`` counts the votes with models built at several ``max_pairs_per_key`` (the scene's keys
are computed once for all of them).
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--meshes", nargs="*", default=["blob", "bunny00", "fandisk"], help="blob (procedural) or CGAL meshes"
    )
    parser.add_argument("--presets", nargs="*", default=["default", "fast"], help="PPFMatcher presets")
    parser.add_argument("--config", default="{}", help="PPFMatcher options over the preset, as JSON")
    parser.add_argument(
        "--caps", nargs="*", type=int, default=None, help="max_pairs_per_key values to count (default: the preset's)"
    )
    parser.add_argument("--width", type=int, default=640, help="frame width")
    parser.add_argument("--height", type=int, default=480, help="frame height")
    parser.add_argument("--time", action="store_true", help="also time ppf_vote on this CPU (median of 3)")
    parser.add_argument("--cache", default=None, help="keep generated frames here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
from pointops import PPFMatcher, scenes
from pointops.ppf import ops as ppf
from pointops.reference import ppf as ref
from pointops.scenes import tabletop


def frame(mesh_name, width, height, cache):
    path = os.path.join(cache, f"frame_{mesh_name}_{width}x{height}.pt") if cache else None
    if path and os.path.isfile(path):
        return torch.load(path, weights_only=False)
    mesh = scenes.blob_mesh(seed=1) if mesh_name == "blob" else scenes.load_mesh(mesh_name)
    scene = tabletop.make_ppf_scene(
        3, mesh, [scenes.blob_mesh(seed=s) for s in (2, 3)], occlusion=0.3, width=width, height=height
    )
    samples = scenes.sample_surface(mesh, 30000, seed=0)[:2]
    out = (scene, samples)
    if path:
        os.makedirs(cache, exist_ok=True)
        torch.save(out, path)
    return out


def main(args):
    rows = []
    config = json.loads(args.config)
    for name in args.meshes:
        scene, (mp, mn) = frame(name, args.width, args.height, args.cache)
        for preset in args.presets:
            caps = args.caps if args.caps else [None]
            matchers = [
                PPFMatcher(
                    mp.float(),
                    mn.float(),
                    preset=preset,
                    **dict(config, **({} if cap is None else {"max_pairs_per_key": cap})),
                )
                for cap in caps
            ]
            cfg = matchers[0].config
            points, normals, lengths = matchers[0].prepare_scene(scene.points)
            models = [m.model for m in matchers]
            first = models[0]
            cast = ref.votes_cast(
                points,
                normals,
                lengths,
                torch.cat([m.key_offsets for m in models]),
                torch.cat([m.distance_step for m in models]),
                torch.cat([m.diameter for m in models]),
                first.angle_bins,
                first.distance_bins,
                int(cfg["stride"]),
                bool(cfg["spread"]),
            )
            for c, (matcher, model) in enumerate(zip(matchers, models)):
                cfg = matcher.config
                row = {
                    "mesh": name,
                    "preset": preset,
                    "max_pairs_per_key": int(cfg["max_pairs_per_key"]),
                    "config": config,
                    "frame_points": int(scene.points.shape[0]),
                    "scene_points": int(lengths[0]),
                    "model_points": int(model.lengths[0]),
                    "model_pairs": int(model.num_pairs[0]),
                    "votes_cast": int(cast[:, c].sum()),
                    "references": int((torch.arange(cast.shape[2]) * int(cfg["stride"]) < lengths[0]).sum()),
                }
                if args.time:
                    times = []
                    for _ in range(3):
                        t0 = time.perf_counter()
                        ppf.ppf_vote(
                            points,
                            normals,
                            model,
                            lengths,
                            stride=int(cfg["stride"]),
                            k=int(cfg["peaks"]),
                            spread=bool(cfg["spread"]),
                        )
                        times.append(time.perf_counter() - t0)
                    row["vote_s"] = round(statistics.median(times), 3)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(
        cli.table(
            rows,
            [
                ("mesh", "mesh", ""),
                ("preset", "preset", ""),
                ("max_pairs_per_key", "cap", "d"),
                ("model_points", "model points", "d"),
                ("scene_points", "scene points", "d"),
                ("votes_cast", "votes cast", ",d"),
            ]
            + ([("vote_s", "vote s", ".3f")] if args.time else []),
        )
    )


if __name__ == "__main__":
    main(ARGS)
