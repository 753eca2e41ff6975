"""Running a trained model: logits in eval mode, and its loss and accuracy on a data set."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpaudit.data import ArrayDataset


@torch.no_grad()
def predict_logits(
    model: nn.Module, images: np.ndarray | torch.Tensor, *, device: torch.device | str = "cpu", batch_size: int = 1024
) -> np.ndarray:
    """Model outputs (raw logits) in eval mode, as a float32 numpy array."""
    was_training = model.training
    model.eval()
    tensor = torch.as_tensor(images)
    outputs = [model(tensor[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(tensor), batch_size)]
    model.train(was_training)
    return torch.cat(outputs).numpy() if outputs else np.zeros((0, 0), dtype=np.float32)


def evaluate(model: nn.Module, data: ArrayDataset, *, device: torch.device | str = "cpu") -> tuple[float, float]:
    """(mean cross-entropy loss, accuracy) of ``model`` on ``data``."""
    logits = torch.from_numpy(predict_logits(model, data.images, device=device))
    labels = torch.from_numpy(data.labels)
    return float(F.cross_entropy(logits, labels)), float((logits.argmax(1) == labels).float().mean())
