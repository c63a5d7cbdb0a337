"""Time of voxel_downsample, estimate_normals and icp against the plain-PyTorch way and Open3D.

Each op is timed against the plain-PyTorch way a user writes it, in the same run; CPU rows also
time Open3D's version (``voxel_down_sample``, ``estimate_normals`` with ``KDTreeSearchParamKNN``,
``registration_icp`` point to plane with every iteration forced) when Open3D loads. ``floor_ms``
is the target time of a GPU row; ``meets_floor`` says whether the row meets it (on the CPU: is at
least as fast as Open3D).

Workloads: uniform clouds in a 10 m cube (1M points, 5 cm voxels), and LiDAR-like scans of
``pointops.scenes.lidar`` (64 x 2048 rays of a street scene, ~120k returns; the ICP source is a
second scan of the same scene with other noise, moved by a known pose).

    python tools/bench_surface.py [--quick] [--device cpu] [--json f]
    python tools/bench.py --ops voxel_downsample estimate_normals icp      # the same rows
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)

OPS = ["voxel_downsample", "estimate_normals", "icp"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch  # noqa: E402

import pointops  # noqa: E402
from bench import time_ms  # noqa: E402


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
        idx = torch.cat([torch.cdist(moved[h : h + chunk], tgt.expand(min(chunk, len(poses) - h), -1, -1)).argmin(-1)
                         for h in range(0, len(poses), chunk)])
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
    k = torch.tensor([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]], dtype=torch.float64)
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
        poses.append(_pose(float(torch.rand(1, generator=g)) * 0.1, torch.randn(3, generator=g).tolist(),
                           (torch.randn(3, generator=g) * 0.3).tolist(), "cpu"))
    return torch.stack(poses).unsqueeze(0).to(device)


def bench_voxel_downsample(device, quick, results, o3d):
    name = _device_name(device)
    g = torch.Generator().manual_seed(0)
    cases = [("uniform 10 m cube", 1, 1_000_000, 0.05, 1.0 if device == "cuda" else None)]
    if not quick:
        cases.append(("lidar", 4 if device == "cuda" else 1, None, 0.1, None))
    for label, b, n, size, floor in cases:
        if n is not None:
            points = (torch.rand(b, n, 3, generator=g) * 10).to(device)
            lengths = None
        else:
            points, lengths = lidar_batch(b, device)
        row = {"op": "voxel_downsample", "case": label, "B": b, "N": points.shape[1], "voxel": size, "device": name,
               "floor_ms": floor, "baseline": "plain PyTorch: floor, torch.unique, index_add (float64 sums)"}
        row["ms"] = time_ms(lambda: torch.ops.pointops.voxel_downsample(points, lengths, None, [size] * 3, None), device)
        out = torch.ops.pointops.voxel_downsample(points, lengths, None, [size] * 3, None)
        row["voxels"] = out[2].tolist()
        if lengths is None:
            row["baseline_ms"] = time_ms(lambda: torch_voxel_downsample(points, [size] * 3), device, min_reps=2)
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
        row = {"op": "estimate_normals", "case": label, "B": pts.shape[0], "N": pts.shape[1], "k": k, "device": name,
               "floor_ms": floor}
        row["ms"] = time_ms(lambda: pointops.estimate_normals(pts, k, lengths), device)
        neighbors = pointops.knn(pts, pts, k, lengths, lengths).indices
        row["knn_ms"] = time_ms(lambda: pointops.knn(pts, pts, k, lengths, lengths), device)
        row["normals_op_ms"] = time_ms(
            lambda: torch.ops.pointops.estimate_normals(pts, lengths, neighbors, None, 1), device)
        if lengths is None and device == "cuda":  # on the CPU the cdist kNN of 100k points takes minutes
            row["baseline"] = "plain PyTorch: cdist + topk kNN (chunks of 4096 queries), einsum covariance, eigh"
            row["baseline_ms"] = time_ms(lambda: torch_normals(pts, k), device, min_reps=1)
        if device == "cpu" and o3d is not None:
            cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts[0].double().numpy()))
            row["open3d_ms"] = time_ms(lambda: cloud.estimate_normals(o3d.geometry.KDTreeSearchParamKNN(k)), device,
                                       min_reps=1, budget_ms=3000)
        _emit(row, results)


def bench_icp(device, quick, results, o3d):
    name = _device_name(device)
    n, iterations, max_dist = 10_000, 30, 1.0
    hypotheses = 16 if device == "cuda" else 1
    source, target, normals, truth = _icp_pair(n, device)
    init = _hypotheses(hypotheses, device)
    row = {"op": "icp", "case": "lidar point_to_plane", "N": n, "M": n, "iterations": iterations, "H": hypotheses,
           "device": name, "floor_ms": 15.0 if device == "cuda" else None}

    def ours():
        return pointops.icp(source, target, max_dist, init_poses=init, target_normals=normals, iterations=iterations)

    row["ms"] = time_ms(ours, device, min_reps=3)
    result = ours()
    error = result.poses[0, 0].double() @ torch.linalg.inv(truth)
    row["rotation_error_deg"] = round(math.degrees(math.acos(min(1.0, (float(error[:3, :3].trace()) - 1) / 2))), 4)
    row["translation_error"] = round(float(error[:3, 3].norm()), 5)
    row["inlier_fraction"] = round(float(result.inlier_fraction[0, 0]), 4)
    moved = pointops.transform_points(source, init)
    queries = moved.view(1, -1, 3)
    row["knn_ms_per_iteration"] = time_ms(lambda: pointops.knn(queries, target, 1), device)
    nearest = pointops.knn(queries, target, 1).indices.view(1, hypotheses, n)
    converged = torch.zeros(1, hypotheses, dtype=torch.bool, device=device)
    row["step_ms_per_iteration"] = time_ms(lambda: torch.ops.pointops.icp_step(
        source, None, target, normals, init, nearest, converged, max_dist, 0.0, True, True), device)
    if device == "cuda" or not quick:
        row["baseline"] = "plain PyTorch: cdist + argmin matches, einsum normal equations, linalg.solve, Rodrigues"
        row["baseline_ms"] = time_ms(lambda: torch_icp_point_to_plane(source, target, normals, init.float(), max_dist,
                                                                       iterations), device, min_reps=1)
    if device == "cpu" and o3d is not None:
        reg = o3d.pipelines.registration
        src = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(source[0].double().numpy()))
        tgt = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(target[0].double().numpy()))
        tgt.normals = o3d.utility.Vector3dVector(normals[0].double().numpy())
        criteria = reg.ICPConvergenceCriteria(relative_fitness=0.0, relative_rmse=0.0, max_iteration=iterations)
        estimation = reg.TransformationEstimationPointToPlane()
        identity = init[0, 0].double().numpy()
        row["open3d_ms"] = time_ms(lambda: reg.registration_icp(src, tgt, max_dist, identity, estimation, criteria),
                                   device, min_reps=3)
        theirs = reg.registration_icp(src, tgt, max_dist, identity, estimation, criteria)
        row["open3d_inlier_fraction"] = round(theirs.fitness, 4)
    _emit(row, results)


def run(device, quick, ops, results):
    o3d = _open3d() if device == "cpu" else None
    if "voxel_downsample" in ops:
        bench_voxel_downsample(device, quick, results, o3d)
    if "estimate_normals" in ops:
        bench_estimate_normals(device, quick, results, o3d)
    if "icp" in ops:
        bench_icp(device, quick, results, o3d)
