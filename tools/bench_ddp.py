"""Frames per second of the DDP example's preprocessing and training, on 1 and on N GPUs, and the scaling.

Each run starts one process per rank (torch.multiprocessing, NCCL on CUDA, gloo on the CPU), and
every rank does what examples/ddp_pipeline.py does, frame after frame from a DataLoader: its
workers serve generated LiDAR frames (a pool of scans of pointops.scenes.lidar street scenes,
each frame one of them turned by its own yaw, x y z intensity), collated into a padded batch with
lengths in pinned memory; the rank copies the batch to its GPU, preprocesses it (voxelize into
pillars, a BEV image, farthest point sampling, plane detection) and takes one training step of the
example's PointPillars-style model under DistributedDataParallel. The frames are split over the
ranks (DistributedSampler), so the total work is the same for every rank count and the scaling
from 1 to N ranks is the ratio of the totals' frames per second.

Defaults: on CUDA, KITTI-size frames (64 beams x 2048 firings, about 120k points) and 2048 frames
(several seconds a run even on several GPUs, so that the start and the last batch weigh little),
4 per batch, 4 DataLoader workers per rank; on the CPU, small frames so that the harness runs in a
minute (the CPU figures are not the product's). The first batches of each rank are a warm-up and
are not timed, and the timed window ends with the last step, before the workers shut down (the
shutdown, about half a second, is reported apart as teardown_s). The table gives, per rank count:
frames per second in all and per rank, the scaling and its efficiency (scaling / ranks), where a
rank's time goes per frame (waiting for the DataLoader, preprocessing, training, as measured on
the host after each stage synchronizes: --no-split times the loop without those syncs), and the
slowest rank's lead: per step, how much longer the slowest rank's data and preprocessing took
than the ranks' mean, which every step's all-reduce waits out. --bind pins each rank and its
workers to a share of the CPUs of its GPU's NUMA node.

--profile runs torch.profiler over each rank's first --profile-steps timed batches and prints, per
rank count, the operations that take the most host time per frame (averaged over the ranks), the
kernel launches per frame (device times too when every run has one rank: device tracing in several
NCCL ranks at once hangs them), and, after the last run, the operations whose host time per frame grew
most from the first rank count to the last: what the ranks share shows up there (a host-bound
launch path slowing as more cores are busy, a lock, the all-reduce's wait). The profiler's own
overhead is in that run's figures.

    python tools/bench_ddp.py --gpus 1 2                      # on a machine with 2 GPUs
    python tools/bench_ddp.py --device cpu --gpus 1 2 --frames 8 --beams 16 --azimuth 512 --steps 2
    python tools/bench_ddp.py --gpus 1 4 --profile            # what grows per rank
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy

CUDA_DEFAULTS = {"frames": 2048, "beams": 64, "azimuth": 2048, "batch": 4, "workers": 4, "pool": 32, "warmup": 2}
CPU_DEFAULTS = {"frames": 16, "beams": 16, "azimuth": 512, "batch": 2, "workers": 1, "pool": 4, "warmup": 1}


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--gpus",
        type=int,
        nargs="+",
        default=None,
        help="rank counts to run, one run each (default: 1 and every visible GPU; on the CPU 1 2)",
    )
    parser.add_argument("--device", help="cuda or cpu (default: cuda when a GPU is visible)")
    for name, help_text in [
        ("frames", "frames per run, split over the ranks"),
        ("beams", "LiDAR beams of a frame"),
        ("azimuth", "LiDAR firings per revolution"),
        ("batch", "frames per batch and rank"),
        ("workers", "DataLoader workers per rank"),
        ("pool", "distinct scans the frames turn"),
        ("warmup", "untimed batches per rank"),
    ]:
        parser.add_argument(
            f"--{name}",
            type=int,
            help=f"{help_text} (default: {CUDA_DEFAULTS[name]} on CUDA, {CPU_DEFAULTS[name]} on the CPU)",
        )
    parser.add_argument(
        "--steps", type=int, default=None, help="timed batches per rank at most (default: all the rank's frames)"
    )
    parser.add_argument(
        "--no-split",
        action="store_true",
        help="time the loop without synchronizing after each stage (no per-stage split)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile each rank's first timed batches (torch.profiler)"
    )
    parser.add_argument("--profile-steps", type=int, default=10, help="batches each rank profiles (default 10)")
    parser.add_argument(
        "--bind",
        action="store_true",
        help="pin each rank (and its DataLoader workers) to the CPUs of its GPU's NUMA node, shared evenly "
        "among the ranks on that node, with as many intra-op threads (Linux; CUDA only)",
    )
    parser.add_argument("--json", help="also write one JSON line per run here")
    parser.add_argument("--cache", help="keep the generated frames in this file (made if missing)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, cli.ROOT)
sys.path.insert(0, os.path.join(cli.ROOT, "examples"))
import pointops
import ddp_pipeline  # the example: frame_cloud, preprocess, PillarNet, the pillar grid


def one_scan(job):
    torch.set_num_threads(1)
    return ddp_pipeline.frame_cloud(*job)


def make_pool(count, beams, azimuth, cache=None):
    """(count, N_max, 4) float32 x y z intensity scans of generated street scenes, and their lengths."""
    if cache and os.path.isfile(cache):
        saved = torch.load(cache)
        if saved["settings"] == [count, beams, azimuth]:
            return saved["points"], saved["lengths"]
    clouds = []
    progress = cli.Progress(count, "scans")
    # One scan is seconds of small tensor ops: on a many-core host they are generated by processes
    # of one thread each (forked: they touch no GPU), not one after another.
    processes = min(count, (os.cpu_count() or 1) // 2)
    jobs = [(seed, beams, azimuth) for seed in range(count)]
    if processes > 1:
        with mp.get_context("fork").Pool(processes) as pool:
            scans = pool.imap(one_scan, jobs)
            for seed, cloud in enumerate(scans):
                clouds.append(cloud)
                progress.step(f"scan {seed}: {cloud.shape[0]:,} points")
    else:
        for job in jobs:
            clouds.append(ddp_pipeline.frame_cloud(*job))
            progress.step(f"scan {job[0]}: {clouds[-1].shape[0]:,} points")
    lengths = torch.tensor([c.shape[0] for c in clouds])
    points = torch.zeros(count, int(lengths.max()), 4)
    for i, c in enumerate(clouds):
        points[i, : c.shape[0]] = c
    if cache:
        torch.save({"settings": [count, beams, azimuth], "points": points, "lengths": lengths}, cache)
    return points, lengths


class Frames(torch.utils.data.Dataset):
    """Frame i: scan i % pool turned by a yaw of its own (so no two frames are the same points)."""

    def __init__(self, points, lengths, frames):
        self.points, self.lengths, self.frames = points, lengths, frames

    def __len__(self):
        return self.frames

    def __getitem__(self, i):
        scan = self.points[i % len(self.points), : int(self.lengths[i % len(self.points)])]
        yaw = torch.tensor(2.399963 * i)  # the golden angle: the turns never repeat
        c, s = torch.cos(yaw), torch.sin(yaw)
        x, y = scan[:, 0] * c - scan[:, 1] * s, scan[:, 0] * s + scan[:, 1] * c
        return torch.stack([x, y, scan[:, 2], scan[:, 3]], 1)


def collate(clouds):
    return ddp_pipeline.pad(clouds)


def gpu_local_cpus(index):
    """The CPUs of GPU `index`'s NUMA node, from sysfs (sorted), or None where that is unknown."""
    props = torch.cuda.get_device_properties(index)
    try:
        address = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:  # a torch without the PCI fields
        return None
    try:
        with open(f"/sys/bus/pci/devices/{address}/local_cpulist") as f:
            text = f.read().strip()
    except OSError:
        return None
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus & os.sched_getaffinity(0)) or None


def rank_cpus(world):
    """Each rank's share of its GPU's NUMA-node CPUs: the node's CPUs split evenly, in contiguous
    slices, among the ranks whose GPUs sit on that node; None for a rank whose node is unknown."""
    nodes = [gpu_local_cpus(r) for r in range(world)]
    shares = []
    for rank, cpus in enumerate(nodes):
        if cpus is None:
            shares.append(None)
            continue
        peers = [r for r in range(world) if nodes[r] == cpus]
        share = len(cpus) // len(peers)
        start = peers.index(rank) * share
        shares.append(cpus[start : start + share] or cpus)
    return shares


def rank_main(rank, world, settings, port, points, lengths, results):
    device_type = settings["device"]
    cpus = settings["cpus"][rank] if settings["cpus"] else None
    if cpus:
        # before the process starts threads: CUDA's, NCCL's and the workers all inherit it
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(len(cpus))
    dist.init_process_group(
        "nccl" if device_type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    if device_type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    dataset = Frames(points, lengths, settings["frames"])
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, world, rank, shuffle=False)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=settings["batch"],
        sampler=sampler,
        num_workers=settings["workers"],
        collate_fn=collate,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if settings["workers"] else None,
        persistent_workers=settings["workers"] > 0,
    )
    torch.manual_seed(0)
    model = ddp_pipeline.PillarNet().to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    grid = pointops.bev_grid_size(ddp_pipeline.PILLAR_RANGE, ddp_pipeline.PILLAR_SIZE[:2])

    # The profiler starts and stops between host-only (gloo) barriers: no rank's NCCL kernel is then
    # in flight while another rank's profiler (CUPTI) starts or stops, the shape of the deadlock of
    # pytorch/pytorch#48987 (a rank's CUDA work waiting for kernels that wait for that rank).
    host_group = dist.new_group(backend="gloo") if settings["profile"] else None

    def host_barrier():
        dist.barrier(group=host_group)

    split = not settings["no_split"]
    timed = {"frames": 0, "wait_s": 0.0, "preprocess_s": 0.0, "train_s": 0.0, "step_work_s": []}
    profiler, profiled_frames = None, 0
    losses = []
    batches = iter(loader)
    # Every rank takes the same number of batches (the sampler pads the shards to equal length), and
    # the loop asks for no more than that: the iterator's end would shut its workers down inside
    # the timed window, a constant 0.6-0.9 s a run (4-8 workers) that is not the steady state.
    steps = len(loader) if settings["steps"] is None else min(len(loader), settings["warmup"] + settings["steps"])
    start = None
    for step in range(steps):
        if step == settings["warmup"]:
            sync()
            dist.barrier()
            start = time.perf_counter()
            if settings["profile"]:
                profiler = torch.profiler.profile(activities=profile_activities(device, settings["profile_device"]))
                host_barrier()
                profiler.start()
                host_barrier()
        t0 = time.perf_counter()
        cloud, length = next(batches)
        cloud = cloud.to(device, non_blocking=True)
        length = length.to(device, non_blocking=True)
        t1 = time.perf_counter()
        outputs = ddp_pipeline.preprocess(cloud, length)
        if split:
            sync()
        t2 = time.perf_counter()
        target = (outputs["bev"][:, 1:2] > 0).float()
        target = torch.nn.functional.adaptive_max_pool2d(target, grid)
        optimizer.zero_grad()
        logits = model(outputs["voxels"], outputs["num_points"], outputs["coords"], outputs["num_voxels"])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if split:
            sync()
        t3 = time.perf_counter()
        if start is not None:
            timed["frames"] += cloud.shape[0]
            timed["wait_s"] += t1 - t0
            timed["preprocess_s"] += t2 - t1
            timed["train_s"] += t3 - t2
            timed["step_work_s"].append(t2 - t0)
        if profiler is not None:
            profiled_frames += cloud.shape[0]
            if step + 1 >= settings["warmup"] + settings["profile_steps"]:
                profiler, timed["profile"] = None, host_profile(profiler, profiled_frames, sync, host_barrier)
    if profiler is not None:
        timed["profile"] = host_profile(profiler, profiled_frames, sync, host_barrier)
    sync()
    dist.barrier()
    seconds = time.perf_counter() - start if start is not None else 0.0
    timed["seconds"] = seconds
    # what the timed window leaves out: the workers' shutdown at the end of the data
    t0 = time.perf_counter()
    del batches, loader
    timed["teardown_s"] = time.perf_counter() - t0
    timed["loss_first"], timed["loss_last"] = (float(losses[0]), float(losses[-1])) if losses else (None, None)
    gathered = [None] * world
    dist.all_gather_object(gathered, timed)
    if rank == 0:
        results.put(gathered)
    # every rank past the gather before any tears its connections down: a gloo rank destroyed
    # while its peer still reads from it aborts that peer at exit
    dist.barrier()
    dist.destroy_process_group()


def profile_activities(device, trace_device):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if trace_device and device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def host_profile(profiler, frames, sync, host_barrier):
    """Stops `profiler` (every rank at once, its GPU idle); {op: [calls, host us, device us] per
    frame} of every operation it saw."""
    sync()
    host_barrier()
    profiler.stop()
    host_barrier()
    per_frame = {}
    for event in profiler.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        per_frame[event.key] = [event.count / frames, event.self_cpu_time_total / frames, device_us / frames]
    return per_frame


# Host calls that launch a kernel (the runtime's and the driver's entry points).
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def profile_rows(ranks):
    """One row per operation: calls, host ms and device ms per frame, averaged over the ranks."""
    profiles = [r["profile"] for r in ranks if r.get("profile")]
    keys = sorted({key for p in profiles for key in p})
    rows = []
    for key in keys:
        values = [p.get(key, [0.0, 0.0, 0.0]) for p in profiles]
        rows.append(
            {
                "op": key,
                "calls": sum(v[0] for v in values) / len(values),
                "host_ms": sum(v[1] for v in values) / len(values) / 1e3,
                "device_ms": sum(v[2] for v in values) / len(values) / 1e3,
            }
        )
    return rows


PROFILE_COLUMNS = [
    ("op", "operation", ""),
    ("calls", "calls/frame", ".1f"),
    ("host_ms", "host ms/frame", ".3f"),
    ("device_ms", "device ms/frame", ".3f"),
]
GROWTH_COLUMNS = [
    ("op", "operation", ""),
    ("before", "host ms/frame, first", ".3f"),
    ("after", "host ms/frame, last", ".3f"),
    ("grew", "grew ms/frame", ".3f"),
]


def print_profile(world, rows, top=12):
    traced = [r for r in rows if r["op"] in LAUNCHES]
    # launches are CUDA runtime calls (recorded with host activity too): a CPU run has none to count
    launches = f", {sum(r['calls'] for r in traced):.0f} kernel launches per frame" if traced else ""
    title = f"{world} rank{'s' if world > 1 else ''}: host time per frame by operation (top {top}){launches}"
    print(cli.table(sorted(rows, key=lambda r: -r["host_ms"])[:top], PROFILE_COLUMNS, title=title), flush=True)


def profile_growth(first, last, top=8):
    """The operations whose host time per frame grew most between two runs' profile rows."""
    before = {r["op"]: r["host_ms"] for r in first}
    after = {r["op"]: r["host_ms"] for r in last}
    rows = [{"op": op, "before": before.get(op, 0.0), "after": after.get(op, 0.0)} for op in set(before) | set(after)]
    for r in rows:
        r["grew"] = r["after"] - r["before"]
    return sorted(rows, key=lambda r: -r["grew"])[:top]


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world, settings, points, lengths):
    """Per-rank figures of one run with `world` ranks."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    # the parent reads the CPU plan, so a rank sets its affinity before it starts any thread
    settings = dict(settings, cpus=rank_cpus(world) if settings["bind"] and settings["device"] == "cuda" else None)
    if settings["cpus"]:
        print(
            f"{world} ranks: CPUs {[f'{c[0]}-{c[-1]} ({len(c)})' if c else None for c in settings['cpus']]}",
            file=sys.stderr,
            flush=True,
        )
    mp.start_processes(
        rank_main,
        args=(world, settings, free_port(), points, lengths, results),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    return results.get()


def summarize(world, ranks, settings):
    frames = sum(r["frames"] for r in ranks)
    seconds = max(r["seconds"] for r in ranks)
    per_frame = {k: sum(r[k] for r in ranks) / max(frames, 1) * 1e3 for k in ("wait_s", "preprocess_s", "train_s")}
    # The all-reduce of step s waits for the rank whose data and preprocessing took longest: per
    # frame, the mean over steps of (slowest rank - mean rank) is that wait.
    steps = min(len(r["step_work_s"]) for r in ranks)
    straggle = sum(
        max(r["step_work_s"][s] for r in ranks) - sum(r["step_work_s"][s] for r in ranks) / len(ranks)
        for s in range(steps)
    )
    return {
        "ranks": world,
        "device": settings["device_name"],
        "frames": frames,
        "seconds": round(seconds, 3),
        "frames_per_s": frames / seconds if seconds else None,
        "frames_per_s_per_rank": frames / seconds / world if seconds else None,
        "wait_ms": per_frame["wait_s"] if not settings["no_split"] else None,
        "preprocess_ms": per_frame["preprocess_s"] if not settings["no_split"] else None,
        "train_ms": per_frame["train_s"] if not settings["no_split"] else None,
        "straggle_ms": straggle / max(steps * settings["batch"], 1) * 1e3 if not settings["no_split"] else None,
        "points_per_frame": settings["points_per_frame"],
        "batch": settings["batch"],
        "workers": settings["workers"],
        "loss_first": ranks[0]["loss_first"],
        "loss_last": ranks[0]["loss_last"],
        "teardown_s": round(max(r["teardown_s"] for r in ranks), 3),
        # each rank's own seconds and stage times per frame: a slow rank shows up here
        "per_rank": [
            {
                "seconds": round(r["seconds"], 3),
                **{
                    k[:-2] + "_ms": round(r[k] / max(r["frames"], 1) * 1e3, 3)
                    for k in ("wait_s", "preprocess_s", "train_s")
                },
            }
            for r in ranks
        ],
    }


COLUMNS = [
    ("ranks", "ranks", "d"),
    ("device", "device", ""),
    ("frames", "frames", "d"),
    ("seconds", "s", ".1f"),
    ("frames_per_s", "frames/s", ".1f"),
    ("frames_per_s_per_rank", "frames/s per rank", ".1f"),
    ("scaling", "scaling", ".2f"),
    ("efficiency", "efficiency", ".0%"),
    ("wait_ms", "data wait ms/frame", ".1f"),
    ("preprocess_ms", "preprocess ms/frame", ".1f"),
    ("train_ms", "train ms/frame", ".1f"),
    ("straggle_ms", "slowest rank's lead ms/frame", ".2f"),
]


def main(args):
    device = cli.default_device(args.device)
    defaults = CUDA_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    settings = {
        name: getattr(args, name) if getattr(args, name) is not None else value for name, value in defaults.items()
    }
    if args.gpus:
        counts = args.gpus
    elif device == "cuda":
        counts = sorted({1, torch.cuda.device_count()})
    else:
        counts = [1, 2]
    if device == "cuda" and max(counts) > torch.cuda.device_count():
        sys.exit(f"--gpus {max(counts)} asks for more GPUs than the {torch.cuda.device_count()} visible")
    settings.update(
        device=device,
        steps=args.steps,
        no_split=args.no_split,
        profile=args.profile,
        profile_steps=args.profile_steps,
        # CUPTI's device tracing in several NCCL ranks at once hangs them (4 ranks, profiler started
        # and stopped between gloo barriers, 4 x H200); host activity alone is what the growth per
        # rank is read from, so when any run has several ranks every run records the host only,
        # and the rank counts' host figures carry the same profiler overhead
        profile_device=max(counts) == 1,
        bind=args.bind,
        device_name=torch.cuda.get_device_name() if device == "cuda" else "cpu (gloo)",
    )
    if device == "cuda":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (docs/multi_gpu.md)
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    print(
        f"generating {settings['pool']} scans of {settings['beams']} beams x {settings['azimuth']} firings "
        f"for {settings['frames']} frames",
        file=sys.stderr,
        flush=True,
    )
    points, lengths = make_pool(settings["pool"], settings["beams"], settings["azimuth"], args.cache)
    settings["points_per_frame"] = int(lengths.float().mean())
    points.share_memory_()
    rows = []
    progress = cli.Progress(len(counts), "runs")
    profiles = []
    for world in counts:
        ranks = run(world, settings, points, lengths)
        row = summarize(world, ranks, settings)
        if args.profile:
            profiles.append((world, profile_rows(ranks)))
            row["launches_per_frame"] = sum(r["calls"] for r in profiles[-1][1] if r["op"] in LAUNCHES)
        base = next((r for r in rows if r["ranks"] == 1), row if world == 1 else None)
        if base is not None and row["frames_per_s"] and base["frames_per_s"]:
            row["scaling"] = row["frames_per_s"] / base["frames_per_s"]
            row["efficiency"] = row["scaling"] / world
        rows.append(row)
        print(json.dumps(row), flush=True)
        progress.step(f"{world} rank{'s' if world > 1 else ''}: {row['frames_per_s']:.1f} frames/s")
    if args.json:
        with open(args.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    title = (
        f"DDP preprocessing + training, {settings['points_per_frame']:,} points per frame on average, "
        f"{settings['batch']} frames per batch, {settings['workers']} DataLoader workers per rank "
        f"(scaling: frames/s over the 1-rank run's)"
    )
    print(cli.table(rows, COLUMNS, title=title), flush=True)
    if len(rows) > 1 and rows[0]["ranks"] == 1 and not args.no_split:
        # Per frame and rank, each stage takes as long with N ranks as with one when nothing is
        # shared; the stage that grew most is what bounds the scaling.
        one, many = rows[0], rows[-1]
        stages = [
            ("wait_ms", "waiting for the DataLoader (host cores)"),
            ("preprocess_ms", "preprocessing"),
            ("train_ms", "the training step (with DDP's all-reduce)"),
        ]
        key, what = max(stages, key=lambda stage: many[stage[0]] - one[stage[0]])
        print(
            f"per frame and rank, {what} grew most from 1 to {many['ranks']} ranks: "
            f"{one[key]:.1f} -> {many[key]:.1f} ms",
            flush=True,
        )
    for world, rows_of_run in profiles:
        print_profile(world, rows_of_run)
    if len(profiles) > 1:
        (first, before), (last, after) = profiles[0], profiles[-1]
        title = f"host time per frame and rank that grew most from {first} to {last} ranks"
        print(cli.table(profile_growth(before, after), GROWTH_COLUMNS, title=title), flush=True)


if __name__ == "__main__":
    main(ARGS)
