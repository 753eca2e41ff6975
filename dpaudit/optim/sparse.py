"""Coordinate-sparse optimizers of the TP-TopK paper: DP-SGD restricted to a support of coordinates.

:class:`MaskedSupport` is the shared machinery (AdaDPIGU, ``dpaudit.optim.adadpigu``, builds on it too);
:class:`TwoPhaseSparse` (TP-TopK, TP-Rand) learns one support after a dense warm-up, :class:`OnlineSparse`
(ON-TopK, ON-Rand) refreshes it every epoch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Self

import numpy as np
import torch

from dpaudit._validation import DPAuditError
from dpaudit.optim.base import Hyperparameters, StepCost, register, sigma_dp_to_noise_multiplier
from dpaudit.optim.clipping import DPSGD, PrivateOptimizer
from dpaudit.optim.stacked import StackedRows
from dpaudit.settings import SETTINGS, OptimizerSettings, SparseSettings, TwoPhaseSettings


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for t in tensors])


def _indicator(chosen: torch.Tensor, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """1 at the flat coordinates ``chosen`` of ``tensors`` (taken together), 0 elsewhere, shaped as each tensor."""
    flat = torch.zeros(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
    flat[chosen.to(flat.device)] = 1
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


#: the coordinate-sparse optimizers' supports of an ensemble are chosen this many values (models × coordinates) at once
SUPPORT_ROW_VALUES = 2**22


def _rows(tensors: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
    """[M, d]: row m is ``_flat(tensors[m])``, model m's tensors (per parameter) flattened and joined."""
    return torch.cat([torch.stack([own[j] for own in tensors]).flatten(1) for j in range(len(tensors[0]))], 1)


def _add_squares(squares: Sequence[Sequence[torch.Tensor]], values: Sequence[torch.Tensor]) -> None:
    """Model m's ``squares`` (``squares[m]``, per parameter) += its row of ``values`` ([M, *shape] per parameter),
    squared: ``square.add_(value * value)`` of every model, in one call."""
    products = torch._foreach_mul(list(values), list(values))
    torch._foreach_add_(
        [square for own in squares for square in own], [product[m] for m in range(len(squares)) for product in products]
    )


def top_k_indices(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries, ties broken by the smaller coordinate index."""
    return torch.argsort(-score, stable=True)[:k]


def top_k_support(score: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of :func:`top_k_indices` (``score``, k) as a set, in increasing order: the entries above the k-th
    largest value, then those equal to it from the smallest index on (one selection instead of a sort)."""
    return torch.nonzero(top_k_rows(score[None], k)[0]).flatten()


def top_k_rows(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[M, d] booleans: True at :func:`top_k_support` (row, k) of each row of ``scores`` ([M, d]), all rows in one
    selection."""
    negated = -scores  # the order top_k_indices sorts by (NaN last there; kthvalue's order of NaN is not documented)
    if 0 < k < negated.shape[1]:
        kth = torch.kthvalue(negated, k, dim=1, keepdim=True).values
        chosen = negated < kth
        ties = negated == kth
        chosen |= ties & (ties.cumsum(1) <= k - chosen.sum(1, keepdim=True))  # the first ties, by coordinate index
        odd = torch.nonzero(torch.isnan(negated).any(1)).flatten().tolist()
    else:
        chosen, odd = torch.zeros_like(negated, dtype=torch.bool), list(range(len(negated)))
    for row in odd:  # by the sort: k out of range, or NaN
        chosen[row] = False
        chosen[row, top_k_indices(scores[row], k)] = True
    return chosen


class MaskedSupport(DPSGD):
    """DP-SGD on a support A: per-sample gradients are masked to A *before* clipping (the sensitivity
    stays C whatever A is), noise is added on A only, and coordinates outside A do not move.

    ``mask`` is None while the step is dense. ``support_version`` counts support changes and ``score``
    (flat) is the ranking the current support came from, if learned; the engine's diagnostics read them.

    An audit block (``set_audit_block``: whole-run canaries; the classes with ``fits_dirac_records``) is left out of
    the ranking and kept in the support at every step: the support is public once chosen (a post-processing of
    earlier releases), so canaries on coordinates it releases are what a white-box adversary can place, and each
    is then one subsampled-Gaussian trial per step at that step's σ. The model's support, noise and updates are
    those of a run without the block (its noise comes from a generator derived from the model's draw, or in one
    draw with it, ``joint``).

    With ``audit_ranked`` (``canary_support: ranked``; the supports learned once, ``ranks_audit_block``) the block's
    coordinates are ranked instead, by the optimizer's own score, among themselves: the support keeps the same
    fraction of them as of the model's. A support chosen from un-noised gradients then keeps the canaries that were
    in the batches and freezes the others, which their releases show (a frozen coordinate releases exactly 0); a
    support chosen from released values is a post-processing of them, and each canary stays one subsampled-Gaussian
    trial per step it is released at.
    """

    fits_dirac_records: ClassVar[bool] = False  # a Dirac record is masked, then clipped as by DP-SGD
    transient_state = (*DPSGD.transient_state, "_masks_kept")  # stacked supports (``_stacked_masks``)
    ranks_audit_block: ClassVar[bool] = False  # the support is learned once, and can rank an audit block
    audit_ranked: bool = False

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[OptimizerSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self.mask: list[torch.Tensor] | None = None
        self.score: torch.Tensor | None = None
        self.support_version = 0
        self._masks_kept: tuple[list[list[torch.Tensor] | None], list[torch.Tensor | None]] | None = None
        self.dimension = sum(p.numel() for p in self.params)

    def support_mask(self) -> torch.Tensor | None:
        """The current support as a flat 0/1 vector over the model's coordinates (None: dense)."""
        return None if self.mask is None else _flat(self.mask[: self._model_parameters])

    def _model_flat(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """The model's part of per-parameter ``tensors``, flat (the ranking's coordinates)."""
        return _flat(tensors[: self._model_parameters])

    @classmethod
    def takes_dirac_records(cls) -> bool:
        return cls.fits_dirac_records

    def set_audit_block(self, count: int, *, joint: bool = False) -> None:
        super().set_audit_block(count, joint=joint)
        self.dimension = sum(p.numel() for p in self.params[: self._model_parameters])

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        if self.mask is not None:
            grads = [g * m for g, m in zip(grads, self.mask)]
        super().accumulate(grads)

    @classmethod
    def _masks_together(cls, optimizers: Sequence[Self], parameters: int) -> list[torch.Tensor | None] | None:
        """The models' supports stacked, per parameter ([M, *shape]; None where every model is dense), for the
        one-pass masked clipping (a Linear weight's masked norms from its factors)."""
        if cls.accumulate is not MaskedSupport.accumulate:
            return None
        return cls._stacked_masks(optimizers, parameters)

    @staticmethod
    def _stacked_masks(optimizers: Sequence[MaskedSupport], parameters: int) -> list[torch.Tensor | None]:
        """Per parameter, the supports of ``optimizers`` as one [M, *shape] 0/1 tensor (a dense model's row all 1;
        None where every model is dense); kept, with the masks they were stacked from, until a support changes (the
        supports change once per epoch or run, the steps read them at every step)."""
        if all(optimizer.mask is None for optimizer in optimizers):
            return [None] * parameters
        masks = [optimizer.mask for optimizer in optimizers]
        kept = optimizers[0]._masks_kept
        if kept is not None and len(kept[0]) == len(masks) and all(a is b for a, b in zip(kept[0], masks)):
            return kept[1][:parameters]
        stacked: list[torch.Tensor | None] = [
            torch.stack([torch.ones_like(o.params[j]) if o.mask is None else o.mask[j] for o in optimizers])
            for j in range(parameters)
        ]
        optimizers[0]._masks_kept = (masks, stacked)
        return stacked

    @classmethod
    def _release_rows(cls, group: Sequence[Self], rows: StackedRows, sigma_dp: float) -> list[torch.Tensor] | None:
        """``_release`` (σ_DP = ``sigma_dp``) of the plain models ``group`` (``step_together``), rows ``rows`` of one
        stack, as [M, *shape] per parameter: the same noise draws, model after model and parameter after parameter,
        and the same operations on the stacks; None where this class's release or noise is not ``_release``'s."""
        if cls._release is not MaskedSupport._release or cls._noise is not PrivateOptimizer._noise:
            return None
        noise, _ = rows.noise()
        for m, optimizer in enumerate(group):
            for values in noise:
                optimizer._draw_noise(values[m])
        released = list(torch._foreach_div(rows.sums, group[0].hyper.expected_batch_size))
        torch._foreach_mul_(noise, sigma_dp)
        torch._foreach_add_(released, noise)
        for value, mask in zip(released, cls._stacked_masks(group, len(released))):
            if mask is not None:
                value.mul_(mask)
        return released

    @staticmethod
    def _apply_rows(group: Sequence[MaskedSupport], rows: StackedRows, updates: list[torch.Tensor]) -> None:
        """``_apply`` (no momentum, no recorded release, no audit block) of the models ``group``, rows ``rows`` of
        one stack, with [M, *shape] ``updates``."""
        torch._foreach_add_(rows.params, updates, alpha=-group[0].hyper.lr)
        torch._foreach_zero_(rows.sums)
        for optimizer in group:
            optimizer.steps_taken += 1

    def _release(self, sigma_dp: float) -> list[torch.Tensor]:
        """The private gradient Σ clipped / b + N(0, σ_DP²) of this step, restricted to the support."""
        b, model = self.hyper.expected_batch_size, self._model_parameters
        released = [total / b + sigma_dp * self._noise(total.shape) for total in self._sum[:model]]
        if self.audit_parameters:  # the block's noise by the same code (``set_audit_block``)
            with self._audit_block_stream():
                released += [total / b + sigma_dp * self._noise(total.shape) for total in self._sum[model:]]
        return released if self.mask is None else [value * m for value, m in zip(released, self.mask)]

    def _random_order(self, stream: int, size: int | None = None) -> torch.Tensor:
        """A data-independent permutation of ``size`` coordinates (default: the model's), fixed by the noise seed and
        ``stream``."""
        seed = int(np.random.SeedSequence([self.generator.initial_seed(), stream]).generate_state(1)[0])
        return torch.randperm(size or self.dimension, generator=torch.Generator().manual_seed(seed))

    def _audit_choice(
        self, scores: Sequence[torch.Tensor] | None, fraction: float, *, stream: int
    ) -> torch.Tensor | None:
        """The audit block's coordinates a ranked support keeps (``audit_ranked``): the top ⌊fraction·M⌋ by the
        block's part of the per-parameter ``scores`` (the model's ranking statistic, or any increasing function of it;
        None: at random, by ``stream``); None where the block is kept whole."""
        if not (self.audit_ranked and self.audit_parameters):
            return None
        size = sum(p.numel() for p in self.params[self._model_parameters :])
        k = math.floor(fraction * size)
        if scores is None:
            return self._random_order(stream, size)[:k]
        return top_k_support(_flat(scores[self._model_parameters :]), k)

    def _set_support(self, chosen: torch.Tensor | None, *, block: torch.Tensor | None = None) -> None:
        """Make ``chosen`` (coordinate indices; None: all) the support, and of an audit block its coordinates
        ``block`` (None: all); frozen velocity is dropped."""
        if chosen is None:
            self._set_mask(None)
            return
        model, audited = self.params[: self._model_parameters], self.params[self._model_parameters :]
        mask = _indicator(chosen, model)
        if audited:  # an audit block: always released, or ranked among itself
            mask += [torch.ones_like(p) for p in audited] if block is None else _indicator(block, audited)
        self._set_mask(mask)

    def _set_mask(self, mask: list[torch.Tensor] | None) -> None:
        """Make ``mask`` (0/1 per parameter; None: dense) the support; frozen velocity is dropped."""
        self.mask = mask
        if mask is not None and self._velocity is not None:  # frozen coordinates must not keep moving on old momentum
            for velocity, m in zip(self._velocity, mask):
                velocity.mul_(m)
        self.support_version += 1


class TwoPhaseSparse(MaskedSupport):
    """TP-TopK paper, Algorithm 1 (Section 3.2). Phase 1 (T_1 steps): DP-SGD with σ_1, accumulating
    s += g̃ ⊙ g̃ of the *released* gradients. Then A = the ⌊ρd⌋ coordinates ranked first (by the denoised
    score a = s/T_1 − σ_1² of Figure 2's caption and Lemma 5.2, or at random) and Phase 2 is DP-SGD on A
    with σ_2. Momentum is reset at the switch.
    """

    learned: ClassVar[bool] = True
    noisy_score: ClassVar[bool] = True  # the score from the released gradients (else from the clipped mean: no DP)
    fits_dirac_records = True
    ranks_audit_block = True
    settings_type = TwoPhaseSettings
    hyper: Hyperparameters[TwoPhaseSettings]

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[TwoPhaseSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self._squares = [torch.zeros_like(p) for p in self.params]

    @property
    def warmup_sigma_dp(self) -> float:
        """σ_1, the warm-up's σ_DP (``check`` requires it)."""
        assert self.hyper.settings.warmup_sigma_dp is not None, "check: two-phase optimizers need warmup_sigma_dp"
        return self.hyper.settings.warmup_sigma_dp

    @classmethod
    def check(cls, hyper: Hyperparameters[TwoPhaseSettings]) -> None:
        super().check(hyper)
        settings = hyper.settings
        SETTINGS["active_ratio"].check(settings.active_ratio)
        if not 0 < settings.warmup_fraction < 1:
            raise DPAuditError(f"warmup_fraction (E1/E) must be in (0, 1); got {settings.warmup_fraction}")
        total = hyper.steps_per_epoch * hyper.epochs
        if not 1 <= hyper.warmup_steps < total:
            raise DPAuditError(f"the warm-up must leave steps for phase 2: T1 = {hyper.warmup_steps} of T = {total}")
        if settings.warmup_sigma_dp is None:
            raise DPAuditError("two-phase optimizers need warmup_sigma_dp (σ_1) or target_epsilon")
        SETTINGS["warmup_sigma_dp"].check(settings.warmup_sigma_dp)

    @classmethod
    def planned_noise_multipliers(cls, hyper: Hyperparameters[TwoPhaseSettings]) -> np.ndarray:
        total = hyper.steps_per_epoch * hyper.epochs
        sigma_1, clip_norm = hyper.settings.warmup_sigma_dp, hyper.clip_norm
        assert sigma_1 is not None and clip_norm is not None, "check: two-phase optimizers need σ_1 and C"
        warmup = sigma_dp_to_noise_multiplier(
            sigma_dp=sigma_1, batch_size=hyper.expected_batch_size, clip_norm=clip_norm
        )
        return np.concatenate(
            [np.full(hyper.warmup_steps, warmup), np.full(total - hyper.warmup_steps, hyper.noise_multiplier)]
        )

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        warmup = self.steps_taken < self.hyper.warmup_steps
        sigma = self.warmup_sigma_dp if warmup else self.sigma_dp
        released = self._release(sigma)
        if warmup:  # the sums are cleared by ``_apply`` only
            scored = released if self.noisy_score else [total / self.hyper.expected_batch_size for total in self._sum]
            for squares, value in zip(self._squares, scored):
                squares.add_(value * value)
        self._apply(released)
        if warmup and self.steps_taken == self.hyper.warmup_steps:
            self._choose_support()
        z = sigma_dp_to_noise_multiplier(
            sigma_dp=sigma, batch_size=self.hyper.expected_batch_size, clip_norm=self.clip_norm
        )
        return StepCost(z, self.hyper.sample_rate, "warmup" if warmup else "train")

    @classmethod
    def _step_rows(cls, group: Sequence[Self], rows: StackedRows) -> StepCost | None:
        # ``step`` of every model at once (they are at the same step: one ensemble)
        steps = {optimizer.steps_taken for optimizer in group}
        if cls.step is not TwoPhaseSparse.step or len(steps) > 1:
            return None
        first = group[0]
        warmup = first.steps_taken < first.hyper.warmup_steps
        sigma = first.warmup_sigma_dp if warmup else first.sigma_dp
        if warmup and not cls.noisy_score:  # the clipped mean before noise (the sums are cleared by ``_apply_rows``)
            scored = torch._foreach_div(rows.sums, first.hyper.expected_batch_size)
        released = cls._release_rows(group, rows, sigma)
        if released is None:
            return None
        if warmup:
            _add_squares([optimizer._squares for optimizer in group], released if cls.noisy_score else scored)
        cls._apply_rows(group, rows, released)
        if warmup and first.steps_taken == first.hyper.warmup_steps:
            for optimizer in group:
                optimizer._choose_support()
        z = sigma_dp_to_noise_multiplier(
            sigma_dp=sigma, batch_size=first.hyper.expected_batch_size, clip_norm=first.clip_norm
        )
        return StepCost(z, first.hyper.sample_rate, "warmup" if warmup else "train")

    def _choose_support(self) -> None:
        # minus the per-coordinate noise variance ν_1² = σ_1² (σ_DP units): E[a_p] = G_p² (Lemma 5.2)
        self.score = self._model_flat(self._squares) / self.hyper.warmup_steps - self.warmup_sigma_dp**2
        ratio = self.hyper.settings.active_ratio
        k = math.floor(ratio * self.dimension)
        order = top_k_support(self.score, k) if self.learned else self._random_order(1)[:k]
        block = self._audit_choice(self._squares if self.learned else None, ratio, stream=2)  # ranked as the model
        if self._velocity is not None:
            for velocity in self._velocity:
                velocity.zero_()
        self._set_support(order, block=block)


@register(
    "tp-topk",
    dp_claim=True,
    description="dense DP warm-up, then DP-SGD on the top-⌊ρd⌋ denoised-score support (TP-TopK paper)",
)
class TPTopK(TwoPhaseSparse):
    pass


@register("tp-rand", dp_claim=True, description="as tp-topk with a random support of the same size (TP-TopK paper)")
class TPRand(TwoPhaseSparse):
    learned = False


@register(
    "tp-topk-clean-support",
    dp_claim=False,
    description="tp-topk with its support ranked on the warm-up's clipped mean gradients before noise (a planted "
    "bug: the support leaks which records were in the warm-up's batches; no DP claim)",
)
class TPTopKCleanSupport(TwoPhaseSparse):
    noisy_score = False


class OnlineSparse(MaskedSupport):
    """ON-* of the TP-TopK paper (Table 1, Section 7.1; the schedule is not in the paper): one σ for the
    whole run; the support is refreshed at the start of every epoch, with active ratio
    ρ_e = 1 − (1 − ρ)·e/(E − 1) at epoch e = 0 … E − 1 (dense first epoch, ρ at the last).

    ON-TopK ranks by a_p = mean over the previous epoch's steps of g̃_p² − σ², from the released gradients
    only; a coordinate frozen all that epoch keeps its latest score. ON-Rand draws a fresh random support.
    The supports are a predictable schedule, so the run costs T steps at (q, σ), as DP-SGD.
    """

    learned: ClassVar[bool] = True
    fits_dirac_records = True
    settings_type = SparseSettings
    hyper: Hyperparameters[SparseSettings]

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[SparseSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self._squares = [torch.zeros_like(p) for p in self.params]
        self._epoch_steps = 0

    @classmethod
    def check(cls, hyper: Hyperparameters[SparseSettings]) -> None:
        super().check(hyper)
        SETTINGS["active_ratio"].check(hyper.settings.active_ratio)
        if hyper.epochs < 2:
            raise DPAuditError(
                f"online sparse optimizers refresh the support per epoch and need epochs ≥ 2; got {hyper.epochs}"
            )

    def active_ratio(self, epoch: int) -> float:
        """ρ_e of 1-based ``epoch`` under the linear schedule."""
        return 1 - (1 - self.hyper.settings.active_ratio) * (epoch - 1) / (self.hyper.epochs - 1)

    def begin_epoch(self, epoch: int) -> None:
        super().begin_epoch(epoch)
        if self.learned and self._epoch_steps:
            fresh = self._model_flat(self._squares) / self._epoch_steps - self.sigma_dp**2
            active = self.support_mask()
            self.score = (
                fresh if self.score is None or active is None else torch.where(active.bool(), fresh, self.score)
            )
        for squares in self._squares:
            squares.zero_()
        self._epoch_steps = 0
        k = math.floor(self.active_ratio(epoch) * self.dimension)
        if k >= self.dimension:
            if self.mask is not None:
                self._set_support(None)
            return
        if self.learned:
            assert self.score is not None  # scored from the dense first epoch on
            order = top_k_support(self.score, k)
        else:
            order = self._random_order(epoch)[:k]
        self._set_support(order)

    @classmethod
    def begin_epoch_together(cls, optimizers: Sequence[Self], epoch: int) -> None:
        # the models alike (same parameters and point of the run, no audit block) in one pass per run of rows
        if cls.begin_epoch is not OnlineSparse.begin_epoch:
            super().begin_epoch_together(optimizers, epoch)
            return
        alike: dict[tuple[int, int, int, bool, bool], list[Self]] = {}
        for optimizer in optimizers:
            key = (
                len(optimizer.params),
                optimizer.audit_parameters,
                optimizer._epoch_steps,
                optimizer.score is None,
                optimizer.mask is None,
            )
            alike.setdefault(key, []).append(optimizer)
        for group in alike.values():
            if len(group) < 2 or group[0].audit_parameters or any(o.hyper != group[0].hyper for o in group):
                super().begin_epoch_together(group, epoch)
                continue
            rows = max(1, SUPPORT_ROW_VALUES // group[0].dimension)
            for start in range(0, len(group), rows):
                cls._begin_epoch_rows(group[start : start + rows], epoch)

    @classmethod
    def _begin_epoch_rows(cls, group: Sequence[Self], epoch: int) -> None:
        """``begin_epoch`` of the models ``group`` (``begin_epoch_together``), their scores and supports as the rows
        of [M, d] tensors: the same operations on each row, and one selection of the top k for all rows."""
        first = group[0]
        for optimizer in group:
            super(OnlineSparse, optimizer).begin_epoch(epoch)
        if cls.learned and first._epoch_steps:
            fresh = _rows([optimizer._squares for optimizer in group]) / first._epoch_steps - first.sigma_dp**2
            if first.score is not None and first.mask is not None:
                active = _rows([optimizer.mask for optimizer in group if optimizer.mask is not None]).bool()
                fresh = torch.where(active, fresh, torch.stack([o.score for o in group if o.score is not None]))
            for optimizer, score in zip(group, fresh):
                optimizer.score = score
        torch._foreach_zero_([squares for optimizer in group for squares in optimizer._squares])
        for optimizer in group:
            optimizer._epoch_steps = 0
        k = math.floor(first.active_ratio(epoch) * first.dimension)
        if k >= first.dimension:
            for optimizer in group:
                if optimizer.mask is not None:
                    optimizer._set_mask(None)
            return
        device, dtype = first.params[0].device, first.params[0].dtype
        if cls.learned:
            chosen = top_k_rows(torch.stack([o.score for o in group if o.score is not None]), k)
        else:
            orders = torch.stack([optimizer._random_order(epoch)[:k] for optimizer in group]).to(device)
            chosen = torch.zeros(len(group), first.dimension, dtype=torch.bool, device=device).scatter_(1, orders, True)
        parts = chosen.to(dtype).split([p.numel() for p in first.params], dim=1)
        for m, optimizer in enumerate(group):
            optimizer._set_mask([part[m].view_as(p) for part, p in zip(parts, optimizer.params)])

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        released = self._release(self.sigma_dp)
        for squares, value in zip(self._squares, released):
            squares.add_(value * value)
        self._epoch_steps += 1
        self._apply(released)
        return StepCost(self.hyper.noise_multiplier, self.hyper.sample_rate)

    @classmethod
    def _step_rows(cls, group: Sequence[Self], rows: StackedRows) -> StepCost | None:
        released = None if cls.step is not OnlineSparse.step else cls._release_rows(group, rows, group[0].sigma_dp)
        if released is None:
            return None
        _add_squares([optimizer._squares for optimizer in group], released)
        for optimizer in group:
            optimizer._epoch_steps += 1
        cls._apply_rows(group, rows, released)
        return StepCost(group[0].hyper.noise_multiplier, group[0].hyper.sample_rate)


@register(
    "on-topk",
    dp_claim=True,
    description="per-epoch support: top-⌊ρ_e d⌋ of the previous epoch's DP score, ρ_e falling linearly from 1 to ρ "
    "(TP-TopK paper)",
)
class ONTopK(OnlineSparse):
    pass


@register(
    "on-rand",
    dp_claim=True,
    description="as on-topk with a fresh random support every epoch (random sparsification; TP-TopK paper)",
)
class ONRand(OnlineSparse):
    learned = False
