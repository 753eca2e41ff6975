"""Optimizers as small pluggable pieces of the one training engine.

The engine computes gradients (per-sample where the optimizer asks for them) and hands them over in
chunks; the optimizer turns them into one parameter update per step and says what the step cost in
privacy. Add an optimizer by subclassing :class:`Optimizer` and decorating it with
:func:`register`. ``available()`` lists the registered names.

Noise convention (seed 004): σ_DP is the per-coordinate std of the Gaussian noise added to the
*averaged* clipped gradient Σ clip_C(g_i) / b. The usual noise multiplier is z = σ_DP · b / C
(noise std on the summed clipped gradient divided by its sensitivity C), so either may be given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from dpaudit._registry import Registry
from dpaudit._validation import DPAuditError, check_choice, check_positive

CLIP_EPSILON = 1e-6  # as Opacus: factor min(1, C / (‖g‖ + 1e-6))


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
    """z = σ_DP · b / C (seed 004 §1.5)."""
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
        clip_norm: per-sample ℓ2 clipping threshold C.
        sigma_dp: std of the Gaussian noise on the averaged clipped gradient (σ_DP).
        domain_radius: radius D of the ℓ2 ball that DPSGD-DC projects onto.
        domain_center: "origin" (the paper's K) or "init" (a ball around θ_0).
    """

    lr: float
    expected_batch_size: int
    dataset_size: int
    clip_norm: float | None = None
    sigma_dp: float | None = None
    domain_radius: float | None = None
    domain_center: str = "origin"

    @property
    def sample_rate(self) -> float:
        return self.expected_batch_size / self.dataset_size


class Optimizer:
    """Base class: one update rule over a list of parameter tensors.

    The engine calls ``accumulate`` once per chunk of a batch (per-sample gradients, shape
    [chunk, *param.shape], if ``per_sample`` else the batch-mean gradient) and then ``step`` once.
    """

    per_sample: ClassVar[bool] = True

    def __init__(self, params: Sequence[torch.Tensor], hyper: Hyperparameters, *, generator: torch.Generator):
        self.params = list(params)
        self.hyper = hyper
        self.generator = generator
        self._sum = [torch.zeros_like(p) for p in self.params]

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        """Raise a one-line DPAuditError if ``hyper`` does not suit this optimizer."""
        check_positive("lr", hyper.lr)

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        for total, grad in zip(self._sum, grads):
            total.add_(grad.sum(0) if self.per_sample else grad)

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float] | None:
        """Apply one update; return the step's (noise multiplier, sample rate), or None if not private."""
        raise NotImplementedError

    def _reset(self) -> None:
        for total in self._sum:
            total.zero_()


@register("sgd", dp_claim=False, description="non-private mini-batch SGD (reference; no DP claim)")
class SGD(Optimizer):
    per_sample = False

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> None:
        for param, total in zip(self.params, self._sum):
            param.sub_(self.hyper.lr * total)
        self._reset()
        return None


@register(
    "dpsgd-gc",
    dp_claim=True,
    description="DP-SGD with per-sample gradient clipping (seed 004 DPSGD-GC)",
)
class DPSGD(Optimizer):
    """θ ← θ − η (Σ clip_C(g_i) / b + N(0, σ_DP² I))."""

    @classmethod
    def check(cls, hyper: Hyperparameters) -> None:
        super().check(hyper)
        if hyper.clip_norm is None or hyper.sigma_dp is None:
            raise DPAuditError("DP optimizers need clip_norm (C) and sigma_dp or noise_multiplier")
        check_positive("clip_norm (C)", hyper.clip_norm)
        check_positive("sigma_dp (σ_DP)", hyper.sigma_dp, allow_zero=True)

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads))
        factors = (self.hyper.clip_norm / (norms + CLIP_EPSILON)).clamp(max=1.0)
        for total, grad in zip(self._sum, grads):
            total.add_(torch.einsum("i,i...->...", factors, grad))

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> tuple[float, float]:
        b = self.hyper.expected_batch_size
        for param, total in zip(self.params, self._sum):
            noise = torch.randn(param.shape, generator=self.generator, device=param.device, dtype=param.dtype)
            param.sub_(self.hyper.lr * (total / b + self.hyper.sigma_dp * noise))
        self._reset()
        self.after_step()
        z = sigma_dp_to_noise_multiplier(sigma_dp=self.hyper.sigma_dp, batch_size=b, clip_norm=self.hyper.clip_norm)
        return z, self.hyper.sample_rate

    def after_step(self) -> None:
        """Hook for constraints applied after each update (projection in DPSGD-DC)."""


@register(
    "dpsgd-dc",
    dp_claim=True,
    description="DP-SGD with clipping and projection onto the ℓ2 ball of radius D (seed 004 DPSGD-DC)",
)
class DPSGDDomainConstrained(DPSGD):
    """DPSGD-GC followed by θ ← Π_K(θ), K = {θ : ‖θ − c‖ ≤ D}, c = 0 or θ_0, jointly over all parameters."""

    def __init__(self, params, hyper, *, generator):
        super().__init__(params, hyper, generator=generator)
        self.center = (
            [p.detach().clone() for p in self.params] if hyper.domain_center == "init" else None
        )
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
