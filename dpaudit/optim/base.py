"""The optimizer registry, the hyperparameters, the typed step cost and the base class.

:func:`register` adds an optimizer class under a name, :func:`available` lists the names and :func:`get_spec` looks
one up. :class:`Hyperparameters` is what every optimizer is given: lr, momentum, C and σ_DP, the run's facts, and its
family's settings (a dataclass of :mod:`dpaudit.settings`, the class's ``settings_type``); :class:`Optimizer` is the
base class of every update rule and :class:`StepCost` what a private step says it cost. :class:`SGD` is the
non-private reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Generic, NamedTuple, Self, TypeVar, cast

import numpy as np
import torch

from dpaudit._registry import Registry
from dpaudit._validation import DPAuditError
from dpaudit.layerwise import dense
from dpaudit.optim.stacked import StackedRows
from dpaudit.settings import SETTINGS, ImportanceMaskSettings, OptimizerSettings, TwoPhaseSettings

# covariant: a Hyperparameters is frozen, so one with a family's settings is one with the settings of its bases
SettingsT = TypeVar("SettingsT", bound=OptimizerSettings, covariant=True)


class StepCost(NamedTuple):
    """What one step cost in privacy: noise multiplier z, sample rate q, and the accounting phase.

    Attributes:
        noise_multiplier: z of the step, the std of the Gaussian noise on the summed clipped gradients divided by
            their sensitivity C (dimensionless; a dynamic schedule's factor included).
        sample_rate: q = b / n, the probability that a record is in the step's batch (dimensionless).
        phase: the accounting phase the ledger records: "train" (the default), "warmup" (the two-phase
            optimizers' dense phase 1) or "pretrain" (AdaDPIGU's pre-training).
    """

    noise_multiplier: float
    sample_rate: float
    phase: str = "train"


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
    """The registry entry of optimizer ``name``; an unknown name is a one-line DPAuditError listing the names."""
    return _REGISTRY.get(name)


def sigma_dp_to_noise_multiplier(*, sigma_dp: float, batch_size: float, clip_norm: float) -> float:
    """z = σ_DP · b / C (σ_DP: Liang et al., Section 2.2, eq. 6; the conversion is the authors' code's)."""
    return sigma_dp * batch_size / clip_norm


def noise_multiplier_to_sigma_dp(*, noise_multiplier: float, batch_size: float, clip_norm: float) -> float:
    """σ_DP = z · C / b."""
    return noise_multiplier * clip_norm / batch_size


@dataclass(frozen=True)
class Hyperparameters(Generic[SettingsT]):
    """What an optimizer is given: its settings and the facts of the run it trains in.

    ``TrainConfig.hyperparameters`` builds it from a configuration; each optimizer checks what it reads in its
    ``check``.

    Attributes:
        lr: learning rate η.
        expected_batch_size: b; private optimizers divide the clipped-gradient sum by b.
        dataset_size: n, the number of training records (sample rate q = b / n).
        epochs: the run's length E in epochs (two-phase optimizers split it).
        momentum: heavy-ball momentum μ of the outer SGD update (0: plain SGD).
        clip_norm: C, the per-sample ℓ2 clipping threshold (private optimizers; None: not private).
        sigma_dp: σ_DP, the std of the noise on the averaged clipped gradient (private optimizers).
        settings: the settings of the optimizer's family, an instance of its ``settings_type``
            (:class:`dpaudit.settings.OptimizerSettings` for those without any).
    """

    lr: float
    expected_batch_size: int
    dataset_size: int
    epochs: int = 1
    momentum: float = cast(float, SETTINGS["momentum"].default)  # a float: OptimizerConfig.momentum's default
    clip_norm: float | None = None
    sigma_dp: float | None = None
    settings: SettingsT = field(default_factory=OptimizerSettings)  # type: ignore[assignment]

    @property
    def pretrain_steps(self: Hyperparameters[ImportanceMaskSettings]) -> int:
        """T_pre = round((T_pre/T)·T) with T = E·ceil(n/b) (T_pre of AdaDPIGU's Algorithm 1, Section 4; the settings'
        ``pretrain_fraction``: :class:`dpaudit.settings.ImportanceMaskSettings`)."""
        return round(self.settings.pretrain_fraction * self.steps_per_epoch * self.epochs)

    @property
    def warmup_steps(self: Hyperparameters[TwoPhaseSettings]) -> int:
        """T_1 = round((E_1/E)·T) with T = E·ceil(n/b) (T_1 of TP-TopK's Algorithm 1; E_1/E: its Section 7.3, the
        settings' ``warmup_fraction``: :class:`dpaudit.settings.TwoPhaseSettings`)."""
        return round(self.settings.warmup_fraction * self.steps_per_epoch * self.epochs)

    @property
    def sample_rate(self) -> float:
        return self.expected_batch_size / self.dataset_size

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.dataset_size / self.expected_batch_size)

    @property
    def noise_multiplier(self) -> float:
        """z = σ_DP · b / C, the noise multiplier before any schedule (private optimizers, whose ``check`` requires
        σ_DP and C)."""
        assert self.sigma_dp is not None and self.clip_norm is not None, "a private optimizer's settings"
        return sigma_dp_to_noise_multiplier(
            sigma_dp=self.sigma_dp, batch_size=self.expected_batch_size, clip_norm=self.clip_norm
        )


class Optimizer:
    """Base class: one update rule over a list of parameter tensors.

    The engine calls ``begin_epoch`` at the start of every epoch, ``accumulate`` once per chunk of a
    batch (per-sample gradients, shape [chunk, *param.shape], if ``per_sample`` else the batch-mean
    gradient) and then ``step`` once per batch; for an ensemble, through the class's ``begin_epoch_together``,
    ``accumulate_together`` and ``step_together``, which a class may do in one pass for all models.
    """

    per_sample: ClassVar[bool] = True
    # the settings this class reads besides lr and momentum (and, if private, the privacy settings): ``hyper.settings``
    settings_type: ClassVar[type[OptimizerSettings]] = OptimizerSettings
    # its hyperparameters; a class that reads a family's settings declares ``hyper: Hyperparameters[ItsSettings]``
    hyper: Hyperparameters[OptimizerSettings]
    record_updates: bool = False
    # with record_updates: whether last_update holds the model's releases too (False: the audit block's alone)
    record_model_updates: bool = True
    last_update: list[torch.Tensor] | None = None
    # the audit block (``set_audit_block``): how many of the last parameters it holds, and whether its noise is
    # drawn in one call with the model's (else from a generator derived from the state the model's draw left)
    audit_parameters: int = 0
    audit_joint: bool = False
    # not saved for resuming (``dpaudit._state``); ``_block_release``: spare buffers of the audit block's sums
    transient_state: ClassVar[tuple[str, ...]] = ("params", "hyper", "_stack", "_row", "_block_release")

    def __init__(self, params: Sequence[torch.Tensor], hyper: Hyperparameters[Any], *, generator: torch.Generator):
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
    def setting_names(cls) -> tuple[str, ...]:
        """The settings this optimizer reads, by name: ``lr``, ``momentum`` and its family's (``settings_type``)."""
        return ("lr", "momentum", *(item.name for item in fields(cls.settings_type)))

    @classmethod
    def check(cls, hyper: Hyperparameters[Any]) -> None:
        """Raise a one-line DPAuditError if ``hyper`` does not suit this optimizer."""
        if type(hyper.settings) is not cls.settings_type:
            raise DPAuditError(
                f"{cls.__name__} reads {cls.settings_type.__name__}, not {type(hyper.settings).__name__}"
            )
        SETTINGS["lr"].check(hyper.lr)
        SETTINGS["momentum"].check(hyper.momentum)

    @classmethod
    def noise_schedule(cls, hyper: Hyperparameters[Any]) -> np.ndarray:
        """Relative factor on z for every step of the run (``hyper.epochs`` epochs; all ones: static noise)."""
        return np.ones(hyper.steps_per_epoch * hyper.epochs)

    @classmethod
    def planned_noise_multipliers(cls, hyper: Hyperparameters[Any]) -> np.ndarray:
        """z of every step of the whole run (``hyper.epochs`` epochs), as the ledger will record it."""
        return hyper.noise_multiplier * cls.noise_schedule(hyper)

    @classmethod
    def planned_sample_rate(cls, hyper: Hyperparameters) -> float:
        """q of every step, as the ledger will record it (q = b/n; a variant whose ledger departs says so here)."""
        return hyper.sample_rate

    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @classmethod
    def begin_epoch_together(cls, optimizers: Sequence[Self], epoch: int) -> None:
        """``begin_epoch`` for M optimizers of this class and equal hyperparameters (an ensemble). Subclasses may do
        it in one vectorised pass."""
        for optimizer in optimizers:
            optimizer.begin_epoch(epoch)

    def accumulate(self, grads: Sequence[torch.Tensor]) -> None:
        """Add one chunk's gradients, one tensor per parameter in order; ``grads`` may stop before the audit
        block (``set_audit_block``), whose sums it then leaves as they are."""
        for total, grad in zip(self._sum, grads):
            total.add_(grad.sum(0) if self.per_sample else grad)

    @classmethod
    def takes_dirac_records(cls) -> bool:
        """Whether ``accumulate_diracs`` and ``set_audit_block`` are exact for this class: records whose
        per-sample gradient is a Dirac on the audit block go through the optimizer as through ``accumulate``."""
        return False

    def accumulate_diracs(self, *, coordinates: torch.Tensor, magnitude: float) -> None:
        """Add k records whose per-sample gradients are zero except ``magnitude`` at one coordinate each of the
        last parameter (flattened; ``coordinates``: [k] distinct indices), as ``accumulate`` would add the dense
        [k, *shape] per-sample gradients (zeros on every other parameter), without building them.

        Raises:
            DPAuditError: this optimizer does not take Dirac records (``takes_dirac_records``).
        """
        raise DPAuditError(f"{type(self).__name__} does not take Dirac records (whole-run canaries)")

    def set_audit_block(self, count: int, *, joint: bool = False) -> None:
        """Make the last ``count`` parameters an audit block: coordinates no loss touches (whole-run canaries),
        which nothing but their own coordinates depends on, and whose noise comes from the model's own generator
        through the model's own code path (``_step_noise``), so that a bug in the model's noise is one in theirs.

        Args:
            count: how many of the last parameters the block holds.
            joint: draw the block's noise in one call with the model's (the model's later noise then differs
                from a run without the block); False: draw it, by the same code, from a generator seeded by the
                state the model's draw left (``dpaudit._streams``), so that the model's parameters get the noise,
                updates and constraint they would get without the block, bit for bit.

        Raises:
            DPAuditError: this optimizer cannot keep one (``takes_dirac_records``).
        """
        raise DPAuditError(f"{type(self).__name__} cannot keep an audit block (whole-run canaries)")

    @classmethod
    def stack_rows(cls, optimizers: Sequence[Self], params: Sequence[torch.Tensor]) -> None:
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
        optimizers: Sequence[Self],
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
    def step(self, *, realized_batch_size: int) -> StepCost | None:
        """Apply one update; return what the step cost in privacy, or None if not private."""
        raise NotImplementedError

    @classmethod
    def step_together(cls, optimizers: Sequence[Self], realized_batch_sizes: Sequence[int]) -> list[StepCost | None]:
        """``step`` for M optimizers of this class and equal hyperparameters (an ensemble); their returns in
        order. Subclasses may do it in one vectorised pass."""
        return [optimizer.step(realized_batch_size=size) for optimizer, size in zip(optimizers, realized_batch_sizes)]

    def gradient_before_noise(self) -> list[torch.Tensor] | None:
        """This step's accumulated gradient before noise (per-sample optimizers: the clipped sum / b),
        in parameter space; None where it lives elsewhere. For diagnostics only."""
        if not self.per_sample:
            return self._sum
        return [total / self.hyper.expected_batch_size for total in self._sum]

    @property
    def _model_parameters(self) -> int:
        """How many of the parameters are the model's (an audit block's, ``set_audit_block``, are after them)."""
        return len(self.params) - self.audit_parameters

    @torch.no_grad()
    def _apply(self, updates: Sequence[torch.Tensor]) -> None:
        """θ ← θ − η·u (with momentum: v ← μv + u, θ ← θ − η·v); then clear the accumulated sums.

        With ``record_updates`` set, ``last_update`` keeps a copy of u, the step's release before
        momentum (what a white-box observer of every update infers); with ``record_model_updates`` unset, only
        the audit block's part of it. An audit block's parameters (``set_audit_block``) are not moved:
        ``last_update`` keeps their release itself (valid until the next step) and their sums are cleared
        (``_release_block``).
        """
        if self.record_updates:
            self.last_update = []
        model = self._model_parameters
        self._apply_to(slice(model), list(updates[:model]))
        if self.audit_parameters:
            self._release_block(list(updates[model:]))
        self.steps_taken += 1

    def _release_block(self, updates: list[torch.Tensor]) -> None:
        """The audit block's part of ``_apply``: ``updates``, its release, go to ``last_update`` as they are (one
        released in place in its sums is kept, and the sums go on in a spare buffer), and its sums are cleared.

        The block's parameters and velocities are left as they are: no loss reads them and the observers read the
        release, so a copy, the momentum and the update would be passes over the block at every step that no
        observation needs."""
        spares: list[torch.Tensor | None] = getattr(self, "_block_release", None) or []
        if len(spares) != len(updates):
            spares = [None] * len(updates)
            self._block_release = spares
        for index, update in enumerate(updates):
            position = self._model_parameters + index
            total = self._sum[position]
            if update.data_ptr() == total.data_ptr():  # released in place (``_noisy_mean``): keep it
                spare = spares[index]
                spare = torch.zeros_like(total) if spare is None else spare.zero_()
                self._sum[position], spares[index] = spare, total
            else:
                total.zero_()
            if self.record_updates:
                assert self.last_update is not None  # ``_apply`` started it
                self.last_update.append(update.detach())

    def exchange_block_release(self, spare: torch.Tensor) -> torch.Tensor | None:
        """Hand over the last step's release of a one-tensor audit block, where it was released in place in the
        block's sums (``_release_block``): the caller keeps it (no copy), and ``spare`` (the block's shape, dtype and
        device; any contents: it is zeroed when it takes its turn) takes its place among the buffers the block's sums
        go to. None, with nothing exchanged, where the release is not such a buffer (a release computed elsewhere,
        which is the optimizer's until the next step)."""
        spares = getattr(self, "_block_release", None)
        released = spares[-1] if spares and len(spares) == 1 else None
        if released is None or not self.last_update or released.data_ptr() != self.last_update[-1].data_ptr():
            return None
        if spare.shape != released.shape or spare.dtype != released.dtype or spare.device != released.device:
            raise DPAuditError("an audit block's spare buffer must have the shape, dtype and device of its release")
        assert spares is not None  # released came from it
        spares[-1] = spare
        return released

    def _apply_to(self, part: slice, updates: list[torch.Tensor]) -> None:
        """``_apply`` on the parameters ``part`` (and their velocities and sums), whose updates are ``updates``."""
        if self.record_updates and self.record_model_updates:
            assert self.last_update is not None  # ``_apply`` started it
            self.last_update.extend(update.detach().clone() for update in updates)
        # torch._foreach_*: one call per list instead of one per tensor (the per-call overhead dominates
        # small models trained as an ensemble)
        if self._velocity is not None:
            velocity = self._velocity[part]
            torch._foreach_mul_(velocity, self.hyper.momentum)
            torch._foreach_add_(velocity, updates)
            updates = velocity
        torch._foreach_add_(self.params[part], updates, alpha=-self.hyper.lr)
        torch._foreach_zero_(self._sum[part])


@register("sgd", dp_claim=False, description="non-private mini-batch SGD (reference; no DP claim)")
class SGD(Optimizer):
    per_sample = False

    @torch.no_grad()
    def step(self, *, realized_batch_size: int) -> None:
        self._apply(self._sum)
        return None
