"""The training device: resolving a device name, and moving small host arrays to it without stalling it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

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


@contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
    """torch on one CPU thread inside, where ``device`` is the CPU (elsewhere nothing changes).

    For the few passes over an audit block (whole-run canaries: ``dpaudit.attacks.canary_run``), each well under a
    millisecond: split over the threads, each pass waits for all of them, which costs more than it saves where the
    cores are shared (the model's small tensors run on one thread anyway). Results equal those on more threads up
    to rounding (at most where a fused operation is split between threads).
    """
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def padding_mask(counts: Sequence[int], width: int, device: torch.device) -> torch.Tensor:
    """[M, W] booleans on ``device``: True in the rows from ``counts[m]`` on, the padding of model m's batch."""
    return host_to_device(torch.arange(width)[None, :] >= torch.tensor(counts)[:, None], device)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise DPAuditError("device 'cuda' requested but no CUDA device is available")
    return torch.device(device)
