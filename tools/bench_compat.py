"""Benchmark rows of the peers' drop-ins, run by tools/bench.py or alone: PV-RCNN++'s vector pool
(pointops.nn.stack) against the plain-PyTorch brute force of OpenPCDet's semantics.

Workload: two generated street scans (pointops.scenes.lidar, 64 beams, ~120k returns each); as
x_conv4's voxel centres (Waymo's 0.1 m voxels 8 times down), the centres of their occupied 0.8 m
voxels and of those voxels' 26 neighbours (the dilation of the padded 3 x 3 x 3 sparse
convolutions), ~27k a scan, so that most cubes of half-width 9.6 m hold over 1,000 of them; and
4,096 keypoints a scan by farthest point sampling, as PV-RCNN++'s Waymo configuration takes them.

Rows (each against its baseline in the same run):
  vector_pool three_nn d=4.8 / d=9.6: three_nn_for_vector_pool_by_two_step with x_conv4's two
      groups (max_neighbour_distance 2.4 and 4.8, multiplier 2, 3 x 3 x 3 grid centres): the first
      1,000 points of each keypoint's cube (cube_query_packed), then each grid centre's 3 nearest of
      them (one knn_packed). `cube_query_ms` times the first step alone. Baseline: the brute force
      in plain PyTorch, every keypoint against every point of its cloud (the first 1,000 inside the
      cube by a cumulative count), then every grid centre against those slots, its 3 nearest by
      three argmins; `indices_equal` checks the two agree.
  vector_pool layer: OpenPCDet's VectorPoolAggregationModuleMSG with the Waymo x_conv4 settings
      (64 input channels), forward and backward; baseline: the same layer with the brute-force
      search in place of pointops'.
On the CPU each row also gives `cpu_ms` and `baseline_cpu_ms`, the CPU time of all threads (the
fairer figure on a shared machine).

--openpcdet DIR (CUDA only) also times OpenPCDet's own kernels on the same inputs: DIR holds its
pointnet2_stack sources (bash tools/fetch_openpcdet_ops.sh OPENPCDET_CHECKOUT DIR copies them, with
the commit), built here with torch.utils.cpp_extension.load into DIR/build (a minute or two) and
called through their pybind functions as their pointnet2_utils.py calls them. Columns:
`openpcdet_ms` and `openpcdet_ratio` = openpcdet_ms / ms (above 1: pointops is faster);
  three_nn rows: query_stacked_local_neighbor_idxs + query_three_nn_by_stacked_local_idxs
      (buffer retry loop included); `openpcdet_indices_equal`, `openpcdet_dist_max_diff`;
  layer row: the same layer with OpenPCDet's two-step search and three_interpolate (forward and
      backward kernels) in place of pointops'; `openpcdet_out_max_diff`, `openpcdet_grad_max_diff`
      (their gradient adds with atomics, in a different order each call);
and one more row, vector_pool voxel_query avg / random fwd+bwd: vector_pool_with_voxel_query_op
(x_conv4's first group: 3 x 3 x 3 cells, half-width 2.4 m, 32 channels) against OpenPCDet's
vector_pool_wrapper and vector_pool_grad_wrapper, baseline = OpenPCDet (so `ratio` = their ms /
ours); `openpcdet_cnt_equal` (points per cell), `openpcdet_out_max_diff`,
  `openpcdet_local_xyz_max_diff`, `openpcdet_grad_max_diff`.

    python tools/bench_compat.py [--quick] [--device cpu] [--json f] [--openpcdet DIR]
    python tools/bench.py --ops vector_pool   # the same rows
"""

import contextlib
import json
import os
import statistics
import sys
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)

OPS = ["vector_pool"]


def parser():
    p = cli.bench_parser(__doc__, OPS)
    p.add_argument(
        "--openpcdet",
        metavar="DIR",
        help="also time OpenPCDet's pointnet2_stack kernels, built from the sources in DIR "
        "(tools/fetch_openpcdet_ops.sh copies them; CUDA only)",
    )
    return p


if __name__ == "__main__":  # run alone: tools/bench.py's command line and --openpcdet, these rows by default
    cli.run(parser().parse_args())
    sys.exit(0)

import torch  # noqa: E402

from bench import time_ms  # noqa: E402

import pointops  # noqa: E402
from pointops.compat import openpcdet_stack  # noqa: E402
from pointops.scenes import lidar as lidar_scenes  # noqa: E402

X_CONV4 = dict(
    NUM_GROUPS=2,
    LOCAL_AGGREGATION_TYPE="local_interpolation",
    NUM_REDUCED_CHANNELS=32,
    NUM_CHANNELS_OF_LOCAL_AGGREGATION=32,
    MSG_POST_MLPS=[128],
    GROUP_CFG_0=dict(NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=2.4, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[64, 64]),
    GROUP_CFG_1=dict(NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=4.8, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[64, 64]),
)


class Config(dict):
    """OpenPCDet's EasyDict: attribute access, nested dicts too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for key, value in self.items():
            if isinstance(value, dict):
                self[key] = Config(value)

    def __getattr__(self, name):
        return self[name]


def scene(device, scans=2, keypoints=4096):
    """(voxel centres (N, 3), their counts (B,) int32, keypoints (M, 3), their counts) of `scans`
    street scans, stacked as OpenPCDet stacks them."""
    voxels, picks = [], []
    for seed in range(scans):
        points = lidar_scenes.lidar_scan(lidar_scenes.make_scene(seed), n_beams=64, seed=seed).points
        cells = torch.unique(torch.floor(points / 0.8), dim=0)
        around = torch.stack(torch.meshgrid(*[torch.arange(-1.0, 2.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
        voxels.append(torch.unique((cells[:, None] + around).reshape(-1, 3), dim=0) * 0.8 + 0.4)
        idx = pointops.farthest_point_sampling(points[None], keypoints).indices[0]
        picks.append(points[idx])
    cnt = torch.tensor([v.shape[0] for v in voxels], dtype=torch.int32)
    new_cnt = torch.tensor([p.shape[0] for p in picks], dtype=torch.int32)
    return torch.cat(voxels).to(device), cnt.to(device), torch.cat(picks).to(device), new_cnt.to(device)


def brute_three_nn_for_vector_pool(
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
    max_neighbors=1000,
):
    """OpenPCDet's three_nn_for_vector_pool_by_two_step in plain PyTorch, brute force (same
    arguments and outputs): each centre against every point of its cloud, the first `limit` inside
    the cube (or closed ball) by a cumulative count, scattered into slots; then each grid centre
    against its centre's slots, the 3 nearest by three argmins (the first minimum: ties to the
    lowest slot). Reads the counts back to the host to loop over clouds."""
    limit = max_neighbors if nsample <= 0 else min(nsample, max_neighbors)
    m, g = new_xyz.shape[0], num_total_grids
    device = new_xyz.device
    d = torch.tensor(max_neighbour_distance * neighbor_distance_multiplier, dtype=torch.float32, device=device)
    grid = new_xyz_grid_centers.reshape(m, g, 3)
    out_idx = torch.full((m, g, 3), -1, dtype=torch.int64, device=device)
    out_d2 = torch.full((m, g, 3), float("inf"), device=device)
    starts, new_starts = [0], [0]
    for a, b in zip(xyz_batch_cnt.tolist(), new_xyz_batch_cnt.tolist()):
        starts.append(starts[-1] + a)
        new_starts.append(new_starts[-1] + b)
    chunk = 1024 if device.type == "cuda" else 64
    for b in range(len(starts) - 1):
        pts = support_xyz[starts[b] : starts[b + 1]]
        n = pts.shape[0]
        padded = torch.cat([pts, torch.full((1, 3), float("inf"), device=device)])  # slot n: no point
        for c0 in range(new_starts[b], new_starts[b + 1], chunk):
            c1 = min(c0 + chunk, new_starts[b + 1])
            local = pts[None] - new_xyz[c0:c1, None]  # (c, n, 3)
            if neighbor_type == 1:
                inside = (local[..., 0] * local[..., 0] + local[..., 1] * local[..., 1]) + local[..., 2] * local[
                    ..., 2
                ] <= d * d
            else:
                inside = ((local <= d) & (local >= -d)).all(-1)
            rank = inside.long().cumsum(1) - 1
            keep = inside & (rank < limit)
            slots = torch.full((c1 - c0, limit + 1), n, dtype=torch.int64, device=device)
            slots.scatter_(
                1,
                torch.where(keep, rank, torch.full_like(rank, limit)),
                torch.arange(n, device=device).expand(c1 - c0, n),
            )
            slots = slots[:, :limit]
            p = padded[slots]  # (c, S, 3)
            q = grid[c0:c1]
            dx = q[:, :, None, 0] - p[:, None, :, 0]
            dy = q[:, :, None, 1] - p[:, None, :, 1]
            dz = q[:, :, None, 2] - p[:, None, :, 2]
            d2 = (dx * dx + dy * dy) + dz * dz  # (c, G, S)
            for j in range(3):
                best = d2.argmin(-1, keepdim=True)
                value = d2.gather(-1, best)
                row = slots[:, None, :].expand_as(d2).gather(-1, best)
                found = value < float("inf")
                out_idx[c0:c1, :, j : j + 1] = torch.where(found, row + starts[b], torch.full_like(row, -1))
                out_d2[c0:c1, :, j : j + 1] = value
                d2 = d2.scatter(-1, best, float("inf"))
    missing = out_idx < 0
    out_d2 = torch.where(missing, out_d2[..., :1].expand_as(out_d2), out_d2)
    out_idx = torch.where(missing, out_idx[..., :1].expand_as(out_idx), out_idx)
    return torch.sqrt(out_d2), out_idx.int(), torch.tensor(avg_length_of_neighbor_idxs)


# ---- OpenPCDet's own kernels (--openpcdet) -----------------------------------------------------


def build_openpcdet(folder):
    """OpenPCDet's pointnet2_stack extension, built with torch.utils.cpp_extension.load from the
    sources tools/fetch_openpcdet_ops.sh copied into folder (their setup.py's CUDAExtension: every
    src/*.cpp and *.cu, no extra flags; -O3 for the host code as a release build), into
    folder/build (ninja rebuilds only what changed). Without a GPU (a compile check) set
    TORCH_CUDA_ARCH_LIST, e.g. 9.0. Returns (module, OpenPCDet's commit)."""
    import glob

    # as setup.py: cpp_extension guesses CUDA_HOME from `which nvcc`, /usr/local where nvcc is a
    # symlink in /usr/local/bin, which has no CUDA headers
    if "CUDA_HOME" not in os.environ and os.path.isdir("/usr/local/cuda/include"):
        os.environ["CUDA_HOME"] = "/usr/local/cuda"
    from torch.utils import cpp_extension

    src = os.path.join(os.path.abspath(folder), "src")
    sources = sorted(glob.glob(os.path.join(src, "*.cpp")) + glob.glob(os.path.join(src, "*.cu")))
    if not sources:
        raise SystemExit(f"--openpcdet {folder}: no src/*.cpp or *.cu (run tools/fetch_openpcdet_ops.sh first)")
    # as setup.py: a toolkit without cusparse.h (which torch's CUDA headers include) takes the
    # nvidia wheels' headers, as -isystem: searched after the toolkit's own
    system = []
    if not os.path.isfile(os.path.join(cpp_extension.CUDA_HOME or "", "include", "cusparse.h")):
        for entry in sys.path:
            for header in glob.glob(os.path.join(entry, "nvidia", "*", "include", "cusparse.h")) + glob.glob(
                os.path.join(entry, "nvidia", "*", "*", "include", "cusparse.h")
            ):
                system += ["-isystem", os.path.dirname(header)]
    build = os.path.join(os.path.abspath(folder), "build")
    os.makedirs(build, exist_ok=True)
    start = time.perf_counter()
    module = cpp_extension.load(
        "openpcdet_pointnet2_stack",
        sources,
        extra_include_paths=[src],
        extra_cflags=["-O3"] + system,
        extra_cuda_cflags=system,
        build_directory=build,
        verbose=False,
    )
    print(f"OpenPCDet pointnet2_stack built and loaded in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    commit_file = os.path.join(folder, "COMMIT")
    commit = open(commit_file).read().strip() if os.path.exists(commit_file) else "unknown"
    return module, commit


class OpenPCDetStack:
    """Our calls of OpenPCDet's pybind functions, in the order and with the buffers their
    pointnet2_utils.py uses (their kernels run on the default stream and take int32 counts and
    indices, contiguous float32 points and features). The buffer-size hints persist across
    calls as their modules keep them (the largest seen), so a timed call retries only where
    OpenPCDet's would."""

    def __init__(self, ext):
        self.ext = ext
        self.mean_points_per_grid = 20  # VectorPoolAggregationModule's first hint

    def three_nn_for_vector_pool_by_two_step(
        self,
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
        """Step 1 stacks each centre's first (<= 1,000) cube points into one buffer of
        avg_length * M slots (again, larger, while the total overflows it; the total is read back
        to the host); step 2 takes each grid centre's 3 nearest of its centre's points."""
        m = new_xyz.shape[0]
        support_xyz, new_xyz = support_xyz.contiguous(), new_xyz.contiguous()
        grid = new_xyz_grid_centers.contiguous()
        dist2 = torch.zeros_like(grid)
        idx = torch.full(grid.shape, -1, dtype=torch.int32, device=grid.device)
        while True:
            capacity = avg_length_of_neighbor_idxs * m
            stacked = torch.zeros(capacity, dtype=torch.int32, device=grid.device)
            start_len = torch.zeros((m, 2), dtype=torch.int32, device=grid.device)
            total = torch.zeros(1, dtype=torch.int32, device=grid.device)
            self.ext.query_stacked_local_neighbor_idxs_wrapper_stack(
                support_xyz,
                xyz_batch_cnt.contiguous(),
                new_xyz,
                new_xyz_batch_cnt.contiguous(),
                stacked,
                start_len,
                total,
                int(avg_length_of_neighbor_idxs),
                float(max_neighbour_distance * neighbor_distance_multiplier),
                int(nsample),
                int(neighbor_type),
            )
            found = int(total.item())
            avg_length_of_neighbor_idxs = -(-found // m) if m else 0
            if found <= capacity:
                break
        self.ext.query_three_nn_by_stacked_local_idxs_wrapper_stack(
            support_xyz, new_xyz, grid, idx, dist2, stacked[:found], start_len, m, int(num_total_grids)
        )
        return torch.sqrt(dist2), idx, torch.tensor(avg_length_of_neighbor_idxs)

    def three_interpolate(self, features, idx, weight):
        return _OpenPCDetInterpolate.apply(self.ext, features, idx, weight)

    def vector_pool_with_voxel_query_op(self, *args):
        """Our vector_pool_with_voxel_query_op's 15 arguments (OpenPCDet's order, all of them);
        the hint num_mean_points_per_grid is this object's, not the argument."""
        return _OpenPCDetVectorPool.apply(self, *args)


class _OpenPCDetInterpolate(torch.autograd.Function):
    """three_interpolate_wrapper forward, three_interpolate_grad_wrapper backward (atomics)."""

    @staticmethod
    def forward(ctx, ext, features, idx, weight):
        idx, weight = idx.contiguous(), weight.contiguous()
        out = features.new_zeros((idx.shape[0], features.shape[1]))
        ext.three_interpolate_wrapper(features.contiguous(), idx, weight, out)
        ctx.ext, ctx.rows = ext, features.shape[0]
        ctx.save_for_backward(idx, weight)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        idx, weight = ctx.saved_tensors
        grad = grad_out.new_zeros((ctx.rows, grad_out.shape[1]))
        ctx.ext.three_interpolate_grad_wrapper(grad_out.contiguous(), idx, weight, grad)
        return None, grad, None, None


class _OpenPCDetVectorPool(torch.autograd.Function):
    """vector_pool_wrapper (one thread a centre, sums in cloud order; again with a larger
    buffer while the grouped pairs overflow it; the total comes back to the host), then the
    per-cell means; vector_pool_grad_wrapper backward (atomics)."""

    @staticmethod
    def forward(
        ctx,
        stack,
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
        num_mean_points_per_grid,
        nsample,
        neighbor_type,
        pooling_type,
    ):
        grids = num_grid_x * num_grid_y * num_grid_z
        m = new_xyz.shape[0]
        n, c_in = support_features.shape
        mean_points = stack.mean_points_per_grid
        while True:
            new_features = support_features.new_zeros((m, num_c_out_each_grid * grids))
            new_local_xyz = support_features.new_zeros((m, 3 * grids))
            point_cnt_of_grid = torch.zeros((m, grids), dtype=torch.int32, device=new_xyz.device)
            capacity = mean_points * m
            grouped = torch.zeros((capacity, 3), dtype=torch.int32, device=new_xyz.device)
            total = stack.ext.vector_pool_wrapper(
                support_xyz.contiguous(),
                xyz_batch_cnt.contiguous(),
                support_features.contiguous(),
                new_xyz.contiguous(),
                new_xyz_batch_cnt.contiguous(),
                new_features,
                new_local_xyz,
                point_cnt_of_grid,
                grouped,
                int(num_grid_x),
                int(num_grid_y),
                int(num_grid_z),
                float(max_neighbour_distance),
                int(bool(use_xyz)),
                int(capacity),
                int(nsample),
                int(neighbor_type),
                int(pooling_type),
            )
            mean_points = -(-total // m) if m else 0
            if total <= capacity:
                break
        stack.mean_points_per_grid = max(stack.mean_points_per_grid, mean_points)
        normalizer = point_cnt_of_grid[:, :, None].float().clamp_min(1e-6)
        new_features = (new_features.view(m, grids, -1) / normalizer).view(m, -1)
        if use_xyz:
            new_local_xyz = (new_local_xyz.view(m, grids, 3) / normalizer).view(m, -1)
        ctx.stack, ctx.shape = stack, (n, c_in)
        ctx.save_for_backward(point_cnt_of_grid, grouped[:total])
        ctx.mark_non_differentiable(new_local_xyz, point_cnt_of_grid)
        return new_features, new_local_xyz, torch.tensor([mean_points]).int(), point_cnt_of_grid

    @staticmethod
    def backward(ctx, grad_features, *unused):
        point_cnt_of_grid, grouped = ctx.saved_tensors
        grad = grad_features.new_zeros(ctx.shape)
        if grouped.shape[0] > 0:
            ctx.stack.ext.vector_pool_grad_wrapper(grad_features.contiguous(), point_cnt_of_grid, grouped, grad)
        return (None,) * 3 + (grad,) + (None,) * 12


def max_diff(a, b):
    """Largest absolute difference of two float tensors (0 for empty ones), a Python float."""
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def cpu_time_ms(fn, reps=3):
    """Median CPU time of all threads of this process, in ms."""
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
    results.append(row)
    print(json.dumps(row), flush=True)


def timed(row, device, ours, baseline, reps):
    if device == "cuda":
        row["ms"] = time_ms(ours, device, min_reps=reps)
        row["baseline_ms"] = time_ms(baseline, device, min_reps=reps, budget_ms=500.0)
    else:
        row["ms"] = time_ms(ours, device, min_reps=reps, budget_ms=0.0)
        row["baseline_ms"] = time_ms(baseline, device, min_reps=reps, budget_ms=0.0)
        row["cpu_ms"] = cpu_time_ms(ours, reps)
        row["baseline_cpu_ms"] = cpu_time_ms(baseline, reps)


def bench_vector_pool(device, quick, results, openpcdet=None):
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    theirs_stack = None
    if openpcdet:
        ext, commit = build_openpcdet(openpcdet)
        theirs_stack = OpenPCDetStack(ext)
    xyz, cnt, keypoints, new_cnt = scene(device, keypoints=1024 if quick else 4096)
    reps = 5 if device == "cuda" else 2
    offsets = torch.nn.functional.pad(cnt.long().cumsum(0), (1, 0))
    new_offsets = torch.nn.functional.pad(new_cnt.long().cumsum(0), (1, 0))
    for group in ("GROUP_CFG_0", "GROUP_CFG_1"):
        distance = X_CONV4[group]["MAX_NEIGHBOR_DISTANCE"]
        grid = openpcdet_stack.VectorPoolAggregationModule.get_dense_voxels_by_center(keypoints, distance, [3, 3, 3])
        args = (xyz, cnt, keypoints, grid, new_cnt, distance, -1, 0, 1000, 27, 2.0)
        counts = pointops.cube_query_packed(keypoints, new_offsets, xyz, offsets, 2 * distance, 0).counts
        row = {
            "op": "vector_pool",
            "case": f"three_nn d={2 * distance:g}",
            "N": int(xyz.shape[0]),
            "M": int(keypoints.shape[0]),
            "k": 1000,
            "device": name,
            "cube_points_mean": round(counts.float().mean().item(), 1),
            "centres_over_1000": int((counts > 1000).sum()),
            "baseline": "plain-PyTorch brute force (cube by cumulative count, 3 argmins over the slots)",
        }
        ours = openpcdet_stack.three_nn_for_vector_pool_by_two_step(*args)
        theirs = brute_three_nn_for_vector_pool(*args)
        row["indices_equal"] = bool(torch.equal(ours[1], theirs[1]))
        row["cube_query_ms"] = time_ms(
            lambda: pointops.cube_query_packed(keypoints, new_offsets, xyz, offsets, 2 * distance, 1000),
            device,
            min_reps=reps,
            budget_ms=0.0 if device == "cpu" else 1500.0,
        )
        timed(
            row,
            device,
            lambda: openpcdet_stack.three_nn_for_vector_pool_by_two_step(*args),
            lambda: brute_three_nn_for_vector_pool(*args),
            reps,
        )
        if theirs_stack is not None:
            # the same first 1,000 cube points in index order and a strict < in that order: the
            # same indices; distances from the same float squared sums
            found = theirs_stack.three_nn_for_vector_pool_by_two_step(*args)
            row["openpcdet_commit"] = commit[:12]
            row["openpcdet_indices_equal"] = bool(torch.equal(ours[1], found[1]))
            row["openpcdet_dist_max_diff"] = max_diff(ours[0], found[0])
            row["openpcdet_ms"] = time_ms(
                lambda: theirs_stack.three_nn_for_vector_pool_by_two_step(*args), device, min_reps=reps
            )
            row["openpcdet_ratio"] = round(row["openpcdet_ms"] / row["ms"], 2)
        emit(results, row)

    torch.manual_seed(0)
    layer, _ = openpcdet_stack.build_local_aggregation_module(
        64, Config(NAME="VectorPoolAggregationModuleMSG", **X_CONV4)
    )
    layer = layer.to(device).train()
    features = torch.randn(xyz.shape[0], 64, device=device, requires_grad=True)

    def step():
        _, out = layer(xyz=xyz, xyz_batch_cnt=cnt, new_xyz=keypoints, new_xyz_batch_cnt=new_cnt, features=features)
        out.square().mean().backward()

    def brute_step():
        with mock.patch.object(openpcdet_stack, "three_nn_for_vector_pool_by_two_step", brute_three_nn_for_vector_pool):
            step()

    row = {
        "op": "vector_pool",
        "case": "layer fwd+bwd",
        "N": int(xyz.shape[0]),
        "M": int(keypoints.shape[0]),
        "device": name,
        "baseline": "the same layer on the brute-force search",
    }
    timed(row, device, step, brute_step, reps)
    if theirs_stack is not None:
        theirs_kernels = {
            "three_nn_for_vector_pool_by_two_step": theirs_stack.three_nn_for_vector_pool_by_two_step,
            "three_interpolate": theirs_stack.three_interpolate,
        }

        def openpcdet_step():
            with mock.patch.multiple(openpcdet_stack, **theirs_kernels):
                step()

        # the output and feature gradient of one call on each (BatchNorm in training mode
        # normalises by the batch's statistics: the same output on every call)
        outputs = []
        for kernels in ({}, theirs_kernels):
            with mock.patch.multiple(openpcdet_stack, **kernels) if kernels else contextlib.nullcontext():
                features.grad = None
                _, out = layer(
                    xyz=xyz, xyz_batch_cnt=cnt, new_xyz=keypoints, new_xyz_batch_cnt=new_cnt, features=features
                )
                out.square().mean().backward()
            outputs.append((out.detach(), features.grad.clone()))
        row["openpcdet_commit"] = commit[:12]
        row["openpcdet_out_max_diff"] = max_diff(outputs[0][0], outputs[1][0])
        row["openpcdet_grad_max_diff"] = max_diff(outputs[0][1], outputs[1][1])
        row["openpcdet_ms"] = time_ms(openpcdet_step, device, min_reps=reps)
        row["openpcdet_ratio"] = round(row["openpcdet_ms"] / row["ms"], 2)
    emit(results, row)
    if theirs_stack is not None:
        bench_voxel_query(device, name, xyz, cnt, keypoints, new_cnt, theirs_stack, commit, reps, results)


def bench_voxel_query(device, name, xyz, cnt, keypoints, new_cnt, theirs_stack, commit, reps, results):
    """vector_pool_with_voxel_query_op, forward and backward, against OpenPCDet's kernels (the
    baseline of these rows) with x_conv4's first group as a voxel pool: 3 x 3 x 3 cells of a cube
    of half-width 2.4 m, 32 channels (the layer's reduced features)."""
    torch.manual_seed(0)
    features = torch.randn(xyz.shape[0], 32, device=device, requires_grad=True)
    for pooling_type, label in ((0, "avg"), (1, "random")):
        args = (xyz, cnt, features, keypoints, new_cnt, 3, 3, 3, 2.4, 32, True, 20, -1, 0, pooling_type)
        outputs = []
        for op in (openpcdet_stack.vector_pool_with_voxel_query_op, theirs_stack.vector_pool_with_voxel_query_op):
            features.grad = None
            out = op(*args)
            out[0].square().mean().backward()
            outputs.append((out[0].detach(), out[1], out[3], features.grad.clone()))
        (f0, l0, c0, g0), (f1, l1, c1, g1) = outputs

        def fwd_bwd(op):
            return lambda: op(*args)[0].square().mean().backward()

        row = {
            "op": "vector_pool",
            "case": f"voxel_query {label} fwd+bwd",
            "N": int(xyz.shape[0]),
            "M": int(keypoints.shape[0]),
            "device": name,
            "baseline": "OpenPCDet's vector_pool_wrapper + vector_pool_grad_wrapper",
            "openpcdet_commit": commit[:12],
            "openpcdet_cnt_equal": bool(torch.equal(c0, c1)),
            "openpcdet_out_max_diff": max_diff(f0, f1),
            "openpcdet_local_xyz_max_diff": max_diff(l0, l1),
            "openpcdet_grad_max_diff": max_diff(g0, g1),
            "ms": time_ms(fwd_bwd(openpcdet_stack.vector_pool_with_voxel_query_op), device, min_reps=reps),
            "baseline_ms": time_ms(fwd_bwd(theirs_stack.vector_pool_with_voxel_query_op), device, min_reps=reps),
        }
        row["openpcdet_ms"] = row["baseline_ms"]
        row["openpcdet_ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        emit(results, row)


OPENPCDET_COLUMNS = [
    ("case", "case", ""),
    ("ms", "pointops ms", ".3f"),
    ("openpcdet_ms", "OpenPCDet ms", ".3f"),
    ("openpcdet_ratio", "OpenPCDet / pointops", ".2f"),
    ("openpcdet_indices_equal", "indices equal", ""),
    ("openpcdet_cnt_equal", "counts equal", ""),
    ("openpcdet_dist_max_diff", "dist diff", ".3g"),
    ("openpcdet_out_max_diff", "out diff", ".3g"),
    ("openpcdet_local_xyz_max_diff", "local xyz diff", ".3g"),
    ("openpcdet_grad_max_diff", "grad diff", ".3g"),
]


def run(device, quick, ops, results, openpcdet=None):
    if openpcdet and device != "cuda":
        raise SystemExit("--openpcdet times OpenPCDet's CUDA kernels: it needs --device cuda")
    if "vector_pool" in ops:
        bench_vector_pool(device, quick, results, openpcdet)
        if openpcdet:
            rows = [r for r in results if "openpcdet_ms" in r]
            print(
                cli.table(
                    rows, OPENPCDET_COLUMNS, title=f"OpenPCDet {rows[0]['openpcdet_commit']} on {rows[0]['device']}"
                )
            )
