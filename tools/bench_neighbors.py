"""Time of knn, ball_query and three_nn against plain PyTorch, OpenPCDet's kernels and Open3D.

Each row is timed against a baseline in the same run: for knn, plain PyTorch (cdist + topk over
chunks of 4,096 queries, pointops.reference.geometry.knn_cdist_topk); for ball_query and three_nn,
the classic one-thread-per-query kernels of OpenPCDet's pointnet2_batch, written again in
tools/baselines/neighbors_classic.cu and compiled here on first use. On CUDA the knn rows also check
the grid against brute force on the first queries (the sizes pick the strategy: 2,048 queries per
cloud take the grid, 64 brute force). The ball_query rows cover PointNet++ / PointRCNN / PV-RCNN's
configurations (unit-cube radii 0.1 / 0.2 / 0.4 with 16 to 128 samples, PointRCNN's four set
abstraction levels on 16,384-point front-view scans, PV-RCNN's keypoint radii on packed scans),
against the classic kernel on the same clouds (packed clouds padded for it, the layout OpenPCDet's
stack kernel walks the same way). Without a GPU, CPU rows time pointops' CPU kernels against Open3D's CPU
NearestNeighborSearch (knn_search, its KD-tree, in the same process) when open3d imports, in wall
time (ms) and in CPU time of all threads (cpu_ms: the fairer figure on a shared machine).

    python tools/bench_neighbors.py [--quick] [--device cpu] [--json f]
    python tools/bench.py --ops knn ball_query three_nn      # the same rows
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)

OPS = ["knn", "ball_query", "three_nn"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch  # noqa: E402

from bench import time_ms  # noqa: E402

import pointops  # noqa: E402
from pointops.scenes import lidar as lidar_scenes  # noqa: E402
from pointops.reference.geometry import knn_cdist_topk  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))

_classic = None


def classic_module():
    global _classic
    if _classic is None:
        from torch.utils.cpp_extension import load

        _classic = load("pointops_neighbors_classic", [os.path.join(ROOT, "baselines", "neighbors_classic.cu")],
                        extra_cuda_cflags=["-O3"], verbose=False)
    return _classic


def uniform(b, n, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.rand(b, n, 3, device=device, generator=g)


_scans = {}


def scan(seed, beams=64):
    """One generated street scan (cached: the knn and ball_query rows share them)."""
    if (seed, beams) not in _scans:
        _scans[seed, beams] = lidar_scenes.lidar_scan(lidar_scenes.make_scene(seed), n_beams=beams, seed=seed).points
    return _scans[seed, beams]


def lidar(b, device, beams=64):
    """Spinning-LiDAR scans of generated street scenes (dense near the sensor, sparse far away),
    padded to the longest with lengths."""
    scans = [scan(seed, beams) for seed in range(b)]
    n = max(len(s) for s in scans)
    points = torch.zeros(b, n, 3)
    for i, s in enumerate(scans):
        points[i, : len(s)] = s
    return points.to(device), torch.tensor([len(s) for s in scans], device=device)


def cpu_time_ms(fn, reps=3):
    """Median CPU time (all threads of this process) of fn() in ms: on a machine shared with other
    jobs, wall time measures the neighbours' load as much as the op."""
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        samples.append((time.process_time() - t0) * 1e3)
    return statistics.median(samples)


def emit(results, row):
    if row.get("baseline_ms") and row.get("ms"):
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
    if row.get("floor_ms") is not None:
        row["meets_floor"] = row["ms"] <= row["floor_ms"]
    results.append(row)
    print(json.dumps(row), flush=True)


# (case, B, M, N, k, floor_ms from the issue)
KNN_CASES = [
    ("uniform", 1, 100_000, 100_000, 16, 4.0),
    ("uniform", 16, 16_384, 16_384, 32, 4.0),
    ("lidar", 1, None, None, 16, None),
    ("lidar", 4, None, None, 16, None),
]


def bench_knn_cuda(quick, results):
    name = torch.cuda.get_device_name()
    for case, b, m, n, k, floor in KNN_CASES[:2] if quick else KNN_CASES:
        if case == "uniform":
            points, lengths = uniform(b, n, "cuda", 0), None
            queries = uniform(b, m, "cuda", 1)
        else:
            points, lengths = lidar(b, "cuda")
            queries, m, n = points, points.shape[1], points.shape[1]
        row = {"op": "knn", "case": case, "B": b, "M": m, "N": n, "k": k, "device": name, "floor_ms": floor}

        def op():
            return torch.ops.pointops.knn(queries, lengths, points, lengths, k)

        # the grid (2,048 queries per cloud) against brute force (the first 64 of them): queries x
        # points per cloud above and below 2^27
        head = queries[:, :2048].contiguous()
        assert head.shape[0] * head.shape[1] * points.shape[1] > 2**27 >= head.shape[0] * 64 * points.shape[1]
        grid = torch.ops.pointops.knn(head, None, points, lengths, k)
        brute = torch.ops.pointops.knn(head[:, :64].contiguous(), None, points, lengths, k)
        assert all(torch.equal(a[:, :64], e) for a, e in zip(grid, brute)), "knn: grid and brute force differ"
        row["ms"] = time_ms(op, "cuda")
        if case == "uniform":
            row["baseline"] = "PyTorch cdist + topk, 4,096 queries a chunk"
            row["baseline_ms"] = time_ms(lambda: knn_cdist_topk(queries, points, k), "cuda", min_reps=2)
        emit(results, row)


def bench_knn_cpu(quick, results):
    try:
        import open3d as o3d
        o3d_error = None
    except Exception as error:  # noqa: BLE001  (an optional baseline: say why it is missing)
        o3d, o3d_error = None, repr(error)
    cases = [("uniform", 1, 100_000, 100_000, 16), ("uniform", 4, 16_384, 16_384, 16), ("lidar", 1, None, None, 16)]
    for case, b, m, n, k in cases[:1] if quick else cases:
        if case == "uniform":
            points, queries = uniform(b, n, "cpu", 0), uniform(b, m, "cpu", 1)
        else:
            scan = lidar_scenes.lidar_scan(lidar_scenes.make_scene(0), n_beams=64, seed=0).points
            points = queries = scan[None].contiguous()
            m = n = scan.shape[0]
        row = {"op": "knn", "case": case, "B": b, "M": m, "N": n, "k": k, "device": "cpu",
               "threads": torch.get_num_threads(), "floor_ms": None}
        row["ms"] = time_ms(lambda: pointops.knn(queries, points, k), "cpu", min_reps=3, budget_ms=3000)
        row["cpu_ms"] = cpu_time_ms(lambda: pointops.knn(queries, points, k))
        if o3d is None:
            row["baseline"] = "open3d unavailable: " + o3d_error
        else:
            clouds = [(o3d.core.Tensor(points[i].numpy()), o3d.core.Tensor(queries[i].numpy())) for i in range(b)]

            def open3d_knn():
                for p, q in clouds:
                    nns = o3d.core.nns.NearestNeighborSearch(p)
                    nns.knn_index()
                    nns.knn_search(q, k)

            row["baseline"] = "Open3D %s core.nns.NearestNeighborSearch (KD-tree) knn_search, index built per call" % (
                o3d.__version__)
            row["baseline_ms"] = time_ms(open3d_knn, "cpu", min_reps=3, budget_ms=3000)
            row["baseline_cpu_ms"] = cpu_time_ms(open3d_knn)
            row["cpu_ratio"] = round(row["baseline_cpu_ms"] / row["cpu_ms"], 2)
            # same neighbours (Open3D orders ties its own way; compare the distance rows)
            nns = o3d.core.nns.NearestNeighborSearch(clouds[0][0])
            nns.knn_index()
            _, d = nns.knn_search(clouds[0][1], k)
            ours = pointops.knn(queries[:1], points[:1], k).distances[0]
            row["distances_match_open3d"] = bool(torch.allclose(torch.from_numpy(d.numpy()).float(), ours, rtol=1e-5, atol=1e-7))
        emit(results, row)


# (case, B, N points, M centres, radius, nsample, floor_ms)
BALL_CASES = [
    ("uniform", 16, 16_384, 4096, 0.05, 32, 0.6),
    ("uniform", 2, 120_000, 4096, 0.04, 32, None),
]
# PointNet++ radii on 16 x 16,384 unit-cube points, 1,024 centres a cloud: (radius, nsample)
CUBE_BALLS = [(r, k) for r in (0.1, 0.2, 0.4) for k in (16, 32, 64, 128)]
# PointRCNN's set abstraction levels (tools/cfgs/kitti_models/pointrcnn.yaml): points, centres and
# the (radius, nsample) of each scale; each level's points are the previous level's centres
POINTRCNN_LEVELS = [
    (16_384, 4096, [(0.1, 16), (0.5, 32)]),
    (4096, 1024, [(0.5, 16), (1.0, 32)]),
    (1024, 256, [(1.0, 16), (2.0, 32)]),
    (256, 64, [(2.0, 16), (4.0, 32)]),
]
# PV-RCNN's voxel set abstraction (tools/cfgs/kitti_models/pv_rcnn.yaml): 2,048 keypoints a scan,
# the POOL_RADIUS / NSAMPLE pairs of its sources, on the scans' raw points (packed)
PV_RCNN_BALLS = [(0.4, 16), (0.8, 16), (1.2, 16), (2.4, 32), (4.8, 32)]
PV_RCNN_KEYPOINTS = 2048


def front_view_scans(b, n=None, seed=0):
    """KITTI-like scans: the generated 64-beam street scans cropped to the front 90 degrees within
    70 m (as KITTI's labelled field of view), then n points drawn from each (with replacement when
    a scan has fewer, as PointRCNN's sampling does); n None keeps every point (padded, lengths)."""
    scans = []
    for i in range(b):
        pts = scan(seed + i)
        keep = (pts[:, 0] > 0) & (pts[:, 1].abs() < pts[:, 0]) & (pts[:, :2].norm(dim=1) < 70)
        pts = pts[keep]
        if n is not None:
            g = torch.Generator().manual_seed(seed + i)
            pick = (torch.randperm(len(pts), generator=g)[:n] if len(pts) >= n
                    else torch.randint(0, len(pts), (n,), generator=g))
            pts = pts[pick]
        scans.append(pts)
    return scans


def fps_centres(points, m):
    picks, _ = torch.ops.pointops.fps(points, None, None, m)
    return torch.gather(points, 1, picks.unsqueeze(-1).expand(-1, -1, 3)).contiguous()


def ball_row(results, name, row, queries, points, radius, k, packed=None):
    """Time pointops' ball query (the search its sizes pick) against the classic kernel on the padded clouds; `packed` = (queries, query_offsets, points, offsets) runs
    ball_query_packed instead, the classic kernel still on the padded clouds."""
    if packed is None:
        def op():
            return torch.ops.pointops.ball_query(queries, None, points, None, radius, k, True)
    else:
        def op():
            return torch.ops.pointops.ball_query_packed(*packed, radius, k, True)
    ours = op()
    classic = classic_module().classic_ball_query(queries, points, radius, k)
    if packed is None:
        mine = ours[0].clamp(min=0).int()
    else:  # packed indices -> indices within each padded cloud
        offsets = packed[3]
        cloud = torch.searchsorted(packed[1][1:], torch.arange(len(ours[0]), device=offsets.device), right=True)
        mine = torch.where(ours[0] >= 0, ours[0] - offsets[cloud, None], 0).int().view(classic.shape)
    row.update({"op": "ball_query", "device": name, "radius": radius, "k": k,
                "baseline": "classic one-thread-per-centre kernel (OpenPCDet pointnet2_batch style)",
                "rows_equal_to_classic": round((mine == classic).all(-1).float().mean().item(), 6),
                "mean_hits": round(ours[1].float().mean().item(), 2)})
    row["ms"] = time_ms(op, "cuda")
    row["baseline_ms"] = time_ms(lambda: classic_module().classic_ball_query(queries, points, radius, k), "cuda")
    emit(results, row)


def bench_ball_query(device, quick, results):
    if device != "cuda":
        points, centres = uniform(2, 20_000, "cpu", 2), uniform(2, 2048, "cpu", 3)
        row = {"op": "ball_query", "B": 2, "N": 20_000, "M": 2048, "radius": 0.05, "k": 32, "device": "cpu",
               "threads": torch.get_num_threads(), "floor_ms": None,
               "ms": time_ms(lambda: pointops.ball_query(centres, points, 0.05, 32), "cpu")}
        emit(results, row)
        return
    name = torch.cuda.get_device_name()
    for case, b, n, m, radius, k, floor in BALL_CASES[:1] if quick else BALL_CASES:
        points = uniform(b, n, "cuda", 4)
        centres = fps_centres(points, m)
        ball_row(results, name, {"case": case, "B": b, "N": n, "M": m, "floor_ms": floor}, centres, points, radius, k)
    # PointNet++ radii in the unit cube (the large-radius configurations)
    points = uniform(16, 16_384, "cuda", 7)
    centres = fps_centres(points, 1024)
    for radius, k in CUBE_BALLS[2:3] if quick else CUBE_BALLS:
        ball_row(results, name, {"case": "pointnet2_cube", "B": 16, "N": 16_384, "M": 1024, "floor_ms": None},
                 centres, points, radius, k)
    if quick:
        return
    # PointRCNN on 16,384-point front-view scans, B = 4
    points = torch.stack(front_view_scans(4, 16_384)).cuda()
    for level, (n, m, scales) in enumerate(POINTRCNN_LEVELS, 1):
        centres = fps_centres(points, m)
        for radius, k in scales:
            ball_row(results, name, {"case": "pointrcnn_sa%d" % level, "B": 4, "N": n, "M": m, "floor_ms": None},
                     centres, points, radius, k)
        points = centres
    # PV-RCNN's keypoint balls on two packed front-view scans (every point kept)
    scans = front_view_scans(2)
    keypoints = [fps_centres(s[None].cuda(), PV_RCNN_KEYPOINTS)[0] for s in scans]
    counts = [len(s) for s in scans]
    offsets = torch.tensor([0, counts[0], sum(counts)], device="cuda")
    key_offsets = torch.tensor([0, PV_RCNN_KEYPOINTS, 2 * PV_RCNN_KEYPOINTS], device="cuda")
    packed = (torch.cat(keypoints), key_offsets, torch.cat(scans).cuda(), offsets)
    n = max(counts)
    padded = torch.full((2, n, 3), 1e6, device="cuda")  # padding far from every keypoint
    for i, s in enumerate(scans):
        padded[i, :len(s)] = s.cuda()
    for radius, k in PV_RCNN_BALLS:
        ball_row(results, name, {"case": "pv_rcnn_vsa_packed", "B": 2, "N": counts, "M": PV_RCNN_KEYPOINTS,
                                 "floor_ms": None}, torch.stack(keypoints), padded, radius, k, packed=packed)


def bench_three_nn(device, quick, results):
    if device != "cuda":
        queries, points = uniform(4, 16_384, "cpu", 5), uniform(4, 4096, "cpu", 6)
        emit(results, {"op": "three_nn", "B": 4, "M": 16_384, "N": 4096, "device": "cpu", "floor_ms": None,
                       "threads": torch.get_num_threads(),
                       "ms": time_ms(lambda: pointops.three_nn(queries, points), "cpu")})
        return
    name = torch.cuda.get_device_name()
    queries, points = uniform(16, 16_384, "cuda", 5), uniform(16, 4096, "cuda", 6)
    ours = pointops.three_nn(queries, points)
    d2, idx = classic_module().classic_three_nn(queries, points)
    row = {"op": "three_nn", "B": 16, "M": 16_384, "N": 4096, "device": name, "floor_ms": 0.5,
           "baseline": "classic one-thread-per-query kernel (OpenPCDet pointnet2_batch style)",
           "indices_equal_to_classic": round((ours.indices.int() == idx).float().mean().item(), 6)}
    row["ms"] = time_ms(lambda: torch.ops.pointops.knn(queries, None, points, None, 3), "cuda")
    row["baseline_ms"] = time_ms(lambda: classic_module().classic_three_nn(queries, points), "cuda")
    emit(results, row)


def run(device, quick, ops, results):
    if "knn" in ops:
        if device == "cuda":
            bench_knn_cuda(quick, results)
        else:
            bench_knn_cpu(quick, results)
    if "ball_query" in ops:
        bench_ball_query(device, quick, results)
    if "three_nn" in ops:
        bench_three_nn(device, quick, results)
