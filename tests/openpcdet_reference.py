"""Slow NumPy versions of OpenPCDet's pointnet2 kernels, written anew from their loops
(open-mmlab/OpenPCDet @8cacccec, pcdet/ops/pointnet2/pointnet2_batch/src/*_gpu.cu and
pointnet2_stack/src/{ball_query,group_points,interpolate,sampling,vector_pool}_gpu.cu), in
float32 with one rounding per operation and the distance ``(dx*dx + dy*dy) + dz*dz`` (OpenPCDet's
left-to-right sum, without the FMAs nvcc may fuse in). OpenPCDet has no tests of these ops; the
tests hold pointops.nn against these. Each returns torch tensors as OpenPCDet's wrappers do."""

from types import SimpleNamespace

import numpy as np
import torch

from tests.openpcdet_code import batch_grouping_modules, stack_query_and_group

F32 = np.float32


def _np(t):
    return t.detach().cpu().numpy()


def _d2(q, pts):
    dx, dy, dz = F32(q[0]) - pts[:, 0], F32(q[1]) - pts[:, 1], F32(q[2]) - pts[:, 2]
    return (dx * dx + dy * dy) + dz * dz


def _sqrt(dist2):
    """OpenPCDet's torch.sqrt of the float32 squared distances, correctly rounded (NumPy's; torch's
    float32 sqrt may be off by an ulp, pointops rounds it correctly on every device)."""
    with np.errstate(over="ignore"):
        return torch.from_numpy(np.sqrt(dist2.astype(F32)))


def _starts(cnt):
    cnt = [int(c) for c in cnt]
    return np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64), cnt


def fps_rows(pts, m):
    """One cloud's farthest point sampling from row 0: min distance kept per point (1e10 at first),
    the first largest picked (distinct data has no ties)."""
    n = pts.shape[0]
    temp = np.full(n, 1e10, dtype=F32)
    picks, old = [0], 0
    for _ in range(1, m):
        temp = np.minimum(temp, _d2(pts[old], pts))
        old = int(np.argmax(temp))
        picks.append(old)
    return picks


# ---- pointnet2_batch ------------------------------------------------------------------------------


def farthest_point_sample(xyz, npoint):
    pts = _np(xyz).astype(F32)
    return torch.tensor([fps_rows(p, npoint) for p in pts], dtype=torch.int32)


def gather_operation(features, idx):
    return torch.stack([features[b][:, idx[b].long()] for b in range(features.shape[0])])


def grouping_operation(features, idx):
    return torch.stack([features[b][:, idx[b].long()] for b in range(features.shape[0])])


def ball_query(radius, nsample, xyz, new_xyz):
    pts, ctr = _np(xyz).astype(F32), _np(new_xyz).astype(F32)
    r2 = F32(radius) * F32(radius)
    out = np.zeros((ctr.shape[0], ctr.shape[1], nsample), dtype=np.int32)
    for b in range(ctr.shape[0]):
        for m in range(ctr.shape[1]):
            hits = np.nonzero(_d2(ctr[b, m], pts[b]) < r2)[0][:nsample]
            if len(hits):
                out[b, m, :] = hits[0]
                out[b, m, : len(hits)] = hits
    return torch.from_numpy(out)


def _three_best(d):
    """Indices and squared distances of the 3 smallest, strict < in order (ties to the first),
    initial (1e40, index 0) as in the kernels."""
    best = [(1e40, 0), (1e40, 0), (1e40, 0)]
    for k, v in enumerate(d.tolist()):
        if v < best[0][0]:
            best = [(v, k), best[0], best[1]]
        elif v < best[1][0]:
            best = [best[0], (v, k), best[1]]
        elif v < best[2][0]:
            best[2] = (v, k)
    return [b[1] for b in best], [b[0] for b in best]


def three_nn(unknown, known):
    u, k = _np(unknown).astype(F32), _np(known).astype(F32)
    idx = np.zeros(u.shape, dtype=np.int32)
    dist2 = np.zeros(u.shape, dtype=F32)
    for b in range(u.shape[0]):
        for i in range(u.shape[1]):
            idx[b, i], dist2[b, i] = _three_best(_d2(u[b, i], k[b]))
    return _sqrt(dist2), torch.from_numpy(idx)


def three_interpolate(features, idx, weight):
    out = 0
    for j in range(3):
        out = out + weight[:, None, :, j] * grouping_operation(features, idx[:, :, j : j + 1])[..., 0]
    return out


batch_utils = SimpleNamespace(
    farthest_point_sample=farthest_point_sample,
    furthest_point_sample=farthest_point_sample,
    gather_operation=gather_operation,
    grouping_operation=grouping_operation,
    ball_query=ball_query,
    three_nn=three_nn,
    three_interpolate=three_interpolate,
)
_groupers = batch_grouping_modules(batch_utils)
batch_utils.QueryAndGroup, batch_utils.GroupAll = _groupers.QueryAndGroup, _groupers.GroupAll


# ---- pointnet2_stack ------------------------------------------------------------------------------


def _cloud_of(cnt):
    return np.repeat(np.arange(len(cnt)), cnt)


def stack_ball_query(radius, nsample, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt):
    pts, ctr = _np(xyz).astype(F32), _np(new_xyz).astype(F32)
    start, cnt = _starts(_np(xyz_batch_cnt))
    _, new_cnt = _starts(_np(new_xyz_batch_cnt))
    r2 = F32(radius) * F32(radius)
    out = np.zeros((ctr.shape[0], nsample), dtype=np.int32)
    for m, b in enumerate(_cloud_of(new_cnt)):
        hits = np.nonzero(_d2(ctr[m], pts[start[b] : start[b] + cnt[b]]) < r2)[0][:nsample]
        if len(hits):
            out[m, :] = hits[0]
            out[m, : len(hits)] = hits
        else:
            out[m, 0] = -1
    idx = torch.from_numpy(out)
    empty = idx[:, 0] == -1
    idx[empty] = 0
    return idx, empty


def stack_grouping_operation(features, features_batch_cnt, idx, idx_batch_cnt):
    start, _ = _starts(_np(features_batch_cnt))
    _, idx_cnt = _starts(_np(idx_batch_cnt))
    rows = torch.tensor(start[_cloud_of(idx_cnt)])[:, None] + idx.long()
    return features[rows].permute(0, 2, 1).contiguous()


def stack_three_nn(unknown, unknown_batch_cnt, known, known_batch_cnt):
    u, k = _np(unknown).astype(F32), _np(known).astype(F32)
    start, cnt = _starts(_np(known_batch_cnt))
    _, ucnt = _starts(_np(unknown_batch_cnt))
    idx = np.zeros(u.shape, dtype=np.int32)
    dist2 = np.zeros(u.shape, dtype=F32)
    for i, b in enumerate(_cloud_of(ucnt)):
        best, d = _three_best(_d2(u[i], k[start[b] : start[b] + cnt[b]]))
        with np.errstate(over="ignore"):  # 1e40 (no neighbour) is +inf in float32, as in the kernel
            idx[i], dist2[i] = np.array(best) + start[b], np.array(d, dtype=np.float64)
    return _sqrt(dist2), torch.from_numpy(idx)


def stack_three_interpolate(features, idx, weight):
    f = features
    i = idx.long()
    return (weight[:, 0:1] * f[i[:, 0]] + weight[:, 1:2] * f[i[:, 1]]) + weight[:, 2:3] * f[i[:, 2]]


def stack_farthest_point_sample(xyz, xyz_batch_cnt, npoint):
    pts = _np(xyz).astype(F32)
    start, cnt = _starts(_np(xyz_batch_cnt))
    if isinstance(npoint, torch.Tensor):
        npoint = npoint.tolist()
    elif not isinstance(npoint, list):
        npoint = [npoint] * len(cnt)
    out = []
    for b in range(len(cnt)):
        out += [start[b] + i for i in fps_rows(pts[start[b] : start[b] + cnt[b]], npoint[b])]
    return torch.tensor(out, dtype=torch.int32)


def _local_neighbors(support, start, cnt, b, centre, distance, nsample, neighbor_type, cap=1000):
    local = support[start[b] : start[b] + cnt[b]] - centre
    if neighbor_type == 1:
        inside = ((local[:, 0] * local[:, 0] + local[:, 1] * local[:, 1]) + local[:, 2] * local[:, 2]) <= F32(
            distance
        ) ** 2
    else:
        inside = (np.abs(local) <= F32(distance)).all(1)
    found = np.nonzero(inside)[0]
    found = found[:cap]
    if nsample > 0:
        found = found[:nsample]
    return found, local


def three_nn_for_vector_pool_by_two_step(
    support_xyz,
    xyz_batch_cnt,
    new_xyz,
    new_xyz_grid_centers,
    new_xyz_batch_cnt,
    max_neighbour_distance,
    nsample,
    neighbor_type,
    avg_length_of_neighbor_idxs,
    num_total_grids,
    neighbor_distance_multiplier,
):
    support, ctr = _np(support_xyz).astype(F32), _np(new_xyz).astype(F32)
    grid = _np(new_xyz_grid_centers).astype(F32).reshape(ctr.shape[0], num_total_grids, 3)
    start, cnt = _starts(_np(xyz_batch_cnt))
    _, new_cnt = _starts(_np(new_xyz_batch_cnt))
    distance = F32(max_neighbour_distance * neighbor_distance_multiplier)
    idx = np.full((ctr.shape[0], num_total_grids, 3), -1, dtype=np.int32)
    dist2 = np.full((ctr.shape[0], num_total_grids, 3), np.inf, dtype=F32)
    for m, b in enumerate(_cloud_of(new_cnt)):
        found, _ = _local_neighbors(support, start, cnt, b, ctr[m], distance, nsample, neighbor_type)
        if len(found) == 0:
            continue
        pts = support[start[b] + found]
        diff = grid[m][:, None, :] - pts[None, :, :]  # (G, n) grid centre minus point, as the kernel
        d = (diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1]) + diff[..., 2] * diff[..., 2]
        # _three_best of every grid centre at once: the 3 smallest by (distance, slot), strict <
        # in slot order, is a stable sort's first 3 (an infinite or NaN distance is never kept)
        order = np.argsort(d, axis=1, kind="stable")[:, :3]
        best = np.take_along_axis(d, order, axis=1)
        kept = np.isfinite(best)
        rows = np.where(kept, start[b] + found[order], -1)
        best = np.where(kept, best, np.inf).astype(F32)
        for j in range(rows.shape[1]):  # a missing second or third neighbour repeats the first
            idx[m, :, j] = np.where(kept[:, j], rows[:, j], rows[:, 0])
            dist2[m, :, j] = np.where(kept[:, j], best[:, j], best[:, 0])
        for j in range(rows.shape[1], 3):
            idx[m, :, j], dist2[m, :, j] = rows[:, 0], best[:, 0]
    return _sqrt(dist2), torch.from_numpy(idx), torch.tensor(avg_length_of_neighbor_idxs)


def vector_pool_with_voxel_query_op(
    support_xyz,
    xyz_batch_cnt,
    support_features,
    new_xyz,
    new_xyz_batch_cnt,
    num_grid_x,
    num_grid_y,
    num_grid_z,
    max_neighbour_distance,
    num_c_out_each_grid,
    use_xyz,
    num_mean_points_per_grid=100,
    nsample=-1,
    neighbor_type=0,
    pooling_type=0,
):
    """vector_pool_kernel_stack, then the wrapper's normalisation (average pooling, or the first
    point of each grid cell); the features' gradient comes from torch on the same formula."""
    support, ctr = _np(support_xyz).astype(F32), _np(new_xyz).astype(F32)
    start, cnt = _starts(_np(xyz_batch_cnt))
    _, new_cnt = _starts(_np(new_xyz_batch_cnt))
    g_total = num_grid_x * num_grid_y * num_grid_z
    r = F32(max_neighbour_distance)
    size = [r * F32(2) / F32(n) for n in (num_grid_x, num_grid_y, num_grid_z)]
    m_all, c_in = ctr.shape[0], support_features.shape[1]
    rows, bins = [], []
    counts = np.zeros((m_all, g_total), dtype=np.int32)
    local_sum = np.zeros((m_all, g_total, 3), dtype=F32)
    for m, b in enumerate(_cloud_of(new_cnt)):
        local_all = support[start[b] : start[b] + cnt[b]] - ctr[m]
        taken = 0
        for k in range(cnt[b]):
            lx, ly, lz = local_all[k]
            if neighbor_type == 1:
                if (lx * lx + ly * ly) + lz * lz > r * r:
                    continue
            elif abs(lx) > r or abs(ly) > r or abs(lz) > r:
                continue
            gx, gy, gz = (int(np.floor((v + r) / s)) for v, s in zip((lx, ly, lz), size))
            gi = min(max(gx * num_grid_y * num_grid_z + gy * num_grid_z + gz, 0), g_total - 1)
            if pooling_type == 1 and counts[m, gi] > 0:
                continue
            counts[m, gi] += 1
            local_sum[m, gi] += local_all[k]
            rows.append(start[b] + k)
            bins.append(m * g_total + gi)
            taken += 1
            if nsample > 0 and taken >= nsample:
                break
    folded = support_features.reshape(-1, c_in // num_c_out_each_grid, num_c_out_each_grid).sum(1)
    sums = folded.new_zeros((m_all * g_total, num_c_out_each_grid))
    if rows:
        sums = sums.index_add(0, torch.tensor(bins), folded[torch.tensor(rows)])
    normalizer = torch.from_numpy(counts).float().clamp(min=1e-6).reshape(-1, 1)
    new_features = (sums / normalizer).reshape(m_all, -1)
    new_local_xyz = torch.from_numpy(local_sum).reshape(-1, 3) / normalizer
    if not use_xyz:
        new_local_xyz = torch.zeros_like(new_local_xyz)
    return (
        new_features,
        new_local_xyz.reshape(m_all, -1),
        torch.tensor([num_mean_points_per_grid]).int(),
        torch.from_numpy(counts),
    )


stack_utils = SimpleNamespace(
    ball_query=stack_ball_query,
    grouping_operation=stack_grouping_operation,
    three_nn=stack_three_nn,
    three_interpolate=stack_three_interpolate,
    farthest_point_sample=farthest_point_sample,
    furthest_point_sample=farthest_point_sample,
    stack_farthest_point_sample=stack_farthest_point_sample,
    three_nn_for_vector_pool_by_two_step=three_nn_for_vector_pool_by_two_step,
    vector_pool_with_voxel_query_op=vector_pool_with_voxel_query_op,
)
stack_utils.QueryAndGroup = stack_query_and_group(stack_utils)
