"""Every pointops operator and wrapper through opcheck, torch.compile, TorchScript, export,
side streams and a second GPU. Families join by adding samples to tests/op_samples.py."""

import re

import pytest
import torch

from tests.conftest import DEVICES
from tests.op_samples import OP_SAMPLES, WRAPPER_CASES


def registered_ops():
    names = {
        n.split("::", 1)[1].split(".", 1)[0]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("pointops::")
    }
    return sorted(names)


def test_every_registered_op_has_samples():
    assert registered_ops(), "no pointops operators are registered"
    assert set(registered_ops()) == set(OP_SAMPLES)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _assert_equal(a, b):
    for x, y in zip(_as_tuple(a), _as_tuple(b)):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", sorted(OP_SAMPLES))
def test_opcheck(op_name, device):
    op = getattr(torch.ops.pointops, op_name).default
    for args in OP_SAMPLES[op_name](device):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(WRAPPER_CASES))
def test_compile_fullgraph(name, device):
    case = WRAPPER_CASES[name]
    args = case.make_args(device)
    torch._dynamo.reset()
    compiled = torch.compile(case.fn, fullgraph=True)
    _assert_equal(compiled(*args), case.fn(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(WRAPPER_CASES))
def test_torchscript(name, device):
    case = WRAPPER_CASES[name]
    args = case.make_args(device)
    _assert_equal(torch.jit.script(case.fn)(*args), case.fn(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(WRAPPER_CASES))
def test_export(name, device):
    case = WRAPPER_CASES[name]
    args = case.make_args(device)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]

    class Module(torch.nn.Module):
        def forward(self, *ts):
            it = iter(ts)
            full = [next(it) if isinstance(a, torch.Tensor) else a for a in args]
            return case.fn(*full)

    exported = torch.export.export(Module(), tuple(tensors))
    _assert_equal(exported.module()(*tensors), case.fn(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", sorted(OP_SAMPLES))
def test_repeat_calls_equal(op_name, device):
    """Two identical calls return identical results, bit for bit (no order-dependent sums)."""
    op = getattr(torch.ops.pointops, op_name)
    for args in OP_SAMPLES[op_name](device):
        _assert_equal(op(*args), op(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(WRAPPER_CASES))
def test_wrapper_repeat_calls_equal(name, device):
    case = WRAPPER_CASES[name]
    args = case.make_args(device)
    _assert_equal(case.fn(*args), case.fn(*args))


@pytest.mark.cuda
@pytest.mark.parametrize("op_name", sorted(OP_SAMPLES))
def test_side_stream(op_name):
    """Inputs produced on a non-default stream: the op must run on the current stream."""
    op = getattr(torch.ops.pointops, op_name)
    for args in OP_SAMPLES[op_name]("cpu"):
        expected = op(*args)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(20_000_000)  # keeps the stream busy: a launch elsewhere would race
            # the copies queue behind the sleep on this stream
            cuda_args = tuple(a.cuda(non_blocking=True) if isinstance(a, torch.Tensor) else a for a in args)
            result = op(*cuda_args)
        stream.synchronize()
        _assert_equal(tuple(r.cpu() for r in _as_tuple(result)), _as_tuple(expected))


def _to(args, device):
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("op_name", sorted(OP_SAMPLES))
@pytest.mark.parametrize("data, current", [(1, 0), (0, 1)])
def test_inputs_on_another_gpu_than_the_current_one(op_name, data, current):
    """Inputs on cuda:data while cuda:current is the current device, with a busy side stream
    current on cuda:data: the op must run on the inputs' device and on that device's current
    stream, and equal the same call on cuda:0 bit for bit."""
    op = getattr(torch.ops.pointops, op_name)
    for args in OP_SAMPLES[op_name]("cpu"):
        torch.cuda.set_device(0)
        expected = tuple(r.cpu() for r in _as_tuple(op(*_to(args, "cuda:0"))))
        torch.cuda.set_device(data)
        previous = torch.cuda.current_stream(data)
        stream = torch.cuda.Stream(device=data)
        torch.cuda.set_stream(stream)
        try:
            torch.cuda._sleep(20_000_000)  # the copies below wait behind this on the side stream
            moved = _to(args, torch.device("cuda", data))
            torch.cuda.set_device(current)
            result = _as_tuple(op(*moved))
            assert all(r.device == torch.device("cuda", data) for r in result)
        finally:
            torch.cuda.set_device(data)
            torch.cuda.set_stream(previous)
            torch.cuda.set_device(0)
        stream.synchronize()
        _assert_equal(tuple(r.cpu() for r in result), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("op_name", sorted(OP_SAMPLES))
def test_mixed_devices_raise_clear_errors(op_name):
    """The first tensor on CUDA, another on the CPU: an error that names a device, never a read of
    the wrong memory."""
    op = getattr(torch.ops.pointops, op_name)
    for args in OP_SAMPLES[op_name]("cpu"):
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if len(tensors) < 2:
            continue
        for other in tensors[1:]:
            mixed = list(_to(args, "cuda"))
            mixed[other] = args[other]
            with pytest.raises(RuntimeError, match="device"):
                op(*mixed)


OTHER_DEVICES = ["meta"] + (["cuda:1"] if torch.cuda.device_count() >= 2 else [])


@pytest.mark.parametrize("other", OTHER_DEVICES)
@pytest.mark.parametrize("op_name", sorted(OP_SAMPLES))
def test_tensor_on_another_device_is_named(op_name, other):
    """Each tensor argument in turn on another device than the rest (meta among CPU tensors, or
    cuda:1 among cuda:0 ones): an error that names that argument and a device, never an output
    (a meta tensor among CPU ones dispatches to the fake kernel, which would otherwise return
    uninitialised CPU memory)."""
    op = getattr(torch.ops.pointops, op_name).default
    names = [a.name for a in op._schema.arguments]
    home = "cuda:0" if other.startswith("cuda") else "cpu"
    for args in OP_SAMPLES[op_name](home):
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if len(tensors) < 2:
            continue
        for i in tensors:
            moved = list(args)
            moved[i] = args[i].detach().to(other)
            name = names[i]
            with pytest.raises(RuntimeError) as error:
                op(*moved)
            message = str(error.value)
            assert re.search(rf"\b{name}\b", message) and "device" in message, (
                f"{op_name}: {name} on {other}: the error does not name it: {message[:300]}"
            )
