"""pointops.io: round trips (bit for bit), files written by the format libraries themselves, real
files from CGAL's example data (Debian's libcgal-demo), the error for every kind of broken file,
and area-weighted surface sampling. Files are made in tmp_path; the whole module runs in seconds."""

import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch

from pointops import io as pio
from pointops import scenes
from pointops.io import FileFormatError, PointCloud

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CGAL_DOC = "/usr/share/doc/libcgal-dev"


def need(module):
    return pytest.importorskip(
        module, reason=f"{module} is not installed (pip install '{pio.FORMAT_PACKAGES[module]}')"
    )


def same(a, b):
    """Bit-for-bit equality of two tensors (dtype, shape and values, NaN included)."""
    if a is None or b is None:
        return a is None and b is None
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        bits = {torch.float32: torch.int32, torch.float64: torch.int64}[a.dtype]
        return torch.equal(a.view(bits), b.view(bits))
    return torch.equal(a, b)


def assert_same_cloud(got, want):
    for name in ("points", "normals", "colors", "intensity", "faces"):
        assert same(getattr(got, name), getattr(want, name)), name
    assert set(got.fields) == set(want.fields or {})
    for name, value in (want.fields or {}).items():
        assert same(got.fields[name], value), name


def make_cloud(n=257, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    scale = 10.0 ** torch.randint(-6, 6, (n, 1), generator=g)  # magnitudes where fixed decimals would fail
    points = (torch.randn(n, 3, generator=g, dtype=torch.float64) * scale).to(dtype)
    points[0] = torch.tensor([0.0, -0.0, 1e-30])  # signed zero and a tiny value must survive text
    normals = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=dtype), dim=1)
    colors = torch.randint(0, 256, (n, 3), generator=g).float() / 255.0  # what an 8-bit file holds
    intensity = torch.rand(n, generator=g, dtype=dtype) * 1000
    return PointCloud(points, normals, colors, intensity, None, {})


def expect_error(path, *words, kind=FileFormatError):
    """The error for a broken file must name the file and the problem."""

    def check(excinfo):
        message = str(excinfo.value)
        assert os.fspath(path) in message, message
        for word in words:
            assert word in message, (word, message)

    return pytest.raises(kind), check


# ---------------------------------------------------------------------------------------------
# import and dispatch


def test_import_pointops_loads_no_format_library():
    code = (
        "import sys, pointops, pointops.io\n"
        "loaded = [m for m in ('plyfile', 'pypcd4', 'laspy', 'lazrs', 'trimesh', 'lzf') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_pinned_extras_are_the_versions_installed():
    """setup.py's EXTRAS is the one list of optional pins (tools/install.sh installs from it): the
    libraries the tests run with must be those versions. Only in the environment install.sh makes
    (.venv); any other interpreter brings its own versions."""
    if os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(ROOT, ".venv")):
        pytest.skip(f"not the .venv tools/install.sh makes (sys.prefix is {sys.prefix})")
    import ast
    import importlib.metadata
    import re

    with open(os.path.join(ROOT, "setup.py")) as f:
        extras = ast.literal_eval(re.search(r"^EXTRAS = (\{.*?^\})", f.read(), re.M | re.S).group(1))
    assert len(extras["io"]) == 5
    for pin in extras["io"] + extras["demo"] + extras["test"]:
        if "==" not in pin:
            continue
        name, version = pin.split("==")
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra that is not installed here: its tests skip
        assert installed == version, f"{name} {installed} is installed, setup.py pins {version}"


def test_missing_file_unknown_extension_and_directory(tmp_path):
    missing = tmp_path / "nothing.ply"
    with pytest.raises(FileNotFoundError) as e:
        pio.read(missing)
    assert str(missing) in str(e.value)
    for reader in (pio.read_pcd, pio.read_las, pio.read_mesh, pio.read_xyz, pio.read_kitti_bin):
        with pytest.raises(FileNotFoundError):
            reader(tmp_path / "nothing.xyz")
    odd = tmp_path / "cloud.e57"
    odd.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError) as e:
        pio.read(odd)
    assert str(odd) in str(e.value) and "unknown" in str(e.value) and ".pcd" in str(e.value)
    folder = tmp_path / "scan.bin"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        pio.read(folder)


def test_missing_library_says_which_extra(monkeypatch, tmp_path):
    path = tmp_path / "a.ply"
    path.write_bytes(b"ply\n")
    monkeypatch.setitem(sys.modules, "plyfile", None)  # makes `import plyfile` fail
    with pytest.raises(ImportError) as e:
        pio.read_ply(path)
    message = str(e.value)
    assert message.startswith(
        "pointops.io.read_ply needs the 'plyfile' package, which is not installed: "
        "pip install 'plyfile==1.1.5' (all of pointops.io's format libraries: pip install "
    ), message
    assert "'trimesh==5.2.0'" in message and ".[io]" not in message


def test_format_packages_are_the_io_extra():
    """pointops.io names the packages a user installs with the pins of setup.py's io extra."""
    import ast
    import re

    setup = os.path.join(ROOT, "setup.py")
    if not os.path.isfile(setup):
        pytest.skip("needs the source checkout (setup.py)")
    extras = ast.literal_eval(re.search(r"^EXTRAS = (\{.*?^\})", open(setup).read(), re.M | re.S).group(1))
    assert sorted(pio.FORMAT_PACKAGES.values()) == sorted(extras["io"])


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype"):
        pio.read_kitti_bin(__file__, dtype=torch.float16)


# ---------------------------------------------------------------------------------------------
# PLY


@pytest.mark.parametrize("ascii", [False, True], ids=["binary", "ascii"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ply_round_trip(tmp_path, ascii, dtype):
    need("plyfile")
    cloud = make_cloud(dtype=dtype)
    n = cloud.points.shape[0]
    faces = torch.randint(0, n, (40, 3), generator=torch.Generator().manual_seed(1))
    fields = {
        "label": torch.arange(n, dtype=torch.int32) - 7,
        "flag": (torch.arange(n) % 3).to(torch.uint8),
        "curvature": torch.rand(n, dtype=torch.float32),
        "descriptor": torch.randn(n, 4, dtype=torch.float64),
    }
    cloud = cloud._replace(faces=faces, fields=fields)
    path = tmp_path / "cloud.ply"
    pio.write_ply(path, cloud, ascii=ascii)
    assert path.read_bytes().startswith(b"ply\nformat " + (b"ascii" if ascii else b"binary_little_endian"))
    assert_same_cloud(pio.read_ply(path, dtype=dtype), cloud)
    assert_same_cloud(pio.read(path, dtype=dtype), cloud)
    assert same(pio.read_mesh(path, dtype=dtype).faces, faces)


def test_writers_round_trip_empty_clouds(tmp_path):
    need("plyfile")
    need("pypcd4")
    empty = PointCloud(
        torch.zeros(0, 3),
        torch.zeros(0, 3),
        torch.zeros(0, 3),
        torch.zeros(0),
        None,
        {"label": torch.zeros(0, dtype=torch.int32)},
    )
    for name, write in [("e.ply", pio.write_ply), ("e.pcd", pio.write_pcd)]:
        write(tmp_path / name, empty)
        assert_same_cloud(pio.read(tmp_path / name), empty)
    for encoding in ("ascii", "binary"):
        pio.write_pcd(tmp_path / "e.pcd", empty, encoding=encoding)
        assert_same_cloud(pio.read(tmp_path / "e.pcd"), empty)
    pio.write_kitti_bin(tmp_path / "e.bin", empty)
    assert pio.read(tmp_path / "e.bin").points.shape == (0, 3)


def test_ply_points_only_and_empty(tmp_path):
    need("plyfile")
    points = torch.randn(5, 3)
    path = tmp_path / "p.ply"
    pio.write_ply(path, points)
    got = pio.read_ply(path)
    assert same(got.points, points) and got.normals is None and got.colors is None and got.faces is None
    assert got.fields == {}
    pio.write_ply(path, torch.zeros(0, 3))
    assert pio.read_ply(path).points.shape == (0, 3)


def test_ply_written_by_plyfile_big_endian_polygons_and_colours(tmp_path):
    plyfile = need("plyfile")
    vertex = np.array(
        [
            (0, 0, 0, 65535, 0, 32768, 7),
            (1, 0, 0, 0, 65535, 0, 8),
            (1, 1, 0, 0, 0, 0, 9),
            (0, 1, 0, 1, 2, 3, 10),
            (0.5, 1.5, 0, 4, 5, 6, 11),
        ],
        dtype=[
            ("x", "f8"),
            ("y", "f8"),
            ("z", "f8"),
            ("red", "u2"),
            ("green", "u2"),
            ("blue", "u2"),
            ("Intensity", "i4"),
        ],
    )
    face = np.empty(2, dtype=[("vertex_index", object)])
    face["vertex_index"] = [np.array([0, 1, 2, 3], "i4"), np.array([3, 2, 4], "i4")]
    path = tmp_path / "quad.ply"
    plyfile.PlyData(
        [plyfile.PlyElement.describe(vertex, "vertex"), plyfile.PlyElement.describe(face, "face")], byte_order=">"
    ).write(str(path))
    got = pio.read_ply(path)
    xyz = np.stack([vertex["x"], vertex["y"], vertex["z"]], 1)
    assert same(got.points, torch.from_numpy(xyz.astype(np.float32)))
    rgb = np.stack([vertex["red"], vertex["green"], vertex["blue"]], 1)
    assert same(got.colors, torch.from_numpy(rgb.astype(np.float32) / np.float32(65535)))
    assert same(got.intensity, torch.arange(7.0, 12.0))  # "Intensity": names compare case-blind
    assert got.faces.tolist() == [[0, 1, 2], [0, 2, 3], [3, 2, 4]]  # the quad as a fan around vertex 0


def _ply_bytes(ascii, n=4):
    plyfile = need("plyfile")
    vertex = np.zeros(n, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    vertex["x"] = np.arange(n)
    face = np.empty(1, dtype=[("vertex_indices", "i4", (3,))])
    face["vertex_indices"] = [[0, 1, 2]]
    data = plyfile.PlyData(
        [plyfile.PlyElement.describe(vertex, "vertex"), plyfile.PlyElement.describe(face, "face")], text=ascii
    )
    import io

    out = io.BytesIO()
    data.write(out)
    return out.getvalue()


def test_ply_truncated_binary(tmp_path):
    path = tmp_path / "cut.ply"
    path.write_bytes(_ply_bytes(False)[:-7])
    raises, check = expect_error(path, "malformed PLY", "end-of-file")
    with raises as e:
        pio.read_ply(path)
    check(e)


@pytest.mark.parametrize("ascii", [False, True], ids=["binary", "ascii"])
def test_ply_header_lies_about_the_vertex_count(tmp_path, ascii):
    raw = _ply_bytes(ascii)
    path = tmp_path / "lies.ply"
    path.write_bytes(raw.replace(b"element vertex 4", b"element vertex 3"))  # data left over
    raises, check = expect_error(path, "header")
    with raises as e:
        pio.read_ply(path)
    check(e)
    path.write_bytes(raw.replace(b"element vertex 4", b"element vertex 6"))  # data runs out
    with pytest.raises(FileFormatError) as e:
        pio.read_ply(path)
    assert str(path) in str(e.value)


def test_ply_malformed_content(tmp_path):
    path = tmp_path / "bad.ply"
    raw = _ply_bytes(True)
    path.write_bytes(raw.replace(b"3 0 1 2", b"3 0 1 9"))
    raises, check = expect_error(path, "face 0 refers to vertex 9", "4 vertices")
    with raises as e:
        pio.read_ply(path)
    check(e)
    path.write_bytes(raw.replace(b"property float z", b"property float w"))
    raises, check = expect_error(path, "no z property")
    with raises as e:
        pio.read_ply(path)
    check(e)
    path.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nend_header\n1\nabc\n")
    with pytest.raises(FileFormatError) as e:
        pio.read_ply(path)
    assert str(path) in str(e.value) and "malformed" in str(e.value)
    path.write_bytes(b"not a ply file\n")
    with pytest.raises(FileFormatError):
        pio.read_ply(path)
    path.write_bytes(b"")
    with pytest.raises(FileFormatError):
        pio.read_ply(path)


def test_write_ply_rejects_what_ply_cannot_store(tmp_path):
    need("plyfile")
    cloud = PointCloud(torch.zeros(3, 3), fields={"big": torch.tensor([0, 1, 2**40])})
    with pytest.raises(ValueError, match="big"):
        pio.write_ply(tmp_path / "x.ply", cloud)
    with pytest.raises(ValueError, match="normals"):
        pio.write_ply(tmp_path / "x.ply", PointCloud(torch.zeros(3, 3), normals=torch.zeros(2, 3)))
    with pytest.raises(ValueError, match="faces"):
        pio.write_ply(tmp_path / "x.ply", PointCloud(torch.zeros(3, 3), faces=torch.tensor([[0, 1, 3]])))


# ---------------------------------------------------------------------------------------------
# PCD


@pytest.mark.parametrize("encoding", ["ascii", "binary", "binary_compressed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pcd_round_trip(tmp_path, encoding, dtype):
    need("pypcd4")
    cloud = make_cloud(dtype=dtype)
    n = cloud.points.shape[0]
    fields = {
        "label": torch.arange(n, dtype=torch.int64) * 2**54 + 1,  # past 2**53: ascii must parse integers as such
        "ring": (torch.arange(n) % 64).to(torch.uint8),
        "time": torch.rand(n, dtype=torch.float64),
        "fpfh": torch.rand(n, 5, dtype=torch.float32),
    }
    cloud = cloud._replace(fields=fields)
    path = tmp_path / "cloud.pcd"
    pio.write_pcd(path, cloud, encoding=encoding)
    assert f"DATA {encoding}\n".encode() in path.read_bytes()
    assert_same_cloud(pio.read_pcd(path, dtype=dtype), cloud)
    assert_same_cloud(pio.read(path, dtype=dtype), cloud)


@pytest.mark.parametrize("encoding", ["binary", "binary_compressed"])
def test_pcd_written_by_pypcd4(tmp_path, encoding):
    pypcd4 = need("pypcd4")
    rng = np.random.default_rng(3)
    xyz = rng.normal(size=(50, 3)).astype(np.float32)
    rgb_u8 = rng.integers(0, 256, size=(50, 3))
    packed = pypcd4.PointCloud.encode_rgb(rgb_u8)
    intensity = rng.random(50).astype(np.float32)
    label = rng.integers(0, 9, 50).astype(np.uint32)
    pc = pypcd4.PointCloud.from_xyzirgbl_points(np.column_stack([xyz, intensity, packed, label]))
    path = tmp_path / "lib.pcd"
    pc.save(str(path), encoding=pypcd4.Encoding(encoding))
    got = pio.read_pcd(path)
    assert same(got.points, torch.from_numpy(xyz))
    assert same(got.colors, torch.from_numpy(rgb_u8.astype(np.float32) / np.float32(255)))
    assert same(got.intensity, torch.from_numpy(intensity))
    assert got.fields["label"].tolist() == label.tolist()


def test_pcd_ascii_as_pcl_writes_it(tmp_path):
    """PCL writes a float rgb field in ascii as its uint32 word; '_' fields are padding."""
    need("pypcd4")
    path = tmp_path / "pcl.pcd"
    path.write_text(
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS x y z rgb _ normal_x normal_y normal_z\n"
        "SIZE 4 4 4 4 1 4 4 4\nTYPE F F F F U F F F\nCOUNT 1 1 1 1 1 1 1 1\nWIDTH 2\nHEIGHT 1\n"
        "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS 2\nDATA ascii\n"
        "1.5 -2 3e-3 4278190335 0 0 0 1\n"
        "nan nan nan 4294901760 0 1 0 0\n"
    )
    got = pio.read_pcd(path)
    assert got.colors.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    assert same(got.points[0], torch.tensor([1.5, -2.0, 3e-3]))
    assert torch.isnan(got.points[1]).all()  # organized-cloud NaN points are kept as stored
    assert got.normals.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    assert got.fields == {}


def _pcd_text(points=3, width=None, data="ascii", drop=None):
    lines = [
        "VERSION 0.7",
        "FIELDS x y z",
        "SIZE 4 4 4",
        "TYPE F F F",
        "COUNT 1 1 1",
        f"WIDTH {width or points}",
        "HEIGHT 1",
        f"POINTS {points}",
        f"DATA {data}",
    ]
    return "\n".join(line for line in lines if not (drop and line.startswith(drop))) + "\n"


def test_pcd_missing_header_field(tmp_path):
    need("pypcd4")
    path = tmp_path / "nosize.pcd"
    path.write_text(_pcd_text(drop="SIZE") + "1 2 3\n4 5 6\n7 8 9\n")
    raises, check = expect_error(path, "missing", "SIZE")
    with raises as e:
        pio.read_pcd(path)
    check(e)
    path.write_text(_pcd_text(drop="DATA"))
    raises, check = expect_error(path, "DATA")
    with raises as e:
        pio.read_pcd(path)
    check(e)
    path.write_text(_pcd_text().replace("SIZE 4 4 4", "SIZE 4 4"))
    raises, check = expect_error(path, "3 FIELDS but 2 SIZE")
    with raises as e:
        pio.read_pcd(path)
    check(e)
    path.write_text(_pcd_text(width=2) + "1 2 3\n4 5 6\n7 8 9\n")
    raises, check = expect_error(path, "WIDTH x HEIGHT")
    with raises as e:
        pio.read_pcd(path)
    check(e)


@pytest.mark.parametrize("encoding", ["ascii", "binary", "binary_compressed"])
def test_pcd_header_lies_about_the_point_count(tmp_path, encoding):
    need("pypcd4")
    path = tmp_path / "lies.pcd"
    pio.write_pcd(path, torch.randn(10, 3), encoding=encoding)
    raw = path.read_bytes()
    for wrong in (9, 11):
        path.write_bytes(raw.replace(b"WIDTH 10", b"WIDTH %d" % wrong).replace(b"POINTS 10", b"POINTS %d" % wrong))
        raises, check = expect_error(path, f"POINTS {wrong}")
        with raises as e:
            pio.read_pcd(path)
        check(e)


@pytest.mark.parametrize("encoding", ["binary", "binary_compressed"])
def test_pcd_truncated_binary(tmp_path, encoding):
    need("pypcd4")
    path = tmp_path / "cut.pcd"
    pio.write_pcd(path, torch.randn(10, 3), encoding=encoding)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(FileFormatError) as e:
        pio.read_pcd(path)
    assert str(path) in str(e.value) and "bytes" in str(e.value)


def test_pcd_malformed_ascii_rows(tmp_path):
    need("pypcd4")
    path = tmp_path / "rows.pcd"
    path.write_text(_pcd_text() + "1 2 3\n4 5\n7 8 9\n")
    raises, check = expect_error(path, "malformed PCD ascii")
    with raises as e:
        pio.read_pcd(path)
    check(e)


# ---------------------------------------------------------------------------------------------
# LAS / LAZ


def _las(n=100, origin=(1000.0, 2000.0, 0.0), spread=10.0, point_format=3, seed=0):
    laspy = need("laspy")
    header = laspy.LasHeader(point_format=point_format, version="1.2")
    header.scales = np.array([0.001, 0.001, 0.001])
    header.offsets = np.array(origin)
    las = laspy.LasData(header)
    rng = np.random.default_rng(seed)
    las.x = origin[0] + rng.random(n) * spread
    las.y = origin[1] + rng.random(n) * spread
    las.z = origin[2] + rng.random(n) * spread
    las.intensity = rng.integers(0, 65536, n).astype(np.uint16)
    las.classification = rng.integers(0, 20, n).astype(np.uint8)
    if point_format in (2, 3):
        for c in ("red", "green", "blue"):
            setattr(las, c, rng.integers(0, 65536, n).astype(np.uint16))
    return las


@pytest.mark.parametrize("ext", [".las", ".laz"])
def test_las_written_by_laspy(tmp_path, ext):
    if ext == ".laz":
        need("lazrs")
    las = _las()
    path = tmp_path / f"cloud{ext}"
    las.write(str(path))
    xyz = np.stack([np.asarray(las.x), np.asarray(las.y), np.asarray(las.z)], 1)
    got = pio.read_las(path, dtype=torch.float64)
    assert same(got.points, torch.from_numpy(xyz))
    assert same(got.intensity, torch.from_numpy(np.asarray(las.intensity).astype(np.float64)))
    rgb = np.stack([np.asarray(las.red), np.asarray(las.green), np.asarray(las.blue)], 1)
    assert same(got.colors, torch.from_numpy(rgb.astype(np.float32) / np.float32(65535)))
    assert got.fields["classification"].tolist() == np.asarray(las.classification).tolist()
    assert got.fields["gps_time"].dtype == torch.float64
    # float32 relative to the header's offsets keeps the millimetre grid
    near = pio.read_las(path, origin="header")
    assert near.points.dtype == torch.float32
    assert (near.points.double() - torch.from_numpy(xyz - np.array([1000.0, 2000.0, 0.0]))).abs().max() < 1e-5
    # read() takes the default options: float32 from the origin, fine here (coordinates ~2e3, scale 1e-3)
    assert same(pio.read(path).points, torch.from_numpy(xyz.astype(np.float32)))


def test_las_float32_far_from_origin_is_refused(tmp_path):
    path = tmp_path / "utm.las"
    _las(origin=(548875.0, 4176972.0, 171.0), spread=90.0).write(str(path))
    raises, check = expect_error(path, "float32", "origin", kind=ValueError)
    with raises as e:
        pio.read_las(path)
    check(e)
    with pytest.raises(ValueError):
        pio.read(path)
    far = pio.read_las(path, dtype=torch.float64)
    near = pio.read_las(path, origin=(548875.0, 4176972.0, 171.0))
    assert (near.points.double() + torch.tensor([548875.0, 4176972.0, 171.0]) - far.points).abs().max() < 1e-4
    with pytest.raises(ValueError, match="origin"):
        pio.read_las(path, origin="centre")


def test_las_header_lies_about_the_point_count(tmp_path):
    path = tmp_path / "cut.las"
    _las(point_format=1).write(str(path))
    raw = path.read_bytes()
    record = 28  # point format 1
    path.write_bytes(raw[:-record])  # one record short: laspy reads 99 points without complaint
    raises, check = expect_error(path, "declares 100 points", "holds 99")
    with raises as e:
        pio.read_las(path)
    check(e)
    path.write_bytes(raw + raw[-record:])  # one undeclared record more
    raises, check = expect_error(path, "declares 100 points", "1 records")
    with raises as e:
        pio.read_las(path)
    check(e)
    path.write_bytes(raw[:-10])
    with pytest.raises(FileFormatError) as e:
        pio.read_las(path)
    assert str(path) in str(e.value)
    path.write_bytes(raw[:100])
    with pytest.raises(FileFormatError):
        pio.read_las(path)


def test_laz_truncated(tmp_path):
    need("lazrs")
    path = tmp_path / "cut.laz"
    _las().write(str(path))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(FileFormatError) as e:
        pio.read_las(path)
    assert str(path) in str(e.value)


# ---------------------------------------------------------------------------------------------
# meshes


def _tetra():
    vertices = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    return vertices, faces


@pytest.mark.parametrize("file_type", ["off", "obj", "stl", "stl_ascii"])
def test_mesh_exported_by_trimesh(tmp_path, file_type):
    trimesh = need("trimesh")
    vertices, faces = _tetra()
    vertices = vertices * 0.75 + torch.tensor([0.125, -3.5, 2.0])  # exact in every text format
    mesh = trimesh.Trimesh(vertices.double().numpy(), faces.numpy(), process=False)
    path = tmp_path / f"tetra.{file_type.split('_')[0]}"
    data = mesh.export(file_type=file_type)
    (path.write_text if isinstance(data, str) else path.write_bytes)(data)
    got = pio.read_mesh(path)
    assert got.faces.dtype == torch.int64 and got.vertices.dtype == torch.float32
    if file_type.startswith("stl"):  # STL stores each triangle's corners; compare the triangles
        assert got.vertices.shape == (12, 3)
        assert same(got.vertices[got.faces], vertices[faces])
    else:
        assert same(got.vertices, vertices) and same(got.faces, faces)
    cloud = pio.read(path)
    assert same(cloud.points, got.vertices) and same(cloud.faces, got.faces)


def _off(nv=4, nf=2, faces=("3 0 1 2", "3 0 2 3"), extra=""):
    return f"OFF\n# a comment\n{nv} {nf} 0\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n" + "\n".join(faces) + "\n" + extra


def test_off_polygons_and_header_counts(tmp_path):
    need("trimesh")
    path = tmp_path / "m.off"
    path.write_text(_off(nf=1, faces=("4 0 1 2 3",)))
    assert pio.read_mesh(path).faces.shape == (2, 3)  # the quad as two triangles
    for nf, faces in ((3, ("3 0 1 2", "3 0 2 3")), (1, ("3 0 1 2", "3 0 2 3"))):
        path.write_text(_off(nf=nf, faces=faces))
        raises, check = expect_error(path, f"declares 4 vertices and {nf} faces")
        with raises as e:
            pio.read_mesh(path)
        check(e)
    path.write_text(_off(faces=("3 0 1 2", "3 0 2 7")))
    with pytest.raises(FileFormatError) as e:
        pio.read_mesh(path)
    assert str(path) in str(e.value)
    path.write_text(_off().replace("1 1 0", "1 x 0"))
    with pytest.raises(FileFormatError) as e:
        pio.read_mesh(path)
    assert str(path) in str(e.value)


def test_stl_truncated_or_garbage(tmp_path):
    trimesh = need("trimesh")
    vertices, faces = _tetra()
    mesh = trimesh.Trimesh(vertices.double().numpy(), faces.numpy(), process=False)
    path = tmp_path / "t.stl"
    binary = mesh.export(file_type="stl")
    path.write_bytes(binary[:-20])
    raises, check = expect_error(path, "declaring 4 triangles needs 284")
    with raises as e:
        pio.read_mesh(path)
    check(e)
    ascii = mesh.export(file_type="stl_ascii")
    path.write_text(ascii[: len(ascii) // 2])
    raises, check = expect_error(path, "truncated")
    with raises as e:
        pio.read_mesh(path)
    check(e)
    path.write_bytes(b"\x00garbage")
    with pytest.raises(FileFormatError):
        pio.read_mesh(path)


def test_obj_of_vertices_only_and_of_several_objects(tmp_path):
    need("trimesh")
    path = tmp_path / "m.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\n")
    got = pio.read_mesh(path)
    assert got.vertices.tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0]] and got.faces.shape == (0, 3)
    path.write_text("o a\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\no b\nv 0 0 1\nv 1 0 1\nv 0 1 1\nf 4 5 6\n")
    got = pio.read_mesh(path)
    assert got.vertices.shape == (6, 3) and got.faces.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_obj_keeps_the_files_vertices(tmp_path):
    need("trimesh")
    path = tmp_path / "m.obj"
    # vertex 3 is used by no face and the faces carry texture coordinates: trimesh's defaults would
    # drop the one and split vertices by the other, renumbering the faces
    path.write_text(
        "v 0 0 0\nv 1 0 0\nv 9 9 9\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nvt 1 1\nf 1/1 2/2 4/3\nf 1/4 4/3 2/1\n"
    )
    got = pio.read_mesh(path)
    assert got.vertices.tolist() == [[0, 0, 0], [1, 0, 0], [9, 9, 9], [0, 1, 0]]
    assert got.faces.tolist() == [[0, 1, 3], [0, 3, 1]]


def test_obj_errors(tmp_path):
    need("trimesh")
    path = tmp_path / "m.obj"
    for cut, problem in (
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\nf 1 2", "line 5: a face with 2 corners"),
        ("v 0 0 0\nv 1 0 0\nv 0 1", "line 3: a vertex with 2 coordinates"),
    ):
        path.write_text(cut)  # cut inside a line
        raises, check = expect_error(path, problem)
        with raises as e:
            pio.read_mesh(path)
        check(e)
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n")
    with pytest.raises(FileFormatError) as e:
        pio.read_mesh(path)
    assert str(path) in str(e.value)
    path.write_bytes(b"\x89PNG not a mesh at all\n")
    raises, check = expect_error(path, "no vertex")
    with raises as e:
        pio.read_mesh(path)
    check(e)


def test_read_mesh_of_a_ply_without_faces(tmp_path):
    need("plyfile")
    path = tmp_path / "p.ply"
    pio.write_ply(path, torch.zeros(3, 3))
    raises, check = expect_error(path, "no face")
    with raises as e:
        pio.read_mesh(path)
    check(e)


# ---------------------------------------------------------------------------------------------
# XYZ / PTS text and KITTI .bin


def test_xyz_layouts(tmp_path):
    rng = np.random.default_rng(5)
    table = rng.normal(size=(20, 7))
    path = tmp_path / "c.xyz"
    np.savetxt(path, table[:, :3], fmt="%.17g", header="x y z")
    got = pio.read_xyz(path, dtype=torch.float64)
    assert same(got.points, torch.from_numpy(table[:, :3])) and got.normals is None
    np.savetxt(path, table[:, :6], fmt="%.17g")
    got = pio.read(path)
    assert same(got.normals, torch.from_numpy(table[:, 3:6].astype(np.float32)))
    np.savetxt(path, table[:, :5], fmt="%.17g")
    got = pio.read_xyz(path, columns=["x", "y", "z", "_", "label"])
    assert same(got.fields["label"], torch.from_numpy(table[:, 4].astype(np.float32))) and got.intensity is None
    raises, check = expect_error(path, "5 columns", "columns=")
    with raises as e:
        pio.read_xyz(path)
    check(e)


def test_pts_with_count_line(tmp_path):
    rng = np.random.default_rng(6)
    rows = np.column_stack([rng.normal(size=(9, 3)), rng.integers(-2048, 2048, 9), rng.integers(0, 256, (9, 3))])
    path = tmp_path / "scan.pts"
    with open(path, "w") as f:
        f.write("9\n")
        np.savetxt(f, rows, fmt="%.17g")
    got = pio.read(path)
    assert same(got.points, torch.from_numpy(rows[:, :3].astype(np.float32)))
    assert same(got.intensity, torch.from_numpy(rows[:, 3].astype(np.float32)))
    assert same(got.colors, torch.from_numpy(rows[:, 4:].astype(np.float32) / np.float32(255)))
    with open(path, "w") as f:
        f.write("10\n")
        np.savetxt(f, rows, fmt="%.17g")
    raises, check = expect_error(path, "declares 10 points but 9 rows")
    with raises as e:
        pio.read(path)
    check(e)


def test_xyz_malformed(tmp_path):
    path = tmp_path / "bad.xyz"
    path.write_text("1 2 3\n4 5\n")
    with pytest.raises(FileFormatError) as e:
        pio.read_xyz(path)
    assert str(path) in str(e.value)
    path.write_text("1 2 3\n4 5 z\n")
    with pytest.raises(FileFormatError):
        pio.read_xyz(path)
    path.write_text("")
    assert pio.read_xyz(path).points.shape == (0, 3)


def test_kitti_bin_round_trip_and_errors(tmp_path):
    cloud = make_cloud(n=1000)
    cloud = PointCloud(cloud.points, intensity=cloud.intensity)
    path = tmp_path / "000000.bin"
    pio.write_kitti_bin(path, cloud)
    assert path.stat().st_size == 1000 * 16
    assert_same_cloud(pio.read(path), cloud._replace(fields={}))
    scan = np.fromfile(path, dtype="<f4").reshape(-1, 4)  # the KITTI layout, read the way devkits do
    assert same(torch.from_numpy(scan[:, :3].copy()), cloud.points)
    pio.write_kitti_bin(path, cloud.points)  # no intensity: zeros
    assert pio.read_kitti_bin(path).intensity.abs().sum() == 0
    path.write_bytes(path.read_bytes()[:-4])
    raises, check = expect_error(path, "15996 bytes", "16-byte")
    with raises as e:
        pio.read_kitti_bin(path)
    check(e)


# ---------------------------------------------------------------------------------------------
# surface sampling and padding


# ---------------------------------------------------------------------------------------------
# real files: CGAL's example data (Debian package libcgal-demo)

CGAL_FILES = {
    "data.tar.gz": [
        "data/meshes/bunny00.off",
        "data/points_3/kitten.xyz",
        "data/points_3/colors.ply",
        "data/meshes/colored_tetra.ply",
        "data/meshes/sphere.stl",
        "data/points_3/oni.ply",
    ],
    "examples.tar.gz": [
        "examples/Point_set_processing_3/data/pig_points.las",
        "examples/Point_set_processing_3/data/urban.las",
    ],
}


@pytest.fixture(scope="module")
def cgal(tmp_path_factory):
    if not all(os.path.isfile(os.path.join(CGAL_DOC, t)) for t in CGAL_FILES):
        pytest.skip(f"CGAL example data not found in {CGAL_DOC} (apt-get install libcgal-demo)")
    out = tmp_path_factory.mktemp("cgal")
    for tarball, wanted in CGAL_FILES.items():
        left = set(wanted)
        with tarfile.open(os.path.join(CGAL_DOC, tarball)) as tar:
            for member in tar:
                if member.name in left:
                    target = out / os.path.basename(member.name)
                    target.write_bytes(tar.extractfile(member).read())
                    left.discard(member.name)
                    if not left:
                        break
        assert not left, f"missing from {tarball}: {left}"
    return out


def test_cgal_bunny(cgal):
    need("trimesh")
    mesh = pio.read_mesh(cgal / "bunny00.off")
    assert mesh.vertices.shape == (37706, 3) and mesh.faces.shape == (75408, 3)  # the OFF header's counts
    assert int(mesh.faces.min()) == 0 and int(mesh.faces.max()) == 37705
    # A closed surface: every edge is shared by exactly two faces (Euler: F = 2 V - 4 for genus 0).
    assert mesh.faces.shape[0] == 2 * mesh.vertices.shape[0] - 4
    low, high = mesh.vertices.min(0).values, mesh.vertices.max(0).values
    assert (low > -1).all() and (high < 1).all() and ((high - low) > 0.5).all()
    samples = scenes.sample_surface(mesh, 2000, seed=0)
    assert ((samples.points >= low - 1e-6) & (samples.points <= high + 1e-6)).all()


def test_cgal_point_sets(cgal):
    kitten = pio.read(cgal / "kitten.xyz")  # 6 columns: points with normals
    assert kitten.points.shape == (5210, 3)
    assert torch.allclose(kitten.normals.norm(dim=1), torch.ones(5210), atol=1e-4)
    need("plyfile")
    colors = pio.read(cgal / "colors.ply")  # ascii, double x y z, normals, uchar rgb, int intensity
    assert colors.points.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert colors.colors.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert colors.intensity.tolist() == [10, 20, 30]
    oni = pio.read(cgal / "oni.ply")  # binary little endian, double
    assert oni.points.shape == (1435, 3)
    assert torch.allclose(oni.normals.norm(dim=1), torch.ones(1435), atol=1e-4)
    tetra = pio.read(cgal / "colored_tetra.ply")  # ascii with face and edge elements
    assert tetra.points.shape == (4, 3) and tetra.faces.shape == (4, 3) and "id" in tetra.fields
    need("trimesh")
    sphere = pio.read_mesh(cgal / "sphere.stl")  # binary STL
    radius = sphere.vertices.norm(dim=1)
    assert sphere.faces.shape == (320, 3) and float(radius.max() - radius.min()) < 1e-3 * float(radius.max())


def test_cgal_las(cgal):
    need("laspy")
    pig = pio.read(cgal / "pig_points.las")
    assert pig.points.shape == (468, 3) and pig.colors.shape == (468, 3)
    assert (pig.points.abs() < 1).all()
    with pytest.raises(ValueError, match="float32"):  # UTM coordinates
        pio.read_las(cgal / "urban.las")
    urban = pio.read_las(cgal / "urban.las", origin="header")
    assert urban.points.shape == (13511, 3) and (urban.points >= 0).all() and (urban.points < 100).all()
