"""AdaDPIGU: a DP importance mask from pre-training, then standardised, per-record sparsified DP-SGD on it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Self

import torch

from dpaudit._validation import DPAuditError
from dpaudit.layerwise import ConvFactors, OuterProducts, dense, row_norms
from dpaudit.optim.base import Hyperparameters, StepCost, register
from dpaudit.optim.clipping import CLIP_EPSILON
from dpaudit.optim.sparse import MaskedSupport, top_k_support
from dpaudit.optim.stacked import StackedRows, _stacked_rows
from dpaudit.settings import SETTINGS, AdaDPIGUSettings, ImportanceMaskSettings

VARIANCE_CLAMP = (1e-6, 1e6)  # AdaDPIGU code: the EMA variance is clamped to [h1, h2]
#: an ensemble's per-record statistics (``AdaDPIGU.accumulate_together``) are formed this many values (models ×
#: records × coordinates) at once
RECORD_ROW_VALUES = 2**22
STACKED_STATE = ("_importance", "alpha", "beta")  # per-parameter state an ensemble keeps as rows (``stack_rows``)


class AdaDPIGU(MaskedSupport):
    """AdaDPIGU paper, Algorithms 1 and 2 (Section 4; masked noise: Section 5.1 and Theorem 11).
    Pre-training: T_pre steps of DP-SGD accumulating the importance s += |g̃| of the
    released gradients; then the mask m keeps the top ⌊r·d⌋ coordinates and the pruned weights are set
    to 0 (the paper's forward pass at m ⊙ θ). Main phase, per record: z_i = m ⊙ (g_i − α) / (√β + μ),
    keep its ⌊k_s·d⌋ largest |entries|, clip to C; then ḡ = Σ z_i / b + N(0, σ_DP²) on the support,
    ĝ = m ⊙ (ḡ ⊙ (√β + μ) + α), θ ← θ − η ĝ, and α, β are EMAs (γ1, γ2) of the released ĝ.
    α and β depend only on released updates, so every step is one subsampled Gaussian step at σ.

    An audit block (``set_audit_block``: whole-run canaries, ``fits_dirac_records``) is left out of the importance
    ranking, kept in the mask, and left out of the real records' standardisation and top-k, with its own α = 0 and
    √β + μ = 1: a canary record designed against the public α and √β + μ (gradient α + K·(√β + μ)·e_j, zero once
    standardised but at its block coordinate j) is then K·e_j after standardisation and top-k, φ(K)·K after
    clipping, and its release ḡ at j is read directly. Each canary is one subsampled-Gaussian trial per step at σ,
    pre-training and main phase alike; the model's mask, noise and updates are those of a run without the block.

    Without ``adaptive_statistics`` (α = 0, β = 1) the EMA settings are not read: the settings are then
    :class:`ImportanceMaskSettings` instead of :class:`AdaDPIGUSettings`.
    """

    noisy_importance: ClassVar[bool] = True
    fits_dirac_records = True
    ranks_audit_block = True
    adaptive_statistics: ClassVar[bool] = True
    prunes_weights: ClassVar[bool] = True  # False: pruned weights keep their pre-trained values, frozen (official code)
    settings_type: ClassVar[type[ImportanceMaskSettings]] = AdaDPIGUSettings
    hyper: Hyperparameters[ImportanceMaskSettings]

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        hyper: Hyperparameters[ImportanceMaskSettings],
        *,
        generator: torch.Generator,
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self._importance = [torch.zeros_like(p) for p in self.params]
        self.alpha = [torch.zeros_like(p) for p in self.params]
        self.beta = [torch.ones_like(p) for p in self.params]

    @property
    def example_k(self) -> int:
        """k = ⌊k_s·d⌋ (at least 1): the entries each record keeps, of the model's d coordinates."""
        return max(1, math.floor(self.hyper.settings.example_topk_fraction * self.dimension))

    @staticmethod
    def _statistics(settings: ImportanceMaskSettings) -> AdaDPIGUSettings:
        """The settings of α and β, which a class with ``adaptive_statistics`` reads (its ``settings_type``:
        ``check``)."""
        assert isinstance(settings, AdaDPIGUSettings), "adaptive statistics read AdaDPIGUSettings"
        return settings

    @classmethod
    def check(cls, hyper: Hyperparameters[ImportanceMaskSettings]) -> None:
        super().check(hyper)
        settings = hyper.settings
        SETTINGS["retention_ratio"].check(settings.retention_ratio)
        SETTINGS["example_topk_fraction"].check(settings.example_topk_fraction)
        if cls.adaptive_statistics:
            statistics = cls._statistics(settings)
            for name, value in (
                ("ema_mean_decay (γ1)", statistics.ema_mean_decay),
                ("ema_variance_decay (γ2)", statistics.ema_variance_decay),
            ):
                if not 0 <= value < 1:
                    raise DPAuditError(f"{name} must be in [0, 1); got {value}")
        SETTINGS["standardise_constant"].check(settings.standardise_constant)
        if not 0 < settings.pretrain_fraction < 1:
            raise DPAuditError(f"pretrain_fraction must be in (0, 1); got {settings.pretrain_fraction}")
        total = hyper.steps_per_epoch * hyper.epochs
        if not 1 <= hyper.pretrain_steps < total:
            raise DPAuditError(
                f"the pre-training must leave steps for the main phase: T_pre = {hyper.pretrain_steps} of T = {total}"
            )

    def _scale(self) -> list[torch.Tensor]:
        """√β + μ of the model's parameters (an audit block's is 1)."""
        return [beta.sqrt() + self.hyper.settings.standardise_constant for beta in self.beta[: self._model_parameters]]

    @property
    def accumulated_statistic(self) -> str:
        """What ``gradient_before_noise`` holds this step (for the diagnostics' histogram label)."""
        if self.mask is None:
            return "clipped mean gradient before noise (pre-training)"
        if not self.adaptive_statistics:  # α = 0, β = 1: the masked gradient / (1 + μ), top-k and clipped per record
            return "masked, per-record top-k, clipped gradient / (1 + μ) before noise (main phase)"
        return "standardised, masked, per-record top-k statistic before noise (main phase; not gradient values)"

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        if self.mask is None:
            super().accumulate(grads)
            return
        model = self._model_parameters
        standardised = [m * (g - a) / s for g, a, s, m in zip(grads[:model], self.alpha, self._scale(), self.mask)]
        standardised += grads[model:]  # an audit block: α = 0, √β + μ = 1, in the mask, k counted on the model
        flat = torch.cat([z.flatten(1) for z in standardised], 1)
        if self.example_k < flat.shape[1]:
            # unsorted: the same k entries (torch selects them, then sorts them only if asked), about 3× faster
            top = torch.topk(flat.abs(), self.example_k, dim=1, sorted=False).indices
            keep = torch.zeros_like(flat).scatter_(1, top, 1.0)
            flat = flat * keep
        norms = row_norms(flat)
        flat = flat * torch.clamp(self.clip_norm / (norms + CLIP_EPSILON), max=1.0)[:, None]
        for total, part in zip(self._sum, flat.sum(0).split([p.numel() for p in self.params[: len(grads)]])):
            total.add_(part.view_as(total))

    @classmethod
    def accumulate_together(
        cls,
        optimizers: Sequence[Self],
        grads: Sequence[torch.Tensor],
        counts: Sequence[int],
        padding: torch.Tensor | None = None,
    ) -> None:
        # the main phase of models on stacked rows: every record's standardised, top-k, clipped statistic for all
        # models at once (the same operations on each record's row), then each model's sum over its own records as
        # ``accumulate`` takes it
        rows = _stacked_rows(optimizers)
        first = optimizers[0]
        if (
            cls.accumulate is not AdaDPIGU.accumulate
            or rows is None
            or set(rows.state) != set(STACKED_STATE)
            or len(grads) != len(rows.sums)
            or any(isinstance(g, ConvFactors) for g in grads)
            or any(optimizer.mask is None or optimizer.hyper != first.hyper for optimizer in optimizers)
        ):
            super().accumulate_together(optimizers, grads, counts, padding)
            return
        masks, alphas, scales = cls._stacked_standardisation(optimizers, rows, len(grads))
        sizes = [total[0].numel() for total in rows.sums]
        width = (grads[0].outer if isinstance(grads[0], OuterProducts) else grads[0]).shape[1]
        chunk = max(1, RECORD_ROW_VALUES // (width * first.dimension))
        for start in range(0, len(optimizers), chunk):
            part = slice(start, start + chunk)
            flat = torch.cat(
                [
                    (m[part, None] * (dense(g[part]) - a[part, None]) / s[part, None]).flatten(2)
                    for g, a, s, m in zip(grads, alphas, scales, masks)
                ],
                2,
            )
            if first.example_k < flat.shape[2]:
                top = torch.topk(flat.abs(), first.example_k, dim=2, sorted=False).indices
                flat = flat * torch.zeros_like(flat).scatter_(2, top, 1.0)
            norms = row_norms(flat)
            flat = flat * torch.clamp(first.clip_norm / (norms + CLIP_EPSILON), max=1.0)[..., None]
            totals = torch.stack([values[:count].sum(0) for values, count in zip(flat, counts[part])])
            torch._foreach_add_(
                [total[part] for total in rows.sums],
                [values.view_as(total[part]) for values, total in zip(totals.split(sizes, 1), rows.sums)],
            )

    @classmethod
    def _stacked_standardisation(
        cls, optimizers: Sequence[Self], rows: StackedRows, parameters: int
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """(masks, α, √β + μ) of the first ``parameters`` parameters of main-phase models on stacked rows ``rows``,
        [M, *shape] each: ``mask``, ``alpha`` and ``_scale`` of every model at once (every model is masked)."""
        masks = [m for m in cls._stacked_masks(optimizers, parameters) if m is not None]
        constant = optimizers[0].hyper.settings.standardise_constant
        scales = [beta.sqrt() + constant for beta in rows.state["beta"][:parameters]]
        return masks, rows.state["alpha"][:parameters], scales

    @classmethod
    def stack_rows(cls, optimizers: Sequence[Self], params: Sequence[torch.Tensor]) -> None:
        # the importance and the statistics α, β too: the ensemble's step updates them for all models at once
        super().stack_rows(optimizers, params)
        stack = optimizers[0]._stack
        if stack is not None:
            for name in STACKED_STATE:
                stack.keep(name, optimizers)

    @classmethod
    def _step_rows(cls, group: Sequence[Self], rows: StackedRows) -> StepCost | None:
        # ``step`` of every model at once (one ensemble: the same step and phase), the same operations on the stacks
        first, state = group[0], rows.state
        if (
            cls.step is not AdaDPIGU.step
            or set(state) != set(STACKED_STATE)
            or len({(optimizer.steps_taken, optimizer.mask is None) for optimizer in group}) > 1
            or (first.mask is None and not cls.noisy_importance)
        ):
            return None
        released = cls._release_rows(group, rows, first.sigma_dp)
        if released is None:
            return None
        if first.mask is None:
            for importance, value in zip(state["_importance"], released):
                importance.add_(value.abs())
            cls._apply_rows(group, rows, released)
            if first.steps_taken == first.hyper.pretrain_steps:
                for optimizer in group:
                    optimizer._choose_mask()
            return StepCost(first.hyper.noise_multiplier, first.hyper.sample_rate, "pretrain")
        masks, alphas, scales = cls._stacked_standardisation(group, rows, len(released))
        released = [m * (value * s + a) for value, s, a, m in zip(released, scales, alphas, masks)]
        cls._apply_rows(group, rows, released)
        if cls.adaptive_statistics:
            cls._update_statistics(first.hyper.settings, state["alpha"], state["beta"], released)
        return StepCost(first.hyper.noise_multiplier, first.hyper.sample_rate, "train")

    @classmethod
    def _update_statistics(
        cls,
        settings: ImportanceMaskSettings,
        alphas: Sequence[torch.Tensor],
        betas: Sequence[torch.Tensor],
        released: Sequence[torch.Tensor],
    ) -> None:
        """α and β (in place, per parameter) ← their EMAs (γ1, γ2) with the released ĝ."""
        statistics = cls._statistics(settings)
        for alpha, beta, value in zip(alphas, betas, released):
            deviation = (value - alpha) ** 2
            alpha.mul_(statistics.ema_mean_decay).add_((1 - statistics.ema_mean_decay) * value)
            beta.mul_(statistics.ema_variance_decay).add_(
                (1 - statistics.ema_variance_decay) * deviation.clamp(*VARIANCE_CLAMP)
            )

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        mask = self.mask
        pretraining = mask is None
        if mask is None:
            released = self._release(self.sigma_dp)
            if self.noisy_importance:
                scored = released
            else:  # the sums are cleared by ``_apply`` only
                scored = [total / max(realized_batch_size, 1) for total in self._sum]
            for importance, value in zip(self._importance, scored):
                importance.add_(value.abs())
            self._apply(released)
            if self.steps_taken == self.hyper.pretrain_steps:
                self._choose_mask()
        else:
            scale, noised, model = self._scale(), self._release(self.sigma_dp), self._model_parameters
            released = [m * (value * s + a) for value, s, a, m in zip(noised[:model], scale, self.alpha, mask)]
            self._apply(released + noised[model:])  # an audit block's release: ḡ, its α = 0 and √β + μ = 1
            if self.adaptive_statistics:
                self._update_statistics(self.hyper.settings, self.alpha, self.beta, released)
        return StepCost(self.hyper.noise_multiplier, self.hyper.sample_rate, "pretrain" if pretraining else "train")

    def _choose_mask(self) -> None:
        self.score = self._model_flat(self._importance) / self.hyper.pretrain_steps
        if self._velocity is not None:
            for velocity in self._velocity:
                velocity.zero_()
        ratio = self.hyper.settings.retention_ratio
        block = self._audit_choice(self._importance, ratio, stream=2)  # an audit block ranked as the model
        self._set_support(top_k_support(self.score, math.floor(ratio * self.dimension)), block=block)
        assert self.mask is not None  # a support is a mask
        if self.prunes_weights:  # the paper's forward pass at m ⊙ θ
            for param, m in zip(self.params, self.mask):
                param.mul_(m)


@register(
    "adadpigu",
    dp_claim=True,
    description="DP importance mask from pre-training, then standardised per-record top-k, clipping and noise "
    "(AdaDPIGU paper)",
)
class AdaDPIGUPaper(AdaDPIGU):
    pass


@register(
    "adadpigu-code",
    dp_claim=False,
    description="AdaDPIGU as the official code: mask from un-noised clipped gradients, no standardisation "
    "statistics (α = 0, β = 1); run it with sampling: shuffle as the code does (no DP claim)",
)
class AdaDPIGUCode(AdaDPIGU):
    noisy_importance = False
    adaptive_statistics = False
    settings_type = ImportanceMaskSettings


@register(
    "adadpigu-freeze",
    dp_claim=True,
    description="AdaDPIGU (paper) whose pruned weights keep their pre-trained values, frozen, instead of being set "
    "to 0 (the official code's training forward pass); the mask and updates are the paper's",
)
class AdaDPIGUFreeze(AdaDPIGU):
    prunes_weights = False
