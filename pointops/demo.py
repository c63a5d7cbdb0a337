"""pointops demo: farthest point sampling and BEV images of a generated scene, written as PNGs.

    python -m pointops.demo [--points 200000] [--k 1024] [--out pointops_demo.png]
                            [--height-out pointops_height.png] [--bev-out pointops_bev.png] [--device cuda]

Runs on CUDA when available, else on the CPU. Every picture is a top view with x forward pointing
up and y left pointing left (forward_up). `--out`: the cloud in grey, the farthest point
samples in red. `--height-out`: the grayscale height image (the highest point per 0.1 m
cell, 0..255 over the z range). `--bev-out`: a Complex-YOLO style 3-channel BEV image: red = max
z, green = log density, blue = the intensity of the highest point (the scene has no intensity, so
it is synthesized from range). Needs nothing beyond torch and numpy (the PNGs are written with zlib).
"""
import argparse
import struct
import time
import zlib

import numpy as np
import torch

import pointops
from pointops import datasets


def write_png(path: str, rgb: np.ndarray) -> None:
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def top_view(points: np.ndarray, samples: np.ndarray, size: int = 800, extent: float = 42.0) -> np.ndarray:
    image = np.full((size, size, 3), 255, dtype=np.uint8)

    def to_pixels(xy):
        col = ((extent - xy[:, 1]) / (2 * extent) * (size - 1)).round().astype(int)  # y left -> image left
        row = ((extent - xy[:, 0]) / (2 * extent) * (size - 1)).round().astype(int)  # x forward -> image up
        keep = (row >= 0) & (row < size) & (col >= 0) & (col < size)
        return row[keep], col[keep]

    row, col = to_pixels(points)
    image[row, col] = (170, 170, 170)
    row, col = to_pixels(samples)
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            image[np.clip(row + dr, 0, size - 1), np.clip(col + dc, 0, size - 1)] = (220, 30, 30)
    return image


# The demo scene's extent: 80 x 80 m around the sensor at 0.1 m, z from below the ground to above the pole.
DEMO_RANGE = [-40.0, -40.0, -2.0, 40.0, 40.0, 4.4]
DEMO_CELL = [0.1, 0.1]


def with_intensity(cloud: torch.Tensor) -> torch.Tensor:
    """(..., 3) -> (..., 4): a LiDAR-like return strength that fades with range."""
    intensity = (1.0 - cloud.norm(dim=-1, keepdim=True) / 50.0).clamp(0.05, 1.0)
    return torch.cat([cloud, intensity], -1)


def bev_picture(points: torch.Tensor) -> np.ndarray:
    """(1, N, 4) -> (rows, cols, 3) uint8: max z, density and top intensity as red, green, blue."""
    image = pointops.bev_rasterize(points, ["max_z", "density", "top_feature", "occupancy"], None,
                                   DEMO_RANGE, DEMO_CELL, forward_up=True)[0]
    red = (image[0] - DEMO_RANGE[2]) / (DEMO_RANGE[5] - DEMO_RANGE[2])
    rgb = torch.stack([red, image[1], image[2]], -1) * image[3].unsqueeze(-1)
    return (rgb.clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()


PLANE_COLOURS = np.array([(60, 120, 200), (220, 60, 50), (60, 170, 80), (240, 170, 30), (150, 80, 190),
                          (40, 190, 190), (200, 90, 150), (120, 120, 40)], dtype=np.uint8)


def plane_picture(points: np.ndarray, labels: np.ndarray, size: int = 800, extent: float = 42.0) -> np.ndarray:
    """Top view (x up, y left) coloured by detected plane; points on no plane in grey."""
    image = np.full((size, size, 3), 255, dtype=np.uint8)
    col = ((extent - points[:, 1]) / (2 * extent) * (size - 1)).round().astype(int)
    row = ((extent - points[:, 0]) / (2 * extent) * (size - 1)).round().astype(int)
    keep = (row >= 0) & (row < size) & (col >= 0) & (col < size)
    colours = np.where((labels >= 0)[:, None], PLANE_COLOURS[labels % len(PLANE_COLOURS)], np.uint8(170))
    order = np.argsort(labels >= 0, kind="stable")  # planes drawn over unlabelled points
    order = order[keep[order]]
    image[row[order], col[order]] = colours[order]
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--out", default="pointops_demo.png")
    parser.add_argument("--height-out", default="pointops_height.png")
    parser.add_argument("--bev-out", default="pointops_bev.png")
    parser.add_argument("--planes-out", default="pointops_planes.png")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    cloud = datasets.sampled_street(args.points).to(args.device).unsqueeze(0)
    pointops.farthest_point_sampling(cloud[:, :1000], 8)  # warm-up
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    samples, indices = pointops.sample_farthest_points(cloud, K=args.k)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - t0) * 1e3
    assert indices.unique().numel() == args.k, "farthest point sampling repeated a point"
    write_png(args.out, top_view(cloud[0].cpu().numpy(), samples[0].cpu().numpy()))
    print(f"farthest_point_sampling: {args.points} points -> {args.k} samples on {args.device} "
          f"in {elapsed:.1f} ms; top view written to {args.out}")

    points = with_intensity(cloud)
    pointops.height_image(points[:, :1000], None, DEMO_RANGE, DEMO_CELL)  # warm-up
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    gray = pointops.height_image(points, None, DEMO_RANGE, DEMO_CELL)[0]
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - t0) * 1e3
    write_png(args.height_out, gray.unsqueeze(-1).expand(-1, -1, 3).cpu().numpy())
    write_png(args.bev_out, bev_picture(points))
    print(f"height_image: {tuple(gray.shape)} uint8 in {elapsed:.1f} ms, written to {args.height_out}; "
          f"max z / density / top intensity BEV written to {args.bev_out}")

    # Planes of a ray-cast LiDAR scene; on a CPU a lighter scan and a coarser accumulator.
    fast = args.device.startswith("cuda")
    scan = datasets.lidar_scan(datasets.make_scene(0), n_beams=64 if fast else 32, n_azimuth=2048 if fast else 1024,
                               range_noise=0.02, clutter=0.1, seed=0)
    grid = {} if fast else {"n_phi": 45, "n_theta": 45, "rho_step": 0.2}
    t0 = time.perf_counter()
    found = pointops.detect_planes(scan.points[None].to(args.device), 8, iterations=2, **grid)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - t0) * 1e3
    write_png(args.planes_out, plane_picture(scan.points.numpy(), found.labels[0].cpu().numpy()))
    score = datasets.evaluate_planes(found.planes[0][~torch.isnan(found.planes[0, :, 3])].cpu(), scan.planes,
                                     scan.labels)
    print(f"detect_planes: {len(scan.points)} points, {int((~torch.isnan(found.planes[0, :, 3])).sum())} planes "
          f"in {elapsed:.0f} ms (recall {score.recall:.2f}, precision {score.precision:.2f} against the scene's "
          f"ground truth); top view coloured by plane written to {args.planes_out}")


if __name__ == "__main__":
    main()
