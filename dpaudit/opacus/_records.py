"""Record-level canaries in a user's Opacus training: ``RecordCanaries`` (``dpaudit.opacus``, module docstring)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch

from dpaudit._online import PARTIAL_STEPS, OnlineSums
from dpaudit._validation import DPAuditError, check_count, check_positive, check_seed
from dpaudit.attacks.canary_run import RunCanaryObservations
from dpaudit.audit import ValidationFlag, WholeRunReport, validation_flag
from dpaudit.opacus._configuration import (
    _STREAM,
    NORM_FACTOR,
    accountant_epsilon,
    audit_record,
    claim_findings,
    claimed_record,
    loader_sampling,
)

try:  # the optional extra: ``pip install -e ".[train]"``
    from opacus.optimizers import DPOptimizer
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError('dpaudit.opacus needs Opacus: pip install -e ".[train]"') from error

if TYPE_CHECKING:
    from opacus.accountants import IAccountant

#: Optimizers the record-level canaries refuse, with the reason (matched by class name along the MRO).
REFUSED_OPTIMIZERS = {
    "DPOptimizerFastGradientClipping": (
        "ghost clipping (grad_sample_mode='ghost') computes per-sample norms in its own two-pass loss wrapper, "
        "which the canary rows' norms would have to enter: use grad_sample_mode 'hooks' or 'functorch'"
    ),
    "DistributedDPOptimizer": (
        "under DistributedDataParallel each process clips its own shard and only rank 0 adds noise; the canary "
        "rows' presence and clipping would have to be gathered across processes: audit a single-process run"
    ),
    "DistributedPerLayerOptimizer": "distributed per-layer clipping is not supported: audit a single-process run",
    "DPPerLayerOptimizer": (
        "per-layer clipping gives every parameter its own bound and noise ‖(C_1, …, C_L)‖; a canary block would "
        "add a bound and change the model's noise: use flat clipping, or CanaryAudit (the configuration check)"
    ),
    "AdaClipDPOptimizer": "adaptive clipping moves C from the clipped norms, which the canary rows would enter",
    "AcceleratedOptimizer": (
        "Hugging Face accelerate wraps the optimizer (the transformers Trainer does), and the Trainer iterates its own "
        "DataLoader of train_dataset (shuffled batches, not make_private's Poisson loader) and calls the model with "
        "keyword inputs: audit the model in a plain PyTorch or Lightning loop"
    ),
}
#: Modules that mix a record with its batch-mates in training mode: per-sample clipping no longer bounds one
#: record's influence, whatever their affine parameters (Opacus refuses them only when they are trainable).
CROSS_RECORD_MODULES = (torch.nn.modules.batchnorm._BatchNorm,)
_PROBE = 4096  # coordinates of the canary block that measure the divisor
CACHE_BYTES = 2**26  # the member canaries' inputs are built once where they take at most this (64 MiB)


def cross_record_modules(module: torch.nn.Module) -> list[str]:
    """The names of ``module``'s submodules that mix records of a batch (BatchNorm in any form, trainable or not)."""
    return [
        f"layer {name!r} ({type(sub).__name__})" if name else f"the model ({type(sub).__name__})"
        for name, sub in module.named_modules()
        if isinstance(sub, CROSS_RECORD_MODULES)
    ]


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by a factor (the real rows' share of a mean)."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return value.view_as(value)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


class _CanaryRows(torch.autograd.Function):
    """The canary rows' outputs: zeros, whose backward hands each row's per-sample gradient on the block to the
    canaries (``RecordCanaries._backward``)."""

    @staticmethod
    def forward(ctx: Any, block: torch.Tensor, ids: torch.Tensor, shape: tuple[int, ...], sink: Any) -> torch.Tensor:
        ctx.ids, ctx.sink = ids, sink
        return block.new_zeros((ids.numel(), *shape))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None, None]:
        ctx.sink(ctx.ids, grad.reshape(grad.shape[0], -1)[:, 0])
        return None, None, None, None


class CanaryDataset(torch.utils.data.Dataset):
    """The user's dataset followed by the member canaries: record i < n is the user's, record n + k is member
    canary ``member_ids[k]`` (``RecordCanaries.dataset``).

    A canary record is (input, target): the input has the shape and dtype of the user's first input, marked as a
    canary (its first entry NaN, or the dtype's least value for integer inputs) and carrying the canary's id in its
    second entry; the target is the user's first target. The model wrapper (``RecordCanaries.model``) recognises
    canary rows by that mark; nothing else may change the inputs between the loader and the model.
    """

    def __init__(self, dataset: torch.utils.data.Dataset, *, member_ids: npt.NDArray[np.int64]) -> None:
        try:
            size = len(dataset)  # type: ignore[arg-type]
        except TypeError:
            raise DPAuditError("the dataset must have a length (a map-style torch Dataset)") from None
        if size < 1:
            raise DPAuditError("the dataset is empty")
        first = dataset[0]
        if not isinstance(first, (tuple, list)) or len(first) != 2 or not isinstance(first[0], torch.Tensor):
            raise DPAuditError(
                "record-level canaries need a dataset of (input tensor, target) pairs, got a record of type "
                f"{type(first).__name__}"
            )
        template, target = first
        if template.numel() < 2:
            raise DPAuditError("record-level canaries need inputs of at least 2 entries (a mark and the canary id)")
        if template.dtype in (torch.float16, torch.bfloat16) or (
            not template.dtype.is_floating_point and template.dtype not in (torch.int32, torch.int64)
        ):
            raise DPAuditError(
                f"record-level canaries need float32/float64 or int32/int64 inputs (the id is stored exactly), got "
                f"{template.dtype}"
            )
        self.dataset, self.size = dataset, size
        self.member_ids = np.asarray(member_ids, dtype=np.int64)
        self.template, self.target = template, target
        self._cache: list[tuple[torch.Tensor, Any]] | None = None
        if self.member_ids.size * template.element_size() * template.numel() <= CACHE_BYTES:
            self._cache = self._rows(self.size + np.arange(self.member_ids.size))

    def __len__(self) -> int:
        return self.size + int(self.member_ids.size)

    def batch_size_for(self, real_batch_size: int) -> int:
        """The batch size that samples every record at the rate ``real_batch_size``/n of the user's dataset alone
        (n its records): ``real_batch_size``·len(self)/n, rounded."""
        return max(1, round(check_count("real_batch_size", real_batch_size, allow_zero=False) * len(self) / self.size))

    def _rows(self, positions: npt.NDArray[np.int64]) -> list[tuple[torch.Tensor, Any]]:
        """The canary records at these dataset positions, built at once (or from the cache)."""
        if self._cache is not None:
            return [self._cache[k] for k in (positions - self.size).tolist()]
        inputs = mark_canaries(torch.from_numpy(self.member_ids[positions - self.size]), template=self.template)
        return [(row, self.target) for row in inputs.unbind(0)]

    def __getitem__(self, index: int) -> Any:
        if index < self.size:
            return self.dataset[index]
        return self._rows(np.array([index], dtype=np.int64))[0]

    def __getitems__(self, indices: Sequence[int]) -> Sequence[Any]:
        """A batch's records (torch's DataLoader calls this): the user's, then the canaries', as a sequence whose
        canary records are built only when read; the attached loader's collation (:meth:`collating`) reads their
        ids alone."""
        positions = np.asarray(indices, dtype=np.int64)
        canary = positions >= self.size
        real = [self.dataset[index] for index in positions[~canary].tolist()]
        if not canary.any():
            return real
        return _Batch(real, positions[canary], dataset=self)

    def collating(self, collate_fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """``collate_fn`` (the loader's) for the real records, the batch's canary records appended to its
        (inputs, targets) in one vectorised call (any collation gives the same batch, slower)."""

        def collate(batch: list[Any]) -> Any:
            if not isinstance(batch, _Batch):
                return collate_fn(batch)
            collated = collate_fn(batch.real)  # Opacus's collation gives an empty batch its shapes
            if not isinstance(collated, (list, tuple)) or len(collated) != 2:
                raise DPAuditError("record-level canaries need the loader to collate records into (inputs, targets)")
            real_inputs, real_targets = collated
            ids = torch.from_numpy(self.member_ids[batch.positions - self.size])
            real, rows = len(real_inputs), len(real_inputs) + ids.numel()
            inputs = real_inputs.new_empty((rows, *self.template.shape))
            inputs[:real] = real_inputs
            mark_canaries(ids, template=self.template, out=inputs[real:])
            target = torch.as_tensor(self.target)
            return [
                inputs,
                torch.cat([real_targets, target.expand(ids.numel(), *target.shape).to(real_targets.dtype)]),
            ]

        return collate


class _Batch(Sequence[Any]):
    """A batch's records: the user's (``real``), then the canaries' at dataset positions ``positions``, built on
    first reading."""

    def __init__(self, real: list[Any], positions: npt.NDArray[np.int64], *, dataset: CanaryDataset) -> None:
        self.real, self.positions, self._dataset = real, positions, dataset
        self._canaries: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.real) + int(self.positions.size)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = operator.index(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("batch index out of range")
        if index < len(self.real):
            return self.real[index]
        if self._canaries is None:
            self._canaries = self._dataset._rows(self.positions)
        return self._canaries[index - len(self.real)]


def _clipped(gradient: float, clip: float) -> float:
    """A one-coordinate per-sample gradient clipped at C by Opacus's formula, g·min(1, C/(|g| + 1e-6))."""
    return gradient * min(1.0, clip / (abs(gradient) + 1e-6))


def _marker(dtype: torch.dtype) -> float:
    return math.nan if dtype.is_floating_point else float(torch.iinfo(dtype).min)


def mark_canaries(ids: torch.Tensor, *, template: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[k, *template.shape] canary inputs: each marked (first entry NaN, or the integer dtype's least value) and
    carrying its id in its second entry, zeros elsewhere (written into ``out``, contiguous, where given)."""
    if out is None:
        out = torch.empty((ids.numel(), *template.shape), dtype=template.dtype)
    rows = out.view(ids.numel(), math.prod(out.shape[1:]))
    rows.zero_()
    rows[:, 0] = _marker(out.dtype)
    rows[:, 1] = ids.to(out.dtype)
    return out


class CanaryModule(torch.nn.Module):
    """The user's module, and the canary rows' outputs (``RecordCanaries.model``).

    A batch without canary rows goes to the user's module unchanged. A batch with canary rows: the user's module
    sees its real rows only (a module that treats records independently gives them the same outputs); each canary
    row's output is zeros whose gradient, through the user's loss, is that row's per-sample gradient on the canary
    block (a Dirac on the canary's own coordinate, of norm ``norm_factor``·C times the loss's slope at zero in the
    first output). With a mean-reduced loss the real rows' gradients are scaled by B/B_real, so that Opacus's
    hooks (which multiply by the rows they see) give each row the gradient of its own loss, as without canaries.

    The trained module is ``.module``.
    """

    def __init__(self, module: torch.nn.Module, *, canaries: RecordCanaries) -> None:
        super().__init__()
        self.module = module
        self._canaries = [canaries]  # a list: not a submodule, not in state_dict

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.ndim == 0 or x.shape[0] == 0:
            return self.module(x, *args, **kwargs)
        flat = x.reshape(x.shape[0], -1)
        marks = torch.isnan(flat[:, 0]) if x.dtype.is_floating_point else flat[:, 0] == _marker(x.dtype)
        marked = int(marks.sum())
        if not marked:
            return self.module(x, *args, **kwargs)
        if args or kwargs:
            raise DPAuditError("record-level canaries support models called with one input tensor only")
        canaries = self._canaries[0]
        batch = x.shape[0]
        first = batch - marked
        tail = bool(marks[first:].all())  # the attached loader's batches: real rows, then canaries
        real_rows: slice | torch.Tensor
        canary_rows: slice | torch.Tensor
        if tail:  # views, and one concatenation
            real_rows, canary_rows = slice(0, first), slice(first, batch)
            count, canary_count = first, batch - first
        else:
            real_index, canary_index = torch.nonzero(~marks).flatten(), torch.nonzero(marks).flatten()
            real_rows, canary_rows = real_index, canary_index
            count, canary_count = int(real_index.numel()), int(canary_index.numel())
        ids = canaries._check_ids(flat[canary_rows, 1])
        out_real = self.module(x[real_rows])
        recording = self.training and torch.is_grad_enabled()
        if recording and canaries._mean and count > 0:
            out_real = _ScaleGradient.apply(out_real, batch / count)
        shape = tuple(out_real.shape[1:])
        if recording:
            scale = float(batch if canaries._mean else 1)
            out_canary = _CanaryRows.apply(canaries._block, ids, shape, lambda i, g: canaries._backward(i, g * scale))
        else:
            out_canary = out_real.new_zeros((canary_count, *shape))
        out_canary = out_canary.to(device=out_real.device, dtype=out_real.dtype)
        if tail:
            return torch.cat([out_real, out_canary])
        out = out_real.new_zeros((batch, *shape))
        return out.index_put((real_rows,), out_real).index_put((canary_rows,), out_canary)


@dataclass(eq=False)
class RecordCanaryObservations(RunCanaryObservations):
    """The record-level canaries' record: :class:`RunCanaryObservations` and what the run really did.

    Attributes (beyond those of :class:`RunCanaryObservations`, whose ``sample_rates`` and ``noise_multipliers``
    are the accountant's ledger):
        member_counts: [M] int64, in how many optimizer steps each canary's record reached the optimizer (0 for
            non-members, which are not in the dataset).
        divisors: [T] float64, what the optimizer divided each step's noised sum by, measured from the canary block.
        noise_chi2: [T] float64, Σ_i (noise_ti/(z_t·C_t))² over the block's M coordinates: the noise the optimizer
            added to the block, measured (released minus the clipped canaries), in units of its claimed std.
        batch_rows: [T] int64, the rows (real and canary) the optimizer's step clipped.
        canary_rows: [T] int64, the canary rows among them.
    """

    member_counts: npt.NDArray[np.int64] | None = None
    divisors: npt.NDArray[np.float64] | None = None
    noise_chi2: npt.NDArray[np.float64] | None = None
    batch_rows: npt.NDArray[np.int64] | None = None
    canary_rows: npt.NDArray[np.int64] | None = None

    def presence_p_value(self) -> float | None:
        """Two-sided p-value of "each member canary reached the optimizer independently at each step with the
        ledger's q_t" from the counts that really reached it: the total count (normal approximation of the
        Poisson-binomial) and the dispersion of the members' counts (Σ_j (N_j − Σ_t q_t)²/Σ_t q_t(1 − q_t) against
        its mean and variance; a shuffled loader, with every count equal, gives far too little dispersion), the
        smaller p-value doubled (Bonferroni)."""
        if self.member_counts is None or self.steps == 0:
            return None
        from scipy import stats

        counts = np.asarray(self.member_counts, dtype=float)[self.members]
        rates = np.asarray(self.sample_rates, dtype=float)
        mean, var = float(rates.sum()), float(np.sum(rates * (1 - rates)))
        members = counts.size
        if var == 0 or members == 0:
            return 1.0 if np.all(counts == mean) else 0.0
        total_p = float(2 * stats.norm.sf(abs(counts.sum() - members * mean) / math.sqrt(members * var)))
        kappa4 = float(np.sum(rates * (1 - rates) * (1 - 6 * rates * (1 - rates))))
        dispersion = float(np.sum(np.square(counts - mean)) / var)
        spread = math.sqrt(members * (kappa4 + 2 * var * var) / (var * var))
        dispersion_p = float(2 * stats.norm.sf(abs(dispersion - members) / spread))
        return min(1.0, 2 * min(total_p, dispersion_p))

    def noise_p_value(self) -> float | None:
        """Two-sided p-value of "the optimizer added Gaussian noise of std z_t·C_t to every coordinate of the canary
        block" from the measured noise: Σ_t χ²_t against the χ² distribution with M·T degrees of freedom (each tail,
        doubled)."""
        if self.noise_chi2 is None or self.steps == 0:
            return None
        from scipy import stats

        freedom = self.members.size * self.steps
        total = float(np.sum(self.noise_chi2))
        return min(1.0, 2 * float(min(stats.chi2.cdf(total, freedom), stats.chi2.sf(total, freedom))))

    def save(self, path: str | Path) -> Path:
        """Write the record (the statistics and the ledger; not the run's measured sampling) for ``dpaudit audit
        --canary-record``."""
        base = {name: getattr(self, name) for name in RunCanaryObservations.__dataclass_fields__}
        return RunCanaryObservations(**base).save(path)


@dataclass(frozen=True, eq=False)
class RecordAuditReport:
    """The record-level canaries' audit of an Opacus run beside its accountant's ε (every ε in nats at δ).

    Attributes:
        whole_run: :func:`dpaudit.audit_whole_run` of the canaries against the accountant's ledger, at the report's
            confidence: the all-iterates and final-model bounds, each assumption-free and family (the family bound
            assumes the run is a composed Poisson-subsampled Gaussian with the ledger's q_t and T).
        flag: :func:`dpaudit.audit.validation_flag` with the run's checks (family, assumption-free, spread,
            presence, noise), each at (1 − confidence)/k: a run that keeps its claim is flagged with probability at
            most 1 − confidence.
        epsilon_accountant: ``accountant.get_epsilon(δ)``: the ε the user's accountant gives for the run it recorded.
        epsilon_claimed: the ε the checks test: ``report``'s ``claimed_epsilon`` where given (e.g. the target the
            noise was calibrated to), else ``epsilon_accountant``.
        accountant: the accountant's mechanism ("prv", "rdp", "gdp").
        steps: T, the optimizer steps audited.
        flagged: the flag raised by a test, or a finding of the divisor (below).
        findings: one sentence per reason for ``flagged``.
        notes: what the run did that is worth knowing and is not a finding (measured, no test).
        observed: what the canaries measured of the run: rows per step, the divisor, the noise multiplier, the
            members' presence.
        record: the canaries' :class:`RecordCanaryObservations`.
    """

    whole_run: WholeRunReport
    flag: ValidationFlag
    epsilon_accountant: float
    epsilon_claimed: float
    accountant: str
    steps: int
    flagged: bool
    findings: tuple[str, ...]
    notes: tuple[str, ...]
    observed: dict[str, float]
    record: RecordCanaryObservations

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (without ROC curves)."""
        return {
            "design": "record-level canaries (records of the user's dataset, sampled by the user's loader)",
            "whole_run": self.whole_run.to_dict(),
            "flag": self.flag.to_dict(),
            "epsilon_accountant": self.epsilon_accountant,
            "epsilon_accountant_label": f"the {self.accountant} accountant's ε for the run it recorded",
            "epsilon_claimed": self.epsilon_claimed,
            "epsilon_claimed_label": "the ε the checks test (a claim without guarantee until the run keeps it)",
            "accountant": self.accountant,
            "steps": self.steps,
            "flagged": self.flagged,
            "findings": list(self.findings),
            "notes": list(self.notes),
            "observed": dict(self.observed),
        }

    def summary(self) -> str:
        """A few lines: the claim, both bounds of both threat models, what the run did, the verdict."""
        run = self.whole_run
        assert run.all_iterates is not None and run.final_model is not None  # every statistic was audited
        level = f"{100 * run.confidence:g} %"
        family = run.all_iterates_family
        capped = " (capped: the grid's strongest hypothesis)" if family.capped else ""
        seen = self.observed
        lines = [
            f"Opacus record-level canary audit: {run.all_iterates.n_members} member and "
            f"{run.all_iterates.n_nonmembers} non-member canaries, {self.steps} steps, δ = {run.delta:g}.",
            f"Run as observed: {seen['real_rows_per_step']:.1f} real and {seen['canary_rows_per_step']:.1f} canary "
            f"rows per step, divided by {seen['divisor']:.6g}, noise multiplier {seen['noise_multiplier']:.4g} "
            f"measured ({seen['noise_multiplier_claimed']:.4g} claimed).",
            f"Claimed: ε = {self.epsilon_claimed:.3f}; the {self.accountant} accountant gives ε = "
            f"{self.epsilon_accountant:.3f} for the run it recorded, its ledger ε = {run.epsilon_pld:.3f} (PLD), "
            f"{run.epsilon_rdp:.3f} (RDP).",
            f"All iterates: ε ≥ {run.all_iterates_profile.headline.epsilon_lower:.3f} (assumption-free, {level}, "
            f"threshold fixed by the ledger), ε ≥ {run.all_iterates.epsilon_lower:.3f} (assumption-free, held-out "
            f"threshold), ε ≥ {family.epsilon:.3f}{capped} (family bound, {level}: a test of the ledger's σ, q and T, "
            "a lower bound only if the run is a composed subsampled Gaussian).",
            f"Final model: ε ≥ {run.final_model_family.epsilon:.3f} (family: ledger test), ε ≥ "
            f"{run.final_model.epsilon_lower:.3f} (assumption-free).",
            "FLAGGED: " + " ".join(self.findings) if self.flagged else f"Not flagged ({self.flag.summary()}).",
            "The canaries see the sampling, clipping, noise and division of the records that reached the optimizer, "
            "not the model's inner layers (cross-record layers are refused before training).",
        ]
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    def plot(self, *, stem: str | Path, title: str | None = None) -> list[Path]:
        """Write the ROC curves and the ε chart (claim beside the lower bounds) to ``stem``.png and .pdf."""
        from dpaudit.plot import plot_whole_run

        return plot_whole_run(
            self.whole_run,
            stem=stem,
            title=title or f"Opacus record-level canaries, {self.steps} steps",
            claimed_epsilon=self.epsilon_claimed,
            claim_label="the claimed ε"
            if self.epsilon_claimed != self.epsilon_accountant
            else f"{self.accountant} accountant's ε (the claim)",
        )


class RecordCanaries:
    """Whole-run canaries that are records of the user's dataset (module docstring of :mod:`dpaudit.opacus`).

    Wrap the dataset and the model before building the loader, the optimizer and ``make_private``; attach to the
    ``DPOptimizer`` after; report after training.

    Args:
        num_canaries: M ≥ 2 canaries, each a member (a record of the dataset) with probability ½.
        seed: non-negative seed of the membership (the only randomness of the canaries' own: their sampling and
            noise are the run's).
        norm_factor: > 1, a canary's per-sample gradient norm in units of the loss's slope and of C (clipping
            brings it to C).
        keep_observations: keep the [T, M] float32 observations (4·T·M bytes), e.g. for plots.

    Raises:
        DPAuditError: bad counts or seeds.
    """

    def __init__(
        self, *, num_canaries: int, seed: int = 0, norm_factor: float = NORM_FACTOR, keep_observations: bool = False
    ) -> None:
        count = check_count("num_canaries", num_canaries, allow_zero=False)
        if count < 2:
            raise DPAuditError(f"num_canaries must be ≥ 2, got {num_canaries!r}")
        if count >= 2**24:
            raise DPAuditError(f"num_canaries must be < 2**24 (ids stored exactly in float32), got {num_canaries!r}")
        if check_positive("norm_factor", norm_factor) <= 1.0:
            raise DPAuditError(f"norm_factor must be > 1, got {norm_factor!r}")
        membership = np.random.SeedSequence([check_seed(seed), _STREAM, 1]).spawn(1)[0]
        self.members = np.random.default_rng(membership).random(count) < 0.5
        self.member_ids = np.flatnonzero(self.members).astype(np.int64)
        self._norm_factor = float(norm_factor)
        self._keep = bool(keep_observations)
        self._dataset: CanaryDataset | None = None
        self._module: CanaryModule | None = None
        self._optimizer: DPOptimizer | None = None
        self._block = torch.zeros(count, requires_grad=True)
        self._mean = True
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (ids, per-sample gradients) not yet clipped
        self._step_ids: list[torch.Tensor] = []  # canary rows clipped into the coming step
        self._step_rows = 0
        self._probe: torch.Tensor | None = None
        self._block_group: dict[str, Any] = {}
        self._contribution: float | None = None
        self._deferred: list[tuple[torch.Tensor, float, int]] = []  # steps noised before a canary row was seen
        self._rate = 0.0
        self._reset_sums()

    def _reset_sums(self) -> None:
        count = self.members.size
        device = self._block.device
        self._sums = OnlineSums(count, device=device, dtype=self._block.dtype)  # Λ, Σx, Σx/σ, Σx²/σ²
        self._counts = torch.zeros(count, dtype=torch.int64)
        self._present: list[torch.Tensor] = []  # canary ids that reached the optimizer, not yet in _counts
        self._observations: list[npt.NDArray[np.float32]] = []
        self.noise_multipliers: list[float] = []
        self.clip_norms: list[float] = []
        self.contributions: list[float] = []
        self.divisors: list[float] = []
        self.noise_chi2: list[float] = []
        self.batch_rows: list[int] = []
        self.canary_rows: list[int] = []

    # ------------------------------------------------------------------------------------------
    # Wrapping
    # ------------------------------------------------------------------------------------------

    def dataset(self, dataset: torch.utils.data.Dataset) -> CanaryDataset:
        """The user's dataset followed by the member canaries (build the DataLoader on it)."""
        if self._dataset is not None:
            raise DPAuditError("these canaries already wrap a dataset")
        self._dataset = CanaryDataset(dataset, member_ids=self.member_ids)
        return self._dataset

    def model(self, module: torch.nn.Module) -> CanaryModule:
        """The user's module with the canary rows' outputs (build the optimizer on its parameters).

        Raises:
            DPAuditError: a module with layers that mix records of a batch (BatchNorm, also without affine
                parameters, which Opacus accepts).
        """
        if self._module is not None:
            raise DPAuditError("these canaries already wrap a model")
        if not isinstance(module, torch.nn.Module):
            raise DPAuditError(f"model must be a torch.nn.Module, got {type(module).__name__}")
        mixing = cross_record_modules(module)
        if mixing:
            raise DPAuditError(
                f"{', '.join(mixing)} mixes each record with its batch-mates in training mode, so per-sample "
                "clipping does not bound one record's influence and the run is not DP (Opacus accepts BatchNorm "
                "without trainable parameters): replace it, e.g. opacus.validators.ModuleValidator.fix (GroupNorm)"
            )
        self._module = CanaryModule(module, canaries=self)
        return self._module

    def attach(self, optimizer: DPOptimizer, *, data_loader: torch.utils.data.DataLoader[Any]) -> None:
        """Observe the optimizer's steps: the canary block joins its parameters (last, learning rate 0), its
        clipping takes the canary rows the backward passes produced, its noise and division are read back.

        Args:
            optimizer: the ``DPOptimizer`` ``make_private`` returned (flat clipping, hooks or functorch).
            data_loader: the loader the training loop iterates (``make_private``'s), over the wrapped dataset: its
                sample rate is the q of the online statistic Λ (fixed before any record is drawn).

        Raises:
            DPAuditError: an optimizer the canaries refuse (with the reason), a model or dataset not wrapped, a
                loader over another dataset, a second attach.
        """
        if any(cls.__name__ == "LightningOptimizer" for cls in type(optimizer).__mro__):
            optimizer = optimizer.optimizer  # Lightning's self.optimizers(): its strategy steps the one it wraps
        for cls in type(optimizer).__mro__:
            if cls.__name__ in REFUSED_OPTIMIZERS:
                raise DPAuditError(
                    f"record-level canaries cannot audit {type(optimizer).__name__}: {REFUSED_OPTIMIZERS[cls.__name__]}"
                )
        if not isinstance(optimizer, DPOptimizer):
            raise DPAuditError(f"attach needs the DPOptimizer make_private returned, got {type(optimizer).__name__}")
        if self._optimizer is not None or getattr(optimizer, "_dpaudit_canaries", None) is not None:
            raise DPAuditError("canaries are already attached to this optimizer")
        dataset = self._dataset
        if dataset is None or self._module is None:
            raise DPAuditError("wrap the dataset (canaries.dataset) and the model (canaries.model) before attaching")
        if getattr(data_loader, "dataset", None) is not dataset:
            raise DPAuditError("data_loader must iterate the wrapped dataset (canaries.dataset(...))")
        sampling = loader_sampling(data_loader)
        self._rate = float(sampling.sample_rate)
        data_loader.collate_fn = dataset.collating(data_loader.collate_fn)  # type: ignore[union-attr]
        reference = optimizer.params[0]
        self._block = torch.zeros(self.members.size, device=reference.device, dtype=reference.dtype, requires_grad=True)
        self._reset_sums()
        self._pending.clear()  # backward passes before the attach belong to no step
        self._mean = optimizer.loss_reduction == "mean"
        # the block's group: empty but for add_noise and scale_grad (``_clip_and_accumulate`` to ``_pre_step``'s
        # end), so that no check, clipping, zero_grad or update of the optimizer's own sees it
        optimizer.original_optimizer.add_param_group({"params": [self._block], "lr": 0.0})
        self._block_group = optimizer.original_optimizer.param_groups[-1]
        self._block_group["params"] = []
        originals = {name: getattr(optimizer, name) for name in ("clip_and_accumulate", "add_noise", "pre_step")}
        self._originals = originals
        optimizer.clip_and_accumulate = self._clip_and_accumulate
        optimizer.add_noise = self._add_noise
        optimizer.pre_step = self._pre_step
        optimizer.zero_grad = self._zero_grad_of(optimizer.zero_grad)
        optimizer._dpaudit_canaries = self
        self._optimizer = optimizer

    @property
    def steps(self) -> int:
        """T, the optimizer steps observed (virtual steps excluded)."""
        return len(self.divisors)

    # ------------------------------------------------------------------------------------------
    # What happens at each step
    # ------------------------------------------------------------------------------------------

    def _check_ids(self, values: torch.Tensor) -> torch.Tensor:
        values = values.cpu()
        found = values.numpy()
        ids = found.astype(np.int64)
        if ids.min() < 0 or ids.max() >= self.members.size or not np.array_equal(ids, found):  # exact ids
            raise DPAuditError(
                "a canary input reached the model altered (its id is not a canary's): pass the loader's inputs to "
                "the model unchanged, or normalise them in the dataset's transform"
            )
        if not self.members[ids].all():
            raise DPAuditError("a non-member canary reached the model: its record is not in the dataset")
        return torch.from_numpy(ids)

    def _backward(self, ids: torch.Tensor, slopes: torch.Tensor) -> None:
        self._pending.append((ids, slopes.detach().to(torch.float64).cpu()))

    def _zero_grad_of(self, zero_grad: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._pending.clear()  # backward passes whose per-sample gradients Opacus drops too
            return zero_grad(*args, **kwargs)

        return wrapped

    def _clip_and_accumulate(self) -> None:
        optimizer = cast(Any, self._optimizer)
        block = cast(Any, self._block)
        # the block is out of the parameters (``_pre_step``): Opacus clips the real rows as without the canaries
        self._originals["clip_and_accumulate"]()
        real_rows = len(optimizer.grad_samples[0]) if optimizer.grad_samples else 0
        # the accumulated batches, as Opacus counts them from every parameter's grad_sample (scale_grad's divisor)
        first = optimizer.params[0].grad_sample
        empty = self._block.new_zeros((0, 1))
        block.grad_sample = [empty] * len(first) if isinstance(first, list) else empty
        self._group()["params"] = [self._block]  # back in: noised by add_noise (last), divided by scale_grad
        clip = float(optimizer.max_grad_norm)
        summed = torch.zeros(self.members.size, dtype=self._block.dtype, device=self._block.device)
        for ids, slopes in self._pending:
            if slopes.numel():  # every row's clipped gradient must be the first's (to 1e-6): checked at the extremes
                low, high = (float(value) for value in torch.aminmax(slopes))
                least = min(abs(low), abs(high)) if low * high > 0 else float(slopes.abs().min())
                smallest = least * self._norm_factor * clip
                if smallest < clip:
                    raise DPAuditError(
                        "the loss gives a canary row a per-sample gradient below the clipping bound (its slope at "
                        "zero output is too small): raise norm_factor"
                    )
                contribution = _clipped(float(slopes[0]) * self._norm_factor * clip, clip)
                if any(
                    abs(_clipped(value * self._norm_factor * clip, clip) - contribution) > 1e-6 * abs(contribution)
                    for value in (low, high)
                ):
                    raise DPAuditError("the loss gives the canary rows different gradients: their targets must agree")
                self._contribution = contribution
                summed.index_add_(0, ids.to(summed.device), summed.new_full((ids.numel(),), contribution))
            self._step_ids.append(ids)
            self._step_rows += int(ids.numel())
        self._step_rows += real_rows
        self._pending.clear()
        if getattr(block, "summed_grad", None) is not None:  # a step Opacus skipped (BatchMemoryManager) added to it
            summed += block.summed_grad
        block.summed_grad = summed

    def _add_noise(self) -> None:
        """The optimizer's own noise, then one step's observations from the canary block before its division: the
        noise it added (noised − summed, in units of its claimed std z·C) and x = noised/c (a present canary adds 1;
        noise of std σ = z·C/|c|)."""
        optimizer, block = cast(Any, self._optimizer), cast(Any, self._block)
        summed = block.summed_grad
        self._originals["add_noise"]()
        noised = block.grad.detach()
        std = float(optimizer.noise_multiplier) * float(optimizer.max_grad_norm)
        # ‖noised − summed‖² without a temporary: summed is the few present canaries' contributions
        squares = (
            float(torch.dot(noised, noised)) - 2 * float(torch.dot(noised, summed)) + float(torch.dot(summed, summed))
        )
        self.noise_chi2.append(squares / std**2 if std > 0 else math.nan)
        self._probe = noised[:_PROBE].to(torch.float64)  # the divisor, from these coordinates after scale_grad
        present = sum(int(ids.numel()) for ids in self._step_ids)
        self._present += self._step_ids
        if len(self._present) >= PARTIAL_STEPS:
            self._count_present()
        self.batch_rows.append(self._step_rows)
        self.canary_rows.append(present)
        self._step_ids, self._step_rows = [], 0
        self.noise_multipliers.append(float(optimizer.noise_multiplier))
        self.clip_norms.append(float(optimizer.max_grad_norm))
        self.contributions.append(math.nan)
        if self._contribution is None:  # no canary row seen yet: normalised once one shows its clipped contribution
            self._deferred.append((noised.clone(), std, len(self.contributions) - 1))
            return
        for earlier, earlier_std, index in self._deferred:
            self._accumulate(earlier, earlier_std, index)
        self._deferred.clear()
        self._accumulate(noised, std, len(self.contributions) - 1)

    def _count_present(self) -> None:
        """Add the ids that reached the optimizer to the members' counts (one bincount per ``PARTIAL_STEPS``)."""
        if self._present:
            self._counts += torch.bincount(torch.cat(self._present), minlength=self.members.size)
            self._present = []

    def _group(self) -> dict[str, Any]:
        """The optimizer's parameter group of the canary block."""
        return self._block_group

    def _pre_step(self, closure: Callable[[], object] | None = None) -> bool:
        self._probe = None
        try:
            proceed = self._originals["pre_step"](closure)
        finally:
            self._group()["params"] = []
        block = cast(Any, self._block)
        if self._probe is not None:  # noised and divided: the divisor it applied (least squares, exact to rounding)
            released = block.grad.detach()[:_PROBE].to(torch.float64)
            norm = float(torch.dot(released, released))
            self.divisors.append(float(torch.dot(self._probe, released)) / norm if norm > 0 else math.inf)
            self._probe = None
            block.grad = block.summed_grad = block.grad_sample = None  # a step Opacus skipped keeps its sum
        return proceed

    def _accumulate(self, noised: torch.Tensor, noise_std: float, index: int) -> None:
        """Add one step's observations x = noised/c to the online sums (``dpaudit._online.OnlineSums``)."""
        contribution = cast(float, self._contribution)
        self.contributions[index] = contribution
        if self._keep:
            self._observations.append((noised / contribution).to(torch.float32).cpu().numpy())
        self._sums.add(noised, contribution=contribution, noise_std=noise_std, rate=self._rate)

    # ------------------------------------------------------------------------------------------
    # Results
    # ------------------------------------------------------------------------------------------

    def detach(self) -> None:
        """Give the optimizer its own methods back and take the canary block out of its parameters; the canaries
        keep what they recorded (the model and dataset stay wrapped)."""
        optimizer = cast(Any, self._optimizer)
        if optimizer is None or getattr(optimizer, "_dpaudit_canaries", None) is not self:
            return
        for name in (*self._originals, "zero_grad"):
            delattr(optimizer, name)
        del optimizer._dpaudit_canaries
        groups = optimizer.original_optimizer.param_groups
        groups[:] = [group for group in groups if group is not self._group()]

    @property
    def observations(self) -> npt.NDArray[np.float32] | None:
        """[T, M] float32 x_tj where kept (``keep_observations``), else None."""
        return np.stack(self._observations) if self._keep and self._observations else None

    def record(self, *, accountant: IAccountant) -> RecordCanaryObservations:
        """The canaries' record against the accountant's ledger (its ``save`` writes what ``dpaudit audit
        --canary-record`` scores).

        Raises:
            DPAuditError: no step yet, no canary row seen yet, or an accountant whose history does not have the
                canaries' T steps.
        """
        if self.steps == 0:
            raise DPAuditError("the canaries saw no optimizer step yet: attach them, then train")
        if self._contribution is None:
            raise DPAuditError("no canary record reached the optimizer yet: train longer or with more canaries")
        self._count_present()
        sums = self._sums.result()
        return RecordCanaryObservations(
            **claimed_record(
                accountant,
                members=self.members,
                clip_norms=self.clip_norms,
                contributions=self.contributions,
                norm_factor=self._norm_factor,
            ),
            batch_size=int(round(self.divisors[-1])) if math.isfinite(self.divisors[-1]) else 0,
            sampling="poisson",
            all_iterates_scores=sums[0],
            final_model_scores=sums[1],
            observations=self.observations,
            standardised_sum=sums[2],
            standardised_sum_of_squares=sums[3],
            member_counts=self._counts.numpy().copy(),
            divisors=np.asarray(self.divisors, dtype=float),
            noise_chi2=np.asarray(self.noise_chi2, dtype=float),
            batch_rows=np.asarray(self.batch_rows, dtype=np.int64),
            canary_rows=np.asarray(self.canary_rows, dtype=np.int64),
        )

    def save(self, path: str | Path, *, accountant: IAccountant) -> Path:
        """Write ``record(accountant=...)`` to ``path`` (npz and its .json sidecar); returns the path."""
        return self.record(accountant=accountant).save(path)

    def _divisor_findings(self, record: RecordCanaryObservations) -> tuple[list[str], list[str]]:
        """(findings, notes) on the divisor: one that follows the realised batch, or one computed from the dataset's
        size that a record added or removed would move (Opacus #819: the scale of every released coordinate then
        reveals that record, which the accountant's subsampled-Gaussian analysis does not cover)."""
        findings: list[str] = []
        notes: list[str] = []
        divisors = cast(npt.NDArray[np.float64], record.divisors)
        rows = cast(npt.NDArray[np.int64], record.batch_rows)
        if not self._mean and np.allclose(divisors, 1.0, rtol=1e-5):
            return findings, notes
        if divisors.size > 2 and np.ptp(divisors) > 1e-5 * np.abs(divisors).max() and np.ptp(rows) > 0:
            correlation = float(np.corrcoef(divisors, rows)[0, 1])
            if correlation > 0.9:
                findings.append(
                    f"the optimizer divides each step by a number that follows the realised batch (correlation "
                    f"{correlation:.3f} with the rows it clipped): the batch size, which depends on the records, is "
                    "released; the accountant's subsampled-Gaussian analysis assumes a fixed divisor."
                )
            return findings, notes
        optimizer = cast(Any, self._optimizer)
        n, rate = len(cast(CanaryDataset, self._dataset)), self._rate
        divisor = float(np.median(divisors))
        iterations = divisor / max(float(optimizer.expected_batch_size), 1e-300)
        expected = int(n * rate)
        if expected >= 1 and math.isclose(divisor, expected * round(iterations), rel_tol=1e-5):
            neighbours = {int((n - 1) * rate), int((n + 1) * rate)}
            if neighbours != {expected}:
                findings.append(
                    f"the optimizer divides by ⌊q·n⌋ = {expected} of the dataset's size n = {n}, and one record more "
                    f"or fewer gives {sorted(neighbours - {expected})}: the scale of every released coordinate "
                    "reveals whether that record is in the data (Opacus #819/#571), which the accountant's "
                    "subsampled-Gaussian analysis does not cover; use loss_reduction='sum' or a divisor fixed from "
                    "public numbers."
                )
            else:
                notes.append(
                    f"the divisor is ⌊q·n⌋ = {expected} of the dataset's size (Opacus's expected_batch_size); at "
                    f"n = {n} one record more or fewer does not change it, but it does at other sizes (Opacus #819)."
                )
        return findings, notes

    def report(
        self,
        *,
        accountant: IAccountant,
        delta: float,
        confidence: float = 0.95,
        seed: int = 0,
        family_selection: str = "split",
        claimed_epsilon: float | None = None,
    ) -> RecordAuditReport:
        """Audit the run against the user's accountant: both bounds of both threat models, the run's checks, its ε
        beside them.

        Args:
            accountant: the run's Opacus accountant (``privacy_engine.accountant``): its history is the claim.
            delta: δ in (0, 1) of every ε.
            confidence: 1 − α of every bound; the flag's false-alarm probability is α.
            seed: seed of the bounds' held-out halves (fix it before looking at any result).
            family_selection: "split" or "ledger", as in :func:`dpaudit.audit_whole_run`.
            claimed_epsilon: the ε (nats, at δ) you claim for the run, e.g. the target ``make_private_with_epsilon``
                calibrated the noise to; None: the accountant's ε. The checks test it, and a note gives the
                accountant's ε for the run it recorded beside it.

        Returns:
            A :class:`RecordAuditReport`.

        Raises:
            DPAuditError: no step yet, a history of another length, bad δ or confidence, an accountant without ε at δ.
        """
        if claimed_epsilon is not None:
            check_positive("claimed_epsilon", claimed_epsilon, allow_zero=True)
        record = self.record(accountant=accountant)
        options = {"confidence": confidence, "seed": seed, "family_selection": family_selection}
        whole_run = audit_record(record, spread=True, delta=delta, **options)
        mechanism, recorded_epsilon = accountant_epsilon(accountant, delta=whole_run.delta)
        claimed = recorded_epsilon if claimed_epsilon is None else float(claimed_epsilon)
        noise_p = record.noise_p_value()
        flag = validation_flag(
            canaries=record,
            epsilon=claimed,
            delta=whole_run.delta,
            false_alarm=1.0 - whole_run.confidence,
            seed=seed,
            checks={} if noise_p is None else {"noise": noise_p},
        )
        findings = claim_findings(flag, mechanism=mechanism if claimed_epsilon is None else None)
        divisor_findings, notes = self._divisor_findings(record)
        findings += divisor_findings
        if claimed_epsilon is not None and not math.isclose(claimed, recorded_epsilon, rel_tol=1e-2):
            notes.append(
                f"you claim ε = {claimed:.3f}; the {mechanism} accountant gives ε = {recorded_epsilon:.3f} for the "
                "run it recorded"
            )
        rates, recorded = np.full(self.steps, self._rate), record.sample_rates
        if not np.allclose(rates, recorded, rtol=1e-6, atol=0):
            notes.append(
                f"the loader samples at q = {self._rate:.4g} but the accountant recorded q = {recorded.mean():.4g} "
                "(mean over steps)"
            )
        rows, canary_rows = (
            cast(npt.NDArray[np.int64], record.batch_rows),
            cast(npt.NDArray[np.int64], record.canary_rows),
        )
        chi2 = cast(npt.NDArray[np.float64], record.noise_chi2)
        observed = {
            "real_rows_per_step": float(np.mean(rows - canary_rows)),
            "canary_rows_per_step": float(np.mean(canary_rows)),
            "divisor": float(np.median(cast(npt.NDArray[np.float64], record.divisors))),
            "noise_multiplier": float(np.sqrt(chi2.sum() / (self.members.size * self.steps)))
            * float(np.mean(record.noise_multipliers)),
            "noise_multiplier_claimed": float(np.mean(record.noise_multipliers)),
            "member_presence_mean": float(np.mean(cast(npt.NDArray[np.int64], record.member_counts)[record.members])),
            "member_presence_expected": float(np.sum(record.sample_rates)),
        }
        return RecordAuditReport(
            whole_run=whole_run,
            flag=flag,
            epsilon_accountant=recorded_epsilon,
            epsilon_claimed=claimed,
            accountant=mechanism,
            steps=self.steps,
            flagged=bool(findings),
            findings=tuple(findings),
            notes=tuple(notes),
            observed=observed,
            record=record,
        )
