"""The folder of a ``dpaudit train`` run: reading its configuration, split and checkpoints.

Layout (written by :func:`dpaudit.train.train_configuration`)::

    RUN/config.json              the validated configuration and derived values (z, σ_DP, q, T/epoch)
    RUN/split.json               member / non-member indices of the target and every shadow
    RUN/<model>/metrics.json     per epoch: training loss, test loss and accuracy
    RUN/<model>/ledger.json      per step: noise multiplier z, sample rate q (run-length encoded)
    RUN/<model>/epoch_EEEE.pt    state_dict at each evaluation epoch (+ epoch_EEEE.json metadata)

where <model> is ``target`` or :func:`shadow_name` (``shadow_00``, …). Attacks, diagnostics and summaries read
runs through this module, never through the training engine.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dpaudit import models as model_registry
from dpaudit._device import resolve_device
from dpaudit._io import atomic_write_bytes, read_json, write_json
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.data import dataset_info


def save_checkpoint(path: str | Path, model: nn.Module, metadata: dict[str, Any]) -> Path:
    """Write the state_dict to ``path`` and ``metadata`` beside it as JSON, both atomically."""
    buffer = io.BytesIO()
    # clone: an ensemble's parameters are views of stacked tensors, and torch.save would write the whole stack
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, buffer)
    path = Path(path)
    write_json(path.with_suffix(".json"), metadata)
    return atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, model: nn.Module) -> nn.Module:
    """Load a state_dict saved by ``save_checkpoint`` into ``model`` (``weights_only=True``)."""
    path = Path(path)
    if not path.is_file():
        raise DPAuditError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as error:  # noqa: BLE001 - any failure here means an unusable file
        raise DPAuditError(f"cannot load checkpoint {path}: {_first_sentence(error)}") from None
    return model


def _first_sentence(error: Exception) -> str:
    """The cause in a loader's error message (torch appends paragraphs of advice)."""
    text = str(error).strip()
    return text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(error).__name__


def shadow_name(index: int) -> str:
    return f"shadow_{index:02d}"


def open_run(run_dir: str | Path, *, epoch: int):
    """What attacks on one checkpoint epoch of a ``dpaudit train`` run need.

    Returns:
        ``(config, split, load, device)``: ``load(name)`` puts the epoch checkpoint of model ``name``
        (``"target"``, ``shadow_name(i)``) into one shared network on ``device`` and returns it.

    Raises:
        DPAuditError: no run at ``run_dir``, or no checkpoint at ``epoch``.
    """
    from dpaudit.data import load_split

    run = Path(run_dir)
    config = load_run_config(run)
    if epoch not in config.eval_epochs:
        raise DPAuditError(f"epoch {epoch} has no checkpoint; evaluation epochs are {list(config.eval_epochs)}")
    split = load_split(run / "split.json")
    info = dataset_info(config.dataset)
    device = resolve_device(config.device)
    network = model_registry.build_model(config.model, input_shape=info.input_shape, num_classes=info.num_classes)

    def load(name: str) -> nn.Module:
        return load_checkpoint(run / name / f"epoch_{epoch:04d}.pt", network).to(device)

    return config, split, load, device


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The ``TrainConfig`` a run directory was trained with."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise DPAuditError(f"no training run at {run_dir} (missing config.json); run `dpaudit train` first")
    return TrainConfig.from_dict(read_json(path)["config"])
