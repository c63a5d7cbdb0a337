"""Presets: the YAML files in configs/ and the Python table TorchScript resolves hold the same
values; names are listed; explicit values override a preset's."""

import os

import pytest
import torch

import pointops
from pointops import presets

yaml = pytest.importorskip("yaml", reason="PyYAML reads configs/*.yaml (installed by .ci/run)")


def test_bev_yaml_equals_the_code():
    config = pointops.load_config("bev")
    assert sorted(config) == sorted(presets.BEV_PRESETS)
    for name, entry in config.items():
        point_range, cell_size = pointops.bev_preset(name)
        assert point_range == [float(v) for v in entry["point_range"]], name
        assert cell_size == [float(v) for v in entry["cell_size"]], name


def test_plane_yaml_equals_the_code():
    config = pointops.load_config("planes")
    assert sorted(config) == sorted(presets.PLANE_PRESETS)
    for name, entry in config.items():
        assert pointops.plane_preset(name)._asdict() == entry, name


def test_ppf_yaml_equals_the_code():
    config = pointops.load_config("ppf")
    assert sorted(config) == sorted(presets.PPF_PRESETS)
    for name, entry in config.items():
        assert pointops.ppf_preset(name) == entry, name


def test_every_yaml_family_is_listed():
    listed = pointops.list_presets()
    assert sorted(listed) == sorted(f[:-5] for f in os.listdir(presets.config_dir()) if f.endswith(".yaml"))
    for family, names in listed.items():
        assert sorted(pointops.load_config(family)) == sorted(names)


def test_unknown_names_raise():
    with pytest.raises(ValueError, match="unknown BEV preset 'kiti'"):
        pointops.bev_preset("kiti")
    with pytest.raises(ValueError, match="unknown plane preset"):
        pointops.plane_preset("underwater")
    with pytest.raises(ValueError, match="unknown PPF preset 'slow'"):
        pointops.ppf_preset("slow")
    with pytest.raises(ValueError, match="no preset family 'nope'"):
        pointops.load_config("nope")


def test_explicit_values_override_a_preset():
    points = torch.rand(1, 50, 4) * 10
    by_name = pointops.bev_rasterize(points, ["count"], preset="kitti")
    assert by_name.shape[-2:] == (496, 432)
    wider = pointops.bev_rasterize(points, ["count"], preset="kitti", cell_size=[0.32, 0.32])
    assert wider.shape[-2:] == (248, 216)


def test_presets_resolve_under_torchscript():
    def grid(name: str):
        return pointops.bev_grid_size(None, None, name)

    assert torch.jit.script(grid)("nuscenes") == (512, 512)
    assert torch.jit.script(pointops.plane_preset)("indoor") == pointops.plane_preset("indoor")
