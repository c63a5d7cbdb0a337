"""Time of the PPF ops (model description, voting, pose clustering) and of PPFMatcher's match.

Run alone (python tools/bench_ppf.py [--quick] [--device cpu] [--json f]) or by tools/bench.py.
Sizes: a model of about 2,000 points (tau_d = 0.025 in the matcher rows) (a lumpy procedural mesh, scenes.blob_mesh,
sampled uniformly with exact normals), a depth-camera scene of 15,000 points (the model among
distractors on a table, scenes.tabletop.make_ppf_scene, randomly thinned to 15,000), every 5th
scene point a reference. Rows:

  ppf_model        one 2,000-point model (4M pairs); baseline: the description in plain PyTorch
                   (the reference's float32 features of all pairs, torch.sort, unique_consecutive);
  ppf_vote         one model x one scene, dense and sort backends, each the other's baseline, with
                   peak device memory (target: 10 ms for the whole lookup, 2 GB);
  pose_cluster     the lookup's candidate poses; baseline: the all-pairs cluster scores in plain
                   PyTorch (cdist of translations and quaternion dots);
  ppf_lookup       ppf_vote + pose_cluster (target 10 ms), and the same for 16 models x 1 scene
                   (target 100 ms); ppf_match: + ICP (two calls of the icp op) + re-scoring (target
                   25 ms), and the whole match with the default preset (what tools/eval_ppf.py
                   measures).

The scene is taken as given (match(downsample=False)): 15,000 points thinned at random from the
camera's returns, denser than a scene downsampled to the model's step, so each reference point has
more partners within the diameter than it would there.

On the CPU the sizes shrink (500-point model, 4,000-point scene) so the harness runs quickly;
``--full`` keeps the GPU's sizes there too (the bench scene with the fast preset on a CPU, floor
600 ms a match). On the CPU the ppf_match rows (ours and OpenCV's) also give cpu_ms, the process
time over all threads, and the load average: on a shared machine the wall time alone misleads.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cli  # imports nothing heavy

OPS = ["ppf_model", "ppf_vote", "pose_cluster", "ppf_lookup", "ppf_match"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch

from bench import time_ms

from pointops import scenes
from pointops.scenes import tabletop
from pointops.ppf import ops as ppf
from pointops.ppf.matcher import PPFMatcher
from pointops.reference import ppf as ref


def _inputs(device, quick, full=False):
    cuda = device == "cuda" or full
    n_model, n_scene = (2000, 15000) if cuda else (500, 4000)
    mesh = scenes.blob_mesh(seed=1)
    mp, mn, _ = scenes.sample_surface(mesh, n_model, seed=0)
    distractors = [scenes.blob_mesh(seed=s) for s in (2, 3)]
    scene = tabletop.make_ppf_scene(
        5, mesh, distractors, occlusion=0.3, width=480 if cuda else 320, height=360 if cuda else 240
    )
    g = torch.Generator().manual_seed(0)
    keep = torch.randperm(scene.points.shape[0], generator=g)[:n_scene]
    return (
        mp.float().to(device),
        mn.float().to(device),
        scene.points[keep].to(device),
        scene.normals[keep].to(device),
        n_model,
        int(keep.numel()),
    )


def torch_model_description(points, normals, tau_d=0.05, angle_bins=30):
    """The model description in plain PyTorch: float32 features of all N^2 pairs (the reference's
    arithmetic), keys, a stable sort and the runs."""
    n = points.shape[0]
    binning = ref.Binning(angle_bins, ppf.distance_bins_for(tau_d))
    unit, valid = ref.unit_normals(points, normals)
    diameter = ref.bounding_diagonal(points.cpu()).to(points.device)
    i, j = torch.meshgrid(torch.arange(n, device=points.device), torch.arange(n, device=points.device), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    features, alpha = ref.pair_features(points[i], unit[i], points[j], unit[j])
    bins, _ = ref.feature_bins(features, torch.tensor(tau_d, dtype=torch.float32) * diameter, binning)
    ok = (i != j) & valid[i] & valid[j] & (features[:, 0] > 0) & (bins[:, 0] >= 0)
    keys = torch.where(ok, ref.pack_keys(bins, binning.feature_bins), binning.key_count)
    keys, order = torch.sort(keys, stable=True)
    unique, counts = torch.unique_consecutive(keys, return_counts=True)
    return unique, counts, i[order].int(), alpha[order]


def torch_cluster_scores(q, t, votes, threshold, angle):
    """Cluster scores of every pose by comparing all pairs (translations within the threshold,
    |q . q'| >= cos(angle / 2)): the O(M^2) clustering a user writes in PyTorch."""
    valid = votes > 0
    near = torch.cdist(t, t) <= threshold
    rot = (q @ q.T).abs() >= math.cos(angle / 2)
    member = near & rot & valid[None, :] & valid[:, None]
    return (member.long() * votes[None, :]).sum(1)


def _opencv_detector(mp, mn):
    """OpenCV's PPF3DDetector trained on the model (its defaults: sampling 0.05 of the extent, 30
    angles), or None without cv2.ppf_match_3d (opencv-contrib-python 4.x, opencv-python 5.x)."""
    try:
        import cv2
    except ImportError:
        return None
    if not hasattr(cv2, "ppf_match_3d"):
        return None
    import time

    detector = cv2.ppf_match_3d.PPF3DDetector(0.05, 0.05)
    t0 = time.perf_counter()
    detector.trainModel(torch.cat([mp, mn], 1).cpu().numpy().astype("float32"))
    return detector, time.perf_counter() - t0


def _cpu_extra(device, fn, reps=3):
    """On the CPU: the median process (CPU) time of fn() in ms over all threads and the 1-minute
    load average, beside the wall time (the build machine's cores are shared); {} on CUDA."""
    if device != "cpu":
        return {}
    import os
    import time

    samples = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        samples.append((time.process_time() - t0) * 1e3)
    return {
        "cpu_ms": round(sorted(samples)[len(samples) // 2], 3),
        "threads": torch.get_num_threads(),
        "load": round(os.getloadavg()[0], 2),
    }


def _row(results, op, device, sizes, ms, baseline=None, baseline_ms=None, floor=None, **extra):
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    row = {"op": op, **sizes, "device": name, "ms": round(ms, 3), "floor_ms": floor}
    if baseline is not None:
        row.update(baseline=baseline, baseline_ms=round(baseline_ms, 3), ratio=round(baseline_ms / ms, 2))
    if floor is not None:
        row["meets_floor"] = ms <= floor
    row.update(extra)
    results.append(row)
    print(json.dumps(row), flush=True)


def _peak_mb(device, fn):
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)


def run(device, quick, ops, results, full=False):
    mp, mn, sp, sn, n_model, n_scene = _inputs(device, quick, full)
    cuda = device == "cuda"
    sizes = {"model_points": n_model, "scene_points": n_scene, "stride": 5}

    if "ppf_model" in ops:

        def build():
            return ppf.ppf_model(mp[None], mn[None], tau_d=0.05)

        model = build()
        _row(
            results,
            "ppf_model",
            device,
            {"model_points": n_model, "pairs": int(model.num_pairs[0])},
            time_ms(build, device),
            "plain PyTorch features + torch.sort + unique_consecutive",
            time_ms(lambda: torch_model_description(mp, mn), device, min_reps=3),
            floor=2.0 if cuda else None,
        )

    # the workload: the "fast" preset (Drost's stride 5, exact bins, 3 peaks) with
    # tau_d = 0.025, which keeps the matcher's model near 2,000 points (0.05 would thin it to
    # about 450)
    matcher = PPFMatcher(mp, mn, preset="fast", tau_d=0.025)
    sizes["matcher_model_points"] = int(matcher.model.lengths[0])
    # the scene as given (15,000 points, thinned from the camera's returns, exact normals): denser
    # than a scene downsampled to the model's step, so each reference has more partners
    points, normals = sp[None], sn[None]
    lengths = torch.tensor([n_scene], device=device)
    cfg = matcher.config

    if "ppf_vote" in ops:
        times = {}
        for backend in ("dense", "sort"):

            def vote(backend=backend):
                return ppf.ppf_vote(
                    points, normals, matcher.model, lengths, stride=5, k=int(cfg["peaks"]), backend=backend
                )

            times[backend] = (time_ms(vote, device, min_reps=3), _peak_mb(device, vote))
        for backend, other in (("dense", "sort"), ("sort", "dense")):
            _row(
                results,
                "ppf_vote",
                device,
                dict(sizes, backend=backend),
                times[backend][0],
                f"ppf_vote backend={other}",
                times[other][0],
                floor=10.0 if cuda else None,
                peak_mb=times[backend][1],
            )

    votes = ppf.ppf_vote(points, normals, matcher.model, lengths, stride=5, k=int(cfg["peaks"]))
    q, t, v = votes.quaternions.reshape(1, -1, 4), votes.translations.reshape(1, -1, 3), votes.votes.reshape(1, -1)
    threshold = matcher.model.distance_step * float(cfg["cluster_distance"])
    angle = math.radians(float(cfg["cluster_angle_deg"]))
    if "pose_cluster" in ops:

        def cluster():
            return ppf.pose_cluster(
                q, t, v, threshold, angle_threshold=angle, suppression_distance=matcher.model.diameter * 0.5, k=10
            )

        qq = torch.where(torch.isfinite(q[0]), q[0], torch.zeros_like(q[0]))
        tt = torch.where(torch.isfinite(t[0]), t[0], torch.zeros_like(t[0]))
        _row(
            results,
            "pose_cluster",
            device,
            dict(sizes, poses=int(v.shape[1])),
            time_ms(cluster, device),
            "all-pairs cluster scores in plain PyTorch",
            time_ms(lambda: torch_cluster_scores(qq, tt, v[0], float(threshold[0]), angle), device),
        )

    if "ppf_lookup" in ops:

        def lookup():
            return matcher.hypotheses(points, normals, lengths, int(cfg["hypotheses"]), int(cfg["turned_hypotheses"]))

        _row(
            results,
            "ppf_lookup",
            device,
            sizes,
            time_ms(lookup, device, min_reps=3),
            floor=10.0 if cuda else None,
            peak_mb=_peak_mb(device, lookup),
            note="ppf_vote + pose_cluster",
        )
        models = 16 if cuda or full else 4
        scales = torch.linspace(0.8, 1.2, models, device=device)[:, None, None]
        many = PPFMatcher(mp[None] * scales, mn[None].expand(models, -1, -1), preset="fast", tau_d=0.025)

        def lookup_many():
            return many.hypotheses(points, normals, lengths, int(cfg["hypotheses"]), int(cfg["turned_hypotheses"]))

        _row(
            results,
            "ppf_lookup",
            device,
            dict(sizes, models=models),
            time_ms(lookup_many, device, min_reps=3),
            floor=100.0 if cuda else None,
            peak_mb=_peak_mb(device, lookup_many),
            note="ppf_vote + pose_cluster",
        )

    if "ppf_match" in ops:

        def match():
            return matcher.match(points, normals, lengths, max_instances=1, downsample=False)

        _row(
            results,
            "ppf_match",
            device,
            sizes,
            time_ms(match, device, min_reps=3),
            floor=25.0 if cuda else (600.0 if full else None),
            note="lookup + ICP (2 x 10 steps, 14 hypotheses: two icp op calls) + re-score",
            **_cpu_extra(device, match),
        )
        opencv = _opencv_detector(mp, mn)
        if opencv is not None:  # OpenCV's PPF3DDetector on the same model and scene, on the CPU
            detector, train_s = opencv
            scene_cv = torch.cat([sp, sn], 1).cpu().numpy().astype("float32")

            def match_opencv():
                return detector.match(scene_cv, 1.0 / 5.0, 0.05)

            _row(
                results,
                "ppf_match",
                "cpu",
                dict(sizes, method="opencv PPF3DDetector"),
                time_ms(match_opencv, "cpu", min_reps=3),
                note=f"cv2.ppf_match_3d (relative scene sampling 1/5, distance step 0.05), trained in {train_s:.1f} s",
                **_cpu_extra("cpu", match_opencv),
            )
        # the eval's own setting: the default preset on the scene as the camera returned it
        accurate = PPFMatcher(mp, mn)

        def match_default():
            return accurate.match(sp, sn, max_instances=1)

        _row(
            results,
            "ppf_match",
            device,
            dict(sizes, preset="default", model_points=int(accurate.model.lengths[0])),
            time_ms(match_default, device, min_reps=3),
            note="default preset (tau_d 0.035, stride 2, spread, 10 peaks) with downsampling, on the thinned scene",
        )
