"""Files that lie about their size are refused before they are read: a FileFormatError naming the
file, the field and the values, quickly and without a large allocation (pointops/io/)."""

import struct
import time

import pytest

from pointops import io as pio
from pointops.io import FileFormatError
from tests.test_io import _las, _pcd_text, need


def refused(path, *words, read=None, seconds=5.0):
    start = time.perf_counter()
    with pytest.raises(FileFormatError) as e:
        (read or pio.read_cloud)(path)
    message = str(e.value)
    assert str(path) in message, message
    for word in words:
        assert word in message, (word, message)
    assert time.perf_counter() - start < seconds, message
    return message


def test_pcd_count_that_the_file_cannot_hold(tmp_path):
    need("pypcd4")
    path = tmp_path / "count.pcd"
    path.write_text(_pcd_text().replace("COUNT 1 1 1", "COUNT 1 1 100000000") + "1 2 3\n4 5 6\n7 8 9\n")
    refused(path, "COUNT 1 1 100000000", "POINTS 3", "bytes after its header", read=pio.read_pcd)
    for data in ("binary", "binary_compressed"):
        path = tmp_path / f"points_{data}.pcd"
        path.write_bytes(_pcd_text(points=10**9, data=data).encode() + b"\0" * 64)
        refused(path, "POINTS 1000000000", read=pio.read_pcd)


def test_pcd_comment_lines_do_not_count_against_the_header_limit(tmp_path):
    need("pypcd4")
    path = tmp_path / "comments.pcd"
    comments = "".join(f"# comment {k}\n" for k in range(500))
    path.write_text(comments + _pcd_text() + "1 2 3\n4 5 6\n7 8 9\n")
    cloud = pio.read_pcd(path)
    assert cloud.points.shape == (3, 3)


def test_pcd_header_size_is_bounded(tmp_path):
    need("pypcd4")
    path = tmp_path / "long.pcd"
    path.write_bytes(b"# " + b"x" * (4 << 20) + b"\n" + _pcd_text().encode())
    refused(path, "header size limit", read=pio.read_pcd)
    path = tmp_path / "keywords.pcd"
    path.write_text("".join(f"UNKNOWN{k} 1\n" for k in range(100)) + _pcd_text())
    refused(path, "keyword lines", read=pio.read_pcd)


def test_ply_header_size_is_bounded(tmp_path):
    need("plyfile")
    path = tmp_path / "long.ply"
    path.write_bytes(
        b"ply\nformat ascii 1.0\ncomment " + b"x" * (4 << 20) + b"\nelement vertex 1\n"
        b"property float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n"
    )
    refused(path, "header size limit", read=pio.read_ply)


@pytest.mark.parametrize("fmt", ["binary_little_endian", "ascii"])
def test_ply_element_counts_that_the_file_cannot_hold(tmp_path, fmt):
    need("plyfile")
    path = tmp_path / "count.ply"
    path.write_bytes(
        f"ply\nformat {fmt} 1.0\nelement vertex 1000000000\nproperty float x\nproperty float y\n"
        "property float z\nend_header\n".encode()
        + b"\0" * 120
    )
    refused(path, "element vertex 1000000000", "bytes after its header", read=pio.read_ply)


def test_las_point_count_that_the_file_cannot_hold(tmp_path):
    path = tmp_path / "count.las"
    _las(point_format=1).write(str(path))
    raw = bytearray(path.read_bytes())
    raw[107:111] = struct.pack("<I", 10**9)  # LAS 1.2: legacy point count
    path.write_bytes(bytes(raw))
    refused(path, "declares 1000000000 points", "holds 100 records", read=pio.read_las)


def test_obj_face_index_zero_is_refused(tmp_path):
    need("trimesh")
    path = tmp_path / "zero.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n")
    refused(path, "line 4", "index 0", read=pio.read_mesh)
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1/1 2/2 0/3\n")
    refused(path, "index 0", read=pio.read_mesh)
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf -3 -2 -1\n")  # relative indices are fine
    assert pio.read_mesh(path).faces.tolist() == [[0, 1, 2]]


@pytest.mark.parametrize("value", ["300", "-5", "nan"])
def test_xyz_colours_out_of_range_are_refused(tmp_path, value):
    path = tmp_path / "colours.pts"
    path.write_text(f"0 0 0 10 20 30\n1 1 1 {value} 0 0\n")
    refused(path, "colour column 'r'", "data row 2", read=pio.read_xyz)


def test_xyz_line_size_is_bounded(tmp_path):
    path = tmp_path / "line.xyz"
    path.write_text("0 0 0\n" + "1.5 " * 100000 + "\n")
    refused(path, "line 2", "line size limit", read=pio.read_xyz)
    path.write_text("0 0 0\n1 2 3\n")
    assert pio.read_xyz(path).points.shape == (2, 3)
