"""The training device: resolving a device name, and moving small host arrays to it without stalling it."""

from __future__ import annotations

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
