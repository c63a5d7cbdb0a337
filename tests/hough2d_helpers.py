"""Helpers shared by tests/test_hough_circles.py and tests/test_hough_lines.py: the variant
fixture's body, random edge maps and exact comparison. Apart from tests/samples_hough2d.py, which
tests/op_samples.py imports while it merges the families: a test file importing the samples module
first would enter that merge half-initialized."""
from typing import Dict

import torch

VARIABLES = ("POINTOPS_DETECT_VARIANT",)


def select_variant(request, monkeypatch, variants: Dict[str, Dict[str, str]], cuda_only) -> str:
    """The body of the test files' autouse `variant` fixture: set the environment of the variant
    `request.param` (every other variable unset), skipping a CUDA-only variant on a CPU test."""
    name = request.param
    if name in cuda_only:
        on_cuda = request.node.get_closest_marker("cuda") is not None or (
            "device" in request.fixturenames and request.getfixturevalue("device") == "cuda")
        if not on_cuda:
            import pytest

            pytest.skip("a CUDA-only variant: the CPU runs the default")
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in variants[name].items():
        monkeypatch.setenv(variable, value)
    return name


def random_edges(batch, height, width, density=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, height, width, generator=g) < density


def assert_equal(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=0, atol=0, equal_nan=True)
