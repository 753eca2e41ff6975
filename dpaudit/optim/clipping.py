"""The private skeleton and the optimizers that differ only in their per-sample weight φ.

:class:`PrivateOptimizer` scales each per-sample gradient g_i by φ(‖g_i‖) with ‖φ(‖g‖)·g‖ ≤ C, sums, adds Gaussian
noise and divides by the expected batch size b. DP-SGD with gradient clipping (DPSGD-GC) or domain clipping
(DPSGD-DC, Liang et al.) and its broken-on-purpose controls, and the DP-PSAC paper's weights (Auto-S, Auto-V,
DP-PSAC and a data-dependent-noise control) are each a few lines on top.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Self

import torch

from dpaudit._device import padding_mask
from dpaudit._streams import derived_generator
from dpaudit._validation import DPAuditError
from dpaudit.layerwise import sample_norms, weighted_sample_sums
from dpaudit.optim.base import Hyperparameters, Optimizer, StepCost, register
from dpaudit.optim.stacked import StackedRows, _stacked_rows, draw_noise_rows
from dpaudit.settings import SETTINGS, DomainSettings, OptimizerSettings, PSACSettings

CLIP_EPSILON = 1e-6  # as Opacus: factor min(1, C / (‖g‖ + 1e-6))
AUTO_V_EPSILON = 1e-12  # Auto-V's C / ‖g‖ (DP-PSAC paper, Section 3) gets a guard at ‖g‖ = 0 (dpaudit's choice)


def _flat_norms(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-sample ℓ2 norms over all parameter tensors together ("flat" clipping)."""
    # summed left to right, as ``sum`` would (without its leading 0, which types as an int)
    return torch.sqrt(functools.reduce(operator.add, [g.flatten(1).pow(2).sum(1) for g in grads]))


class PrivateOptimizer(Optimizer):
    """Weighted per-sample sum, noise of std z·C on the sum, division by the expected batch size b.

    Subclasses define ``factors(norms)`` = φ(‖g_i‖), with ‖φ(s)·g‖ ≤ C for every s (the sensitivity).
    ``pure_factors``: φ depends on nothing but the norms and the hyperparameters (no state).
    """

    pure_factors: ClassVar[bool] = True
    # caches, the audit block's noise buffer (reused at every step: at 10⁷ canaries a fresh one costs a page fault
    # per 4 kB, about as much as the draw itself) and the generator its derived stream is reseeded into
    transient_state: ClassVar[tuple[str, ...]] = (
        *Optimizer.transient_state,
        *("_dirac_values", "_block_noise", "_derived_generator"),
    )

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        lr, momentum, *family = super().setting_names()
        return (lr, momentum, "clip_norm", "sigma_dp", "noise_multiplier", "target_epsilon", *family)

    @classmethod
    def check(cls, hyper: Hyperparameters[Any]) -> None:
        super().check(hyper)
        if hyper.clip_norm is None or hyper.sigma_dp is None:
            raise DPAuditError("DP optimizers need clip_norm (C) and sigma_dp, noise_multiplier or target_epsilon")
        SETTINGS["clip_norm"].check(hyper.clip_norm)
        SETTINGS["sigma_dp"].check(hyper.sigma_dp)

    @property
    def clip_norm(self) -> float:
        """C, the per-sample ℓ2 clipping threshold (``check`` requires it of a private optimizer)."""
        assert self.hyper.clip_norm is not None, "check: DP optimizers need clip_norm (C)"
        return self.hyper.clip_norm

    @property
    def sigma_dp(self) -> float:
        """σ_DP, the std of the noise on the averaged clipped gradient (``check`` requires it)."""
        assert self.hyper.sigma_dp is not None, "check: DP optimizers need sigma_dp"
        return self.hyper.sigma_dp

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        factors = self.factors(_flat_norms(grads))
        for total, grad in zip(self._sum, grads):
            total.add_(torch.einsum("i,i...->...", factors, grad))

    @classmethod
    def takes_dirac_records(cls) -> bool:
        # exact where each record's gradient is weighted by φ of its norm and summed, nothing else
        return cls.accumulate is PrivateOptimizer.accumulate

    def accumulate_diracs(self, *, coordinates: torch.Tensor, magnitude: float) -> None:
        if not self.takes_dirac_records():
            super().accumulate_diracs(coordinates=coordinates, magnitude=magnitude)
        block = self._sum[-1].view(-1)
        if self.pure_factors:  # every record adds the same φ(K)·K (elementwise +, −, ·, /: one value for all k)
            values = self._dirac_value(block, magnitude).expand(len(coordinates))
        else:  # φ looks at the records (e.g. the batch's largest clipped norm): through ``factors``
            norms = block.new_full((len(coordinates),), magnitude)  # ‖g_i‖ of a Dirac: its magnitude
            values = self.factors(norms) * norms
        block.index_add_(0, coordinates, values)

    def _dirac_value(self, block: torch.Tensor, magnitude: float) -> torch.Tensor:
        """[1] φ(m)·m of a Dirac record of norm ``magnitude`` (pure φ: computed once per magnitude and kept), in
        ``block``'s dtype and on its device."""
        cached = getattr(self, "_dirac_values", None)
        if cached is None or cached[0] != magnitude or cached[1].dtype != block.dtype:
            norms = block.new_full((1,), magnitude)
            cached = self._dirac_values = (magnitude, self.factors(norms) * norms)
        return cached[1]

    def dirac_contribution(self, magnitude: float) -> float:
        """φ(m)·m: what one Dirac record of norm ``magnitude`` adds at its coordinate (``accumulate_diracs``), in
        the last parameter's dtype; C for plain clipping of a Dirac of norm m ≥ C."""
        norms = self._sum[-1].new_full((1,), magnitude)
        return float((self.factors(norms) * norms)[0])

    def set_audit_block(self, count: int, *, joint: bool = False) -> None:
        if not self.takes_dirac_records():
            super().set_audit_block(count, joint=joint)
        self.audit_parameters = count
        self.audit_joint = joint

    @classmethod
    def _masks_together(cls, optimizers: Sequence[Self], parameters: int) -> list[torch.Tensor | None] | None:
        """Per parameter, the [M, *shape] 0/1 masks the ensemble's per-sample gradients are multiplied by before
        clipping (None: unmasked); None where this class's ``accumulate`` is not the one-pass form's."""
        if cls.accumulate is not PrivateOptimizer.accumulate:
            return None
        return [None] * parameters

    @classmethod
    def accumulate_together(
        cls,
        optimizers: Sequence[Self],
        grads: Sequence[torch.Tensor],
        counts: Sequence[int],
        padding: torch.Tensor | None = None,
    ) -> None:
        # One pass when φ is a pure function of ‖g‖ and the hyperparameters (shared by the ensemble).
        masks = cls._masks_together(optimizers, len(grads))
        if masks is None or not cls.pure_factors:
            return super().accumulate_together(optimizers, grads, counts, padding)
        norms = torch.linalg.vector_norm(torch.stack([sample_norms(g, m) for g, m in zip(grads, masks)]), dim=0)
        if padding is None:
            padding = padding_mask(counts, norms.shape[1], norms.device)
        factors = optimizers[0].factors(norms).masked_fill(padding, 0.0)
        sums = [s if m is None else s.mul_(m) for s, m in zip(weighted_sample_sums(grads, factors), masks)]
        rows = _stacked_rows(optimizers)
        if rows is not None:
            torch._foreach_add_(rows.sums, sums)
            return
        for row, optimizer in enumerate(optimizers):  # not rows of one stack: each into its own model sums
            torch._foreach_add_(optimizer._sum[: len(sums)], [total[row] for total in sums])

    @classmethod
    @torch.no_grad()
    def step_together(cls, optimizers: Sequence[Self], realized_batch_sizes: Sequence[int]) -> list[StepCost | None]:
        # The plain update (no momentum, no recorded release, no audit block) of the models that take it, when they
        # are consecutive rows of one ``stack_rows`` stack: ``_step_rows``, one call per operation for all M models;
        # the others (and every model, where the class has no such pass) step model by model.
        plain = [
            m
            for m, optimizer in enumerate(optimizers)
            if optimizer._velocity is None
            and not optimizer.record_updates
            and not optimizer.audit_parameters
            and optimizer.hyper == optimizers[0].hyper
        ]
        group = [optimizers[m] for m in plain]
        rows = _stacked_rows(group) if len(group) > 1 and cls._apply is Optimizer._apply else None
        cost = None if rows is None else cls._step_rows(group, rows)
        if cost is None:
            return super().step_together(optimizers, realized_batch_sizes)
        costs: dict[int, StepCost | None] = dict.fromkeys(plain, cost)
        others = [m for m in range(len(optimizers)) if m not in costs]
        costs.update(
            zip(
                others,
                super().step_together([optimizers[m] for m in others], [realized_batch_sizes[m] for m in others]),
            )
        )
        return [costs[m] for m in range(len(optimizers))]

    @classmethod
    def _step_rows(cls, group: Sequence[Self], rows: StackedRows) -> StepCost | None:
        """``step`` of the plain models ``group`` (``step_together``; equal hyperparameters), rows ``rows`` of one
        stack, as one pass over the [M, *shape] stacks: each model's own noise draw, then the arithmetic of ``step``;
        their one cost. None, with nothing done, where this class has no such pass."""
        factors = {optimizer.noise_factor() for optimizer in group}
        if (
            len(factors) > 1
            or cls.step is not PrivateOptimizer.step
            or cls.after_step is not PrivateOptimizer.after_step
            or cls._noisy_mean is not PrivateOptimizer._noisy_mean
        ):
            return None
        (factor,), hyper, sigma_dp = factors, group[0].hyper, group[0].sigma_dp
        noise, noise_rows = rows.noise()
        draw_noise_rows(group, noise_rows)
        # the update is formed in the sums (zeroed after it), not in new tensors the size of the models
        torch._foreach_div_(rows.sums, hyper.expected_batch_size)
        torch._foreach_add_(rows.sums, noise, alpha=sigma_dp * factor)
        torch._foreach_add_(rows.params, rows.sums, alpha=-hyper.lr)
        torch._foreach_zero_(rows.sums)
        for optimizer in group:
            optimizer.steps_taken += 1
        return StepCost(hyper.noise_multiplier * factor, hyper.sample_rate)

    def noise_factor(self) -> float:
        """Schedule factor on z at the current step (1 for static noise)."""
        return 1.0

    def _step_noise(self, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """The step's standard normal noise of all coordinates, parameter after parameter, in one draw (one
        generator call per step instead of one per tensor); into ``out`` (flat) if given. An audit block's
        coordinates (``set_audit_block``) are in the same draw (``audit_joint``), or drawn by the same code from a
        generator derived from the state the model's draw left (``dpaudit._streams``)."""
        if out is not None:
            return self._draw_noise(out)
        sizes = [total.numel() for total in self._sum]
        if not self.audit_parameters or self.audit_joint:
            return self._noise(sum(sizes))
        model = sum(sizes[: self._model_parameters])
        noise = getattr(self, "_block_noise", None)  # consumed within the step (``_noisy_mean``): reused
        if noise is None or noise.numel() != sum(sizes):
            noise = self._block_noise = self.params[0].new_empty(sum(sizes))
        self._draw_noise(noise[:model])  # what the model's coordinates draw without the block
        with self._audit_block_stream():
            self._draw_noise(noise[model:])
        return noise

    @contextlib.contextmanager
    def _audit_block_stream(self) -> Iterator[None]:
        """Within it, the noise stream (``self.generator``) is the audit block's: the model's own if ``audit_joint``,
        else a generator derived from the state the model's draws left (``dpaudit._streams``), so that the model's
        later draws are those of a run without the block. Enter it after the model's draws of the step."""
        own = self.generator
        if not self.audit_joint:  # reseeded at every step: one generator, not one per step
            into = getattr(self, "_derived_generator", None)
            self.generator = self._derived_generator = derived_generator(own, into=into)
        try:
            yield
        finally:
            self.generator = own

    def _noisy_mean(self, *, b: float, std: float) -> Sequence[torch.Tensor]:
        """Σ / b + N(0, std² I) per parameter (noise from ``_step_noise``, cut in parameter order)."""
        noise = self._step_noise().split([total.numel() for total in self._sum])
        noise = [values.view_as(total) for values, total in zip(noise, self._sum)]
        if not self.audit_parameters:
            updates = torch._foreach_div(self._sum, b)
            torch._foreach_add_(updates, noise, alpha=std)
            return updates
        model = self._model_parameters  # the model's as without the block, then the block's
        updates = torch._foreach_div(self._sum[:model], b)
        torch._foreach_add_(updates, noise[:model], alpha=std)
        block = self._sum[model:]  # in place: its sums go on in a spare (``_release_block``)
        torch._foreach_div_(block, b)
        torch._foreach_add_(block, noise[model:], alpha=std)
        return [*updates, *block]

    def _noise(self, shape) -> torch.Tensor:
        """N(0, I) values of ``shape`` from this optimizer's noise stream."""
        return self._draw_noise(self.params[0].new_empty(shape))

    def _draw_noise(self, out: torch.Tensor) -> torch.Tensor:
        """``out`` filled with N(0, I) values from this optimizer's noise stream (``torch.randn``'s draw)."""
        return out.normal_(generator=self.generator)

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        factor = self.noise_factor()
        b, sigma = self.hyper.expected_batch_size, self.sigma_dp * factor
        self._apply(self._noisy_mean(b=b, std=sigma))
        self.after_step()
        return StepCost(self.hyper.noise_multiplier * factor, self.hyper.sample_rate)

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
        return (self.clip_norm / (norms + CLIP_EPSILON)).clamp(max=1.0)


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


UNDERSTATED_SAMPLE_RATE_FACTOR = 4  # dpsgd-gc-understated-q's ledger records q / 4


@register(
    "dpsgd-gc-understated-q",
    dp_claim=False,
    description="DP-SGD whose ledger records the sample rate q/4 instead of q (broken on purpose: auditor check; "
    "no DP claim)",
)
class DPSGDUnderstatedSampleRate(DPSGD):
    """DPSGD-GC, bit for bit, whose ``StepCost`` reports q/4 (``UNDERSTATED_SAMPLE_RATE_FACTOR``) instead of q = b/n.

    A negative control of the auditor validation: the bug of a ledger that under-states the sample rate (say, a
    batch size or a dataset size taken from the wrong place), so that the run's claimed ε, the ledger's, is that
    of a mechanism amplified by a rate four times smaller than the one the batches use. Only a whole-run audit
    sees it: each step alone is the Gaussian mechanism its z says, and it is the composition over the epochs,
    with the true q, that spends more than the ledger. Calibrate its noise to the claim with the understated
    rate (``calibrate_noise(..., sample_rate=q / 4)``); ``target_epsilon`` calibrates with q = b/n.
    """

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        cost = super().step(realized_batch_size=realized_batch_size)
        return cost._replace(sample_rate=cost.sample_rate / UNDERSTATED_SAMPLE_RATE_FACTOR)

    @classmethod
    def planned_sample_rate(cls, hyper: Hyperparameters[Any]) -> float:
        return super().planned_sample_rate(hyper) / UNDERSTATED_SAMPLE_RATE_FACTOR


@register(
    "dpsgd-gc-reused-noise",
    dp_claim=False,
    description="DP-SGD that draws its Gaussian noise once and adds the same vector at every step (broken on "
    "purpose: auditor check; no DP claim)",
)
class DPSGDReusedNoise(DPSGD):
    """DPSGD-GC whose noise is drawn at the first step and reused, the same vector, at every later step.

    A negative control of the auditor validation: the bug of a noise stream seeded afresh at every step (or a
    noise tensor drawn once and kept). Each step alone is the Gaussian mechanism its z says, so a one-step audit
    cannot see it; across steps the noise cancels in the difference of two releases, so the composed mechanism
    has no privacy at all. The reuse covers every coordinate, an audit block's included (``set_audit_block``:
    the whole-run canaries' coordinates, whose noise is the model's generator's draw), since that is what the
    whole-run canaries observe. The ledger records the calibrated z at every step (what it claims).
    """

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[OptimizerSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self._reused_noise: torch.Tensor | None = None  # the first step's N(0, I) draw, all coordinates

    def _step_noise(self, *, out: torch.Tensor | None = None) -> torch.Tensor:
        if self._reused_noise is None:
            self._reused_noise = super()._step_noise(out=out).clone()
        if out is not None:
            return out.copy_(self._reused_noise)
        return self._reused_noise.clone()


SKIPPED_NOISE_EVERY = 20  # dpsgd-gc-skipped-noise adds no noise at every 20th step: 5 % of the steps


@register(
    "dpsgd-gc-skipped-noise",
    dp_claim=False,
    description="DP-SGD that adds no noise at every 20th step (5 % of the steps) but accounts for it (broken on "
    "purpose: auditor check; no DP claim)",
)
class DPSGDSkippedNoise(DPSGD):
    """DPSGD-GC whose noise is zero at steps 20, 40, … (``SKIPPED_NOISE_EVERY``; its ledger records the calibrated z).

    A negative control of the auditor validation: the bug of a noise switched off on some steps (a flag, a schedule
    or a warm-up that forgets the noise). A step without noise releases the clipped sum exactly, so the run's true ε
    is infinite; on 5 % of the steps, the composed statistics hardly move, which is why the whole-run audit checks
    σ_t at every step (``RunCanaryObservations.noise_check``). The noise is drawn at every step (the stream is the
    twin's) and zeroed on the skipped ones, every coordinate of the step, an audit block's included.
    """

    def _draw_noise(self, out: torch.Tensor) -> torch.Tensor:
        super()._draw_noise(out)
        return out.zero_() if self.steps_taken % SKIPPED_NOISE_EVERY == SKIPPED_NOISE_EVERY - 1 else out


@register(
    "dpsgd-dc",
    dp_claim=True,
    description="DP-SGD with clipping and projection onto the ℓ2 ball of radius D (DPSGD-DC of Liang et al.)",
)
class DPSGDDomainConstrained(DPSGD):
    """DPSGD-GC followed by θ ← Π_K(θ), K = {θ : ‖θ − c‖ ≤ D}, c = 0 or θ_0, jointly over all parameters."""

    settings_type = DomainSettings
    hyper: Hyperparameters[DomainSettings]

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[DomainSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self.center = [p.detach().clone() for p in self.params] if hyper.settings.domain_center == "init" else None
        self.after_step()  # θ_0 ∈ K

    @classmethod
    def check(cls, hyper: Hyperparameters[DomainSettings]) -> None:
        super().check(hyper)
        if hyper.settings.domain_radius is None:
            raise DPAuditError("dpsgd-dc needs domain_radius (D)")
        SETTINGS["domain_radius"].check(hyper.settings.domain_radius)
        SETTINGS["domain_center"].check(hyper.settings.domain_center)

    @torch.no_grad()
    def after_step(self) -> None:
        params = self.params[: self._model_parameters]  # the model's: an audit block is apart
        offsets = params if self.center is None else [p - c for p, c in zip(params, self.center)]
        norm = math.sqrt(sum(float(o.pow(2).sum()) for o in offsets))
        radius = self.hyper.settings.domain_radius
        assert radius is not None, "check: dpsgd-dc needs domain_radius (D)"
        if norm > radius:
            scale = radius / norm
            centers: Sequence[torch.Tensor | None] = self.center or [None] * len(params)
            for param, center in zip(params, centers):
                if center is None:
                    param.mul_(scale)
                else:
                    param.copy_(center + scale * (param - center))


# DP-PSAC (Xia et al.) and its baselines: only the per-sample weight differs.


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

    settings_type = PSACSettings
    hyper: Hyperparameters[PSACSettings]

    @classmethod
    def check(cls, hyper: Hyperparameters[PSACSettings]) -> None:
        super().check(hyper)
        SETTINGS["r"].check(hyper.settings.r)

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return auto_s_factor(norms, r=self.hyper.settings.r, clip_norm=self.clip_norm)


register("nsgd", dp_claim=True, description="alias of auto-s (NSGD, Yang et al. 2022)")(AutoS)


@register("auto-v", dp_claim=True, description="pure normalisation C·g/‖g‖ (the DP-PSAC paper's Auto-V)")
class AutoV(PrivateOptimizer):
    """φ(s) = C / s (with a 1e-12 guard); every clipped gradient has norm C."""

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return self.clip_norm / (norms + AUTO_V_EPSILON)


@register(
    "dp-psac", dp_claim=True, description="per-sample adaptive clipping C·g/(‖g‖ + r/(‖g‖ + r)) (DP-PSAC, Xia et al.)"
)
class DPPSAC(AutoS):
    """φ(s) = C / (s + r/(s + r)) = C (s + r) / (s² + r s + r); ‖φ(s)g‖ = C (1 − r/(s² + rs + r)) < C."""

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return psac_factor(norms, r=self.hyper.settings.r, clip_norm=self.clip_norm)


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

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[PSACSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self._largest = 0.0
        self._dirac_records = 0  # this batch's Dirac records (whole-run canaries): records of the realised batch

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        factors = super().factors(norms)
        self._largest = max(self._largest, float((factors * norms).max()) if len(norms) else 0.0)
        return factors

    def accumulate_diracs(self, *, coordinates: torch.Tensor, magnitude: float) -> None:
        super().accumulate_diracs(coordinates=coordinates, magnitude=magnitude)  # their clipped norms count too
        self._dirac_records += len(coordinates)

    def dirac_contribution(self, magnitude: float) -> float:
        largest = self._largest
        contribution = super().dirac_contribution(magnitude)
        self._largest = largest  # a look at φ, not a record of this batch
        return contribution

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        b = max(realized_batch_size + self._dirac_records, 1)
        std = self.hyper.noise_multiplier * self._largest / b
        self._apply(self._noisy_mean(b=b, std=std))
        self._largest = 0.0
        self._dirac_records = 0
        return StepCost(self.hyper.noise_multiplier, self.hyper.sample_rate)
