"""Writes what the C++ examples run: two models that call pointops ops, as TorchScript modules and
AOTInductor packages, their inputs and the outputs Python computed, and a LiDAR scan as PLY and
KITTI .bin files for cloud_tool (docs/deploy.md).

    python examples/cpp/export_models.py --out build/models            # CPU, and CUDA when a GPU is visible
    python examples/cpp/export_models.py --out build/models --check-cloud build/models/cloud_tool.pt

Models (small, realistic front ends):
  pointnet2  one PointNet++ set abstraction (farthest point sampling, ball query, grouping, a shared
             MLP, max-pooling) and the feature propagation back to every point (three_nn,
             inverse-distance interpolation, a shared MLP);
  pillars    a PointPillars front end (hard voxelization into pillars, the pillar feature net,
             pillar_scatter to a BEV canvas, a BEV convolution).
For each device D the folder gets <model>.D.ts (TorchScript), <model>.D.pt2 (AOTInductor package),
<model>.inputs.pt and <model>.expected.D.pt: the outputs of the TorchScript module and of the
package run in Python, and Python's median latency of each, which run_scripted prints beside its own.
--check-cloud compares what `cloud_tool --save` wrote with the same steps run through the Python API.
"""

import argparse
import os
import statistics
import sys
import time
from typing import List, Tuple

import torch
from torch import Tensor

import pointops
from pointops import ball_query, farthest_point_sampling, group_points, interpolate, inverse_distance_weights
from pointops import pillar_scatter, three_nn, voxelize

# The cloud_tool steps (its defaults; --check-cloud repeats them in Python).
CLOUD_VOXEL = 0.2
CLOUD_NEIGHBORS = 16
CLOUD_SAMPLES = 1024
CLOUD_PLANES = 6


class PointNet2Stage(torch.nn.Module):
    """One PointNet++ set abstraction level and the feature propagation back to every point."""

    def __init__(self, in_channels: int = 1, centres: int = 256, radius: float = 4.0, group: int = 32):
        super().__init__()
        self.centres = centres
        self.radius = radius
        self.group = group
        self.sa_mlp = torch.nn.Sequential(
            torch.nn.Linear(3 + in_channels, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64), torch.nn.ReLU()
        )
        self.fp_mlp = torch.nn.Sequential(
            torch.nn.Linear(64 + in_channels, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)
        )

    def forward(self, xyz: Tensor, features: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        samples = farthest_point_sampling(xyz, self.centres)
        centres = group_points(xyz, samples.indices)
        balls = ball_query(centres, xyz, self.radius, self.group)
        offsets = group_points(xyz, balls.indices) - centres.unsqueeze(2)
        grouped = torch.cat([offsets, group_points(features, balls.indices)], -1)
        centre_features = self.sa_mlp(grouped).amax(2)
        near = three_nn(xyz, centres)
        up = interpolate(centre_features, near.indices, inverse_distance_weights(near.distances))
        return self.fp_mlp(torch.cat([up, features], -1)), samples.indices, balls.indices, near.indices


class PillarFrontEnd(torch.nn.Module):
    """A PointPillars front end: pillars, the pillar feature net, the scatter, one BEV convolution."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.pillar_size: List[float] = [0.5, 0.5, 6.0]
        self.point_range: List[float] = [-32.0, -32.0, -3.0, 32.0, 32.0, 3.0]
        self.points_per_pillar = 32
        self.max_pillars = 6000
        self.height = 128
        self.width = 128
        self.pfn = torch.nn.Sequential(torch.nn.Linear(9, channels), torch.nn.ReLU())
        self.bev = torch.nn.Sequential(torch.nn.Conv2d(channels, 64, 3, padding=1), torch.nn.ReLU())

    def forward(self, points: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        pillars = voxelize(
            points, self.pillar_size, self.point_range, self.points_per_pillar, self.max_pillars, lengths
        )
        slots = torch.arange(self.points_per_pillar, device=points.device)
        present = (slots < pillars.num_points.unsqueeze(-1)).unsqueeze(-1).to(points.dtype)  # (B, V, K, 1)
        xyz = pillars.voxels[..., :3]
        count = pillars.num_points.clamp(min=1).unsqueeze(-1).to(points.dtype)
        mean = (xyz * present).sum(2) / count
        cell = pillars.coords[..., 1:].flip(-1).to(points.dtype)  # (x, y) cell of each pillar
        size = torch.tensor(self.pillar_size[:2], dtype=points.dtype, device=points.device)
        low = torch.tensor(self.point_range[:2], dtype=points.dtype, device=points.device)
        centre = low + (cell + 0.5) * size
        decorated = torch.cat([pillars.voxels, xyz - mean.unsqueeze(2), xyz[..., :2] - centre.unsqueeze(2)], -1)
        pillar_features = (self.pfn(decorated) * present).amax(2)
        canvas = pillar_scatter(pillar_features, pillars.coords, pillars.num_voxels, self.height, self.width)
        return self.bev(canvas), pillars.coords, pillars.num_points, canvas


def scan(seed: int) -> Tensor:
    """One generated LiDAR scan (x, y, z, intensity) as float32 (N, 4)."""
    lidar = pointops.scenes.lidar
    sweep = lidar.lidar_scan(lidar.make_scene(seed=seed), n_beams=32, n_azimuth=1024, seed=seed)
    return torch.cat([sweep.points, sweep.intensity.unsqueeze(-1)], -1).float()


def model_inputs(name: str) -> List[Tensor]:
    clouds = [scan(seed) for seed in (1, 2)]
    if name == "pointnet2":
        n = 4096
        picks = [torch.linspace(0, len(c) - 1, n).long() for c in clouds]
        sampled = torch.stack([c[p] for c, p in zip(clouds, picks)])
        return [sampled[..., :3].contiguous(), sampled[..., 3:].contiguous()]
    points, lengths = pointops.pad_clouds(clouds)
    return [points, lengths]


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return (PointNet2Stage() if name == "pointnet2" else PillarFrontEnd()).eval()


def median_ms(run, inputs, device: str, repeats: int = 20) -> float:
    for _ in range(3):
        run(inputs)
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run(inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def export(name: str, device: str, out: str) -> None:
    model = build(name).to(device)
    inputs = [t.to(device) for t in model_inputs(name)]
    torch.save({f"input{i}": t.cpu() for i, t in enumerate(inputs)}, os.path.join(out, f"{name}.inputs.pt"))
    expected = {}
    with torch.no_grad():
        scripted = torch.jit.script(model)
        scripted.save(os.path.join(out, f"{name}.{device}.ts"))
        for i, t in enumerate(scripted(*inputs)):
            expected[f"torchscript{i}"] = t.cpu()
        expected["torchscript_ms"] = torch.tensor(median_ms(lambda x: scripted(*x), inputs, device))
        program = torch.export.export(model, tuple(inputs))
        package = os.path.join(out, f"{name}.{device}.pt2")
        torch._inductor.aoti_compile_and_package(program, package_path=package)
        compiled = torch._inductor.aoti_load_package(package)
        for i, t in enumerate(compiled(*inputs)):
            expected[f"aoti{i}"] = t.cpu()
        expected["aoti_ms"] = torch.tensor(median_ms(lambda x: compiled(*x), inputs, device))
    torch.save(expected, os.path.join(out, f"{name}.expected.{device}.pt"))
    print(
        f"{name} on {device}: {name}.{device}.ts, {name}.{device}.pt2, Python {float(expected['torchscript_ms']):.2f} ms "
        f"(TorchScript), {float(expected['aoti_ms']):.2f} ms (AOTInductor)"
    )


def write_clouds(out: str) -> None:
    cloud = scan(3)
    pointops.io.write_ply(os.path.join(out, "scene.ply"), cloud[:, :3])
    cloud.numpy().tofile(os.path.join(out, "scene.bin"))  # KITTI's layout: float32 x, y, z, intensity
    print(f"scene.ply and scene.bin: {len(cloud)} points")


def cloud_steps(points: Tensor) -> dict:
    """cloud_tool's steps through the Python API (its defaults)."""
    down = pointops.voxel_downsample(points, CLOUD_VOXEL)
    near = pointops.knn(down.points, down.points, CLOUD_NEIGHBORS, down.lengths, down.lengths)
    normals = pointops.estimate_normals(down.points, CLOUD_NEIGHBORS, down.lengths, neighbors=near.indices)
    samples = farthest_point_sampling(down.points, CLOUD_SAMPLES, down.lengths)
    planes = pointops.detect_planes(down.points, CLOUD_PLANES, down.lengths)
    return {
        "points": down.points,
        "lengths": down.lengths,
        "normals": normals.normals,
        "curvature": normals.curvature,
        "samples": samples.indices,
        "sample_distances": samples.distances,
        "planes": planes.planes,
        "plane_votes": planes.votes,
        "labels": planes.labels,
    }


def check_cloud(saved: str, cloud_file: str) -> int:
    # torch::pickle_save's format tags its dict's types, which torch.load's default weights-only
    # unpickler refuses; the file is cloud_tool's own output.
    got = torch.load(saved, weights_only=False)
    points = pointops.io.read(cloud_file).points.float().unsqueeze(0)
    want = cloud_steps(points.to(got["points"].device))
    bad = [k for k, v in want.items() if not torch.equal(v.cpu().nan_to_num(), got[k].cpu().nan_to_num())]
    print(
        f"cloud_tool against the Python API on {cloud_file}: "
        + ("every output equal, bit for bit" if not bad else "differs in " + ", ".join(bad))
    )
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the models, inputs and expected outputs")
    parser.add_argument(
        "--device",
        nargs="+",
        choices=["cpu", "cuda"],
        help="devices to export for (default: cpu, and cuda when a GPU is visible)",
    )
    parser.add_argument("--models", nargs="+", default=["pointnet2", "pillars"], choices=["pointnet2", "pillars"])
    parser.add_argument("--check-cloud", metavar="SAVED", help="compare cloud_tool --save output with Python")
    parser.add_argument("--cloud", default=None, help="the cloud file cloud_tool read (default OUT/scene.ply)")
    args = parser.parse_args()
    if args.check_cloud:
        return check_cloud(args.check_cloud, args.cloud or os.path.join(args.out, "scene.ply"))
    os.makedirs(args.out, exist_ok=True)
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    for device in devices:
        for name in args.models:
            export(name, device, args.out)
    write_clouds(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
