"""Small tables made on the CPU (bin centres, normals, circle sizes) and used on the inputs' device."""

import torch
from torch import Tensor


def host_table(table: Tensor, device: torch.device) -> Tensor:
    """``table`` on ``device`` without waiting for the GPU: a non-blocking copy from pageable host
    memory is staged by the driver and returns at once, where a blocking ``.to()`` would wait for
    the stream's earlier work. Under torch.compile the table is a constant of the graph."""
    if device.type == "cpu" or torch.compiler.is_compiling():
        return table.to(device)
    return table.to(device, non_blocking=True)
