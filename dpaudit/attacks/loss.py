"""Loss-threshold membership inference (Yeom et al. 2018): members tend to have lower loss.

The score of a record is its negative cross-entropy under the attacked model (higher = member), or
its true-class confidence; the audit statistics then sweep the threshold with proper selection.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpaudit._validation import check_choice
from dpaudit.data import ArrayDataset

LOSS_SIGNALS = ("loss", "confidence")


def loss_scores(
    model: nn.Module, data: ArrayDataset, *, signal: str = "loss", device: str | torch.device = "cpu"
) -> np.ndarray:
    """Per-record membership score: −cross-entropy ("loss") or the softmax probability of the true class
    ("confidence"); higher means "member"."""
    from dpaudit.inference import predict_logits

    check_choice("signal", signal, LOSS_SIGNALS)
    logits = torch.from_numpy(predict_logits(model, data.images, device=device)).double()
    labels = torch.from_numpy(data.labels)
    losses = F.cross_entropy(logits, labels, reduction="none")
    return (-losses if signal == "loss" else torch.exp(-losses)).numpy()


def run_loss_scores(run_dir: str | Path, *, epoch: int, signal: str = "loss") -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) of a ``dpaudit train`` run's target at checkpoint ``epoch``."""
    from dpaudit.data import load_dataset
    from dpaudit.run import open_run

    config, split, load, device = open_run(run_dir, epoch=epoch)
    network = load("target")
    members = load_dataset(config.data.dataset, split="train", root=config.data.data_root).subset(split.target_members)
    nonmembers = load_dataset(config.data.dataset, split=split.nonmember_source, root=config.data.data_root).subset(
        split.target_nonmembers
    )
    return (
        loss_scores(network, members, signal=signal, device=device),
        loss_scores(network, nonmembers, signal=signal, device=device),
    )
