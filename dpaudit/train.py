"""The training engine: one loop for every optimizer, target and shadow models, checkpoints, ledger.

``train_configuration(config, out_dir=...)`` trains the target and the shadow models of one
configuration and one Monte Carlo trial (seed 004 §3.2–3.3) and writes::

    out_dir/config.json              the validated configuration and derived values (z, σ_DP, q, T/epoch)
    out_dir/split.json               member / non-member indices of the target and every shadow (either design)
    out_dir/<model>/metrics.json     per epoch: training loss, test loss and accuracy
    out_dir/<model>/ledger.json      per step: noise multiplier z, sample rate q (run-length encoded)
    out_dir/<model>/epoch_EEEE.pt    state_dict at each evaluation epoch (+ epoch_EEEE.json metadata)
    out_dir/target/diagnostics.json  gradient histogram and support quality (``dpaudit.diagnostics``)

where <model> is ``target``, ``shadow_00``, ``shadow_01``, … Every file is written atomically.
"""

from __future__ import annotations

import io
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from dpaudit import models as model_registry
from dpaudit import optim
from dpaudit._io import atomic_write_bytes, read_json, write_json
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.data import ArrayDataset, dataset_info, load_dataset
from dpaudit.ledger import PrivacyLedger


class TrainingDivergedError(DPAuditError):
    """The training loss became NaN or infinite; finished checkpoints are kept."""


@dataclass
class EpochMetrics:
    epoch: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    elapsed_seconds: list[float] = field(default_factory=list)


@dataclass
class TrainedModel:
    """The result of one ``train_model`` call."""

    model: nn.Module
    metrics: EpochMetrics
    ledger: PrivacyLedger
    checkpoints: dict[int, Path]
    diagnostics: Any = None


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise DPAuditError("device 'cuda' requested but no CUDA device is available")
    return torch.device(device)


def model_seeds(*, seed: int, trial: int, model_index: int) -> tuple[int, int, int]:
    """Independent seeds (initialisation, sampling, noise) for one model of one trial."""
    state = np.random.SeedSequence([seed, trial, model_index]).generate_state(3)
    return int(state[0]), int(state[1]), int(state[2])


def steps_per_epoch(*, dataset_size: int, batch_size: int) -> int:
    """ceil(n / b): the steps of one epoch, for both sampling schemes (T = ceil(n/b)·E)."""
    return math.ceil(dataset_size / batch_size)


def batch_indices(*, dataset_size: int, batch_size: int, sampling: str, rng: np.random.Generator):
    """Yield the index arrays of one epoch's batches."""
    steps = steps_per_epoch(dataset_size=dataset_size, batch_size=batch_size)
    if sampling == "shuffle":
        order = rng.permutation(dataset_size)
        for step in range(steps):
            yield order[step * batch_size : (step + 1) * batch_size]
    else:
        rate = batch_size / dataset_size
        for _ in range(steps):
            yield np.flatnonzero(rng.random(dataset_size) < rate)


class PerSampleGradients:
    """Per-sample gradients and losses of cross-entropy, by torch.func or by Opacus hooks."""

    def __init__(self, model: nn.Module, backend: str):
        self.model = model
        self.params = model_registry.trainable_parameters(model)
        self.backend = backend
        if backend == "opacus":
            from opacus import GradSampleModule

            self.wrapped = GradSampleModule(model, loss_reduction="sum")
        else:
            from torch.func import functional_call, grad_and_value, vmap

            names = [name for name, p in model.named_parameters() if p.requires_grad]
            buffers = dict(model.named_buffers())

            def loss_of_one(param_values, image, label):
                logits = functional_call(model, ({**dict(zip(names, param_values)), **buffers},), (image[None],))
                return F.cross_entropy(logits, label[None])

            self._vmapped = vmap(grad_and_value(loss_of_one), in_dims=(None, 0, 0))

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        if self.backend == "opacus":
            losses = F.cross_entropy(self.wrapped(images), labels, reduction="none")
            losses.sum().backward()
            grads = [p.grad_sample for p in self.params]
            for p in self.params:
                p.grad_sample = None
                p.grad = None
            return grads, losses.detach()
        grads, losses = self._vmapped([p.detach() for p in self.params], images, labels)
        return list(grads), losses


@torch.no_grad()
def predict_logits(model: nn.Module, images: np.ndarray | torch.Tensor, *, device: torch.device | str = "cpu",
                   batch_size: int = 1024) -> np.ndarray:
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


def save_checkpoint(path: str | Path, model: nn.Module, metadata: dict[str, Any]) -> Path:
    """Write the state_dict to ``path`` and ``metadata`` beside it as JSON, both atomically."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
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
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DPAuditError(f"cannot load checkpoint {path}: {first_line}") from None
    return model


def train_model(
    *,
    config: TrainConfig,
    train_data: ArrayDataset,
    test_data: ArrayDataset | None,
    model_index: int,
    out_dir: str | Path | None = None,
    progress: bool = True,
    label: str = "model",
) -> TrainedModel:
    """Train one model with ``config``'s optimizer on ``train_data``.

    Args:
        config: a validated ``TrainConfig``.
        train_data: the model's training records (n = len(train_data), q = b / n).
        test_data: records for the per-epoch test loss / accuracy (None: skip).
        model_index: 0 for the target, 1 + i for shadow i; with (seed, trial) it fixes the randomness.
        out_dir: where metrics, ledger and checkpoints go (None: keep in memory only).
        progress: show a progress bar over the training steps.
        label: name shown in the progress bar and error messages.

    Returns:
        The trained model, its per-epoch metrics, its privacy ledger and its checkpoint paths.

    Raises:
        TrainingDivergedError: the loss became NaN/inf; metrics and finished checkpoints are kept.
    """
    device = resolve_device(config.device)
    init_seed, sampling_seed, noise_seed = model_seeds(seed=config.seed, trial=config.trial, model_index=model_index)
    info = dataset_info(config.dataset)
    model = model_registry.build_model(
        config.model, input_shape=info.input_shape, num_classes=info.num_classes, seed=init_seed
    ).to(device)
    spec = optim.get_spec(config.optimizer)
    n = len(train_data)
    generator = torch.Generator(device=device).manual_seed(noise_seed)
    model_params = model_registry.trainable_parameters(model)
    canaries = None
    if config.canaries and model_index == 0:
        from dpaudit.attacks.canary import DiracCanaries

        canaries = DiracCanaries(count=config.canaries, clip_norm=config.clip_norm or 1.0, seed=noise_seed,
                                 device=device, dtype=model_params[0].dtype)
    optimizer = spec.cls(model_params + ([canaries.parameter] if canaries else []), config.hyperparameters(n),
                         generator=generator)
    optimizer.record_updates = canaries is not None
    per_sample = PerSampleGradients(model, config.grad_sample) if optimizer.per_sample else None
    rng = np.random.default_rng(sampling_seed)
    images = torch.from_numpy(train_data.images).to(device)
    labels = torch.from_numpy(train_data.labels).to(device)
    ledger = PrivacyLedger(sampling=config.sampling, dp_claim=spec.dp_claim)
    metrics = EpochMetrics()
    checkpoints: dict[int, Path] = {}
    out = Path(out_dir) if out_dir is not None else None
    steps = steps_per_epoch(dataset_size=n, batch_size=config.batch_size)
    bar = tqdm(total=steps * config.epochs, desc=label, disable=not progress, leave=False, unit="step")
    diagnostics = None
    if config.diagnostics and model_index == 0:
        from dpaudit.diagnostics import TrainingDiagnostics

        diagnostics = TrainingDiagnostics(
            model=model, train_data=train_data, held_out=test_data, batch_size=config.batch_size, seed=sampling_seed,
            histogram_epoch=config.histogram_epoch or min(5, config.epochs),
            path=out / "diagnostics.json" if out is not None else None,
        )
    model.train()
    started = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        optimizer.begin_epoch(epoch)
        if diagnostics is not None:
            diagnostics.observe_support(optimizer, epoch=epoch)
        batch_losses = []
        for index in batch_indices(dataset_size=n, batch_size=config.batch_size, sampling=config.sampling, rng=rng):
            batch_losses.append(_accumulate_batch(model, optimizer, per_sample, images, labels, index, config,
                                                  padding=canaries.parameter if canaries else None))
            if canaries is not None:
                canaries.insert(optimizer, model_params)
            if diagnostics is not None:
                diagnostics.before_step(optimizer, epoch=epoch)
            cost = optimizer.step(realized_batch_size=len(index))
            if canaries is not None:
                canaries.observe(optimizer, cost)
            if diagnostics is not None:
                diagnostics.observe_support(optimizer, epoch=epoch)
            if cost is not None:
                ledger.record(noise_multiplier=cost[0], sample_rate=cost[1], phase=cost[2] if len(cost) > 2 else "train")
            bar.update()
        ledger.end_epoch()
        observed = [loss for loss in batch_losses if loss is not None]  # None: an empty Poisson batch
        train_loss = float(np.mean(observed)) if observed else float("nan")
        test_loss, test_accuracy = evaluate(model, test_data, device=device) if test_data is not None else (None, None)
        train_accuracy = evaluate(model, train_data, device=device)[1] if model_index == 0 else None
        metrics.epoch.append(epoch)
        metrics.steps.append(ledger.steps if ledger.runs else epoch * steps)
        metrics.train_loss.append(train_loss)
        metrics.test_loss.append(test_loss)
        metrics.test_accuracy.append(test_accuracy)
        metrics.train_accuracy.append(train_accuracy)
        metrics.elapsed_seconds.append(time.perf_counter() - started)
        bar.set_postfix(loss=f"{train_loss:.3f}")
        diverged = (observed and not math.isfinite(train_loss)) or not all(
            torch.isfinite(p).all() for p in model.parameters()
        )
        if diagnostics is not None:
            diagnostics.save()
        if canaries is not None and out is not None:
            canaries.result().save(out / "canaries.npz")
        if out is not None:
            write_json(out / "metrics.json", {"model": label, **asdict(metrics)})
            write_json(out / "ledger.json", ledger.to_dict())
            if epoch in config.eval_epochs and not diverged:
                checkpoints[epoch] = save_checkpoint(
                    out / f"epoch_{epoch:04d}.pt",
                    model,
                    {"model": label, "epoch": epoch, "steps": ledger.steps, "config": config.to_dict()},
                )
        if diverged:
            bar.close()
            kept = f"; checkpoints up to epoch {epoch - 1} kept in {out}" if out is not None else ""
            raise TrainingDivergedError(
                f"training of {label} diverged: loss is {train_loss} at epoch {epoch} "
                f"(try a smaller lr or clip_norm){kept}"
            )
    bar.close()
    return TrainedModel(model, metrics, ledger, checkpoints, diagnostics)


def _accumulate_batch(model, optimizer, per_sample, images, labels, index, config, padding=None) -> float | None:
    """Feed one batch's gradients to the optimizer in chunks; return the batch-mean loss (None if empty).

    ``padding``: an extra optimizer tensor no loss touches (white-box canaries); it gets zero gradients.
    """
    if len(index) == 0:
        return None
    index = torch.as_tensor(index, device=images.device)
    if per_sample is None:
        loss = F.cross_entropy(model(images[index]), labels[index])
        grads = [g.detach() for g in torch.autograd.grad(loss, model_registry.trainable_parameters(model))]
        optimizer.accumulate(grads + ([torch.zeros_like(padding)] if padding is not None else []))
        return loss.item()
    total = 0.0
    for chunk in torch.split(index, config.microbatch_size):
        grads, losses = per_sample(images[chunk], labels[chunk])
        if padding is not None:
            grads = list(grads) + [padding.new_zeros((len(chunk), *padding.shape))]
        optimizer.accumulate(grads)
        total += float(losses.sum())
    return total / len(index)


def train_configuration(config: TrainConfig, *, out_dir: str | Path, progress: bool = True) -> dict[str, Any]:
    """Train the target and all shadow models of one configuration and trial; write ``out_dir``.

    Returns:
        A summary dict (also written as ``out_dir/config.json``).
    """
    target_epsilon = config.target_epsilon
    config = config.validated()
    out = Path(out_dir)
    split = config.make_split()
    train_set = load_dataset(config.dataset, split="train", root=config.data_root, download=config.download)
    test_set = load_dataset(config.dataset, split="test", root=config.data_root, download=False)
    z = (
        optim.sigma_dp_to_noise_multiplier(sigma_dp=config.sigma_dp, batch_size=config.batch_size, clip_norm=config.clip_norm)
        if config.sigma_dp is not None and config.clip_norm
        else None
    )
    summary = {
        "config": config.to_dict(),
        "derived": {
            "dataset_size_n": config.target_size,
            "sample_rate_q": config.batch_size / config.target_size,
            "noise_multiplier_z": z,
            "steps_per_epoch": steps_per_epoch(dataset_size=config.target_size, batch_size=config.batch_size),
            "dp_claim": optim.get_spec(config.optimizer).dp_claim,
            "target_epsilon": target_epsilon,
            "planned_epsilon": planned_epsilon(config),
            "delta": config.delta,
            "accountant": config.accountant,
        },
        "models": ["target"] + [shadow_name(i) for i in range(config.num_shadows)],
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
    }
    write_json(out / "config.json", summary)
    split.save(out / "split.json")
    # Per-epoch test metrics: the target's non-members (seed 004), or as many test records for "halves".
    held_out = test_set.subset(split.target_nonmembers if split.nonmember_source == "test"
                               else np.arange(min(config.target_size, len(test_set))))
    members = [("target", split.target_members)] + [
        (shadow_name(i), shadow.members) for i, shadow in enumerate(split.shadows)
    ]
    for model_index, (name, indices) in enumerate(members):
        train_model(
            config=config,
            train_data=train_set.subset(indices),
            test_data=held_out,
            model_index=model_index,
            out_dir=out / name,
            progress=progress,
            label=name,
        )
    return summary


def planned_epsilon(config: TrainConfig) -> float | None:
    """Theoretical ε at ``config.delta`` of the target's planned steps (None for non-private optimizers)."""
    from dpaudit.theory import epsilon

    spec = optim.get_spec(config.optimizer)
    if not issubclass(spec.cls, optim.PrivateOptimizer):
        return None
    hyper = config.hyperparameters(config.target_size)
    return epsilon(noise_multiplier=spec.cls.planned_noise_multipliers(hyper), sample_rate=hyper.sample_rate,
                   delta=config.delta, accountant=config.accountant)


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
