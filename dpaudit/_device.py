"""The training device: resolving a device name, and moving small host arrays to it without stalling it."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

from dpaudit._validation import DPAuditError


def host_to_device(values: np.ndarray | torch.Tensor | list[int], device: torch.device) -> torch.Tensor:
    """``values`` on ``device``; to a GPU through pinned memory and asynchronously, so the host does not wait
    for the kernels already queued (a plain copy from pageable memory synchronises with them)."""
    tensor = torch.as_tensor(values)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def padding_mask(counts: Sequence[int], width: int, device: torch.device) -> torch.Tensor:
    """[M, W] booleans on ``device``: True in the rows from ``counts[m]`` on, the padding of model m's batch."""
    return host_to_device(torch.arange(width)[None, :] >= torch.tensor(counts)[:, None], device)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise DPAuditError("device 'cuda' requested but no CUDA device is available")
    return torch.device(device)


@functools.cache
def _accelerator_present() -> bool:
    """Whether torch sees a CUDA, MPS or XPU device (read once)."""
    xpu = getattr(torch, "xpu", None)
    return bool(
        torch.cuda.is_available() or torch.backends.mps.is_available() or (xpu is not None and xpu.is_available())
    )


def seed_global_rng(seed: int) -> None:
    """``torch.manual_seed(seed)``, quickly where there is only a CPU to seed.

    Without an accelerator, ``torch.manual_seed`` seeds the CPU generator and queues the seed for a CUDA that can
    never start, formatting a stack trace each time (a tenth of a millisecond or more, by the stack's depth, for each
    model built); seeding the CPU generator alone leaves the same state. With an accelerator this is
    ``torch.manual_seed`` itself."""
    if _accelerator_present():
        torch.manual_seed(seed)
    else:
        torch.random.default_generator.manual_seed(int(seed))
