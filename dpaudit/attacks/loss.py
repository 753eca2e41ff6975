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

from dpaudit._validation import DPAuditError, check_choice
from dpaudit.data import ArrayDataset

LOSS_SIGNALS = ("loss", "confidence")


def loss_scores(model: nn.Module, data: ArrayDataset, *, signal: str = "loss", device: str | torch.device = "cpu") -> np.ndarray:
    """Per-record membership score: −cross-entropy ("loss") or the softmax probability of the true class
    ("confidence"); higher means "member"."""
    from dpaudit.train import predict_logits

    check_choice("signal", signal, LOSS_SIGNALS)
    logits = torch.from_numpy(predict_logits(model, data.images, device=device)).double()
    labels = torch.from_numpy(data.labels)
    losses = F.cross_entropy(logits, labels, reduction="none")
    return (-losses if signal == "loss" else torch.exp(-losses)).numpy()


def run_loss_scores(run_dir: str | Path, *, epoch: int, signal: str = "loss") -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) of a ``dpaudit train`` run's target at checkpoint ``epoch``."""
    from dpaudit import models as model_registry
    from dpaudit.data import dataset_info, load_dataset, load_split
    from dpaudit.train import load_checkpoint, load_run_config, resolve_device

    run = Path(run_dir)
    config = load_run_config(run)
    if epoch not in config.eval_epochs:
        raise DPAuditError(f"epoch {epoch} has no checkpoint; evaluation epochs are {list(config.eval_epochs)}")
    split = load_split(run / "split.json")
    info = dataset_info(config.dataset)
    device = resolve_device(config.device)
    network = model_registry.build_model(config.model, input_shape=info.input_shape, num_classes=info.num_classes)
    load_checkpoint(run / "target" / f"epoch_{epoch:04d}.pt", network)
    network.to(device)
    members = load_dataset(config.dataset, split="train", root=config.data_root).subset(split.target_members)
    nonmembers = load_dataset(config.dataset, split=split.nonmember_source,
                              root=config.data_root).subset(split.target_nonmembers)
    return (loss_scores(network, members, signal=signal, device=device),
            loss_scores(network, nonmembers, signal=signal, device=device))
