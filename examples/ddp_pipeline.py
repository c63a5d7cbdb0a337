"""Data-parallel LiDAR preprocessing and training with pointops under torchrun.

Each rank takes its shard of generated LiDAR frames (frame f goes to rank f % world_size),
preprocesses them on its own device (voxelize into pillars, a BEV image, farthest point sampling,
plane detection) and trains a small PointPillars-style model through DistributedDataParallel for a
few steps. Every rank writes its per-frame outputs and the final weights to --out; a run with one
process over the same frames gives the same per-frame outputs bit for bit (tests/test_ddp.py).

    torchrun --nproc-per-node=2 examples/ddp_pipeline.py --frames 8 --out /tmp/ddp     # one GPU per rank
    torchrun --nproc-per-node=2 examples/ddp_pipeline.py --device cpu --out /tmp/ddp   # CPU ranks (gloo)

On CUDA, rank r uses cuda:LOCAL_RANK and NCCL; on the CPU, gloo. Nothing here syncs with the host
except the loss print and the saves; every op runs on the current stream of the rank's device.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import pointops
from pointops.scenes import lidar

PILLAR_RANGE = [0.0, -32.0, -3.0, 64.0, 32.0, 1.0]
PILLAR_SIZE = [0.5, 0.5, 4.0]
MAX_VOXELS = 6000
MAX_POINTS = 16


def frame_cloud(frame: int, n_beams: int, n_azimuth: int) -> torch.Tensor:
    """(N, 4) x, y, z, intensity of generated frame `frame` (seeded by its number)."""
    scan = lidar.lidar_scan(
        lidar.make_scene(frame), n_beams=n_beams, n_azimuth=n_azimuth, range_noise=0.02, clutter=0.05, seed=frame
    )
    return torch.cat([scan.points, scan.intensity.unsqueeze(1)], 1)


def preprocess(points: torch.Tensor, lengths: torch.Tensor) -> dict:
    """The per-frame work: pillars, a BEV image, FPS keypoints and planes, on points' device."""
    pillars = pointops.voxelize(points, PILLAR_SIZE, PILLAR_RANGE, MAX_POINTS, MAX_VOXELS, lengths)
    bev = pointops.bev_rasterize(points, ["max_z", "density", "top_feature"], lengths, preset="kitti_bev")
    keypoints = pointops.farthest_point_sampling(points[..., :3], 512, lengths).indices
    planes = pointops.detect_planes(points[..., :3], 4, lengths, preset="outdoor_fast")
    return {
        "voxels": pillars.voxels,
        "coords": pillars.coords,
        "num_points": pillars.num_points,
        "num_voxels": pillars.num_voxels,
        "bev": bev,
        "keypoints": keypoints,
        "planes": planes.planes,
        "labels": planes.labels,
    }


class PillarNet(torch.nn.Module):
    """Points of each pillar -> a shared MLP, max-pooled -> pillar_scatter -> a small conv head."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.channels = channels
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, channels), torch.nn.ReLU())
        self.head = torch.nn.Sequential(
            torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(channels, 1, 1)
        )

    def forward(self, voxels, num_points, coords, num_voxels):
        features = self.mlp(voxels)
        filled = torch.arange(voxels.shape[2], device=voxels.device).view(1, 1, -1) < num_points.unsqueeze(-1)
        pillars = torch.where(filled.unsqueeze(-1), features, torch.zeros_like(features)).amax(2)
        height, width = pointops.bev_grid_size(PILLAR_RANGE, PILLAR_SIZE[:2])
        canvas = pointops.pillar_scatter(pillars, coords, num_voxels, height, width)
        return self.head(canvas)


def pad(clouds):
    lengths = torch.tensor([c.shape[0] for c in clouds], dtype=torch.int64)
    points = torch.zeros(len(clouds), int(lengths.max()), 4)
    for i, c in enumerate(clouds):
        points[i, : c.shape[0]] = c
    return points, lengths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=8, help="frames in all, split over the ranks")
    parser.add_argument("--steps", type=int, default=3, help="training steps")
    parser.add_argument("--beams", type=int, default=32)
    parser.add_argument("--azimuth", type=int, default=1024)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", required=True, help="folder for each rank's outputs")
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    frames = list(range(rank, args.frames, world))
    points, lengths = pad([frame_cloud(f, args.beams, args.azimuth) for f in frames])
    points, lengths = points.to(device), lengths.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    outputs = preprocess(points, lengths)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start

    torch.manual_seed(0)  # every rank starts from the same weights (DDP also broadcasts rank 0's)
    model = PillarNet().to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    target = (outputs["bev"][:, 1:2] > 0).float()  # occupied cells of the BEV image, resized to the pillar grid
    target = torch.nn.functional.adaptive_max_pool2d(target, pointops.bev_grid_size(PILLAR_RANGE, PILLAR_SIZE[:2]))
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        logits = model(outputs["voxels"], outputs["num_points"], outputs["coords"], outputs["num_voxels"])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())  # float() of a tensor that requires grad warns; read once, after the loop
    losses = [float(loss) for loss in losses]

    os.makedirs(args.out, exist_ok=True)
    per_frame = {f: {k: v[i].cpu() for k, v in outputs.items() if v.dim() > 0} for i, f in enumerate(frames)}
    weights = {k: v.detach().cpu() for k, v in (model.module if distributed else model).state_dict().items()}
    torch.save(
        {"frames": per_frame, "weights": weights, "losses": losses}, os.path.join(args.out, f"rank{rank}_of{world}.pt")
    )
    summary = {
        "rank": rank,
        "world": world,
        "device": str(device),
        "frames": len(frames),
        "preprocess_s": round(seconds, 4),
        "frames_per_s": round(len(frames) / max(seconds, 1e-9), 2),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
    }
    print(json.dumps(summary), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
