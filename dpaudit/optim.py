"""Optimizers as small pluggable pieces of the one training engine.

The engine computes gradients (per-sample where the optimizer asks for them) and hands them over in
chunks; the optimizer turns them into one parameter update per step and says what the step cost in
privacy. Add an optimizer by subclassing :class:`Optimizer` and decorating it with
:func:`register`. ``available()`` lists the registered names.

Every private optimizer here has the same skeleton (DP-PSAC, D2P2-SGD, DPSGD-GC/DC): per-sample gradients g_i are
scaled by a factor φ(‖g_i‖) with ‖φ(‖g‖)·g‖ ≤ C, summed, Gaussian noise is added, and the result is
divided by the *expected* batch size b (never the realised one, which is data-dependent). Only φ, the
noise schedule and what happens around the update differ, so each optimizer is a few lines.

Noise convention (DPSGD-GC/DC, Liang et al. eq. 6): σ_DP is the per-coordinate std of the Gaussian noise added to the
*averaged* clipped gradient Σ φ_i g_i / b. The usual noise multiplier is z = σ_DP · b / C
(noise std on the summed clipped gradient divided by its sensitivity C), so either may be given.
Dynamic-noise optimizers multiply z by a schedule factor per step and record each step's z in the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from dpaudit._device import padding_mask
from dpaudit._registry import Registry
from dpaudit._validation import DPAuditError, check_choice, check_positive, check_ratio
from dpaudit.layerwise import dense, sample_norms, weighted_sample_sums

CLIP_EPSILON = 1e-6  # as Opacus: factor min(1, C / (‖g‖ + 1e-6))
AUTO_V_EPSILON = 1e-12  # Auto-V's C / ‖g‖ (DP-PSAC paper, Section 3) gets a guard at ‖g‖ = 0 (dpaudit's choice)
NOISE_DECAY_UNITS = ("epoch", "step")
REDUCTION_CONVENTIONS = ("code", "paper")
PROJECTION_REFRESH = ("step", "run")


@dataclass(frozen=True)
class OptimizerSpec:
    """Registry entry: the class, whether it claims DP, and a one-line description."""

    name: str
    cls: type[Optimizer]
    dp_claim: bool
    description: str


_REGISTRY: Registry[OptimizerSpec] = Registry("optimizer")


def register(name: str, *, dp_claim: bool, description: str):
    """Class decorator adding an optimizer to the registry under ``name``."""

    def decorator(cls: type[Optimizer]) -> type[Optimizer]:
        _REGISTRY.add(name, OptimizerSpec(name, cls, dp_claim, description))
        return cls

    return decorator


def available() -> list[str]:
    """Names of the registered optimizers."""
    return _REGISTRY.names()


def get_spec(name: str) -> OptimizerSpec:
    return _REGISTRY.get(name)


def sigma_dp_to_noise_multiplier(*, sigma_dp: float, batch_size: float, clip_norm: float) -> float:
    """z = σ_DP · b / C (σ_DP: Liang et al., Section 2.2, eq. 6; the conversion is the authors' code's)."""
    return sigma_dp * batch_size / clip_norm


def noise_multiplier_to_sigma_dp(*, noise_multiplier: float, batch_size: float, clip_norm: float) -> float:
    """σ_DP = z · C / b."""
    return noise_multiplier * clip_norm / batch_size


@dataclass(frozen=True)
class Hyperparameters:
    """What every optimizer may be given; each optimizer checks the ones it needs.

    Attributes:
        lr: learning rate η.
        expected_batch_size: b; private optimizers divide the clipped-gradient sum by b.
        dataset_size: n, the number of training records (sample rate q = b / n).
        clip_norm: per-sample ℓ2 bound C (the clipping threshold; the scale G of normalising methods).
        sigma_dp: std of the Gaussian noise on the averaged clipped gradient (σ_DP = z·C/b).
        domain_radius: radius D of the ℓ2 ball that DPSGD-DC projects onto.
        domain_center: "origin" (the paper's K) or "init" (a ball around θ_0).
        momentum: heavy-ball momentum μ of the outer SGD update (post-processing; 0 = plain SGD).
        r: regulariser r of the DP-PSAC and Auto-S weights (DP-PSAC paper), r > 0.
        gamma: stability constant γ of automatic clipping C / (‖g‖ + γ) (D2P2-SGD paper), γ > 0.
        noise_decay_exponent: a in the dynamic schedule z_k = z · k^(−a) (0.25: the authors' code, whose
            numbers the paper reports; 0.5: the paper's text, σ/√k).
        noise_decay_unit: k counts "epoch"s (constant within an epoch; the code) or "step"s.
        reduction_rate: random-projection rate (D2P2-SGD paper), in (0, 1]; see ``reduction_convention``.
        reduction_convention: "code": p = ⌊rate · d⌋ per tensor (the authors' code and Table 6, so
            rate 0.3 keeps 30 % of the dimensions); "paper": p = round((1 − rate) · d) (Appendix A.9.1).
        projection_refresh: "step" (a fresh Gaussian matrix every step, as the paper says) or "run"
            (one matrix per tensor for the whole run, as the authors' code).
        epochs: the run's length E in epochs (two-phase optimizers split it).
        active_ratio: ρ, the fraction of coordinates kept trainable in sparse phases (TP-TopK paper), in (0, 1].
        warmup_fraction: E_1/E, the share of the steps spent in a dense warm-up phase (TP-TopK paper), in (0, 1).
        warmup_sigma_dp: σ_DP of the warm-up phase (σ_1 in σ_DP units); ``sigma_dp`` is that of the rest.
        pretrain_fraction: T_pre/T, the share of the steps spent in AdaDPIGU's DP pre-training (the
            authors' code: 15 of 200 epochs), in (0, 1).
        retention_ratio: r, the fraction of coordinates AdaDPIGU's importance mask keeps, in (0, 1].
        example_topk_fraction: per-record top-k of AdaDPIGU as a fraction of d (the code keeps 0.4·d; 1 = off).
        ema_mean_decay: γ1 of AdaDPIGU's running mean α, in [0, 1).
        ema_variance_decay: γ2 of AdaDPIGU's running variance β, in [0, 1).
        standardise_constant: μ > 0 in AdaDPIGU's (g − α) / (√β + μ).
    """

    lr: float
    expected_batch_size: int
    dataset_size: int
    clip_norm: float | None = None
    sigma_dp: float | None = None
    domain_radius: float | None = None
    domain_center: str = "origin"
    momentum: float = 0.0
    r: float = 0.1
    gamma: float = 0.01
    noise_decay_exponent: float = 0.25
    noise_decay_unit: str = "epoch"
    reduction_rate: float = 0.3
    reduction_convention: str = "code"
    projection_refresh: str = "step"
    epochs: int = 1
    active_ratio: float = 0.4
    warmup_fraction: float = 0.3
    warmup_sigma_dp: float | None = None
    pretrain_fraction: float = 0.075
    retention_ratio: float = 0.6
    example_topk_fraction: float = 0.4
    ema_mean_decay: float = 0.9
    ema_variance_decay: float = 0.999
    standardise_constant: float = 1e-6

    @property
    def pretrain_steps(self) -> int:
        """T_pre = round((T_pre/T)·T) with T = E·ceil(n/b) (T_pre of AdaDPIGU's Algorithm 1, Section 4)."""
        return round(self.pretrain_fraction * self.steps_per_epoch * self.epochs)

    @property
    def warmup_steps(self) -> int:
        """T_1 = round((E_1/E)·T) with T = E·ceil(n/b) (T_1 of TP-TopK's Algorithm 1; E_1/E: its Section 7.3)."""
        return round(self.warmup_fraction * self.steps_per_epoch * self.epochs)

    @property
    def sample_rate(self) -> float:
        return self.expected_batch_size / self.dataset_size

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.dataset_size / self.expected_batch_size)

    @property
    def noise_multiplier(self) -> float:
        """z = σ_DP · b / C, the noise multiplier before any schedule."""
        return sigma_dp_to_noise_multiplier(
            sigma_dp=self.sigma_dp, batch_size=self.expected_batch_size, clip_norm=self.clip_norm
        )


@dataclass(eq=False)
class StackedRows:
    """An ensemble's parameters and gradient sums as one [K, *shape] tensor per parameter: optimizer k's own
    tensors are row k of them (``Optimizer.stack_rows``), so one call updates all K. ``rows`` gives a run of
    consecutive rows as views, ``noise`` the buffer their step's noise is drawn into."""

    params: list[torch.Tensor]
    sums: list[torch.Tensor]
    first: int = 0  # where these rows start in the whole stack
    whole: StackedRows | None = None  # the whole stack, for a run of its rows
    _noise_buffer: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def rows(self, first: int, count: int) -> StackedRows:
        """Rows ``first`` to ``first + count - 1`` of the whole stack (the stack itself if that is all of it)."""
        if first == 0 and count == len(self.params[0]):
            return self
        return StackedRows(
            [t.narrow(0, first, count) for t in self.params],
            [t.narrow(0, first, count) for t in self.sums],
            first,
            self,
        )

    def noise(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(per parameter a [M, *shape] view, per row the flat buffer) of the memory these rows' models draw a
        step's noise into, their coordinates parameter after parameter; made on first use and kept."""
        whole = self.whole or self
        if whole._noise_buffer is None:
            sizes = [p[0].numel() for p in whole.params]
            flat = whole.params[0].new_empty((len(whole.params[0]), sum(sizes)))
            views = [values.view(p.shape) for values, p in zip(flat.split(sizes, dim=1), whole.params)]
            whole._noise_buffer = views, list(flat)
        views, rows = whole._noise_buffer
        if whole is self:
            return views, rows
        count = len(self.params[0])
        return [view.narrow(0, self.first, count) for view in views], rows[self.first : self.first + count]


def _stacked_rows(optimizers: Sequence[Optimizer]) -> StackedRows | None:
    """The rows of ``optimizers`` in their ``StackedRows``, if they are consecutive rows of one in order and have
    no parameters beside it; else None."""
    stack, first = optimizers[0]._stack, optimizers[0]._row
    if stack is None or any(
        optimizer._stack is not stack or optimizer._row != first + m or len(optimizer.params) != len(stack.params)
        for m, optimizer in enumerate(optimizers)
    ):
        return None
    return stack.rows(first, len(optimizers))


class Optimizer:
    """Base class: one update rule over a list of parameter tensors.

    The engine calls ``begin_epoch`` at the start of every epoch, ``accumulate`` once per chunk of a
    batch (per-sample gradients, shape [chunk, *param.shape], if ``per_sample`` else the batch-mean
    gradient) and then ``step`` once per batch.
    """

    per_sample: ClassVar[bool] = True
    record_updates: bool = False
    last_update: list[torch.Tensor] | None = None
    # not saved for resuming (``dpaudit._state``)
    transient_state: ClassVar[tuple[str, ...]] = ("params", "hyper", "_stack", "_row")

    def __init__(self, params: Sequence[torch.Tensor], hyper: Hyperparameters, *, generator: torch.Generator):
        self.params = list(params)
        self.hyper = hyper
        self.generator = generator
        self.epoch = 1
        self.steps_taken = 0
        self._sum = [torch.zeros_like(p) for p in self.params]
        self._velocity = [torch.zeros_like(p) for p in self.params] if hyper.momentum else None
        self._stack: StackedRows | None = None
        self._row = 0

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        """Raise a one-line DPAuditError if ``hyper`` does not suit this optimizer."""
        check_positive("lr", hyper.lr)
        if check_positive("momentum", hyper.momentum, allow_zero=True) >= 1:
            raise DPAuditError(f"momentum must be in [0, 1); got {hyper.momentum}")

    @classmethod
    def noise_schedule(cls, hyper: Hyperparameters) -> np.ndarray:
        """Relative factor on z for every step of the run (``hyper.epochs`` epochs; all ones: static noise)."""
        return np.ones(hyper.steps_per_epoch * hyper.epochs)

    @classmethod
    def planned_noise_multipliers(cls, hyper: Hyperparameters) -> np.ndarray:
        """z of every step of the whole run (``hyper.epochs`` epochs), as the ledger will record it."""
        return hyper.noise_multiplier * cls.noise_schedule(hyper)

    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        for total, grad in zip(self._sum, grads):
            total.add_(grad.sum(0) if self.per_sample else grad)

    @classmethod
    def stack_rows(cls, optimizers: Sequence[Optimizer], params: Sequence[torch.Tensor]) -> None:
        """Keep the gradient sums of an ensemble's K optimizers as rows of [K, *shape] tensors, like ``params``.

        Args:
            optimizers: K optimizers of this class whose first parameters are rows of ``params``: optimizer
                k's parameter j is ``params[j][k]`` (a view; further parameters of its own, such as the canary
                tensor, stay apart).
            params: the ensemble's stacked parameters, [K, *shape] per parameter.

        Optimizers whose sums are not shaped like their parameters (a projected space) keep them apart.
        """
        if any(
            len(optimizer._sum) < len(params)
            or any(total.shape != p.shape for total, p in zip(optimizer._sum, optimizer.params))
            for optimizer in optimizers
        ):
            return
        for k, optimizer in enumerate(optimizers):
            for stacked, p in zip(params, optimizer.params):
                if p.data_ptr() != stacked[k].data_ptr() or p.shape != stacked[k].shape:
                    raise DPAuditError(f"optimizer {k}'s parameters are not row {k} of the stacked parameters")
        sums = [torch.stack([optimizer._sum[j] for optimizer in optimizers]) for j in range(len(params))]
        stack = StackedRows(list(params), sums)
        for k, optimizer in enumerate(optimizers):
            optimizer._sum[: len(params)] = [total[k] for total in stack.sums]
            optimizer._stack, optimizer._row = stack, k

    @classmethod
    def accumulate_together(
        cls,
        optimizers: Sequence[Optimizer],
        grads: Sequence[torch.Tensor],
        counts: Sequence[int],
        padding: torch.Tensor | None = None,
    ) -> None:
        """``accumulate`` for M optimizers of this class and equal hyperparameters (an ensemble).

        ``grads``: per parameter, [M, W, *shape] per-sample gradients (or ``layerwise.OuterProducts``)
        whose rows from ``counts[m]`` on are padding (``padding``: [M, W], True there, if the caller has it on the
        device), or [M, *shape] batch-mean shares. Subclasses may do it in one vectorised pass.
        """
        for row, (optimizer, count) in enumerate(zip(optimizers, counts)):
            optimizer.accumulate([dense(g[row, :count]) if cls.per_sample else g[row] for g in grads])

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float] | None:
        """Apply one update; return the step's (noise multiplier, sample rate), or None if not private."""
        raise NotImplementedError

    @classmethod
    def step_together(cls, optimizers: Sequence[Optimizer], realized_batch_sizes: Sequence[int]) -> list:
        """``step`` for M optimizers of this class and equal hyperparameters (an ensemble); their returns in
        order. Subclasses may do it in one vectorised pass."""
        return [optimizer.step(realized_batch_size=size) for optimizer, size in zip(optimizers, realized_batch_sizes)]

    def gradient_before_noise(self) -> list[torch.Tensor] | None:
        """This step's accumulated gradient before noise (per-sample optimizers: the clipped sum / b),
        in parameter space; None where it lives elsewhere. For diagnostics only."""
        if not self.per_sample:
            return self._sum
        return [total / self.hyper.expected_batch_size for total in self._sum]

    @torch.no_grad()
    def _apply(self, updates: Sequence[torch.Tensor]) -> None:
        """θ ← θ − η·u (with momentum: v ← μv + u, θ ← θ − η·v); then clear the accumulated sums.

        With ``record_updates`` set, ``last_update`` keeps a copy of u, the step's release before
        momentum (what a white-box observer of every update infers).
        """
        if self.record_updates:
            self.last_update = [update.detach().clone() for update in updates]
        # torch._foreach_*: one call per list instead of one per tensor (the per-call overhead dominates
        # small models trained as an ensemble)
        if self._velocity is not None:
            torch._foreach_mul_(self._velocity, self.hyper.momentum)
            torch._foreach_add_(self._velocity, list(updates))
            updates = self._velocity
        torch._foreach_add_(self.params, list(updates), alpha=-self.hyper.lr)
        torch._foreach_zero_(self._sum)
        self.steps_taken += 1


@register("sgd", dp_claim=False, description="non-private mini-batch SGD (reference; no DP claim)")
class SGD(Optimizer):
    per_sample = False

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> None:
        self._apply(self._sum)
        return None


def _flat_norms(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-sample ℓ2 norms over all parameter tensors together ("flat" clipping)."""
    return torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads))


class PrivateOptimizer(Optimizer):
    """Weighted per-sample sum, noise of std z·C on the sum, division by the expected batch size b.

    Subclasses define ``factors(norms)`` = φ(‖g_i‖), with ‖φ(s)·g‖ ≤ C for every s (the sensitivity).
    ``pure_factors``: φ depends on nothing but the norms and the hyperparameters (no state).
    """

    pure_factors: ClassVar[bool] = True

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        if hyper.clip_norm is None or hyper.sigma_dp is None:
            raise DPAuditError("DP optimizers need clip_norm (C) and sigma_dp, noise_multiplier or target_epsilon")
        check_positive("clip_norm (C)", hyper.clip_norm)
        check_positive("sigma_dp (σ_DP)", hyper.sigma_dp)

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        factors = self.factors(_flat_norms(grads))
        for total, grad in zip(self._sum, grads):
            total.add_(torch.einsum("i,i...->...", factors, grad))

    @classmethod
    def accumulate_together(cls, optimizers, grads, counts, padding=None) -> None:
        # One pass when φ is a pure function of ‖g‖ and the hyperparameters (shared by the ensemble).
        if cls.accumulate is not PrivateOptimizer.accumulate or not cls.pure_factors:
            return super().accumulate_together(optimizers, grads, counts, padding)
        norms = torch.linalg.vector_norm(torch.stack([sample_norms(g) for g in grads]), dim=0)
        if padding is None:
            padding = padding_mask(counts, norms.shape[1], norms.device)
        factors = optimizers[0].factors(norms).masked_fill(padding, 0.0)
        sums = weighted_sample_sums(grads, factors)
        rows = _stacked_rows(optimizers)
        if rows is not None:
            torch._foreach_add_(rows.sums, sums)
            return
        for row, optimizer in enumerate(optimizers):
            torch._foreach_add_(optimizer._sum, [total[row] for total in sums])

    @classmethod
    @torch.no_grad()
    def step_together(cls, optimizers, realized_batch_sizes) -> list:
        # The plain update (no momentum, no recorded release, no constraint) of the models that take it, when they
        # are consecutive rows of one ``stack_rows`` stack: each model's own noise draw, then the arithmetic of
        # ``step`` on the [M, *shape] stacks, one call per operation for all M models.
        plain = [
            m
            for m, optimizer in enumerate(optimizers)
            if optimizer._velocity is None and not optimizer.record_updates and optimizer.hyper == optimizers[0].hyper
        ]
        group = [optimizers[m] for m in plain]
        factors = {optimizer.noise_factor() for optimizer in group}
        rows = _stacked_rows(group) if len(group) > 1 else None
        if (
            rows is None
            or len(factors) > 1
            or cls.step is not PrivateOptimizer.step
            or cls.after_step is not PrivateOptimizer.after_step
            or cls._noisy_mean is not PrivateOptimizer._noisy_mean
            or cls._apply is not Optimizer._apply
        ):
            return super().step_together(optimizers, realized_batch_sizes)
        (factor,), hyper = factors, group[0].hyper
        noise, noise_rows = rows.noise()
        for optimizer, row in zip(group, noise_rows):
            optimizer._step_noise(out=row)
        updates = torch._foreach_div(rows.sums, hyper.expected_batch_size)
        torch._foreach_add_(updates, noise, alpha=hyper.sigma_dp * factor)
        torch._foreach_add_(rows.params, updates, alpha=-hyper.lr)
        torch._foreach_zero_(rows.sums)
        for optimizer in group:
            optimizer.steps_taken += 1
        costs = dict.fromkeys(plain, (hyper.noise_multiplier * factor, hyper.sample_rate))
        others = [m for m in range(len(optimizers)) if m not in costs]
        costs.update(
            zip(
                others,
                super().step_together([optimizers[m] for m in others], [realized_batch_sizes[m] for m in others]),
            )
        )
        return [costs[m] for m in range(len(optimizers))]

    def noise_factor(self) -> float:
        """Schedule factor on z at the current step (1 for static noise)."""
        return 1.0

    def _step_noise(self, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """The step's standard normal noise of all coordinates, parameter after parameter, in one draw (one
        generator call per step instead of one per tensor); into ``out`` (flat) if given."""
        if out is None:
            return self._noise(sum(total.numel() for total in self._sum))
        return self._draw_noise(out)

    def _noisy_mean(self, *, b: float, std: float) -> list[torch.Tensor]:
        """Σ / b + N(0, std² I) per parameter (noise from ``_step_noise``, cut in parameter order)."""
        noise = self._step_noise().split([total.numel() for total in self._sum])
        noise = [values.view_as(total) for values, total in zip(noise, self._sum)]
        updates = torch._foreach_div(self._sum, b)
        torch._foreach_add_(updates, noise, alpha=std)
        return updates

    def _noise(self, shape) -> torch.Tensor:
        """N(0, I) values of ``shape`` from this optimizer's noise stream."""
        return self._draw_noise(self.params[0].new_empty(shape))

    def _draw_noise(self, out: torch.Tensor) -> torch.Tensor:
        """``out`` filled with N(0, I) values from this optimizer's noise stream (``torch.randn``'s draw)."""
        return out.normal_(generator=self.generator)

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float]:
        factor = self.noise_factor()
        b, sigma = self.hyper.expected_batch_size, self.hyper.sigma_dp * factor
        self._apply(self._noisy_mean(b=b, std=sigma))
        self.after_step()
        return self.hyper.noise_multiplier * factor, self.hyper.sample_rate

    def after_step(self) -> None:
        """Hook for constraints applied after each update (projection in DPSGD-DC)."""


@register(
    "dpsgd-gc",
    dp_claim=True,
    description="DP-SGD with per-sample gradient clipping min(1, C/‖g‖) (Abadi et al.; DPSGD-GC of Liang et al.)",
)
class DPSGD(PrivateOptimizer):
    """θ ← θ − η (Σ clip_C(g_i) / b + N(0, σ_DP² I))."""

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return (self.hyper.clip_norm / (norms + CLIP_EPSILON)).clamp(max=1.0)


@register(
    "dpsgd-no-noise",
    dp_claim=False,
    description="DP-SGD that adds no noise but accounts as if it did (broken on purpose: auditor check; no DP claim)",
)
class DPSGDNoNoise(DPSGD):
    """Clipped mean without the Gaussian noise; its ledger still records the calibrated z (what it claims)."""

    def _draw_noise(self, out: torch.Tensor) -> torch.Tensor:
        return out.zero_()


@register(
    "dpsgd-no-clip",
    dp_claim=False,
    description="DP-SGD without clipping, noise calibrated to C (broken on purpose: auditor check; no DP claim)",
)
class DPSGDNoClip(DPSGD):
    """Σ g_i / b + N(0, σ_DP²): the sensitivity is unbounded, the noise is that of C."""

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(norms)


@register(
    "dpsgd-dc",
    dp_claim=True,
    description="DP-SGD with clipping and projection onto the ℓ2 ball of radius D (DPSGD-DC of Liang et al.)",
)
class DPSGDDomainConstrained(DPSGD):
    """DPSGD-GC followed by θ ← Π_K(θ), K = {θ : ‖θ − c‖ ≤ D}, c = 0 or θ_0, jointly over all parameters."""

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self.center = [p.detach().clone() for p in self.params] if hyper.domain_center == "init" else None
        self.after_step()  # θ_0 ∈ K

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        if hyper.domain_radius is None:
            raise DPAuditError("dpsgd-dc needs domain_radius (D)")
        check_positive("domain_radius (D)", hyper.domain_radius)
        check_choice("domain_center", hyper.domain_center, ("origin", "init"))

    @torch.no_grad()
    def after_step(self) -> None:
        offsets = self.params if self.center is None else [p - c for p, c in zip(self.params, self.center)]
        norm = math.sqrt(sum(float(o.pow(2).sum()) for o in offsets))
        if norm > self.hyper.domain_radius:
            scale = self.hyper.domain_radius / norm
            centers = self.center or [None] * len(self.params)
            for param, center in zip(self.params, centers):
                if center is None:
                    param.mul_(scale)
                else:
                    param.copy_(center + scale * (param - center))


# DP-PSAC (Xia et al.) and its baselines: only the per-sample weight differs.


def _check_r(hyper: Hyperparameters) -> None:
    check_positive("r", hyper.r)


def auto_s_factor(norms, *, r: float, clip_norm: float = 1.0):
    """Auto-S weight φ(s) = C / (s + r) of a per-sample gradient of norm s (numpy or torch)."""
    return clip_norm / (norms + r)


def psac_factor(norms, *, r: float, clip_norm: float = 1.0):
    """DP-PSAC weight φ(s) = C / (s + r/(s + r)) = C (s + r) / (s² + r s + r) (numpy or torch)."""
    return clip_norm * (norms + r) / (norms * norms + r * norms + r)


@register(
    "auto-s", dp_claim=True, description="automatic clipping C·g/(‖g‖ + r) (Bu et al. 2022; the DP-PSAC paper's Auto-S)"
)
class AutoS(PrivateOptimizer):
    """φ(s) = C / (s + r); ‖φ(s)g‖ = C·s/(s + r) < C."""

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        _check_r(hyper)

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return auto_s_factor(norms, r=self.hyper.r, clip_norm=self.hyper.clip_norm)


register("nsgd", dp_claim=True, description="alias of auto-s (NSGD, Yang et al. 2022)")(AutoS)


@register("auto-v", dp_claim=True, description="pure normalisation C·g/‖g‖ (the DP-PSAC paper's Auto-V)")
class AutoV(PrivateOptimizer):
    """φ(s) = C / s (with a 1e-12 guard); every clipped gradient has norm C."""

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return self.hyper.clip_norm / (norms + AUTO_V_EPSILON)


@register(
    "dp-psac", dp_claim=True, description="per-sample adaptive clipping C·g/(‖g‖ + r/(‖g‖ + r)) (DP-PSAC, Xia et al.)"
)
class DPPSAC(AutoS):
    """φ(s) = C / (s + r/(s + r)) = C (s + r) / (s² + r s + r); ‖φ(s)g‖ = C (1 − r/(s² + rs + r)) < C."""

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return psac_factor(norms, r=self.hyper.r, clip_norm=self.hyper.clip_norm)


@register(
    "dp-psac-batch-noise",
    dp_claim=False,
    description="DP-PSAC as some re-implementations do it: noise std scaled to the realised batch's largest "
    "clipped norm and divided by the realised batch size (data-dependent noise; no DP claim)",
)
class DPPSACBatchNoise(DPPSAC):
    """The data-dependent noise scale that breaks the DP guarantee — a negative control. Not in the DP-PSAC paper:
    it departs from line 6 of its Algorithm 1 (noise N(0, C²σ²)) as some third-party re-implementations do.
    """

    pure_factors = False  # factors() tracks the batch's largest clipped norm

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self._largest = 0.0

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        factors = super().factors(norms)
        self._largest = max(self._largest, float((factors * norms).max()) if len(norms) else 0.0)
        return factors

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float]:
        b = max(realized_batch_size, 1)
        std = self.hyper.noise_multiplier * self._largest / b
        self._apply(self._noisy_mean(b=b, std=std))
        self._largest = 0.0
        return self.hyper.noise_multiplier, self.hyper.sample_rate


# D2P2-SGD (Jiang et al.): automatic clipping, dynamic noise, random projection.


class AutomaticClipping(PrivateOptimizer):
    """φ(s) = C / (s + γ) (automatic clipping of the D2P2-SGD paper, with G = C); static noise."""

    dynamic: ClassVar[bool] = False

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        check_positive("gamma (γ)", hyper.gamma)
        check_positive("noise_decay_exponent", hyper.noise_decay_exponent)
        check_choice("noise_decay_unit", hyper.noise_decay_unit, NOISE_DECAY_UNITS)

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return self.hyper.clip_norm / (norms + self.hyper.gamma)

    @classmethod
    def noise_schedule(cls, hyper: Hyperparameters) -> np.ndarray:
        steps = hyper.steps_per_epoch * hyper.epochs
        if not cls.dynamic:
            return np.ones(steps)
        k = (
            np.arange(steps) // hyper.steps_per_epoch + 1
            if hyper.noise_decay_unit == "epoch"
            else np.arange(1, steps + 1)
        )
        return k.astype(float) ** -hyper.noise_decay_exponent

    def noise_factor(self) -> float:
        if not self.dynamic:
            return 1.0
        k = self.epoch if self.hyper.noise_decay_unit == "epoch" else self.steps_taken + 1
        return float(k) ** -self.hyper.noise_decay_exponent


@register(
    "dpsgd-auto",
    dp_claim=True,
    description="automatic clipping C·g/(‖g‖ + γ), static noise (the D2P2-SGD paper's 'DPSGD')",
)
class DPSGDAuto(AutomaticClipping):
    pass


@register(
    "d2p-sgd", dp_claim=True, description="automatic clipping, dynamic noise z·k^(−1/4), no projection (D2P2-SGD paper)"
)
class D2PSGD(AutomaticClipping):
    dynamic = True


def projected_dimension(d: int, *, rate: float, convention: str) -> int:
    """p for a tensor of d entries: ⌊rate·d⌋ ("code") or round((1 − rate)·d) ("paper"), at least 1."""
    p = int(rate * d) if convention == "code" else round((1 - rate) * d)
    return max(1, min(d, p))


class ProjectedNoise(AutomaticClipping):
    """Random projection per tensor: release z = Σ_i φ_i Aᵀg_i/√p + N(0, (z_t C)² I_p), update A z / b.

    DP-correct form: each record's *projected* gradient Aᵀg_i/√p (all tensors together) is clipped,
    so one record moves z by at most C and the ledger's z_t is the true noise multiplier. The authors'
    order — clip, then project the sum — lets one record move z by up to C·max σ_max(A)/√p ≈ (1 + √(d/p))·C,
    so its ε is not what the accountant reports; that version is ``*-as-published`` (no DP claim).
    """

    clip_after_projection: ClassVar[bool] = True
    transient_state = (*Optimizer.transient_state, "_matrices", "_matrices_step")  # redrawn from the seed on use

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self.kept = [
            projected_dimension(p.numel(), rate=hyper.reduction_rate, convention=hyper.reduction_convention)
            for p in self.params
        ]
        self._projection_seed = int(np.random.SeedSequence([generator.initial_seed(), 3]).generate_state(1)[0])
        self._matrices_step: int | None = None
        self._matrices: list[torch.Tensor] = []
        if self.clip_after_projection:
            self._sum = [torch.zeros(p, device=q.device, dtype=q.dtype) for p, q in zip(self.kept, self.params)]

    def gradient_before_noise(self) -> list[torch.Tensor] | None:
        return None if self.clip_after_projection else super().gradient_before_noise()

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        check_ratio("reduction_rate", hyper.reduction_rate)
        check_choice("reduction_convention", hyper.reduction_convention, REDUCTION_CONVENTIONS)
        check_choice("projection_refresh", hyper.projection_refresh, PROJECTION_REFRESH)

    def matrices(self) -> list[torch.Tensor]:
        """This step's A_l ∈ R^{d_l × p_l}, entries N(0, 1); fixed for the run when projection_refresh='run'."""
        step = 0 if self.hyper.projection_refresh == "run" else self.steps_taken
        if self._matrices_step != step:
            device, dtype = self.params[0].device, self.params[0].dtype
            generator = torch.Generator(device=device).manual_seed(self._projection_seed + step)
            self._matrices = [
                torch.randn(param.numel(), p, generator=generator, device=device, dtype=dtype)
                for param, p in zip(self.params, self.kept)
            ]
            self._matrices_step = step
        return self._matrices

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        if not self.clip_after_projection:
            return super().accumulate(grads)
        projected = [g.flatten(1) @ a / math.sqrt(p) for g, a, p in zip(grads, self.matrices(), self.kept)]
        factors = self.factors(_flat_norms(projected))
        for total, values in zip(self._sum, projected):
            total.add_(factors @ values)

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float]:
        factor = self.noise_factor()
        b, sigma = self.hyper.expected_batch_size, self.hyper.sigma_dp * factor
        updates = []
        for param, total, a, p in zip(self.params, self._sum, self.matrices(), self.kept):
            released = total if self.clip_after_projection else total.flatten() @ a / math.sqrt(p)
            updates.append((a @ (released / b + sigma * self._noise(p))).reshape(param.shape))
        self._apply(updates)
        return self.hyper.noise_multiplier * factor, self.hyper.sample_rate


@register(
    "dp2-sgd",
    dp_claim=True,
    description="automatic clipping of projected gradients, static noise in R^p (D2P2-SGD paper)",
)
class DP2SGD(ProjectedNoise):
    pass


@register(
    "d2p2-sgd",
    dp_claim=True,
    description="automatic clipping of projected gradients, dynamic noise in R^p (Jiang et al.)",
)
class D2P2SGD(ProjectedNoise):
    dynamic = True


@register(
    "dp2-sgd-as-published",
    dp_claim=False,
    description="DP2-SGD in the authors' order: clip, then project the sum (sensitivity > C; no DP claim)",
)
class DP2SGDAsPublished(DP2SGD):
    clip_after_projection = False


@register(
    "d2p2-sgd-as-published",
    dp_claim=False,
    description="D2P2-SGD in the authors' order: clip, then project the sum (sensitivity > C; no DP claim)",
)
class D2P2SGDAsPublished(D2P2SGD):
    clip_after_projection = False


# Coordinate-sparse optimizers (AdaDPIGU and TP-TopK): DP-SGD restricted to a support of coordinates.


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for t in tensors])


def top_k_indices(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries, ties broken by the smaller coordinate index."""
    return torch.argsort(-score, stable=True)[:k]


class MaskedSupport(DPSGD):
    """DP-SGD on a support A: per-sample gradients are masked to A *before* clipping (the sensitivity
    stays C whatever A is), noise is added on A only, and coordinates outside A do not move.

    ``mask`` is None while the step is dense. ``support_version`` counts support changes and ``score``
    (flat) is the ranking the current support came from, if learned; the engine's diagnostics read them.
    """

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self.mask: list[torch.Tensor] | None = None
        self.score: torch.Tensor | None = None
        self.support_version = 0
        self.dimension = sum(p.numel() for p in self.params)

    def support_mask(self) -> torch.Tensor | None:
        """The current support as a flat 0/1 vector over all coordinates (None: dense)."""
        return None if self.mask is None else _flat(self.mask)

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        if self.mask is not None:
            grads = [g * m for g, m in zip(grads, self.mask)]
        super().accumulate(grads)

    def _release(self, sigma_dp: float) -> list[torch.Tensor]:
        """The private gradient Σ clipped / b + N(0, σ_DP²) of this step, restricted to the support."""
        released = [total / self.hyper.expected_batch_size + sigma_dp * self._noise(total.shape) for total in self._sum]
        return released if self.mask is None else [value * m for value, m in zip(released, self.mask)]

    def _random_order(self, stream: int) -> torch.Tensor:
        """A data-independent permutation of the coordinates, fixed by the noise seed and ``stream``."""
        seed = int(np.random.SeedSequence([self.generator.initial_seed(), stream]).generate_state(1)[0])
        return torch.randperm(self.dimension, generator=torch.Generator().manual_seed(seed))

    def _set_support(self, chosen: torch.Tensor | None) -> None:
        """Make ``chosen`` (coordinate indices; None: all) the support; frozen velocity is dropped."""
        if chosen is None:
            self.mask = None
        else:
            flat = torch.zeros(self.dimension, dtype=self.params[0].dtype, device=self.params[0].device)
            flat[chosen.to(flat.device)] = 1
            sizes = [p.numel() for p in self.params]
            self.mask = [part.view_as(p) for part, p in zip(flat.split(sizes), self.params)]
            if self._velocity is not None:  # frozen coordinates must not keep moving on old momentum
                for velocity, m in zip(self._velocity, self.mask):
                    velocity.mul_(m)
        self.support_version += 1


class TwoPhaseSparse(MaskedSupport):
    """TP-TopK paper, Algorithm 1 (Section 3.2). Phase 1 (T_1 steps): DP-SGD with σ_1, accumulating
    s += g̃ ⊙ g̃ of the *released* gradients. Then A = the ⌊ρd⌋ coordinates ranked first (by the denoised
    score a = s/T_1 − σ_1² of Figure 2's caption and Lemma 5.2, or at random) and Phase 2 is DP-SGD on A
    with σ_2. Momentum is reset at the switch.
    """

    learned: ClassVar[bool] = True

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self._squares = [torch.zeros_like(p) for p in self.params]

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        check_ratio("active_ratio (ρ)", hyper.active_ratio)
        if not 0 < hyper.warmup_fraction < 1:
            raise DPAuditError(f"warmup_fraction (E1/E) must be in (0, 1); got {hyper.warmup_fraction}")
        total = hyper.steps_per_epoch * hyper.epochs
        if not 1 <= hyper.warmup_steps < total:
            raise DPAuditError(f"the warm-up must leave steps for phase 2: T1 = {hyper.warmup_steps} of T = {total}")
        if hyper.warmup_sigma_dp is None:
            raise DPAuditError("two-phase optimizers need warmup_sigma_dp (σ_1) or target_epsilon")
        check_positive("warmup_sigma_dp (σ_1)", hyper.warmup_sigma_dp)

    @classmethod
    def planned_noise_multipliers(cls, hyper: Hyperparameters) -> np.ndarray:
        total = hyper.steps_per_epoch * hyper.epochs
        warmup = sigma_dp_to_noise_multiplier(
            sigma_dp=hyper.warmup_sigma_dp, batch_size=hyper.expected_batch_size, clip_norm=hyper.clip_norm
        )
        return np.concatenate(
            [np.full(hyper.warmup_steps, warmup), np.full(total - hyper.warmup_steps, hyper.noise_multiplier)]
        )

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float, str]:
        warmup = self.steps_taken < self.hyper.warmup_steps
        sigma = self.hyper.warmup_sigma_dp if warmup else self.hyper.sigma_dp
        released = self._release(sigma)
        if warmup:
            for squares, value in zip(self._squares, released):
                squares.add_(value * value)
        self._apply(released)
        if warmup and self.steps_taken == self.hyper.warmup_steps:
            self._choose_support()
        z = sigma_dp_to_noise_multiplier(
            sigma_dp=sigma, batch_size=self.hyper.expected_batch_size, clip_norm=self.hyper.clip_norm
        )
        return z, self.hyper.sample_rate, "warmup" if warmup else "train"

    def _choose_support(self) -> None:
        # minus the per-coordinate noise variance ν_1² = σ_1² (σ_DP units): E[a_p] = G_p² (Lemma 5.2)
        self.score = _flat(self._squares) / self.hyper.warmup_steps - self.hyper.warmup_sigma_dp**2
        k = math.floor(self.hyper.active_ratio * self.dimension)
        order = top_k_indices(self.score, k) if self.learned else self._random_order(1)[:k]
        if self._velocity is not None:
            for velocity in self._velocity:
                velocity.zero_()
        self._set_support(order)


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


class OnlineSparse(MaskedSupport):
    """ON-* of the TP-TopK paper (Table 1, Section 7.1; the schedule is not in the paper): one σ for the
    whole run; the support is refreshed at the start of every epoch, with active ratio
    ρ_e = 1 − (1 − ρ)·e/(E − 1) at epoch e = 0 … E − 1 (dense first epoch, ρ at the last).

    ON-TopK ranks by a_p = mean over the previous epoch's steps of g̃_p² − σ², from the released gradients
    only; a coordinate frozen all that epoch keeps its latest score. ON-Rand draws a fresh random support.
    The supports are a predictable schedule, so the run costs T steps at (q, σ), as DP-SGD.
    """

    learned: ClassVar[bool] = True

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self._squares = [torch.zeros_like(p) for p in self.params]
        self._epoch_steps = 0

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        check_ratio("active_ratio (ρ)", hyper.active_ratio)
        if hyper.epochs < 2:
            raise DPAuditError(
                f"online sparse optimizers refresh the support per epoch and need epochs ≥ 2; got {hyper.epochs}"
            )

    def active_ratio(self, epoch: int) -> float:
        """ρ_e of 1-based ``epoch`` under the linear schedule."""
        return 1 - (1 - self.hyper.active_ratio) * (epoch - 1) / (self.hyper.epochs - 1)

    def begin_epoch(self, epoch: int) -> None:
        super().begin_epoch(epoch)
        if self.learned and self._epoch_steps:
            fresh = _flat(self._squares) / self._epoch_steps - self.hyper.sigma_dp**2
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
        order = top_k_indices(self.score, k) if self.learned else self._random_order(epoch)[:k]
        self._set_support(order)

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float]:
        released = self._release(self.hyper.sigma_dp)
        for squares, value in zip(self._squares, released):
            squares.add_(value * value)
        self._epoch_steps += 1
        self._apply(released)
        return self.hyper.noise_multiplier, self.hyper.sample_rate


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


VARIANCE_CLAMP = (1e-6, 1e6)  # AdaDPIGU code: the EMA variance is clamped to [h1, h2]


class AdaDPIGU(MaskedSupport):
    """AdaDPIGU paper, Algorithms 1 and 2 (Section 4; masked noise: Section 5.1 and Theorem 11).
    Pre-training: T_pre steps of DP-SGD accumulating the importance s += |g̃| of the
    released gradients; then the mask m keeps the top ⌊r·d⌋ coordinates and the pruned weights are set
    to 0 (the paper's forward pass at m ⊙ θ). Main phase, per record: z_i = m ⊙ (g_i − α) / (√β + μ),
    keep its ⌊k_s·d⌋ largest |entries|, clip to C; then ḡ = Σ z_i / b + N(0, σ_DP²) on the support,
    ĝ = m ⊙ (ḡ ⊙ (√β + μ) + α), θ ← θ − η ĝ, and α, β are EMAs (γ1, γ2) of the released ĝ.
    α and β depend only on released updates, so every step is one subsampled Gaussian step at σ.
    """

    noisy_importance: ClassVar[bool] = True
    adaptive_statistics: ClassVar[bool] = True

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self._importance = [torch.zeros_like(p) for p in self.params]
        self.alpha = [torch.zeros_like(p) for p in self.params]
        self.beta = [torch.ones_like(p) for p in self.params]
        self.example_k = max(1, math.floor(hyper.example_topk_fraction * self.dimension))

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        check_ratio("retention_ratio (r)", hyper.retention_ratio)
        check_ratio("example_topk_fraction", hyper.example_topk_fraction)
        for name, value in (
            ("ema_mean_decay (γ1)", hyper.ema_mean_decay),
            ("ema_variance_decay (γ2)", hyper.ema_variance_decay),
        ):
            if not 0 <= value < 1:
                raise DPAuditError(f"{name} must be in [0, 1); got {value}")
        check_positive("standardise_constant (μ)", hyper.standardise_constant)
        if not 0 < hyper.pretrain_fraction < 1:
            raise DPAuditError(f"pretrain_fraction must be in (0, 1); got {hyper.pretrain_fraction}")
        total = hyper.steps_per_epoch * hyper.epochs
        if not 1 <= hyper.pretrain_steps < total:
            raise DPAuditError(
                f"the pre-training must leave steps for the main phase: T_pre = {hyper.pretrain_steps} of T = {total}"
            )

    def _scale(self) -> list[torch.Tensor]:
        return [beta.sqrt() + self.hyper.standardise_constant for beta in self.beta]

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        if self.mask is None:
            super().accumulate(grads)
            return
        standardised = [m * (g - a) / s for g, a, s, m in zip(grads, self.alpha, self._scale(), self.mask)]
        flat = torch.cat([z.flatten(1) for z in standardised], 1)
        if self.example_k < flat.shape[1]:
            keep = torch.zeros_like(flat).scatter_(1, torch.topk(flat.abs(), self.example_k, dim=1).indices, 1.0)
            flat = flat * keep
        norms = flat.norm(dim=1)
        flat = flat * torch.clamp(self.hyper.clip_norm / (norms + CLIP_EPSILON), max=1.0)[:, None]
        for total, part in zip(self._sum, flat.sum(0).split([p.numel() for p in self.params])):
            total.add_(part.view_as(total))

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float, str]:
        pretraining = self.mask is None
        if pretraining:
            released = self._release(self.hyper.sigma_dp)
            clean = [total / max(realized_batch_size, 1) for total in self._sum]
            for importance, value in zip(self._importance, released if self.noisy_importance else clean):
                importance.add_(value.abs())
            self._apply(released)
            if self.steps_taken == self.hyper.pretrain_steps:
                self._choose_mask()
        else:
            scale = self._scale()
            released = [
                m * (value * s + a)
                for value, s, a, m in zip(self._release(self.hyper.sigma_dp), scale, self.alpha, self.mask)
            ]
            self._apply(released)
            if self.adaptive_statistics:
                for alpha, beta, value in zip(self.alpha, self.beta, released):
                    deviation = (value - alpha) ** 2
                    alpha.mul_(self.hyper.ema_mean_decay).add_((1 - self.hyper.ema_mean_decay) * value)
                    beta.mul_(self.hyper.ema_variance_decay).add_(
                        (1 - self.hyper.ema_variance_decay) * deviation.clamp(*VARIANCE_CLAMP)
                    )
        return self.hyper.noise_multiplier, self.hyper.sample_rate, "pretrain" if pretraining else "train"

    def _choose_mask(self) -> None:
        self.score = _flat(self._importance) / self.hyper.pretrain_steps
        if self._velocity is not None:
            for velocity in self._velocity:
                velocity.zero_()
        self._set_support(top_k_indices(self.score, math.floor(self.hyper.retention_ratio * self.dimension)))
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
