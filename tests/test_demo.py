"""The demo end to end: every picture is written as a PNG of a sensible size, on the CPU equal to
the committed docs/pictures, and on CUDA the same pictures as on the CPU (the ops are
bit-identical)."""

import struct

import pytest

pytest.importorskip("matplotlib", reason="the demo draws with matplotlib, the optional demo extra")

from pointops import demo  # noqa: E402  (after the skip when matplotlib is absent)

FAST = demo.Settings(beams=16, azimuth=512, fps_k=256)  # about 8k points: a few seconds on a CPU


def png_size(path):
    """(width, height) from the PNG header; fails on anything that is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def pixels(path):
    import matplotlib.image

    return matplotlib.image.imread(path)


def test_command_line_and_registry(tmp_path, capsys, request):
    @demo.picture("test_extra")
    def draw_extra(scene):
        fig = demo.figure(4, 4)
        ax = fig.add_subplot()
        demo.top_view(ax, scene, "an added picture")
        return fig, f"{scene.n} points"

    request.addfinalizer(lambda: demo.PICTURES.pop("test_extra", None))  # registered only for this test
    demo.main(
        [
            "--out",
            str(tmp_path / "pictures"),
            "--device",
            "cpu",
            "--beams",
            "8",
            "--azimuth",
            "256",
            "--only",
            "fps",
            "test_extra",
        ]
    )
    out = capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "pictures").iterdir()) == ["fps.png", "test_extra.png"]
    assert "2 pictures in" in out and "test_extra.png: " in out
    with pytest.raises(ValueError, match=r"unknown pictures \['nope'\]"):
        demo.run(str(tmp_path), "cpu", FAST, only=["nope"])


@pytest.mark.cuda
def test_cuda_draws_the_same_pictures(tmp_path):
    # Not the PPF picture: its matcher re-scores with torch matmuls, which sum in a device-dependent
    # order (tests/test_ppf.py compares its poses across devices instead).
    only = [name for name in demo.PICTURES if name != "ppf"]
    cpu = demo.run(str(tmp_path / "cpu"), "cpu", FAST, only=only, dpi=60)
    cuda = demo.run(str(tmp_path / "cuda"), "cuda", FAST, only=only, dpi=60)
    for a, b in zip(cpu, cuda):
        assert (pixels(a) == pixels(b)).all(), f"{b} differs from the CPU's picture"


def test_demo_writes_every_picture_as_committed(tmp_path, capsys):
    """Every picture is written as a PNG of a sensible size, and docs/pictures/*.png are what
    `python -m pointops.demo --out docs/pictures --device cpu` draws (docs/demo.md): the same
    pixels, picture by picture (the files' bytes may differ in metadata where matplotlib's version
    does). Pixels are compared under the matplotlib setup.py pins only (another version lays text
    out in other pixels), and the PPF picture only with Debian's libcgal-demo meshes (without them
    the demo draws procedural blobs instead)."""
    import os
    import re

    import matplotlib

    from pointops import scenes

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pinned = re.search(r'"matplotlib==([^"]+)"', open(os.path.join(root, "setup.py")).read()).group(1)
    same_matplotlib = matplotlib.__version__ == pinned
    pictures = os.path.join(root, "docs", "pictures")
    committed = sorted(name[:-4] for name in os.listdir(pictures) if name.endswith(".png"))
    assert committed == sorted(demo.PICTURES), "docs/pictures holds other pictures than the demo draws"
    assert {"fps", "height", "bev", "planes", "voxels", "hough", "ppf"} <= set(demo.PICTURES)
    paths = demo.run(str(tmp_path), "cpu", demo.Settings())
    assert [os.path.basename(p) for p in paths] == [name + ".png" for name in demo.PICTURES]
    out = capsys.readouterr().out
    for path in paths:
        assert f"wrote {path}: " in out
        width, height = png_size(path)
        assert 400 <= width <= 2000 and 300 <= height <= 2000, (path, width, height)
        image = pixels(path)
        assert image.std() > 0.05, f"{path} is (nearly) blank"
        name = os.path.basename(path)
        if not same_matplotlib or (name == "ppf.png" and not scenes.mesh.cgal_available()):
            continue
        assert (image == pixels(os.path.join(pictures, name))).all(), (
            f"docs/pictures/{name} is not what the demo draws now: redraw the pictures with "
            "python -m pointops.demo --out docs/pictures --device cpu"
        )
