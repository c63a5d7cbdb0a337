"""Benchmark rows of the geometry family, run by tools/bench.py or alone: knn, ball_query and
three_nn against plain PyTorch, OpenPCDet's kernels and Open3D; voxel_downsample, estimate_normals
and icp against the plain-PyTorch way and Open3D.

Neighbourhoods: each row is timed against a baseline in the same run: for knn, plain PyTorch (cdist + topk over
chunks of 4,096 queries, pointops.reference.geometry.knn_cdist_topk); for ball_query and three_nn,
the classic one-thread-per-query kernels of OpenPCDet's pointnet2_batch, written again in
tools/baselines/neighbors_classic.cu and compiled here on first use. On CUDA the knn rows also check
the grid against brute force on the first queries (the sizes pick the strategy: 2,048 queries per
cloud take the grid, 64 brute force). The ball_query rows cover PointNet++ / PointRCNN / PV-RCNN's
configurations (unit-cube radii 0.1 / 0.2 / 0.4 with 16 to 128 samples, PointRCNN's four set
abstraction levels on 16,384-point front-view scans, PV-RCNN's keypoint radii on packed scans),
against the classic kernel on the same clouds (packed clouds padded for it, the layout OpenPCDet's
stack kernel walks the same way); each such row has `ms` (one call from an idle GPU, dispatch included)
and `kernel_ms` (the GPU time of the kernels, from a replayed CUDA graph) for both sides. Without a GPU, CPU rows time pointops' CPU kernels against Open3D's CPU
NearestNeighborSearch (knn_search, its KD-tree, in the same process) when open3d imports, in wall
time (ms) and in CPU time of all threads (cpu_ms: the fairer figure on a shared machine).

Surface geometry: each op is timed against the plain-PyTorch way a user writes it, in the same run; CPU rows also
time Open3D's version (``voxel_down_sample``, ``estimate_normals`` with ``KDTreeSearchParamKNN``,
``registration_icp`` point to plane with every iteration forced) when Open3D loads. ``floor_ms``
is the target time of a GPU row; ``meets_floor`` says whether the row meets it (on the CPU: is at
least as fast as Open3D).

Workloads: uniform clouds in a 10 m cube (1M points, 5 cm voxels), and LiDAR-like scans of
``pointops.scenes.lidar`` (64 x 2048 rays of a street scene, ~120k returns; the ICP source is a
second scan of the same scene with other noise, moved by a known pose).

    python tools/bench_geometry.py [--quick] [--device cpu] [--json f]
    python tools/bench.py --ops knn ball_query three_nn voxel_downsample estimate_normals icp   # the same rows
"""

import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy

OPS = ["knn", "ball_query", "three_nn", "voxel_downsample", "estimate_normals", "icp"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch

from bench import graph_ms, time_ms
from build_baselines import baseline_module

import pointops
from pointops.scenes import lidar as lidar_scenes
from pointops.reference.geometry import knn_cdist_topk


def classic_module():
    return baseline_module("neighbors_classic")


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


# A stray return about 1 km from the unit-cube clouds of the neighbourhood rows, in every cloud.
OUTLIER = (600.0, 600.0, 600.0)


def with_outlier(points, where=OUTLIER):
    """points with the first point of every cloud moved to `where`: the grid's bounding box becomes
    ~1,000 times the cloud's (the trimmed box of csrc/geometry/grid.h keeps the cells small)."""
    out = points.clone()
    out[:, 0] = torch.tensor(where, dtype=out.dtype, device=out.device)
    return out


def with_noise(points, share=0.01, spread=4000.0, seed=7):
    """points with `share` of every cloud's points moved to uniform places in a cube of `spread` m
    around the origin (rain, dust, multipath): more far points than the trimmed box of
    csrc/geometry/grid.h trims (n / 1,024 a side and axis)."""
    out = points.clone()
    g = torch.Generator(device="cpu").manual_seed(seed)
    count = max(1, int(points.shape[1] * share))
    rows = torch.randperm(points.shape[1], generator=g)[:count]
    noise = (torch.rand(points.shape[0], count, 3, generator=g) - 0.5) * spread
    out[:, rows.to(points.device)] = noise.to(out)
    return out


def outlier_row(results, row, clean_ms, fn, case=" + 1 outlier ~1 km", outlier=OUTLIER):
    """A row for fn() on the clouds with the outlier (or noise), the same call on the clean clouds
    its baseline (`ratio` = clean / with outlier: 1 is no cost at all)."""
    row.update(
        {
            "case": row["case"] + case,
            "outlier": list(outlier),
            "baseline": "the same call without the outlier, same run",
        }
    )
    row["ms"] = time_ms(fn, "cuda")
    row["baseline_ms"] = clean_ms
    emit(results, row)


# (case, B, M, N, k, floor_ms: the target time)
KNN_CASES = [
    ("uniform", 1, 100_000, 100_000, 16, 4.0),
    ("uniform", 16, 16_384, 16_384, 32, 4.0),
    # DGCNN's k = 20 over 4,096-point blocks (S3DIS): small padded clouds, the block grid's path
    ("uniform", 32, 4096, 4096, 20, None),
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
        if case == "uniform" and b == 1:
            noisy = with_noise(points)
            # the last row searches the noisy cloud against itself: its far points are queries
            # too, whose k-th neighbours lie farther away than the grid's box is wide
            itself_ms = time_ms(lambda: torch.ops.pointops.knn(points, None, points, None, k), "cuda")
            for ask, far, clean_ms, label, where in (
                (queries, with_outlier(points), row["ms"], " + 1 outlier ~1 km", OUTLIER),
                (queries, noisy, row["ms"], " + 1 % noise in a 4 km cube", (4000.0, 4000.0, 4000.0)),
                (noisy, noisy, itself_ms, " + 1 % noise in a 4 km cube, against itself", (4000.0, 4000.0, 4000.0)),
            ):
                outlier_row(
                    results,
                    {"op": "knn", "case": case, "B": b, "M": m, "N": n, "k": k, "device": name, "floor_ms": None},
                    clean_ms,
                    lambda ask=ask, far=far: torch.ops.pointops.knn(ask, None, far, None, k),
                    case=label,
                    outlier=where,
                )
    if not quick:
        # queries outside their clouds: an exact grid search visits the face of the cloud turned to
        # each query (docs/performance.md, "Queries outside their cloud"); k = 8 takes the block
        # grid, k = 16 the batch grid
        points = uniform(64, 2000, "cuda", 5)
        inside = uniform(64, 20_000, "cuda", 6)
        outside = inside + 500.0
        for k in (8, 16):
            row = {"op": "knn", "case": "small clouds", "B": 64, "M": 20_000, "N": 2000, "k": k}
            row.update({"device": name, "floor_ms": None})
            clean_ms = time_ms(lambda k=k: torch.ops.pointops.knn(inside, None, points, None, k), "cuda")
            outlier_row(
                results,
                row,
                clean_ms,
                lambda k=k: torch.ops.pointops.knn(outside, None, points, None, k),
                case=", queries 500 m away",
                outlier=(500.0, 500.0, 500.0),
            )
        # DGCNN-sized clouds with 1 % far noise, against themselves: their few far points are
        # listed at once in clouds of more than 1,024 points rather than walked to a work limit
        # (docs/performance.md, "Queries outside their cloud")
        blocks = uniform(32, 4096, "cuda", 0)
        noisy_blocks = with_noise(blocks)
        row = {"op": "knn", "case": "uniform", "B": 32, "M": 4096, "N": 4096, "k": 20}
        row.update({"device": name, "floor_ms": None})
        outlier_row(
            results,
            row,
            time_ms(lambda: torch.ops.pointops.knn(blocks, None, blocks, None, 20), "cuda"),
            lambda: torch.ops.pointops.knn(noisy_blocks, None, noisy_blocks, None, 20),
            case=" + 1 % noise in a 4 km cube, against itself",
            outlier=(4000.0, 4000.0, 4000.0),
        )


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
        row = {
            "op": "knn",
            "case": case,
            "B": b,
            "M": m,
            "N": n,
            "k": k,
            "device": "cpu",
            "threads": torch.get_num_threads(),
            "floor_ms": None,
        }
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
                o3d.__version__
            )
            row["baseline_ms"] = time_ms(open3d_knn, "cpu", min_reps=3, budget_ms=3000)
            row["baseline_cpu_ms"] = cpu_time_ms(open3d_knn)
            row["cpu_ratio"] = round(row["baseline_cpu_ms"] / row["cpu_ms"], 2)
            # same neighbours (Open3D orders ties its own way; compare the distance rows)
            nns = o3d.core.nns.NearestNeighborSearch(clouds[0][0])
            nns.knn_index()
            _, d = nns.knn_search(clouds[0][1], k)
            ours = pointops.knn(queries[:1], points[:1], k).distances[0]
            row["distances_match_open3d"] = bool(
                torch.allclose(torch.from_numpy(d.numpy()).float(), ours, rtol=1e-5, atol=1e-7)
            )
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
            pick = (
                torch.randperm(len(pts), generator=g)[:n]
                if len(pts) >= n
                else torch.randint(0, len(pts), (n,), generator=g)
            )
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
    row.update(
        {
            "op": "ball_query",
            "device": name,
            "radius": radius,
            "k": k,
            "baseline": "classic one-thread-per-centre kernel (OpenPCDet pointnet2_batch style)",
            "rows_equal_to_classic": round((mine == classic).all(-1).float().mean().item(), 6),
            "mean_hits": round(ours[1].float().mean().item(), 2),
        }
    )

    def baseline():
        return classic_module().classic_ball_query(queries, points, radius, k)

    row["ms"] = time_ms(op, "cuda")
    row["baseline_ms"] = time_ms(baseline, "cuda")
    # The kernels alone (one CUDA graph of 20 calls replayed): the small levels' calls are mostly
    # the host's dispatch on both sides.
    row["kernel_ms"] = graph_ms(op)
    row["baseline_kernel_ms"] = graph_ms(baseline)
    row["kernel_ratio"] = round(row["baseline_kernel_ms"] / row["kernel_ms"], 2)
    emit(results, row)


def bench_ball_query(device, quick, results):
    if device != "cuda":
        points, centres = uniform(2, 20_000, "cpu", 2), uniform(2, 2048, "cpu", 3)
        row = {
            "op": "ball_query",
            "B": 2,
            "N": 20_000,
            "M": 2048,
            "radius": 0.05,
            "k": 32,
            "device": "cpu",
            "threads": torch.get_num_threads(),
            "floor_ms": None,
            "ms": time_ms(lambda: pointops.ball_query(centres, points, 0.05, 32), "cpu"),
        }
        emit(results, row)
        return
    name = torch.cuda.get_device_name()
    for i, (case, b, n, m, radius, k, floor) in enumerate(BALL_CASES[:1] if quick else BALL_CASES):
        points = uniform(b, n, "cuda", 4)
        centres = fps_centres(points, m)
        ball_row(results, name, {"case": case, "B": b, "N": n, "M": m, "floor_ms": floor}, centres, points, radius, k)
        if i == 0:
            far = with_outlier(points)
            outlier_row(
                results,
                {
                    "op": "ball_query",
                    "case": case,
                    "B": b,
                    "N": n,
                    "M": m,
                    "radius": radius,
                    "k": k,
                    "device": name,
                    "floor_ms": None,
                },
                results[-1]["ms"],
                lambda: torch.ops.pointops.ball_query(centres, None, far, None, radius, k, True),
            )
    # PointNet++ radii in the unit cube, up to the large ones
    points = uniform(16, 16_384, "cuda", 7)
    centres = fps_centres(points, 1024)
    for radius, k in CUBE_BALLS[2:3] if quick else CUBE_BALLS:
        ball_row(
            results,
            name,
            {"case": "pointnet2_cube", "B": 16, "N": 16_384, "M": 1024, "floor_ms": None},
            centres,
            points,
            radius,
            k,
        )
    if quick:
        return
    # PointRCNN on 16,384-point front-view scans, B = 4
    points = torch.stack(front_view_scans(4, 16_384)).cuda()
    for level, (n, m, scales) in enumerate(POINTRCNN_LEVELS, 1):
        centres = fps_centres(points, m)
        for radius, k in scales:
            ball_row(
                results,
                name,
                {"case": "pointrcnn_sa%d" % level, "B": 4, "N": n, "M": m, "floor_ms": None},
                centres,
                points,
                radius,
                k,
            )
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
        padded[i, : len(s)] = s.cuda()
    for radius, k in PV_RCNN_BALLS:
        ball_row(
            results,
            name,
            {"case": "pv_rcnn_vsa_packed", "B": 2, "N": counts, "M": PV_RCNN_KEYPOINTS, "floor_ms": None},
            torch.stack(keypoints),
            padded,
            radius,
            k,
            packed=packed,
        )


def bench_three_nn(device, quick, results):
    if device != "cuda":
        queries, points = uniform(4, 16_384, "cpu", 5), uniform(4, 4096, "cpu", 6)
        emit(
            results,
            {
                "op": "three_nn",
                "B": 4,
                "M": 16_384,
                "N": 4096,
                "device": "cpu",
                "floor_ms": None,
                "threads": torch.get_num_threads(),
                "ms": time_ms(lambda: pointops.three_nn(queries, points), "cpu"),
            },
        )
        return
    name = torch.cuda.get_device_name()
    queries, points = uniform(16, 16_384, "cuda", 5), uniform(16, 4096, "cuda", 6)
    ours = pointops.three_nn(queries, points)
    d2, idx = classic_module().classic_three_nn(queries, points)
    row = {
        "op": "three_nn",
        "B": 16,
        "M": 16_384,
        "N": 4096,
        "device": name,
        "floor_ms": 0.5,
        "baseline": "classic one-thread-per-query kernel (OpenPCDet pointnet2_batch style)",
        "indices_equal_to_classic": round((ours.indices.int() == idx).float().mean().item(), 6),
    }
    row["ms"] = time_ms(lambda: torch.ops.pointops.knn(queries, None, points, None, 3), "cuda")
    row["baseline_ms"] = time_ms(lambda: classic_module().classic_three_nn(queries, points), "cuda")
    row["kernel_ms"] = graph_ms(lambda: torch.ops.pointops.knn(queries, None, points, None, 3))
    row["baseline_kernel_ms"] = graph_ms(lambda: classic_module().classic_three_nn(queries, points))
    emit(results, row)
    far = with_outlier(points)
    outlier_row(
        results,
        {"op": "three_nn", "case": "uniform", "B": 16, "M": 16_384, "N": 4096, "device": name, "floor_ms": None},
        row["ms"],
        lambda: torch.ops.pointops.knn(queries, None, far, None, 3),
    )


def _run_neighbors(device, quick, ops, results):
    if "knn" in ops:
        if device == "cuda":
            bench_knn_cuda(quick, results)
        else:
            bench_knn_cpu(quick, results)
    if "ball_query" in ops:
        bench_ball_query(device, quick, results)
    if "three_nn" in ops:
        bench_three_nn(device, quick, results)


# ---- surface geometry: voxel downsampling, normals, ICP ----


def _open3d():
    try:
        import open3d

        return open3d
    except ImportError as error:  # absent, or its wheel cannot find libusb-1.0
        print(json.dumps({"note": f"open3d unavailable: {error}"}), flush=True)
        return None


def _device_name(device):
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def _emit(row, results):
    if "baseline_ms" in row and row.get("ms"):
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
    if "open3d_ms" in row and row.get("ms"):
        row["ratio_open3d"] = round(row["open3d_ms"] / row["ms"], 2)
        row["meets_floor"] = row["ms"] <= row["open3d_ms"]
    if row.get("floor_ms") is not None:
        row["meets_floor"] = row["ms"] <= row["floor_ms"]
    results.append(row)
    print(json.dumps(row), flush=True)


def _scan(seed, scene=0, n_beams=64):
    from pointops.scenes import lidar

    return lidar.lidar_scan(lidar.make_scene(scene), n_beams=n_beams, range_noise=0.02, seed=seed).points


def lidar_batch(batch, device, n_beams=64):
    """(B, N, 3) padded LiDAR-like scans of B scenes and their lengths."""
    scans = [_scan(seed=b, scene=b, n_beams=n_beams) for b in range(batch)]
    n = max(len(s) for s in scans)
    points = torch.zeros(batch, n, 3)
    for b, s in enumerate(scans):
        points[b, : len(s)] = s
    return points.to(device), torch.tensor([len(s) for s in scans], device=device)


# ---- plain-PyTorch baselines -------------------------------------------------------------------


def torch_voxel_downsample(points, voxel_size):
    """The PyTorch way (B = 1): integer cells, torch.unique (one host sync) and index_add of
    float64 sums."""
    cells = torch.floor(points / torch.tensor(voxel_size, device=points.device)).long()
    cells = cells - cells.amin(1, keepdim=True)
    key = (cells[..., 2] << 42) | (cells[..., 1] << 21) | cells[..., 0]
    unique, inverse, counts = torch.unique(key.flatten(), return_inverse=True, return_counts=True)
    sums = torch.zeros(len(unique), 3, dtype=torch.float64, device=points.device)
    sums.index_add_(0, inverse, points.reshape(-1, 3).double())
    return (sums / counts.unsqueeze(1)).float()


def torch_knn(points, k, chunk=4096):
    """Exact kNN of a cloud in itself by cdist + topk over chunks of queries (B = 1)."""
    out = []
    for start in range(0, points.shape[1], chunk):
        d = torch.cdist(points[:, start : start + chunk], points)
        out.append(torch.topk(d, k, dim=2, largest=False).indices)
    return torch.cat(out, 1)


def torch_normals(points, k):
    """The PyTorch way: kNN by cdist + topk, covariance by einsum, torch.linalg.eigh, orient to the origin."""
    idx = torch_knn(points, k)
    nb = points[0][idx[0]].unsqueeze(0)  # (1, N, k, 3)
    centred = nb - nb.mean(2, keepdim=True)
    cov = torch.einsum("bnki,bnkj->bnij", centred, centred) / k
    # cuSOLVER's batched eigh fails (CUSOLVER_STATUS_INTERNAL_ERROR) for 100k matrices at once on
    # an H100 with torch 2.11, so the batch goes in chunks.
    parts = [torch.linalg.eigh(part) for part in cov.split(16384, dim=1)]
    values = torch.cat([p[0] for p in parts], 1)
    vectors = torch.cat([p[1] for p in parts], 1)
    normal = vectors[..., 0]
    normal = torch.where(((normal * points).sum(-1, keepdim=True) > 0), -normal, normal)
    return normal, values[..., 0] / values.sum(-1).clamp(min=1e-30)


def torch_icp_point_to_plane(sources, targets, normals, init, max_dist, iterations, chunk=2):
    """The PyTorch way, batched over hypotheses: cdist + argmin for the matches (chunks of
    hypotheses), the 6x6 normal equations by einsum, torch.linalg.solve, an exact rotation (Rodrigues)."""
    poses = init[0].clone()  # (H, 4, 4), B = 1
    src, tgt, nrm = sources[0], targets[0], normals[0]
    eye = torch.eye(3, device=src.device)
    for _ in range(iterations):
        moved = torch.einsum("hij,nj->hni", poses[:, :3, :3], src) + poses[:, None, :3, 3]
        idx = torch.cat(
            [
                torch.cdist(moved[h : h + chunk], tgt.expand(min(chunk, len(poses) - h), -1, -1)).argmin(-1)
                for h in range(0, len(poses), chunk)
            ]
        )
        q, n = tgt[idx], nrm[idx]
        diff = moved - q
        inlier = (diff * diff).sum(-1) <= max_dist * max_dist
        r = (diff * n).sum(-1) * inlier
        jac = torch.cat([torch.cross(moved, n, dim=-1), n], -1) * inlier.unsqueeze(-1)
        a = torch.einsum("hni,hnj->hij", jac, jac) + 1e-9 * torch.eye(6, device=src.device)
        x = torch.linalg.solve(a, -torch.einsum("hni,hn->hi", jac, r))
        w, t = x[:, :3], x[:, 3:]
        angle = w.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        axis = w / angle
        kx = torch.zeros(len(poses), 3, 3, device=src.device)
        kx[:, 0, 1], kx[:, 0, 2], kx[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
        kx = kx - kx.transpose(1, 2)
        rot = eye + torch.sin(angle)[..., None] * kx + (1 - torch.cos(angle))[..., None] * (kx @ kx)
        step = torch.eye(4, device=src.device).repeat(len(poses), 1, 1)
        step[:, :3, :3], step[:, :3, 3] = rot, t
        poses = step @ poses
    return poses


# ---- workloads -----------------------------------------------------------------------------------


def _pose(angle, axis, translation, device):
    axis = torch.nn.functional.normalize(torch.tensor(axis, dtype=torch.float64), dim=0)
    k = torch.tensor(
        [[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]], dtype=torch.float64
    )
    p = torch.eye(4, dtype=torch.float64)
    p[:3, :3] = torch.eye(3, dtype=torch.float64) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)
    p[:3, 3] = torch.tensor(translation, dtype=torch.float64)
    return p.to(device)


def _icp_pair(n, device):
    """Target: a LiDAR-like scan downsampled to n points; source: a second scan of the scene
    (other noise) moved by a known pose, downsampled the same way. Returns float32 clouds,
    target normals (k = 16, toward the sensor) and the true pose."""
    truth = _pose(0.05, [0.2, 0.1, 1.0], [0.3, -0.2, 0.05], "cpu")
    clouds = []
    for seed in (0, 1):
        scan = _scan(seed).unsqueeze(0)
        cut = scan[:, (scan[0].norm(dim=-1) < 40)]  # the dense near field
        g = torch.Generator().manual_seed(seed)
        clouds.append(cut[:, torch.randperm(cut.shape[1], generator=g)[:n]].contiguous())
    target = clouds[0].to(device)
    source = pointops.transform_points(clouds[1].double(), torch.linalg.inv(truth).view(1, 1, 4, 4))[:, 0].float()
    normals = pointops.estimate_normals(target, 16).normals
    return source.to(device), target, normals, truth.to(device)


def _hypotheses(h, device):
    g = torch.Generator().manual_seed(5)
    poses = [torch.eye(4, dtype=torch.float64)]
    for _ in range(h - 1):
        poses.append(
            _pose(
                float(torch.rand(1, generator=g)) * 0.1,
                torch.randn(3, generator=g).tolist(),
                (torch.randn(3, generator=g) * 0.3).tolist(),
                "cpu",
            )
        )
    return torch.stack(poses).unsqueeze(0).to(device)


# Far outliers added to the 10 m cube of 10^6 points at 5 cm (label, points): each row's baseline is the
# cube without them, in the same run. The voxels' key (csrc/geometry/voxel_downsample.h) holds
# the offsets of each axis in the bits they need (62 in all); wider offsets are packed by bit-width
# bins; a cloud whose packed offsets still do not fit takes the sorted path.
DOWNSAMPLE_OUTLIERS = [
    ("1 outlier 1 km away", [(600.0, 600.0, 600.0)]),  # 15 bits an axis: the direct key
    ("1 outlier 200 km away on x", [(2e5, 5.0, 5.0)]),  # 22 + 8 + 8 bits: the direct key
    ("1 outlier 200 km away on every axis", [(1.2e5, -1.2e5, 1.2e5)]),  # 22 bits an axis: packed
    ("1 outlier 10^9 m away", [(6e8, 6e8, -6e8)]),  # 34 bits an axis: packed
    ("100 outliers within 20 km", "near"),  # packed
    ("1,000 outliers within 200 km", "far"),  # too thin to pack: the sorted path
]


def _outliers(spec, g):
    if spec == "near":
        return torch.rand(100, 3, generator=g, dtype=torch.float64) * 2e4 - 1e4
    if spec == "far":
        return torch.rand(1000, 3, generator=g, dtype=torch.float64) * 2e5 - 1e5
    return torch.tensor(spec, dtype=torch.float64)


def bench_voxel_downsample(device, quick, results, o3d):
    name = _device_name(device)
    g = torch.Generator().manual_seed(0)
    cases = [("uniform 10 m cube", 1, 1_000_000, 0.05, 1.0 if device == "cuda" else None, None)]
    if not quick:
        cases.append(("lidar", 4 if device == "cuda" else 1, None, 0.1, None, None))
        for label, spec in DOWNSAMPLE_OUTLIERS:
            cases.append(("uniform 10 m cube + " + label, 1, 1_000_000, 0.05, 1.0 if device == "cuda" else None, spec))
    clean = {}
    for label, b, n, size, floor, spec in cases:
        if n is not None:
            points = torch.rand(b, n, 3, generator=torch.Generator().manual_seed(0)) * 10
            if spec is not None:
                far = _outliers(spec, g)
                points[:, : len(far)] = far.float()
            points = points.to(device)
            lengths = None
        else:
            points, lengths = lidar_batch(b, device)
        row = {
            "op": "voxel_downsample",
            "case": label,
            "B": b,
            "N": points.shape[1],
            "voxel": size,
            "device": name,
            "floor_ms": floor,
        }
        row["ms"] = time_ms(
            lambda: torch.ops.pointops.voxel_downsample(points, lengths, None, [size] * 3, None), device
        )
        out = torch.ops.pointops.voxel_downsample(points, lengths, None, [size] * 3, None)
        row["voxels"] = out[2].tolist()
        if spec is None and lengths is None:
            clean = {"ms": row["ms"], "voxels": row["voxels"]}
            row["baseline"] = "plain PyTorch: floor, torch.unique, index_add (float64 sums)"
            row["baseline_ms"] = time_ms(lambda: torch_voxel_downsample(points, [size] * 3), device, min_reps=2)
        elif spec is not None:  # the cube without the outliers, timed in this run
            row["baseline"] = "the same cloud without the outliers, same run"
            row["baseline_ms"] = clean["ms"]
        if device == "cpu" and o3d is not None and b == 1:
            cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points[0, : points.shape[1]].double().numpy()))
            row["open3d_ms"] = time_ms(lambda: cloud.voxel_down_sample(size), device, min_reps=1, budget_ms=3000)
        _emit(row, results)


def bench_estimate_normals(device, quick, results, o3d):
    name = _device_name(device)
    scan = _scan(0)
    points = scan[:100_000].unsqueeze(0).contiguous().to(device)
    cases = [("lidar 100k", points, None, 3.0 if device == "cuda" else None)]
    if not quick and device == "cuda":
        batch, lengths = lidar_batch(8, device)
        cases.append(("lidar batch", batch, lengths, None))
    for label, pts, lengths, floor in cases:
        k = 16
        row = {
            "op": "estimate_normals",
            "case": label,
            "B": pts.shape[0],
            "N": pts.shape[1],
            "k": k,
            "device": name,
            "floor_ms": floor,
        }
        row["ms"] = time_ms(lambda: pointops.estimate_normals(pts, k, lengths), device)
        neighbors = pointops.knn(pts, pts, k, lengths, lengths).indices
        row["knn_ms"] = time_ms(lambda: pointops.knn(pts, pts, k, lengths, lengths), device)
        row["normals_op_ms"] = time_ms(
            lambda: torch.ops.pointops.estimate_normals(pts, lengths, neighbors, None, 1), device
        )
        if lengths is None and device == "cuda":  # on the CPU the cdist kNN of 100k points takes minutes
            row["baseline"] = "plain PyTorch: cdist + topk kNN (chunks of 4096 queries), einsum covariance, eigh"
            row["baseline_ms"] = time_ms(lambda: torch_normals(pts, k), device, min_reps=1)
        if device == "cpu" and o3d is not None:
            cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts[0].double().numpy()))
            row["open3d_ms"] = time_ms(
                lambda: cloud.estimate_normals(o3d.geometry.KDTreeSearchParamKNN(k)), device, min_reps=1, budget_ms=3000
            )
        _emit(row, results)


def bench_icp(device, quick, results, o3d):
    """Point-to-plane ICP of LiDAR clouds: 16 hypotheses of 10,000 sources (on CUDA the icp op's
    wide launch plan) and, on CUDA, 256 of 2,000 (its fused plan)."""
    name = _device_name(device)
    iterations, max_dist = 30, 1.0
    cases = [(10_000, 16 if device == "cuda" else 1, 15.0 if device == "cuda" else None)]
    if device == "cuda" and not quick:
        cases.append((2_000, 256, None))
    for n, hypotheses, floor in cases:
        source, target, normals, truth = _icp_pair(n, device)
        init = _hypotheses(hypotheses, device)
        row = {
            "op": "icp",
            "case": "lidar point_to_plane",
            "N": n,
            "M": n,
            "iterations": iterations,
            "H": hypotheses,
            "device": name,
            "floor_ms": floor,
        }

        def ours():
            return pointops.icp(
                source, target, max_dist, init_poses=init, target_normals=normals, iterations=iterations
            )

        row["ms"] = time_ms(ours, device, min_reps=3)
        result = ours()
        error = result.poses[0, 0].double() @ torch.linalg.inv(truth)
        row["rotation_error_deg"] = round(math.degrees(math.acos(min(1.0, (float(error[:3, :3].trace()) - 1) / 2))), 4)
        row["translation_error"] = round(float(error[:3, 3].norm()), 5)
        row["inlier_fraction"] = round(float(result.inlier_fraction[0, 0]), 4)
        queries = pointops.transform_points(source, init).view(1, -1, 3)
        row["knn_ms_per_iteration"] = time_ms(lambda: pointops.knn(queries, target, 1), device)
        if (device == "cuda" and hypotheses <= 16) or (device == "cpu" and not quick):
            row["baseline"] = "plain PyTorch: cdist + argmin matches, einsum normal equations, linalg.solve, Rodrigues"
            row["baseline_ms"] = time_ms(
                lambda: torch_icp_point_to_plane(source, target, normals, init.float(), max_dist, iterations),
                device,
                min_reps=1,
            )
        if device == "cpu" and o3d is not None:
            reg = o3d.pipelines.registration
            src = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(source[0].double().numpy()))
            tgt = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(target[0].double().numpy()))
            tgt.normals = o3d.utility.Vector3dVector(normals[0].double().numpy())
            criteria = reg.ICPConvergenceCriteria(relative_fitness=0.0, relative_rmse=0.0, max_iteration=iterations)
            estimation = reg.TransformationEstimationPointToPlane()
            identity = init[0, 0].double().numpy()
            row["open3d_ms"] = time_ms(
                lambda: reg.registration_icp(src, tgt, max_dist, identity, estimation, criteria), device, min_reps=3
            )
            theirs = reg.registration_icp(src, tgt, max_dist, identity, estimation, criteria)
            row["open3d_inlier_fraction"] = round(theirs.fitness, 4)
        _emit(row, results)


def _run_surface(device, quick, ops, results):
    o3d = _open3d() if device == "cpu" else None
    if "voxel_downsample" in ops:
        bench_voxel_downsample(device, quick, results, o3d)
    if "estimate_normals" in ops:
        bench_estimate_normals(device, quick, results, o3d)
    if "icp" in ops:
        bench_icp(device, quick, results, o3d)


def run(device, quick, ops, results):
    _run_neighbors(device, quick, ops, results)
    _run_surface(device, quick, ops, results)
