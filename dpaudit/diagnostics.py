"""What the sparse-optimizer figures need, recorded during training and never used by it.

* The gradient-value histogram of one epoch (AdaDPIGU paper, Figure 2): every coordinate of the un-noised,
  clipped mean gradient Σ φ_i g_i / b of every step of that epoch, on fixed bins, with the share in
  [−0.01, 0.01] (the paper's claim: over 99 %).
* Support quality at every support change of a coordinate-sparse optimizer (TP-TopK paper, Figure 1 and Section 7.4):
  against a non-private oracle at that moment — Ĝ, the mean gradient on held-out records, and the
  gradient energy E_j, the mean over mini-batches of the squared batch-mean gradient on training records —
  the share of Ĝ² and of E the support captures (random support: k/d), its overlap with the oracle top-k,
  with the previous support, the DP-visible proxy concentration ρ̂_sig, and curves over the active ratio
  (oracle top-k energy, top-k of the optimizer's DP score, random supports).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpaudit._io import write_json
from dpaudit.data import ArrayDataset, load_dataset
from dpaudit.models import parameter_count, trainable_parameters
from dpaudit.observers import TrainingObserver
from dpaudit.optim import StepCost, top_k_indices
from dpaudit.per_sample import PerSampleGradients
from dpaudit.run import load_run_config, open_run

if TYPE_CHECKING:
    from dpaudit.optim import MaskedSupport, Optimizer

HISTOGRAM_EDGES = np.linspace(-0.05, 0.05, 201)
SMALL_GRADIENT = 0.01
DEFAULT_SOURCE = "clipped mean gradient before noise"  # what an optimizer without ``accumulated_statistic`` holds
CURVE_RATIOS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
ENERGY_BATCHES = 50
RANDOM_SUPPORTS = 20


def _share(weights: torch.Tensor, chosen: torch.Tensor) -> float:
    """Σ_{p ∈ chosen} w_p / Σ_p w_p (0 when the total is 0)."""
    total = float(weights.sum())
    return float(weights[chosen].sum()) / total if total > 0 else 0.0


class GradientHistogram:
    """Counts of the clipped mean-gradient coordinates of one epoch on ``HISTOGRAM_EDGES``."""

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.counts = np.zeros(len(HISTOGRAM_EDGES) - 1, dtype=np.int64)
        self.below = self.above = self.small = self.total = self.steps = 0
        self.largest = 0.0
        self.sources: list[str] = []

    def add(self, gradient: list[torch.Tensor], *, source: str = DEFAULT_SOURCE) -> None:
        """Count one step's statistic; ``source`` says what it is (an optimizer's ``accumulated_statistic``)."""
        if source not in self.sources:
            self.sources.append(source)
        values = torch.cat([g.detach().flatten() for g in gradient]).double().cpu().numpy()
        self.counts += np.histogram(values, bins=HISTOGRAM_EDGES)[0]
        self.below += int((values < HISTOGRAM_EDGES[0]).sum())
        self.above += int((values > HISTOGRAM_EDGES[-1]).sum())
        self.small += int((np.abs(values) <= SMALL_GRADIENT).sum())
        self.total += values.size
        self.steps += 1
        self.largest = max(self.largest, float(np.abs(values).max(initial=0.0)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "source": "; then ".join(self.sources or [DEFAULT_SOURCE]) + ", every coordinate of every step",
            "bin_edges": HISTOGRAM_EDGES.tolist(),
            "counts": self.counts.tolist(),
            "below_range": self.below,
            "above_range": self.above,
            "values": self.total,
            "steps": self.steps,
            "fraction_within_0.01": self.small / self.total if self.total else None,
            "largest_magnitude": self.largest,
        }


class TrainingDiagnostics(TrainingObserver):
    """Recorder of one model's training, an observer of the loop (``dpaudit.observers``); writes ``diagnostics.json``.

    The histogram looks at each step's accumulated gradient before the update (``before_update``); the support
    quality is recorded whenever the support changed, after ``begin_epoch`` and after each update.

    Args:
        model: the model being trained.
        train_data: its training records (gradient energy).
        held_out: held-out records (the oracle gradient Ĝ).
        histogram_epoch: epoch whose gradient values are histogrammed.
        batch_size: b, the size of the energy mini-batches.
        seed: fixes the energy mini-batches and the random supports.
        path: the JSON file to write (None: keep in memory).
    """

    name = "diagnostics"
    transient_state = ("model", "train_data", "held_out", "path", "_written")

    def __init__(
        self,
        *,
        model: nn.Module,
        train_data: ArrayDataset,
        held_out: ArrayDataset | None,
        histogram_epoch: int,
        batch_size: int,
        seed: int,
        path: str | Path | None,
    ) -> None:
        self.model = model
        self.train_data = train_data
        self.held_out = held_out
        self.histogram = GradientHistogram(histogram_epoch)
        self.batch_size = batch_size
        self.rng = np.random.default_rng([seed, 0xD1A6])  # apart from the training streams
        self.path = Path(path) if path is not None else None
        self.supports: list[dict[str, Any]] = []
        self._version = 0
        self._previous: torch.Tensor | None = None
        self._written: tuple[int, int] | None = None  # (histogram steps, supports) in the file; None: not written

    def begin_epoch(self, optimizer: Optimizer, *, epoch: int) -> None:
        self.observe_support(optimizer, epoch=epoch)

    def before_update(self, optimizer: Optimizer, *, epoch: int) -> None:
        if epoch == self.histogram.epoch:
            gradient = optimizer.gradient_before_noise()
            if gradient is not None:
                self.histogram.add(gradient, source=getattr(optimizer, "accumulated_statistic", DEFAULT_SOURCE))

    def after_update(self, optimizer: Optimizer, cost: StepCost | None, *, epoch: int) -> None:
        self.observe_support(optimizer, epoch=epoch)

    def observe_support(self, optimizer: Optimizer, *, epoch: int) -> None:
        """Record the support's quality if it changed since the last call (after begin_epoch and each step)."""
        version = getattr(optimizer, "support_version", 0)
        if version == self._version:
            return
        self._version = version
        masked = cast("MaskedSupport", optimizer)  # only a MaskedSupport's support_version moves from 0
        mask = masked.support_mask()
        if mask is None:
            self._previous = None
            return
        d = parameter_count(self.model)  # the optimizer's coordinates may end with canaries
        score = None if masked.score is None else masked.score[:d]
        self.supports.append(self._support_quality(mask[:d], score, epoch=epoch, step=masked.steps_taken))

    def end_epoch(self, *, epoch: int) -> None:
        """Write what was recorded so far to ``path`` (if any), when it changed since this object last wrote it (a
        resumed run writes once anew): the histogram fills one epoch and a support changes at most once an epoch, so a
        long dense run writes twice, not once an epoch."""
        recorded = (self.histogram.steps, len(self.supports))
        if self.path is not None and recorded != self._written:
            write_json(self.path, self.to_dict())
            self._written = recorded

    def to_dict(self) -> dict[str, Any]:
        return {"gradient_histogram": self.histogram.to_dict(), "supports": self.supports}

    def _mean_gradient(self, data: ArrayDataset, index: np.ndarray, chunk: int = 1024) -> torch.Tensor:
        """Flat mean cross-entropy gradient (no clipping, no noise) over ``data[index]``, float64 on CPU."""
        params = trainable_parameters(self.model)
        device = params[0].device
        total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        for start in range(0, len(index), chunk):
            part = index[start : start + chunk]
            images = torch.as_tensor(data.images[part]).to(device)
            labels = torch.as_tensor(data.labels[part]).to(device)
            loss = F.cross_entropy(self.model(images), labels, reduction="sum") / len(index)
            total += torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]).detach().double().cpu()
        return total

    def _support_quality(
        self, mask: torch.Tensor, score: torch.Tensor | None, *, epoch: int, step: int
    ) -> dict[str, Any]:
        chosen = torch.nonzero(mask.cpu()).flatten()
        d, k = mask.numel(), chosen.numel()
        oracle_data = self.held_out if self.held_out is not None and len(self.held_out) else self.train_data
        oracle = self._mean_gradient(oracle_data, np.arange(len(oracle_data))) ** 2
        n, b = len(self.train_data), min(self.batch_size, len(self.train_data))
        energy = torch.stack(
            [
                self._mean_gradient(self.train_data, self.rng.choice(n, b, replace=False)) ** 2
                for _ in range(ENERGY_BATCHES)
            ]
        ).mean(0)
        random_supports = [
            torch.randperm(d, generator=torch.Generator().manual_seed(int(self.rng.integers(2**31))))
            for _ in range(RANDOM_SUPPORTS)
        ]
        ks = [max(1, int(np.floor(ratio * d))) for ratio in CURVE_RATIOS]
        random_capture = np.array([[_share(oracle, order[:kk]) for kk in ks] for order in random_supports])
        curves = {
            "active_ratio": list(CURVE_RATIOS),
            "energy_oracle_topk": [_share(energy, top_k_indices(energy, kk)) for kk in ks],
            "oracle_capture_random_mean": random_capture.mean(0).tolist(),
            "oracle_capture_random_std": random_capture.std(0).tolist(),
        }
        record = {
            "epoch": epoch,
            "step": step,
            "dimension": d,
            "active": k,
            "random_baseline": k / d,
            "oracle_capture": _share(oracle, chosen),
            "energy_capture": _share(energy, chosen),
            "oracle_topk_overlap": len(np.intersect1d(chosen.numpy(), top_k_indices(oracle, k).numpy())) / k
            if k
            else 0.0,
            "previous_overlap": (
                float((mask.cpu().bool() & self._previous).sum()) / k if self._previous is not None and k else None
            ),
            "proxy_concentration": None,
            "curves": curves,
        }
        if score is not None:
            visible = score.detach().double().cpu().clamp(min=0)
            record["proxy_concentration"] = _share(visible, chosen)
            curves["oracle_capture_score_topk"] = [_share(oracle, top_k_indices(score.detach().cpu(), kk)) for kk in ks]
        self._previous = mask.cpu().bool()
        return record


def gradient_alignment(
    run_dir: str | Path,
    *,
    batches: int = 20,
    weights: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """How single-record gradients align with their batch (DP-PSAC paper, Figures 1, 3, 6), at every checkpoint.

    On ``batches`` random batches (the run's batch size, its target's training records) per checkpoint:
    raw per-sample gradients g_i (un-clipped, no noise), their norms and cos(g_i, Σ_j g_j); for each named
    weight function w (norms → weights), cos(Σ_i w(‖g_i‖) g_i, Σ_i g_i) per batch.

    Returns:
        ``{"epochs", "norms", "cosine" (per record), "weighted": {name: [cos per batch]}}``.
    """
    weights = weights or {}
    rng = np.random.default_rng(seed)
    epochs = list(load_run_config(run_dir).audit.eval_epochs)
    norms: list[np.ndarray] = []
    cosines: list[np.ndarray] = []
    weighted: dict[str, list[float]] = {name: [] for name in weights}
    data: ArrayDataset | None = None
    for epoch in epochs:
        config, split, load, device = open_run(run_dir, epoch=epoch)
        model = load("target")
        if data is None:
            data = load_dataset(config.data.dataset, split="train", root=config.data.data_root).subset(
                split.target_members
            )
        per_sample = PerSampleGradients(model, config.engine.grad_sample)
        for _ in range(batches):
            index = rng.choice(len(data), size=min(config.optimizer.batch_size, len(data)), replace=False)
            images, labels = (
                torch.from_numpy(data.images[index]).to(device),
                torch.from_numpy(data.labels[index]).to(device),
            )
            grads, _ = per_sample(images, labels)
            flat = torch.cat([g.detach().reshape(len(index), -1) for g in grads], 1).double()
            size = flat.norm(dim=1)
            total = flat.sum(0)
            norms.append(size.cpu().numpy())
            cosines.append(F.cosine_similarity(flat, total[None], dim=1).cpu().numpy())
            for name, weight in weights.items():
                mixed = (weight(size)[:, None] * flat).sum(0)
                weighted[name].append(float(F.cosine_similarity(mixed, total, dim=0)))
    return {
        "epochs": epochs,
        "norms": np.concatenate(norms).tolist(),
        "cosine": np.concatenate(cosines).tolist(),
        "weighted": weighted,
    }
