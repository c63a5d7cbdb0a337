import os

import pytest
import torch

import pointops  # noqa: F401  (registers the operators)

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


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
