"""BEV rasterization, height image, pillar scatter and voxelization: the oracles (loops over the
points by the rules of csrc/bev/*.h) and the baselines (the plain-PyTorch way a user writes each op,
timed by tools/bench.py)."""

import math

import numpy as np
import torch

from .._checks import distance_dtype

FEATURE_LIMIT = 2.0**30


def _sanitize(f: float) -> float:
    if math.isnan(f):
        return 0.0
    return min(max(f, -FEATURE_LIMIT), FEATURE_LIMIT)


def bev_grid_size_of(point_range, cell_size):
    """(H, W): cells along y and x, as the kernels size the image."""
    nx, ny = bev_grid(point_range, cell_size)
    return ny, nx


def bev_grid(point_range, cell_size):
    """(W, H): cells along x and y."""
    nx = math.floor((point_range[3] - point_range[0]) / cell_size[0] + 0.5)
    ny = math.floor((point_range[4] - point_range[1]) / cell_size[1] + 0.5)
    return nx, ny


def bev_cells(points: torch.Tensor, point_range, cell_size, length=None):
    """Per-cell lists of (point index, z, raw feature row) of one cloud (N, C), keyed by (iy, ix);
    cell indices computed in the compute type exactly like the kernels (float32 unless float64)."""
    pts = points.to(distance_dtype(points)).numpy()
    ctype = pts.dtype.type
    n = pts.shape[0] if length is None else min(max(int(length), 0), pts.shape[0])
    lo = [ctype(v) for v in point_range[:3]]
    hi = [ctype(v) for v in point_range[3:]]
    cell = [ctype(v) for v in cell_size]
    nx, ny = bev_grid(point_range, cell_size)
    cells = {}
    for i in range(n):
        x, y, z = (ctype(v) for v in pts[i, :3])
        if not all(lo[a] <= v < hi[a] for a, v in enumerate((x, y, z))):  # NaN fails too
            continue
        ix = int(np.floor(ctype(x - lo[0]) / cell[0]))
        iy = int(np.floor(ctype(y - lo[1]) / cell[1]))
        if ix >= nx or iy >= ny:
            continue
        cells.setdefault((iy, ix), []).append((i, z, pts[i]))
    return cells


def bev_rasterize(
    points: torch.Tensor,
    point_range,
    cell_size,
    channels,
    lengths=None,
    feature_column=3,
    density_base=64.0,
    height_slices=0,
    forward_up=False,
):
    """(B, N, C) -> (B, n_out, H, W) float32 (means in float64, rounded once), one Python loop."""
    ctype = torch.empty(0, dtype=distance_dtype(points)).numpy().dtype.type
    nx, ny = bev_grid(point_range, cell_size)
    z_lo = ctype(point_range[2])
    slice_height = ctype((point_range[5] - point_range[2]) / max(height_slices, 1))
    n_out = sum(height_slices if c == "height_slices" else 1 for c in channels)
    out = np.zeros((points.shape[0], n_out, ny, nx), dtype=np.float32)
    for b in range(points.shape[0]):
        length = None if lengths is None else lengths[b]
        for (iy, ix), members in bev_cells(points[b], point_range, cell_size, length).items():
            zs = [np.float32(z) for _, z, _ in members]
            feats = (
                [_sanitize(float(ctype(row[feature_column]))) for _, _, row in members]
                if any(c.endswith("_feature") for c in channels)
                else []
            )
            top = max(range(len(members)), key=lambda k: (zs[k], -members[k][0]))
            c = 0
            for name in channels:
                if name == "height_slices":
                    for _, z, _ in members:
                        s = min(int(np.floor(ctype(z - z_lo) / slice_height)), height_slices - 1)
                        out[b, c + s, iy, ix] = 1.0
                    c += height_slices
                    continue
                count = len(members)
                value = {
                    "max_z": lambda: max(zs),
                    "min_z": lambda: min(zs),
                    "mean_z": lambda: sum(float(z) for _, z, _ in members) / count,
                    "count": lambda: count,
                    "density": lambda: min(1.0, math.log(count + 1) / math.log(density_base)),
                    "occupancy": lambda: 1.0,
                    "max_feature": lambda: max(np.float32(f) for f in feats),
                    "mean_feature": lambda: sum(feats) / count,
                    "top_feature": lambda: feats[top],
                }[name]()
                out[b, c, iy, ix] = np.float32(value)
                c += 1
    image = torch.from_numpy(out)
    return image.transpose(-1, -2).flip(-1, -2).contiguous() if forward_up else image


def height_image(cloud: np.ndarray, cloud_range, voxel_size):
    """The height image of one cloud as a per-point loop: the highest point's grey value
    floor((z - z_min) * (255 / (z_max - z_min))) in float32 per cell, row = W - 1 - ix and
    column = H - 1 - iy (a top view with x forward pointing up)."""
    f32 = np.float32
    grid = [math.floor((cloud_range[3 + a] - cloud_range[a]) / voxel_size[a] + 0.5) for a in range(2)]
    out = np.zeros((grid[0], grid[1]), dtype=np.uint8)
    scale = f32(255.0 / (cloud_range[5] - cloud_range[2]))
    for p in cloud:
        x, y, z = (f32(v) for v in p[:3])
        if not (
            f32(cloud_range[0]) <= x < f32(cloud_range[3])
            and f32(cloud_range[1]) <= y < f32(cloud_range[4])
            and f32(cloud_range[2]) <= z < f32(cloud_range[5])
        ):
            continue
        ix = int(np.floor(f32(x - f32(cloud_range[0])) / f32(voxel_size[0])))
        iy = int(np.floor(f32(y - f32(cloud_range[1])) / f32(voxel_size[1])))
        if ix >= grid[0] or iy >= grid[1]:
            continue
        gray = min(int(np.floor(f32(z - f32(cloud_range[2])) * scale)), 255)
        row, col = grid[0] - 1 - ix, grid[1] - 1 - iy
        out[row, col] = max(out[row, col], gray)
    return out


def pillar_scatter(features: torch.Tensor, coords: torch.Tensor, num_voxels: torch.Tensor, height: int, width: int):
    """(B, P, F) pillars at (z, y, x) -> (B, F, height, width); the lowest pillar index wins a cell."""
    batch, pillars, channels = features.shape
    canvas = torch.zeros(batch, channels, height, width, dtype=features.dtype)
    for b in range(batch):
        taken = set()
        for p in range(min(max(int(num_voxels[b]), 0), pillars)):
            z, y, x = (int(v) for v in coords[b, p])
            if z != 0 or not (0 <= y < height and 0 <= x < width) or (y, x) in taken:
                continue
            taken.add((y, x))
            canvas[b, :, y, x] = features[b, p]
    return canvas


def voxel_grid_dims(voxel_size, point_range):
    """Grid size per axis (x, y, z): round((max - min) / size) in float32, half to even."""
    dims = []
    for d in range(3):
        extent = np.float32(point_range[d + 3]) - np.float32(point_range[d])
        dims.append(int(np.rint(extent / np.float32(voxel_size[d]))))
    return dims


def _voxel_cell(xyz, lo, size, dims):
    """(x, y, z) cell of a point with floor((x - min) / size) in lo's dtype, or None if outside."""
    cell = []
    with np.errstate(all="ignore"):
        for d in range(3):
            f = np.floor((xyz[d] - lo[d]) / size[d])
            if not (f >= 0 and f < dims[d]):  # NaN fails too
                return None
            cell.append(int(f))
    return tuple(cell)


def voxelize(points: torch.Tensor, voxel_size, point_range, max_points: int, max_voxels: int, lengths=None):
    """Hard voxelization with mmcv's deterministic semantics, one point at a time.

    Voxels take slots in order of their first point; a voxel keeps its first max_points points;
    voxels past max_voxels are dropped with their points. Cells are computed in float64 for
    float64 points and in float32 otherwise. Returns (voxels, coords (z, y, x), num_points,
    num_voxels, point_voxel) as in csrc/bev/voxelize.h.
    """
    batch, n, channels = points.shape
    compute = points.to(distance_dtype(points)).numpy()
    dtype = compute.dtype.type
    lo = np.array(point_range[:3], dtype=dtype)
    size = np.array(voxel_size, dtype=dtype)
    dims = voxel_grid_dims(voxel_size, point_range)
    voxels = torch.zeros(batch, max_voxels, max_points, channels, dtype=points.dtype)
    coords = torch.full((batch, max_voxels, 3), -1, dtype=torch.int32)
    num_points = torch.zeros(batch, max_voxels, dtype=torch.int32)
    num_voxels = torch.zeros(batch, dtype=torch.int64)
    point_voxel = torch.full((batch, n), -1, dtype=torch.int64)
    for b in range(batch):
        length = n if lengths is None else min(max(int(lengths[b]), 0), n)
        slot_of_cell = {}
        kept = 0
        for i in range(length):
            cell = _voxel_cell(compute[b, i, :3], lo, size, dims)
            if cell is None:
                continue
            if cell not in slot_of_cell:
                if kept < max_voxels:
                    slot_of_cell[cell] = kept
                    coords[b, kept] = torch.tensor([cell[2], cell[1], cell[0]], dtype=torch.int32)
                    kept += 1
                else:
                    slot_of_cell[cell] = -1
            slot = slot_of_cell[cell]
            if slot < 0:
                continue
            point_voxel[b, i] = slot
            stored = int(num_points[b, slot])
            if stored < max_points:
                voxels[b, slot, stored] = points[b, i]
                num_points[b, slot] = stored + 1
        num_voxels[b] = kept
    return voxels, coords, num_points, num_voxels, point_voxel


# ---- baselines: the plain-PyTorch way a user writes each op (timed by tools/bench.py) ----


def bev_rasterize_baseline(points, point_range, cell_size, channels, density_base=64.0):
    """The pure-PyTorch BEV image a user writes: a flat cell index per point, the range mask
    (boolean indexing, one host sync), then bincount / scatter_reduce per channel."""
    b, n, _ = points.shape
    height, width = bev_grid_size_of(point_range, cell_size)
    x, y, z, f = points.unbind(-1)
    ix = ((x - point_range[0]) / cell_size[0]).floor().long()
    iy = ((y - point_range[1]) / cell_size[1]).floor().long()
    keep = (
        (x >= point_range[0])
        & (x < point_range[3])
        & (y >= point_range[1])
        & (y < point_range[4])
        & (z >= point_range[2])
        & (z < point_range[5])
        & (ix < width)
        & (iy < height)
    )
    batch = torch.arange(b, device=points.device).unsqueeze(1)
    flat = ((batch * height + iy) * width + ix)[keep]
    z, f = z[keep], f[keep]
    cells = b * height * width
    count = torch.bincount(flat, minlength=cells).float()

    def reduce(values, how):
        return torch.zeros(cells, device=points.device).scatter_reduce_(0, flat, values, how, include_self=False)

    out = []
    for name in channels:
        if name == "top_feature":  # the highest point's feature, ties to the lowest index
            max_z = reduce(z, "amax")
            order = torch.arange(flat.numel(), device=points.device)
            first = torch.full((cells,), flat.numel(), device=points.device)
            first.scatter_reduce_(0, flat, torch.where(z == max_z[flat], order, flat.numel()), "amin")
            out.append(torch.where(count > 0, f[first.clamp(max=max(flat.numel() - 1, 0))], 0.0))
        elif name == "density":
            out.append((torch.log(count + 1) / math.log(density_base)).clamp(max=1.0))
        elif name == "count":
            out.append(count)
        elif name == "occupancy":
            out.append((count > 0).float())
        else:
            kind, column = name.split("_")
            values = z if column == "z" else f
            out.append(reduce(values, {"max": "amax", "min": "amin", "mean": "mean"}[kind]))
    return torch.stack(out).view(len(channels), b, height, width).transpose(0, 1)


def pillar_scatter_per_cloud_baseline(features, coords, num_voxels, height, width):
    """OpenPCDet's PointPillarScatter as it runs there: a Python loop over clouds, each reading
    its pillar count back to the host, filling a zero canvas with index_put, then a stack."""
    canvases = []
    for b in range(features.shape[0]):
        count = int(num_voxels[b])
        c = coords[b, :count].long()
        keep = (c[:, 0] == 0) & (c[:, 1] >= 0) & (c[:, 1] < height) & (c[:, 2] >= 0) & (c[:, 2] < width)
        canvas = features.new_zeros(features.shape[2], height * width)
        canvas[:, (c[:, 1] * width + c[:, 2])[keep]] = features[b, :count][keep].t()
        canvases.append(canvas)
    return torch.stack(canvases).view(features.shape[0], features.shape[2], height, width)


def pillar_scatter_baseline(features, coords, num_voxels, height, width):
    """The same without the loop: one index_put over every cloud; invalid pillars go to a spare
    cell that is cut off at the end."""
    b, p, f = features.shape
    c = coords.long()
    valid = (
        (torch.arange(p, device=features.device) < num_voxels.unsqueeze(1))
        & (c[..., 0] == 0)
        & (c[..., 1] >= 0)
        & (c[..., 1] < height)
        & (c[..., 2] >= 0)
        & (c[..., 2] < width)
    )
    cell = torch.where(valid, c[..., 1] * width + c[..., 2], height * width)
    canvas = features.new_zeros(b, height * width + 1, f)
    canvas[torch.arange(b, device=features.device).unsqueeze(1), cell] = features
    return canvas[:, :-1].view(b, height, width, f).permute(0, 3, 1, 2)


def voxelize_baseline(points, voxel_size, point_range, max_points, max_voxels):
    """Deterministic hard voxelization the way a user writes it in PyTorch: per cloud, torch.unique
    of the cell keys, a stable argsort to group points by voxel in point order, and an argsort of
    each voxel's first point for the order of first appearance. Same outputs as pointops.voxelize
    (cells in float32: float32 points only)."""
    batch, n, channels = points.shape
    device = points.device
    lo = torch.tensor(point_range[:3], dtype=torch.float32, device=device)
    size = torch.tensor(voxel_size, dtype=torch.float32, device=device)
    dims = torch.round((torch.tensor(point_range[3:], dtype=torch.float32, device=device) - lo) / size).long()
    voxels = points.new_zeros(batch, max_voxels, max_points, channels)
    coords = torch.full((batch, max_voxels, 3), -1, dtype=torch.int32, device=device)
    num_points = torch.zeros(batch, max_voxels, dtype=torch.int32, device=device)
    num_voxels = torch.zeros(batch, dtype=torch.int64, device=device)
    point_voxel = torch.full((batch, n), -1, dtype=torch.int64, device=device)
    for b in range(batch):
        cell = torch.floor((points[b, :, :3] - lo) / size)
        idx = ((cell >= 0) & (cell < dims)).all(1).nonzero().squeeze(1)
        cell = cell[idx].long()
        key = (cell[:, 2] * dims[1] + cell[:, 1]) * dims[0] + cell[:, 0]
        unique, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
        order = torch.argsort(inverse, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        first = idx[order[starts]]
        by_appearance = torch.argsort(first)
        rank = torch.empty_like(by_appearance)
        rank[by_appearance] = torch.arange(len(first), device=device)
        slot = rank[inverse]
        place = torch.empty_like(order)
        place[order] = torch.arange(len(order), device=device) - starts[inverse[order]]
        kept = slot < max_voxels
        point_voxel[b, idx[kept]] = slot[kept]
        stored = kept & (place < max_points)
        voxels[b, slot[stored], place[stored]] = points[b, idx[stored]]
        count = min(len(unique), max_voxels)
        voxel = by_appearance[:count]
        cells = unique[voxel]
        coords[b, :count] = torch.stack(
            [cells // (dims[0] * dims[1]), (cells // dims[0]) % dims[1], cells % dims[0]], 1
        ).int()
        num_points[b, :count] = counts[voxel].clamp(max=max_points).int()
        num_voxels[b] = count
    return voxels, coords, num_points, num_voxels, point_voxel
