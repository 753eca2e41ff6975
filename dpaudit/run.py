"""Reading a ``dpaudit train`` run: its configuration, split and checkpoints (the layout: :mod:`dpaudit.rundir`).

Attacks, diagnostics and summaries read runs through this module, never through the training engine.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dpaudit import models as model_registry
from dpaudit._device import resolve_device
from dpaudit._io import atomic_write_bytes, read_json, write_json
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.data import dataset_info
from dpaudit.integrity import check_complete, verify_file
from dpaudit.rundir import RunDir, shadow_name

if TYPE_CHECKING:
    from dpaudit.data import HalvesSplit, MIASplit

__all__ = ["RunDir", "load_checkpoint", "load_ledger", "load_run_config", "open_run", "save_checkpoint", "shadow_name"]


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
    verify_file(path)
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


def open_run(
    run_dir: str | Path, *, epoch: int
) -> tuple[TrainConfig, MIASplit | HalvesSplit, Callable[[str], nn.Module], torch.device]:
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
    if epoch not in config.audit.eval_epochs:
        raise DPAuditError(f"epoch {epoch} has no checkpoint; evaluation epochs are {list(config.audit.eval_epochs)}")
    split = load_split(run.split)
    info = dataset_info(config.data.dataset)
    device = resolve_device(config.engine.device)
    network = model_registry.build_model(config.model.name, input_shape=info.input_shape, num_classes=info.num_classes)

    def load(name: str) -> nn.Module:
        return load_checkpoint(run.model(name).checkpoint(epoch), network).to(device)

    return config, split, load, device


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The ``TrainConfig`` a finished run was trained with.

    Raises:
        DPAuditError: no run there, a config.json that is not the one the run wrote, or a run whose training did not
            finish (:func:`dpaudit.integrity.check_complete`).
    """
    path = RunDir(run_dir).config
    if not path.is_file():
        raise DPAuditError(f"no training run at {run_dir} (missing config.json); run `dpaudit train` first")
    payload = read_json(path)
    if not (isinstance(payload, dict) and isinstance(payload.get("config"), dict) and "derived" in payload):
        raise DPAuditError(f'{path} is not a dpaudit run\'s configuration (no "config" and "derived" keys)')
    check_complete(run_dir)
    return TrainConfig.from_dict(payload["config"])


def load_ledger(run_dir: str | Path, *, model: str = "target") -> dict[str, Any]:
    """The privacy ledger of one model of a finished run (``PrivacyLedger.to_dict()``), checked against the run.

    Besides the file's own check (:func:`dpaudit.integrity.verify_file`), the target's ledger must record the run's
    planned steps: as many as its epochs take, each with the noise multiplier z the optimizer plans for it
    (``planned_noise_multipliers``) and the sample rate q it plans to record (``planned_sample_rate``: b/n but for a
    variant whose ledger departs on purpose; a non-private optimizer's records none). A folder
    holding a ledger alone (no config.json, no manifest: e.g. one a user wrote) has nothing to check it against and
    is read as it is.

    Raises:
        DPAuditError: no ledger, an incomplete run, or a ledger that disagrees with the run's configuration.
    """
    import numpy as np

    from dpaudit import optim
    from dpaudit.ledger import PrivacyLedger

    run = RunDir(run_dir)
    path = run.model(model).ledger
    alone = not run.config.is_file() and not run.manifest.is_file()  # nothing to check a ledger against
    config = None if alone else load_run_config(run_dir)
    if not path.is_file():
        raise DPAuditError(f"no privacy ledger at {path}; run `dpaudit train` first")
    if config is None:
        return read_json(path)
    payload = read_json(path)
    ledger = PrivacyLedger.from_dict(payload)
    if model != "target":
        return payload
    spec = optim.get_spec(config.optimizer.name)
    if not issubclass(spec.cls, optim.PrivateOptimizer):  # a non-private optimizer records no steps
        return payload
    hyper = config.hyperparameters(config.data.target_size)
    z, q = ledger.per_step()
    planned = np.asarray(spec.cls.planned_noise_multipliers(hyper), dtype=float).reshape(-1)
    planned_q = spec.cls.planned_sample_rate(hyper)
    epochs, batch_size, target_size = config.optimizer.epochs, config.optimizer.batch_size, config.data.target_size
    steps = epochs * math.ceil(target_size / batch_size)
    problem = None
    if ledger.steps != steps or len(ledger.epoch_ends) != epochs:
        problem = f"{ledger.steps} steps in {len(ledger.epoch_ends)} epochs where the run trained {steps} in {epochs}"
    elif planned.size != z.size or not np.allclose(z, planned, rtol=1e-9, atol=0):
        worst = int(np.argmax(np.abs(z - planned))) if planned.size == z.size else 0
        problem = f"noise multiplier z = {z[worst]:g} at step {worst + 1} where the run planned {planned[worst]:g}"
    elif not np.allclose(q, planned_q, rtol=1e-9, atol=0):
        problem = f"sample rate q = {q[0]:g} where the run planned {planned_q:g}"
    if problem:
        raise DPAuditError(f"{path} disagrees with the run's config.json: {problem}; the ledger cannot be trusted")
    return payload
