"""The D2P2-SGD paper's family (Jiang et al.): automatic clipping, dynamic noise, random projection."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch

from dpaudit._validation import DPAuditError
from dpaudit.optim.base import Hyperparameters, Optimizer, StepCost, register
from dpaudit.optim.clipping import PrivateOptimizer, _flat_norms
from dpaudit.settings import (
    SETTINGS,
    AutomaticClippingSettings,
    DynamicNoiseSettings,
    DynamicProjectionSettings,
    ProjectionSettings,
)

# the accepted values of the choices, as declared in dpaudit.settings
NOISE_DECAY_UNITS = SETTINGS["noise_decay_unit"].choices
REDUCTION_CONVENTIONS = SETTINGS["reduction_convention"].choices
PROJECTION_REFRESH = SETTINGS["projection_refresh"].choices
#: Entries of each whole-run canary's own tensor in the authors' order (``ProjectedNoise``), projected by a matrix of
#: its own as the optimizer projects every tensor: small, so that its matrices cost little, and large enough that the
#: top direction stretches (≈ 1 + √(d/p)).
AUDIT_TENSOR_SIZE = 10


class AutomaticClipping(PrivateOptimizer):
    """φ(s) = C / (s + γ) (automatic clipping of the D2P2-SGD paper, with G = C); static noise.

    ``dynamic`` classes (settings: :class:`DynamicNoiseSettings`) scale z by the schedule k^(−a) instead.
    """

    dynamic: ClassVar[bool] = False
    settings_type = AutomaticClippingSettings
    hyper: Hyperparameters[AutomaticClippingSettings]

    @classmethod
    def check(cls, hyper: Hyperparameters[AutomaticClippingSettings]) -> None:
        super().check(hyper)
        names = ("gamma", "noise_decay_exponent", "noise_decay_unit") if cls.dynamic else ("gamma",)
        for name in names:
            SETTINGS[name].check(getattr(hyper.settings, name))

    def factors(self, norms: torch.Tensor) -> torch.Tensor:
        return self.clip_norm / (norms + self.hyper.settings.gamma)

    @staticmethod
    def _decay(settings: AutomaticClippingSettings) -> DynamicNoiseSettings:
        """The schedule's settings, which a ``dynamic`` class reads (its ``settings_type``: ``check``)."""
        assert isinstance(settings, DynamicNoiseSettings), "a dynamic class reads DynamicNoiseSettings"
        return settings

    @classmethod
    def noise_schedule(cls, hyper: Hyperparameters[AutomaticClippingSettings]) -> np.ndarray:
        steps = hyper.steps_per_epoch * hyper.epochs
        if not cls.dynamic:
            return np.ones(steps)
        decay = cls._decay(hyper.settings)
        k = (
            np.arange(steps) // hyper.steps_per_epoch + 1
            if decay.noise_decay_unit == "epoch"
            else np.arange(1, steps + 1)
        )
        return k.astype(float) ** -decay.noise_decay_exponent

    def noise_factor(self) -> float:
        if not self.dynamic:
            return 1.0
        decay = self._decay(self.hyper.settings)
        k = self.epoch if decay.noise_decay_unit == "epoch" else self.steps_taken + 1
        return float(k) ** -decay.noise_decay_exponent


def _check_projections_fit(params: Sequence[torch.Tensor], kept: Sequence[int]) -> None:
    """A clear error before the first step when the d_l × p_l Gaussian matrices of the model's tensors cannot fit in
    the memory of their device (a dense layer of 4·10⁵ weights needs hundreds of GB)."""
    device = params[0].device
    need = sum(p.numel() * k for p, k in zip(params, kept)) * params[0].element_size()
    if device.type == "cuda":
        have = torch.cuda.get_device_properties(device).total_memory
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        largest = max(p.numel() for p in params)
        raise DPAuditError(
            f"the projected optimizers' d × p Gaussian matrices need {need / 2**30:.1f} GiB for this model (largest "
            f"tensor: {largest:,} entries), more than the {have / 2**30:.1f} GiB of the {device.type} device; choose a "
            "model with smaller tensors (e.g. cnn-small) or a higher reduction_rate"
        )


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
    settings_type = DynamicNoiseSettings
    hyper: Hyperparameters[DynamicNoiseSettings]


def projected_dimension(d: int, *, rate: float, convention: str) -> int:
    """p for a tensor of d entries: ⌊rate·d⌋ ("code") or round((1 − rate)·d) ("paper"), at least 1."""
    p = int(rate * d) if convention == "code" else round((1 - rate) * d)
    return max(1, min(d, p))


def projected_dimensions(sizes: Sequence[int], *, settings: ProjectionSettings) -> list[int]:
    """p_l of each tensor of d_l = ``sizes[l]`` entries under ``settings``' reduction rate and convention."""
    return [
        projected_dimension(d, rate=settings.reduction_rate, convention=settings.reduction_convention) for d in sizes
    ]


class ProjectedNoise(AutomaticClipping):
    """Random projection per tensor: release z = Σ_i φ_i Aᵀg_i/√p + N(0, (z_t C)² I_p), update A z / b.

    DP-correct form: each record's *projected* gradient Aᵀg_i/√p (all tensors together) is clipped,
    so one record moves z by at most C and the ledger's z_t is the true noise multiplier. The authors'
    order — clip, then project the sum — lets one record move z by up to C·max σ_max(A)/√p ≈ (1 + √(d/p))·C,
    so its ε is not what the accountant reports; that version is ``*-as-published`` (no DP claim).

    An audit block (``set_audit_block``: whole-run canaries) is held in the projected space, where clipping and
    noise happen: canary j's gradient is designed against the public A as √p·(Aᵀ)⁺·K·e_j, whose projection is
    K·e_j, so the block's coordinates are projected coordinates (no matrix of its own), clipped with the record's
    projected norm, noised by the model's own code from a generator derived from the model's draw (or in one draw
    with it, ``joint``), and released as they are. The model's matrices, noise and updates are those of a run
    without the block.

    In the authors' order each canary has a tensor of its own (``AUDIT_TENSOR_SIZE`` entries), projected by a public
    matrix A_j of its own (entries N(0, 1), p_j as for any tensor, redrawn as the model's are), and its gradient is
    K·u_j with u_j the direction A_jᵀ stretches most (its top left singular vector). Clipped in the parameter space
    (φ(K)·K·u_j) and then projected, it moves the release by φ(K)·K·κ_j along A_jᵀu_j, κ_j = s_max(A_j)/√p_j
    (``audit_gains``); the block's coordinate j is the release read along that direction, whose noise is one
    N(0, σ²) draw. The observer still divides by φ(K)·K, what a record adds where clipping follows the projection:
    a present canary then adds κ_j > 1, the sensitivity the authors' order has and its ledger does not claim. The
    projection arithmetic itself is not exercised (as in the DP order).
    """

    clip_after_projection: ClassVar[bool] = True
    settings_type = ProjectionSettings
    hyper: Hyperparameters[ProjectionSettings]
    # redrawn from the seed on use
    transient_state = (*PrivateOptimizer.transient_state, "_matrices", "_matrices_step", "_gains", "_gains_step")

    def __init__(
        self, params: Sequence[torch.Tensor], hyper: Hyperparameters[ProjectionSettings], *, generator: torch.Generator
    ) -> None:
        super().__init__(params, hyper, generator=generator)
        self.kept = projected_dimensions([p.numel() for p in self.params], settings=hyper.settings)
        self._projection_seed = int(np.random.SeedSequence([generator.initial_seed(), 3]).generate_state(1)[0])
        self._matrices_step: int | None = None
        self._matrices: list[torch.Tensor] = []
        self._gains_step: int | None = None
        self._gains = torch.ones(0)
        if self.clip_after_projection:
            self._sum = [torch.zeros(p, device=q.device, dtype=q.dtype) for p, q in zip(self.kept, self.params)]

    def gradient_before_noise(self) -> list[torch.Tensor] | None:
        return None if self.clip_after_projection else super().gradient_before_noise()

    @classmethod
    def takes_dirac_records(cls) -> bool:
        # a canary designed against the public projection is a Dirac in the projected space (the class docstring)
        return True

    def set_audit_block(self, count: int, *, joint: bool = False) -> None:
        self.audit_parameters, self.audit_joint = count, joint
        for index in range(len(self.params) - count, len(self.params)):  # projected coordinates: no matrix
            self.kept[index] = self.params[index].numel()
            self._sum[index] = torch.zeros_like(self.params[index]).view(-1)
        self._matrices_step = self._gains_step = None

    def _projection_step(self) -> int:
        """The step whose matrices this one uses: 0 when projection_refresh='run', else this step."""
        return 0 if self.hyper.settings.projection_refresh == "run" else self.steps_taken

    def audit_gains(self) -> torch.Tensor:
        """[M] κ_j = s_max(A_j)/√p of this step's matrices of the canaries' own tensors (authors' order: the class
        docstring): how far canary j's clipped gradient φ(K)·K·u_j moves the release, in units of φ(K)·K. Fixed for
        the run when projection_refresh='run'."""
        step = self._projection_step()
        if self._gains_step != step:
            block = self.params[-1]
            settings = self.hyper.settings
            p = projected_dimension(
                AUDIT_TENSOR_SIZE, rate=settings.reduction_rate, convention=settings.reduction_convention
            )
            generator = torch.Generator().manual_seed(self._projection_seed + 1_000_003 * (step + 1))
            gains = []
            for start in range(0, block.numel(), 100_000):  # [chunk, d, p] matrices, float64 on the CPU
                chunk = min(100_000, block.numel() - start)
                a = torch.randn(chunk, AUDIT_TENSOR_SIZE, p, generator=generator, dtype=torch.float64)
                gains.append((torch.linalg.eigvalsh(a.transpose(1, 2) @ a)[:, -1] / p).sqrt())
            self._gains = torch.cat(gains).to(device=block.device, dtype=block.dtype)
            self._gains_step = step
        return self._gains

    def accumulate_diracs(self, *, coordinates: torch.Tensor, magnitude: float) -> None:
        if not self.audit_parameters:
            Optimizer.accumulate_diracs(self, coordinates=coordinates, magnitude=magnitude)
        if self.clip_after_projection:
            super().accumulate_diracs(coordinates=coordinates, magnitude=magnitude)
            return
        block = self._sum[-1].view(-1)  # clipped in the parameter space, then stretched κ_j by its tensor's A_j
        block.index_add_(0, coordinates, self._dirac_value(block, magnitude) * self.audit_gains()[coordinates])

    @classmethod
    def check(cls, hyper: Hyperparameters[AutomaticClippingSettings]) -> None:  # AutomaticClipping's: by name
        super().check(hyper)
        for name in ("reduction_rate", "reduction_convention", "projection_refresh"):
            SETTINGS[name].check(getattr(hyper.settings, name))

    def matrices(self) -> list[torch.Tensor]:
        """This step's A_l ∈ R^{d_l × p_l}, entries N(0, 1); fixed for the run when projection_refresh='run'."""
        step = self._projection_step()
        if self._matrices_step != step:
            device, dtype = self.params[0].device, self.params[0].dtype
            model = self._model_parameters  # an audit block is in the projected space already
            if self._matrices_step is None:
                _check_projections_fit(self.params[:model], self.kept[:model])
            generator = torch.Generator(device=device).manual_seed(self._projection_seed + step)
            self._matrices = [
                torch.randn(param.numel(), p, generator=generator, device=device, dtype=dtype)
                for param, p in zip(self.params[:model], self.kept[:model])
            ]
            self._matrices_step = step
        return self._matrices

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        if not self.clip_after_projection:
            return super().accumulate(grads)
        # a tensor of zero gradients (the model's, beside canaries fed as extra records) projects to zeros: skipping
        # its d × p product is exact and was most of a canary-audited run's time
        projected = [
            g.flatten(1) @ a / math.sqrt(p) if g.any() else g.new_zeros(len(g), p)
            for g, a, p in zip(grads, self.matrices(), self.kept)
        ]
        projected += [g.flatten(1) for g in grads[self._model_parameters :]]  # an audit block's: projected already
        factors = self.factors(_flat_norms(projected))
        for total, values in zip(self._sum, projected):
            total.add_(factors @ values)

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> StepCost:
        factor = self.noise_factor()
        b, sigma = self.hyper.expected_batch_size, self.sigma_dp * factor
        updates = []
        model = self._model_parameters
        for param, total, a, p in zip(self.params[:model], self._sum[:model], self.matrices(), self.kept[:model]):
            released = total if self.clip_after_projection else total.flatten() @ a / math.sqrt(p)
            updates.append((a @ (released / b + sigma * self._noise(p))).reshape(param.shape))
        if self.audit_parameters:  # released in the projected space (``set_audit_block``)
            with self._audit_block_stream():
                for param, total in zip(self.params[model:], self._sum[model:]):
                    updates.append((total / b + sigma * self._noise(total.numel())).reshape(param.shape))
        self._apply(updates)
        return StepCost(self.hyper.noise_multiplier * factor, self.hyper.sample_rate)


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
    settings_type = DynamicProjectionSettings
    hyper: Hyperparameters[DynamicProjectionSettings]


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
