import os

import pytest
import torch

import pointops  # noqa: F401  (registers the operators)

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
# the kNN / ball-query search strategies the `strategy` fixture forces
STRATEGIES = ["brute", "grid", "block"]


def pytest_collection_modifyitems(config, items):
    run_slow = os.environ.get("POINTOPS_SLOW_TESTS", "0") == "1"
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow; set POINTOPS_SLOW_TESTS=1"))


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(params=STRATEGIES)
def strategy(request, monkeypatch):
    """Every kNN / ball-query search of the test takes the named strategy (see
    tests/test_geometry_neighbors.py's use_strategy)."""
    from tests.test_geometry_neighbors import use_strategy

    if request.param == "block":  # the block grid serves padded kNN on CUDA only
        device = getattr(request.node, "callspec", None) and request.node.callspec.params.get("device")
        if device == "cpu" or "ball_query" in request.node.name or "packed" in request.node.name:
            pytest.skip("the block grid serves padded kNN on CUDA")
    use_strategy(monkeypatch, request.param)
    return request.param


def assert_same(actual, expected):
    """Tuples of tensors equal bit for bit (NaN equals NaN), with equal dtypes and shapes."""
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
        torch.testing.assert_close(a.cpu(), e.cpu(), rtol=0, atol=0, equal_nan=True)
