"""Running a trained model: logits in eval mode, and its loss and accuracy on a data set."""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module

from dpaudit.data import ArrayDataset
from dpaudit.layerwise import _pool_arguments, _pool_before_relu


@torch.no_grad()
def predict_logits(
    model: nn.Module, images: np.ndarray | torch.Tensor, *, device: torch.device | str = "cpu", batch_size: int = 1024
) -> np.ndarray:
    """Model outputs (raw logits) in eval mode, as a float32 numpy array (bit for bit ``model(images)``'s)."""
    was_training = model.training
    model.eval()
    tensor = torch.as_tensor(images)
    forward = (
        functools.partial(_sequential_forward, model)
        if isinstance(model, nn.Sequential) and _unhooked(model)
        else model
    )
    outputs = [forward(tensor[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(tensor), batch_size)]
    model.train(was_training)
    return torch.cat(outputs).numpy() if outputs else np.zeros((0, 0), dtype=np.float32)


def evaluate(model: nn.Module, data: ArrayDataset, *, device: torch.device | str = "cpu") -> tuple[float, float]:
    """(mean cross-entropy loss, accuracy) of ``model`` on ``data``."""
    logits = torch.from_numpy(predict_logits(model, data.images, device=device))
    labels = torch.from_numpy(data.labels)
    return float(F.cross_entropy(logits, labels)), float((logits.argmax(1) == labels).float().mean())


def _unhooked(model: nn.Sequential) -> bool:
    """Whether ``model`` is a plain ``nn.Sequential`` (no subclass) that no forward hook watches: its layers may be
    run one by one."""
    hooked = (_module._global_forward_hooks, _module._global_forward_pre_hooks)
    return (
        type(model) is nn.Sequential
        and not any(hooked)
        and not any(layer._forward_hooks or layer._forward_pre_hooks for layer in model.modules())
    )


def _sequential_forward(model: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``model(x)`` with each 2×2, stride-2 max pool on a CPU taken as the maximum of its window's four strided views
    (PyTorch's channels-first CPU kernel takes several times as long; the maximum of the same values is the same
    value), and each ReLU directly before a max pool run after it, on a quarter of the values (as the layer-wise
    method does: ``layerwise._pool_before_relu``)."""
    for layer, _ in _pool_before_relu((layer, {}) for layer in model):
        x = _window_maximum(x) if _strided_pool(layer, x) else layer(x)
    return x


def _strided_pool(layer: nn.Module, x: torch.Tensor) -> bool:
    """Whether ``layer`` is a max pool over disjoint 2×2 windows of the [N, C, H, W] CPU tensor ``x``."""
    return (
        type(layer) is nn.MaxPool2d
        and x.dim() == 4
        and x.device.type == "cpu"
        and _pool_arguments(layer) == ([2, 2], [2, 2], [0, 0], [1, 1])
        and not layer.return_indices
        and (not layer.ceil_mode or (x.shape[-2] % 2 == 0 and x.shape[-1] % 2 == 0))
    )


def _window_maximum(x: torch.Tensor) -> torch.Tensor:
    """Each disjoint 2×2 window's maximum of ``x`` [N, C, H, W] (an odd last row or column dropped, as the pool
    does without ceil mode); NaN where the window holds one."""
    x = x[..., : x.shape[-2] // 2 * 2, : x.shape[-1] // 2 * 2]
    rows = torch.maximum(x[..., 0::2, :], x[..., 1::2, :])
    return torch.maximum(rows[..., 0::2], rows[..., 1::2])
