"""Where the time of one PPF match of a whole depth frame goes: points in, poses out.

A 640 x 480 depth camera frame (pointops' PPF scenes: a target among distractors and boxes on a
table, about 300,000 returns) and models of about 30,000 surface samples each. For each workload
(one model with the default and the fast preset, sixteen models) it prints the wall time of
``PPFMatcher.match`` (median of several calls, synchronized), then one profiled call split by the
matcher's stages (``ppf.*`` record_function scopes): the host time of each stage, the device
(kernel) time inside it, its kernel launches, its host syncs (device-to-host copies and
synchronizations that block the host) and its operator calls (outermost ``aten::`` /
``pointops::`` calls: on the CPU, where nothing is launched, what the host dispatches).

    python tools/profile_ppf_frame.py [--device cuda] [--repeats 5] [--workloads one fast sixteen]
                                      [--width 640 --height 480] [--model-points 30000] [--json f]
                                      [--config '{"max_pairs_per_key": 64}'] [--kernels 15]
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy


def parse_args():
    parser = cli.parser(__doc__)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per workload (median reported)")
    parser.add_argument(
        "--workloads",
        nargs="*",
        default=["one", "fast", "sixteen"],
        help="one (1 model, default preset), fast (1 model, fast preset), sixteen (16 models, "
        "default preset), sixteen_fast (16 models, fast preset)",
    )
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--model-points", type=int, default=30000)
    parser.add_argument("--mesh", default="blob", help="blob (procedural) or a CGAL mesh name")
    parser.add_argument("--config", default="{}", help="PPFMatcher options over the preset, as JSON")
    parser.add_argument("--kernels", type=int, default=0, help="also list the N kernels with the most device time")
    parser.add_argument("--json", default=None, help="append one JSON line per workload to this file")
    return parser.parse_args()


def main():
    args = parse_args()
    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pointops import scenes
    from pointops.scenes import tabletop
    from pointops.ppf.matcher import PPFMatcher

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device == "cuda"
    mesh = scenes.blob_mesh(seed=1) if args.mesh == "blob" else scenes.load_mesh(args.mesh)
    t0 = time.perf_counter()
    scene = tabletop.make_ppf_scene(
        3, mesh, [scenes.blob_mesh(seed=s) for s in (2, 3)], occlusion=0.3, width=args.width, height=args.height
    )
    print(
        f"frame: {scene.points.shape[0]} points ({args.width} x {args.height}), made in "
        f"{time.perf_counter() - t0:.1f} s; device {torch.cuda.get_device_name() if cuda else 'cpu'}",
        flush=True,
    )
    points = scene.points.to(device)

    def models(count):
        meshes = [mesh] + [scenes.blob_mesh(seed=10 + s) for s in range(count - 1)]
        samples = [scenes.sample_surface(m, args.model_points, seed=i) for i, m in enumerate(meshes)]
        return (
            torch.stack([s.points for s in samples]).float().to(device),
            torch.stack([s.normals for s in samples]).float().to(device),
        )

    workloads = {"one": (1, "default"), "fast": (1, "fast"), "sixteen": (16, "default"), "sixteen_fast": (16, "fast")}
    for name in args.workloads:
        count, preset = workloads[name]
        mp, mn = models(count)
        matcher = PPFMatcher(mp, mn, preset=preset, **json.loads(args.config))

        def call():
            return matcher.match(points, max_instances=1)

        def sync():
            if cuda:
                torch.cuda.synchronize()

        found = call()
        sync()
        times = []
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            call()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=activities) as prof:
            call()
            sync()
        try:
            stages = stage_table(prof, cuda)
        except Exception as error:  # keep the timings if the profiler's event API differs
            print(f"stage table failed: {error!r}")
            print(
                prof.key_averages().table(
                    sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=25
                )
            )
            stages = {}
        if args.kernels and cuda:
            print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.kernels))
        row = {
            "workload": name,
            "models": count,
            "preset": preset,
            "config": json.loads(args.config),
            "frame_points": int(scene.points.shape[0]),
            "model_points": args.model_points,
            "matcher_model_points": int(matcher.model.lengths.max()),
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "ms_median": round(statistics.median(times), 2),
            "ms_all": [round(t, 2) for t in times],
            "score": float(found.scores[0, 0, 0]),
            "stages": stages,
        }
        print(
            f"\n{name}: {count} model(s), preset {preset}, model {row['matcher_model_points']} points after "
            f"downsampling: median {row['ms_median']:.1f} ms over {args.repeats} calls "
            f"(min {min(times):.1f}, max {max(times):.1f}); best score {row['score']:.3f}"
        )
        print(f"  {'stage':22} {'host ms':>9} {'device ms':>10} {'launches':>9} {'syncs':>6} {'ops':>6}")
        for stage, s in stages.items():
            print(
                f"  {stage:22} {s['host_ms']:>9.2f} {s['device_ms']:>10.2f} {s['launches']:>9} {s['syncs']:>6}"
                f" {s['ops']:>6}"
            )
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def device_us(event):
    """Device time of the kernels an event and its children launched (torch's 'CUDA total')."""
    for name in ("device_time_total", "cuda_time_total"):
        if hasattr(event, name):
            return getattr(event, name)
    return 0.0


def is_operator(event):
    return event.name.startswith(("aten::", "pointops::"))


def stage_table(prof, cuda):
    """Per ``ppf.*`` scope: host time, device time of the kernels it launched, launches, syncs,
    operator calls (those not inside another operator); 'total' spans the profiled call."""
    events = list(prof.events())
    scopes = [e for e in events if e.name.startswith("ppf.")]
    table = {}

    def inside(e, scope):
        return scope.time_range.start <= e.time_range.start and e.time_range.end <= scope.time_range.end

    runtime = [e for e in events if e.name in LAUNCH_NAMES or e.name.startswith(SYNC_NAMES)]
    operators = [e for e in events if is_operator(e) and not (e.cpu_parent is not None and is_operator(e.cpu_parent))]
    for scope in scopes:
        s = table.setdefault(scope.name, {"host_ms": 0.0, "device_ms": 0.0, "launches": 0, "syncs": 0, "ops": 0})
        s["ops"] += sum(e.thread == scope.thread and inside(e, scope) for e in operators)
        s["host_ms"] += scope.time_range.elapsed_us() / 1e3
        s["device_ms"] += device_us(scope) / 1e3
        for e in runtime:
            if e.thread == scope.thread and inside(e, scope):
                if e.name in LAUNCH_NAMES:
                    s["launches"] += 1
                elif e.name != "cudaMemcpyAsync":
                    s["syncs"] += 1
    totals = {
        "host_ms": sum(e.time_range.elapsed_us() for e in scopes if e.name == "ppf.match") / 1e3,
        "device_ms": sum(device_us(e) for e in scopes if e.name == "ppf.match") / 1e3,
        "launches": sum(e.name in LAUNCH_NAMES for e in runtime),
        "syncs": sum(e.name.startswith(SYNC_NAMES) and e.name != "cudaMemcpyAsync" for e in runtime),
        "ops": sum(inside(e, scope) for e in operators for scope in scopes if scope.name == "ppf.match"),
    }
    table.pop("ppf.match", None)
    table = {
        k.split(".", 1)[1]: {kk: round(vv, 3) if isinstance(vv, float) else vv for kk, vv in v.items()}
        for k, v in sorted(table.items(), key=lambda kv: -kv[1]["host_ms"])
    }
    table["total"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in totals.items()}
    return table


if __name__ == "__main__":
    main()
