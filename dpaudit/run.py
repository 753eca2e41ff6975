"""Reading a ``dpaudit train`` run: its configuration, split and checkpoints (the layout: :mod:`dpaudit.rundir`).

Attacks, diagnostics and summaries read runs through this module, never through the training engine.
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
from dpaudit.rundir import RunDir, shadow_name

__all__ = ["RunDir", "load_checkpoint", "load_run_config", "open_run", "save_checkpoint", "shadow_name"]


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


def open_run(run_dir: str | Path, *, epoch: int):
    """What attacks on one checkpoint epoch of a ``dpaudit train`` run need.

    Returns:
        ``(config, split, load, device)``: ``load(name)`` puts the epoch checkpoint of model ``name``
        (``"target"``, ``shadow_name(i)``) into one shared network on ``device`` and returns it.

    Raises:
        DPAuditError: no run at ``run_dir``, or no checkpoint at ``epoch``.
    """
    from dpaudit.data import load_split

    run = RunDir(run_dir)
    config = load_run_config(run.path)
    if epoch not in config.eval_epochs:
        raise DPAuditError(f"epoch {epoch} has no checkpoint; evaluation epochs are {list(config.eval_epochs)}")
    split = load_split(run.split)
    info = dataset_info(config.dataset)
    device = resolve_device(config.device)
    network = model_registry.build_model(config.model, input_shape=info.input_shape, num_classes=info.num_classes)

    def load(name: str) -> nn.Module:
        return load_checkpoint(run.model(name).checkpoint(epoch), network).to(device)

    return config, split, load, device


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The ``TrainConfig`` a run directory was trained with."""
    path = RunDir(run_dir).config
    if not path.is_file():
        raise DPAuditError(f"no training run at {run_dir} (missing config.json); run `dpaudit train` first")
    return TrainConfig.from_dict(read_json(path)["config"])
