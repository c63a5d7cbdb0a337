"""Checks the fake (meta) kernels share: the few a fake needs to compute its output shapes and to
refuse what the real kernels refuse (csrc/common/checks.h holds the real kernels' checks)."""
from typing import Optional

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def distance_dtype(points: torch.Tensor) -> torch.dtype:
    """Squared distances and other float outputs: float64 for float64 inputs, else float32."""
    return torch.float64 if points.dtype == torch.float64 else torch.float32


def check_floating(t: torch.Tensor, name: str) -> None:
    torch._check(t.dtype in FLOATS, lambda: f"{name} must be float32, float64, float16 or bfloat16, got {t.dtype}")


def check_same_device(t: Optional[torch.Tensor], name: str, ref: torch.Tensor, ref_name: str = "points") -> None:
    if t is not None:
        torch._check(t.device == ref.device,
                     lambda: f"{name} must be on the same device as {ref_name} ({ref.device}), got {t.device}")
