"""Helpers shared by tests/test_hough_circles.py and tests/test_hough_lines.py: random edge maps
and exact comparison. Apart from tests/samples_hough.py, which tests/op_samples.py imports while
it merges the families: a test file importing the samples module first would enter that merge
half-initialized."""

import torch


def random_edges(batch, height, width, density=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, height, width, generator=g) < density


def assert_equal(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=0, atol=0, equal_nan=True)
