"""The C++ API (include/pointops/pointops.h, csrc/api.cpp) and the table its C++ test calls
(tests/cpp/api_calls.h) are what tools/gen_cpp_api.py writes from the schemas: a new or changed
op cannot leave them behind. .ci/run builds and runs them (docs/deploy.md)."""

import os
import re
import subprocess
import sys

import torch

import pointops  # noqa: F401  (registers the ops)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_cpp_api  # noqa: E402


def test_generated_files_are_up_to_date():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "gen_cpp_api.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_registered_op_has_a_function():
    with open(gen_cpp_api.SCHEMA_FILE) as f:
        parsed = {schema.name for schema, _ in gen_cpp_api.parse_schemas(f.read())}
    registered = {
        name.split("::")[1] for name in torch._C._dispatch_get_all_op_names() if name.startswith("pointops::")
    }
    assert parsed == registered
    header = open(gen_cpp_api.HEADER).read()
    for name in registered:
        assert re.search(r"\b" + name + r"\(", header), name


def test_defaults_follow_the_schema():
    header = open(gen_cpp_api.HEADER).read()
    flat = " ".join(header.split())
    assert (
        "FpsResult fps(const at::Tensor& points, const std::optional<at::Tensor>& lengths, "
        "const std::optional<at::Tensor>& start, int64_t k);" in flat
    )
    assert 'const std::string& backend = "dense"' in flat
    assert "std::optional<double> max_distance = std::nullopt" in flat
    assert "double suppression_angle = 3.141592653589793" in flat
