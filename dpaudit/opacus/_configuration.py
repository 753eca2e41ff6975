"""Whole-run canaries in a user's own Opacus training loop: ``CanaryAudit`` (``import dpaudit.opacus``).

The audit of :mod:`dpaudit.attacks.canary_run` (whole-run Dirac canaries, each a member with probability ½, drawn
once) attached to an Opacus ``DPOptimizer`` the user made with ``PrivacyEngine.make_private`` (or
``make_private_with_epsilon``, or by hand)::

    model, optimizer, loader = privacy_engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                           noise_multiplier=1.0, max_grad_norm=1.0)
    audit = dpaudit.opacus.CanaryAudit(optimizer, data_loader=loader, num_canaries=200_000, seed=0)
    ...the user's training loop, unchanged...
    report = audit.report(accountant=privacy_engine.accountant, delta=1e-5)

How the canaries go through the user's mechanism:

* **The canary block.** M canaries are the M coordinates of a tensor of their own (the canary block), on the device
  and in the dtype of the model's first parameter, which no loss touches. It is *not* in the optimizer's parameter
  groups between steps, so Opacus's clipping, noise and the wrapped optimizer's update of the model's parameters
  run exactly as without the audit: same per-sample norms, same noise draws from the same generator (the global
  RNG or the optimizer's ``generator``), same update; a test checks the parameters bit for bit.
* **Sampling like a record of the user's loader.** Poisson loaders (``DPDataLoader``, Opacus's
  ``UniformWithReplacementSampler``, also under ``BatchMemoryManager``): a member joins each optimizer step
  independently with the sampler's rate q. Shuffled loaders (``shuffle=True``, ``poisson_sampling=False``): a member
  sits in exactly one batch per epoch, batch s with probability |batch s|/n, as a record of a permutation of the n
  records cut into the loader's batches does (no batch with ``drop_last`` for the cut-off records). Sequential
  loaders: the same, its batch drawn once for the whole run. Epochs are counted in optimizer steps of
  ``len(data_loader)`` each, so the loop must run whole epochs of the loader (Poisson: any number of steps).
* **Through the optimizer's own clipping and noise.** The optimizer's ``pre_step`` is wrapped: after the real step
  has been clipped, noised and scaled (and the accountant's step hook has run), and only for a step Opacus does
  not skip (virtual steps of ``BatchMemoryManager`` are not steps), the optimizer's own ``clip_and_accumulate``
  clips one probe record, a Dirac of norm K = ``norm_factor``·C, with the optimizer's current clipping bound
  (flat, or per layer with the bound ‖(C_1, …, C_L)‖ for the canary block); each present canary adds that clipped
  contribution c at its coordinate (a record's clipping depends only on its norm, and the Diracs of present canaries
  sit on distinct coordinates, so this equals clipping the [k, M] Dirac records without building them). The
  optimizer's own ``add_noise`` then noises the block with its current noise multiplier and bound (and
  ``secure_mode``) from a generator of the audit's own, and its own ``scale_grad`` divides it as it divides the
  model's gradients. During that pass the optimizer's parameter groups hold the canary block alone.
* **Observations.** x_tj = g_tj·D/c, g the canary block's released gradient at step t and D the divisor Opacus
  applied (``expected_batch_size``·``accumulated_iterations`` for ``loss_reduction="mean"``, else 1): a present
  canary adds 1 and the noise has std σ_t = z_t·C_t/c_t (z_t, C_t the optimizer's at that step). The two statistics
  of the whole-run audit are summed online in float64: Λ_j = Σ_t log(1 − q_t + q_t·exp((x_tj − ½)/σ_t²)) with the
  rate q_t the loader actually samples at and the σ_t the optimizer actually used
  (:func:`dpaudit.whole_run.step_log_ratio`; any statistic fixed before membership is looked at gives valid
  bounds, and this one is the likelihood ratio of the mechanism as run), and Σ_t x_tj.

The report (:meth:`CanaryAudit.report`) reads the claim from the user's accountant: its ``history`` of
(noise multiplier, sample rate, steps) gives the ledger z_t, q_t against which :func:`dpaudit.audit_whole_run`
computes both bounds (assumption-free Clopper–Pearson, and the family bound of composed Poisson-subsampled Gaussians
with the ledger's q_t and noise s·z_t), and ``accountant.get_epsilon(δ)`` is the accountant's ε beside them. The run
is *flagged* when its canaries reject the claimed mechanism: the family test rejects the ledger's own noise (s ≤ 1),
or the assumption-free lower bound exceeds the accountant's ε.

Supported: ``DPOptimizer`` and ``DPPerLayerOptimizer`` (flat and per-layer clipping), grad-sample modes "hooks" and
"functorch" (the canaries do not go through the module), Poisson, shuffled and sequential loaders,
``BatchMemoryManager``. Refused: ghost clipping (``DPOptimizerFastGradientClipping``), adaptive clipping
(``AdaClipDPOptimizer``) and the distributed optimizers and samplers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import numpy.typing as npt
import torch

from dpaudit._validation import DPAuditError, check_count, check_positive, check_seed
from dpaudit.attacks.canary_run import RunCanaryObservations
from dpaudit.audit import ValidationFlag, WholeRunReport, audit_whole_run
from dpaudit.whole_run import step_log_ratio

try:  # the optional extra: ``pip install "dpaudit[train]"``
    from opacus.optimizers import DPOptimizer, DPPerLayerOptimizer
    from opacus.utils.batch_memory_manager import BatchSplittingSampler
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError('dpaudit.opacus needs Opacus: pip install "dpaudit[train]"') from error

if TYPE_CHECKING:
    from opacus.accountants import IAccountant

NORM_FACTOR = 1e3  # K = 1e3·C: clipping brings a canary to (about) C, as the engine's whole-run canaries
SAMPLINGS = ("poisson", "shuffle", "sequential")
#: How a loader samples a record (one of :data:`SAMPLINGS`).
Sampling = Literal["poisson", "shuffle", "sequential"]
_STREAM = 0x0FAC  # the audit's random streams: SeedSequence([seed, _STREAM]) spawns membership, presence and noise
_SUPPORTED = (DPOptimizer, DPPerLayerOptimizer)


@dataclass(frozen=True)
class LoaderSampling:
    """How the user's data loader samples a record, which the member canaries follow.

    Attributes:
        scheme: "poisson" (independently at every step), "shuffle" (one batch per epoch, a new permutation each
            epoch) or "sequential" (one batch per epoch, the same every epoch).
        sample_rate: q of a Poisson loader; for the others, the mean over an epoch of |batch s|/n.
        dataset_size: n, the loader's records.
        batch_size: b of a shuffled or sequential loader (None for Poisson).
        steps_per_epoch: S = len(loader) of a shuffled or sequential loader (None for Poisson).
    """

    scheme: Sampling
    sample_rate: float
    dataset_size: int
    batch_size: int | None = None
    steps_per_epoch: int | None = None

    def batch_sizes(self) -> npt.NDArray[np.int64]:
        """|batch s| for s < S (shuffled and sequential loaders): b, and the remainder in the last batch.

        Raises:
            DPAuditError: a Poisson loader (it has no fixed batches).
        """
        steps, size = self.steps_per_epoch, self.batch_size
        if steps is None or size is None:
            raise DPAuditError("a Poisson loader has no fixed batches (batch_sizes is for shuffled or sequential ones)")
        sizes = np.full(steps, size)
        sizes[-1] = min(size, self.dataset_size - (steps - 1) * size)
        return sizes


def loader_sampling(data_loader: torch.utils.data.DataLoader[Any]) -> LoaderSampling:
    """The sampling a (DP) data loader performs: Poisson (Opacus's ``UniformWithReplacementSampler``, also wrapped by
    ``BatchMemoryManager``), shuffled (``RandomSampler`` without replacement) or sequential (``SequentialSampler``).

    Raises:
        DPAuditError: any other sampler (distributed, weighted, with replacement, a custom batch sampler).
    """
    batch_sampler = getattr(data_loader, "batch_sampler", None)
    if isinstance(batch_sampler, BatchSplittingSampler):  # BatchMemoryManager's physical batches of a logical one
        batch_sampler = batch_sampler.sampler
    dataset = getattr(data_loader, "dataset", None)
    if batch_sampler is None or dataset is None:
        raise DPAuditError("data_loader must be a torch DataLoader (the one the training loop iterates)")
    n = len(dataset)
    if type(batch_sampler) is UniformWithReplacementSampler:
        return LoaderSampling(scheme="poisson", sample_rate=float(batch_sampler.sample_rate), dataset_size=n)
    if type(batch_sampler) is torch.utils.data.BatchSampler:
        sampler = batch_sampler.sampler
        scheme: Sampling
        if type(sampler) is torch.utils.data.SequentialSampler:
            scheme = "sequential"
        elif type(sampler) is torch.utils.data.RandomSampler and not sampler.replacement and sampler.num_samples == n:
            scheme = "shuffle"
        else:
            raise DPAuditError(
                f"the loader's sampler {type(sampler).__name__} is not supported: use Poisson sampling "
                "(make_private's default), shuffle=True or a sequential loader"
            )
        steps = len(batch_sampler)
        if steps < 1:
            raise DPAuditError("the data loader yields no batch")
        sampling = LoaderSampling(
            scheme=scheme,
            sample_rate=0.0,
            dataset_size=n,
            batch_size=int(batch_sampler.batch_size),
            steps_per_epoch=steps,
        )
        rate = float(sampling.batch_sizes().sum() / (n * steps))
        return dataclasses.replace(sampling, sample_rate=rate)
    raise DPAuditError(
        f"the loader's batch sampler {type(batch_sampler).__name__} is not supported: use Poisson sampling "
        "(make_private's default, also distributed=False), shuffle=True or a sequential loader"
    )


def accountant_ledger(
    accountant: IAccountant, *, steps: int | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(z_t, q_t) per step, [T] each, from an Opacus accountant's ``history`` of (noise multiplier, sample rate,
    steps) runs.

    Args:
        accountant: the Opacus accountant.
        steps: the optimizer steps the canaries saw, which the history must have (None: any).

    Raises:
        DPAuditError: an object without a ``history`` of such triples, or one of other than ``steps`` steps.
    """
    history = getattr(accountant, "history", None)
    if not isinstance(history, list):
        raise DPAuditError("accountant must be an Opacus accountant (with a history of (z, q, steps))")
    z: list[float] = []
    q: list[float] = []
    for entry in history:
        try:
            noise, rate, count = entry
            z.extend([float(noise)] * int(count))
            q.extend([float(rate)] * int(count))
        except (TypeError, ValueError):
            raise DPAuditError(f"the accountant's history has an entry that is not (z, q, steps): {entry!r}") from None
    if steps is not None and len(z) != steps:
        raise DPAuditError(
            f"the accountant recorded {len(z)} steps but the canaries saw {steps}: attach them before the first step, "
            "keep them attached to the report, and let the optimizer's step hook update the accountant"
        )
    return np.asarray(z, dtype=float), np.asarray(q, dtype=float)


def claimed_record(
    accountant: IAccountant,
    *,
    members: npt.NDArray[np.bool_],
    clip_norms: list[float],
    contributions: list[float],
    norm_factor: float,
) -> dict[str, Any]:
    """The fields of a canary record that the claim and the canaries' normalisation fix, for both Opacus designs:
    membership, the accountant's ledger (z_t, q_t) over the T steps the canaries saw (one per entry of
    ``clip_norms``), the observations' noise std σ_t = z_t·C_t/|c_t|, and the last step's C, K = ``norm_factor``·C
    and |c|.

    Raises:
        DPAuditError: an accountant whose history does not have those T steps.
    """
    z, q = accountant_ledger(accountant, steps=len(clip_norms))
    clip = np.asarray(clip_norms)
    contribution = np.abs(np.asarray(contributions))
    return {
        "members": members.copy(),
        "noise_multipliers": z,
        "sample_rates": q,
        "noise_std": z * clip / contribution,
        "clip_norm": float(clip[-1]),
        "magnitude": float(norm_factor * clip[-1]),
        "contribution": float(contribution[-1]),
    }


def audit_record(record: RunCanaryObservations, *, spread: bool, **options: Any) -> WholeRunReport:
    """:func:`dpaudit.audit_whole_run` of a canary record's statistics (Λ, Σ_t x_t, and with ``spread`` the spread
    over the steps) against its ledger; ``options`` are its δ, confidence, seed and family selection."""
    statistics = (record.all_iterates_scores, record.final_model_scores, *((record.spread(),) if spread else ()))
    return audit_whole_run(
        statistics=statistics,
        members=record.members,
        noise_multipliers=record.noise_multipliers,
        sample_rates=record.sample_rates,
        noise_std=record.noise_std,
        **options,
    )


def accountant_epsilon(accountant: IAccountant, *, delta: float) -> tuple[str, float]:
    """(the accountant's mechanism, its ε at δ): the run's claim, ε in nats (Opacus's PRV accountant answers a large
    δ with ε < 0, its estimate's error; no mechanism has ε < 0, so it is read as 0).

    Raises:
        DPAuditError: an accountant that gives no ε at δ (its first line of error).
    """
    mechanism = str(accountant.mechanism()) if hasattr(accountant, "mechanism") else type(accountant).__name__
    try:
        return mechanism, max(0.0, float(accountant.get_epsilon(delta=delta)))
    except (ValueError, ArithmeticError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DPAuditError(f"the {mechanism} accountant gives no ε at δ = {delta:g}: {first}") from None


#: What each check of a validation flag found, as a sentence (``claim_findings``).
_FINDINGS = {
    "all_iterates_family": "the family bound ε ≥ {value:.3f} (a test of the ledger's σ, q and T) exceeds",
    "all_iterates": "the assumption-free all-iterates bound ε ≥ {value:.3f} exceeds",
    "spread": "the assumption-free bound of the spread over the steps (noise reused across steps?) ε ≥ {value:.3f} "
    "exceeds",
}


def claim_findings(flag: ValidationFlag, *, mechanism: str | None) -> list[str]:
    """One sentence per check that flagged the run (``flag.flagged_by``), each naming its number and level; the
    claim is the accountant's ε (``mechanism`` names it) or, with None, the ε the user claims."""
    claim = "the claimed" if mechanism is None else f"the {mechanism} accountant's"
    level = f"{100 * flag.confidence:.4g} %"
    findings = []
    for name in flag.flagged_by:
        if name in _FINDINGS:
            findings.append(
                _FINDINGS[name].format(value=flag.bounds[name])
                + f" {claim} ε = {flag.epsilon_claimed:.3f} (lower bound at {level})."
            )
        elif name == "presence":
            findings.append(
                f"the records reached the optimizer at other rates, or less independently, than the accountant's "
                f"Poisson q_t (p = {flag.presence_p_value:.3g} < {1 - flag.confidence:.3g}): another loader, batch "
                "size or shuffled batches than the accounted ones, or batches accumulated into one step."
            )
        else:
            findings.append(
                f"the {name} check rejects the accounted mechanism (p = {flag.checks[name]:.3g} < "
                f"{1 - flag.confidence:.3g})"
                + (": the noise the optimizer added is not of std z·C." if name == "noise" else ".")
            )
    return findings


@dataclass(frozen=True, eq=False)
class OpacusAuditReport:
    """The whole-run audit of an Opacus run beside its accountant's ε.

    Every ε is in nats at ``whole_run.delta``.

    Attributes:
        whole_run: :func:`dpaudit.audit_whole_run` of the canaries against the accountant's ledger (z_t, q_t): the
            all-iterates and final-model bounds, each assumption-free and family, and the ledger's PLD, RDP ε.
        epsilon_accountant: ``accountant.get_epsilon(δ)``: the ε the user's own accountant claims (an upper bound
            if the run is the mechanism its history records, which the audit tests).
        accountant: the accountant's mechanism ("prv", "rdp", "gdp").
        sampling: the loader's sampling the canaries followed.
        steps: T, the optimizer steps audited.
        flagged: the canaries reject the claim: the family test rejects the ledger's own noise (noise scale
            s ≤ 1), or the assumption-free all-iterates bound exceeds ``epsilon_accountant``.
        findings: one sentence per reason for ``flagged`` (empty when not flagged).
        notes: one sentence per difference between what the run did and what its accountant recorded, found by
            comparing the configuration (not a test, no confidence): a loader that is not Poisson (every Opacus
            accountant assumes Poisson sampling), a sample rate or noise multiplier other than the recorded one.
        record: the canaries' record (membership, statistics, the claimed ledger), as ``save`` writes it.
    """

    whole_run: WholeRunReport
    epsilon_accountant: float
    accountant: str
    sampling: LoaderSampling
    steps: int
    flagged: bool
    findings: tuple[str, ...]
    notes: tuple[str, ...]
    record: RunCanaryObservations

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (the whole-run report's ``to_dict``, without ROC curves)."""
        return {
            "whole_run": self.whole_run.to_dict(),
            "epsilon_accountant": self.epsilon_accountant,
            "epsilon_accountant_label": f"the {self.accountant} accountant's ε: the run's claim",
            "accountant": self.accountant,
            "sampling": self.sampling.__dict__,
            "steps": self.steps,
            "flagged": self.flagged,
            "findings": list(self.findings),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """A few lines of text: the accountant's ε, both bounds of both threat models, the verdict."""
        run = self.whole_run
        # an audit of the observations has every statistic's report (``audit_whole_run``)
        assert run.all_iterates is not None and run.final_model is not None
        level = f"{100 * run.confidence:g} %"
        family = run.all_iterates_family
        capped = " (capped: the grid's strongest hypothesis)" if family.capped else ""
        lines = [
            f"Opacus whole-run canary audit: {run.all_iterates.n_members} member and {run.all_iterates.n_nonmembers} "
            f"non-member canaries, {self.steps} steps, {self.sampling.scheme} loader, δ = {run.delta:g}.",
            f"Claimed: ε = {self.epsilon_accountant:.3f} ({self.accountant} accountant); ledger ε = "
            f"{run.epsilon_pld:.3f} (PLD), {run.epsilon_rdp:.3f} (RDP).",
            f"All iterates: ε ≥ {run.all_iterates_profile.headline.epsilon_lower:.3f} (assumption-free, {level}, "
            f"threshold fixed by the ledger), ε ≥ {run.all_iterates.epsilon_lower:.3f} (assumption-free, held-out "
            f"threshold), ε ≥ {family.epsilon:.3f}{capped} (family bound, {level}: a test of the ledger's σ, q and T, "
            "a lower bound only if the run is a composed subsampled Gaussian).",
            f"Final model: ε ≥ {run.final_model_family.epsilon:.3f} (family: ledger test), ε ≥ "
            f"{run.final_model.epsilon_lower:.3f} (assumption-free)"
            + (
                ""
                if run.epsilon_last_iterate is None
                else f"; last-iterate heuristic ε = {run.epsilon_last_iterate:.3f} (not a guarantee)"
            )
            + ".",
            "FLAGGED: " + " ".join(self.findings) if self.flagged else "Not flagged: the canaries fit the claim.",
        ]
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)


class CanaryAudit:
    """Whole-run Dirac canaries attached to an Opacus ``DPOptimizer`` (module docstring).

    Attach before the first step; the training loop stays as it is. Detach (``detach``) to restore the optimizer's
    own ``pre_step``.

    Args:
        optimizer: the ``DPOptimizer`` (or ``DPPerLayerOptimizer``) ``make_private`` returned.
        data_loader: the data loader the training loop iterates (``make_private``'s), whose sampling the member
            canaries follow.
        num_canaries: M ≥ 2, canaries in all (each a member with probability ½: M/2 per side on average).
        seed: non-negative seed of the canaries' membership, presence and noise (streams of their own: the global
            RNG and the optimizer's generator are not touched).
        norm_factor: K/C, the canary gradient's norm in units of the clipping bound (> 1: clipping brings it to C).
        keep_observations: keep the [T, M] float32 observations x_tj (memory 4·T·M bytes), e.g. for plots.

    Raises:
        DPAuditError: an optimizer or loader the audit does not support, bad counts or seeds.
    """

    def __init__(
        self,
        optimizer: DPOptimizer,
        *,
        data_loader: torch.utils.data.DataLoader[Any],
        num_canaries: int,
        seed: int = 0,
        norm_factor: float = NORM_FACTOR,
        keep_observations: bool = False,
    ) -> None:
        if type(optimizer) not in _SUPPORTED:
            raise DPAuditError(
                f"CanaryAudit supports Opacus's DPOptimizer and DPPerLayerOptimizer (flat and per-layer clipping), "
                f"got {type(optimizer).__name__}"
            )
        if getattr(optimizer, "_dpaudit_canaries", None) is not None:
            raise DPAuditError("this optimizer already has a CanaryAudit attached")
        count = check_count("num_canaries", num_canaries, allow_zero=False)
        if count < 2:
            raise DPAuditError(f"num_canaries must be ≥ 2, got {num_canaries!r}")
        seed = check_seed(seed)
        if check_positive("norm_factor", norm_factor) <= 1.0:
            raise DPAuditError(f"norm_factor must be > 1 (a canary's norm K = norm_factor·C), got {norm_factor!r}")
        params = optimizer.params
        if not params:
            raise DPAuditError("the optimizer has no trainable parameters")
        self.sampling = loader_sampling(data_loader)
        self._optimizer = optimizer
        self._norm_factor = float(norm_factor)
        reference = params[0]
        self._device, self._dtype = reference.device, reference.dtype
        membership, presence, noise = np.random.SeedSequence([seed, _STREAM]).spawn(3)
        self.members = np.random.default_rng(membership).random(count) < 0.5
        self._member_index = np.flatnonzero(self.members)
        self._rng = np.random.default_rng(presence)
        self._generator = torch.Generator(device=self._device)
        self._generator.manual_seed(int(noise.generate_state(1, dtype=np.uint64)[0] >> 1))
        self._canary = torch.zeros(count, device=self._device, dtype=self._dtype, requires_grad=True)
        self._probe = torch.zeros(1, device=self._device, dtype=self._dtype, requires_grad=True)
        self._all = torch.zeros(count, dtype=torch.float64, device=self._device)
        self._sum = torch.zeros(count, dtype=torch.float64, device=self._device)
        # shuffled / sequential loaders: each member's batch in the current epoch
        self._batch: npt.NDArray[np.int64] | None = None
        self._keep = bool(keep_observations)
        self._observations: list[npt.NDArray[np.float32]] = []
        self.noise_multipliers: list[float] = []  # z_t the optimizer used
        self.clip_norms: list[float] = []  # C_t (flat; ‖(C_1, …, C_L)‖ per layer)
        self.contributions: list[float] = []  # c_t, a present canary's clipped contribution
        self.divisors: list[float] = []  # D_t, what scale_grad divided by
        self.sample_rates: list[float] = []  # q_t the loader samples at (the marginal rate of a step)
        self.present: list[int] = []  # present canaries per step
        self._original_pre_step = optimizer.pre_step
        optimizer.pre_step = self._pre_step
        optimizer._dpaudit_canaries = self

    # ------------------------------------------------------------------------------------------
    # Attachment
    # ------------------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """T, the optimizer steps seen so far (virtual steps excluded)."""
        return len(self.noise_multipliers)

    def detach(self) -> None:
        """Give the optimizer its own ``pre_step`` back; the canaries keep what they recorded."""
        if getattr(self._optimizer, "_dpaudit_canaries", None) is self:
            del self._optimizer.pre_step
            del self._optimizer._dpaudit_canaries

    def _pre_step(self, closure: Callable[[], object] | None = None) -> bool:
        proceed = self._original_pre_step(closure)
        if proceed:  # a real step (not one BatchMemoryManager skips), noised, scaled and accounted
            self._canary_step()
        return proceed

    def _present(self, step: int) -> tuple[npt.NDArray[np.intp], float]:
        """The member canaries present at ``step`` (indices) and the step's marginal sample rate."""
        sampling = self.sampling
        members = self._member_index
        if sampling.scheme == "poisson":
            return members[self._rng.random(members.size) < sampling.sample_rate], sampling.sample_rate
        steps, size = sampling.steps_per_epoch, sampling.batch_size
        assert steps is not None and size is not None  # set for every loader that is not Poisson
        epoch_step = step % steps
        if self._batch is None or (sampling.scheme == "shuffle" and epoch_step == 0):
            # a record's place in a permutation of the n records, cut into the loader's batches (b per batch)
            self._batch = self._rng.integers(0, sampling.dataset_size, size=members.size) // size
        rate = float(sampling.batch_sizes()[epoch_step] / sampling.dataset_size)
        return members[self._batch == epoch_step], rate

    def _canary_step(self) -> None:
        optimizer = self._optimizer
        try:
            iterations = optimizer.accumulated_iterations
        except ValueError:
            iterations = 1
        present, rate = self._present(self.steps)
        mask = torch.zeros(self.members.size, dtype=self._dtype)
        mask[torch.from_numpy(present)] = 1.0
        mask = mask.to(self._device)
        inner = optimizer.original_optimizer
        groups, generator = inner.param_groups, optimizer.generator
        per_layer = isinstance(optimizer, DPPerLayerOptimizer)
        norms = optimizer.max_grad_norms if per_layer else None
        clip_norm = float(optimizer.max_grad_norm)
        # Opacus sets grad_sample and summed_grad on the tensors it clips at run time; torch's stubs lack them
        probe, canary = cast(Any, self._probe), cast(Any, self._canary)
        try:
            # the probe record, a Dirac of norm K, through the optimizer's own clipping
            inner.param_groups = [{"params": [probe]}]
            if per_layer:
                optimizer.max_grad_norms = [clip_norm]
            probe.grad_sample = torch.full(
                (1, 1), self._norm_factor * clip_norm, device=self._device, dtype=self._dtype
            )
            probe.summed_grad = None
            optimizer.clip_and_accumulate()
            contribution = probe.summed_grad
            # the canary block: c at each present canary's coordinate, then the optimizer's own noise and scaling
            inner.param_groups = [{"params": [canary]}]
            canary.summed_grad = mask * contribution
            canary.grad_sample = (
                torch.zeros(0, 1) if iterations == 1 else [torch.zeros(0, 1) for _ in range(iterations)]
            )
            optimizer.generator = self._generator
            optimizer.add_noise()
            optimizer.scale_grad()
        finally:
            inner.param_groups = groups
            optimizer.generator = generator
            if per_layer:
                optimizer.max_grad_norms = norms
            probe.grad_sample = probe.summed_grad = None
            canary.grad_sample = canary.summed_grad = None
        contribution = float(contribution[0])
        divisor = float(optimizer.expected_batch_size * iterations) if optimizer.loss_reduction == "mean" else 1.0
        noise = float(optimizer.noise_multiplier)
        x = canary.grad.detach().to(torch.float64).mul_(divisor / contribution)
        canary.grad = None
        sigma = noise * clip_norm / contribution
        self._all += step_log_ratio(x, sigma, rate) if sigma > 0 else torch.full_like(x, math.nan)
        self._sum += x
        if self._keep:
            self._observations.append(x.to(torch.float32).cpu().numpy())
        self.noise_multipliers.append(noise)
        self.clip_norms.append(clip_norm)
        self.contributions.append(contribution)
        self.divisors.append(divisor)
        self.sample_rates.append(rate)
        self.present.append(int(present.size))

    # ------------------------------------------------------------------------------------------
    # Results
    # ------------------------------------------------------------------------------------------

    @property
    def observations(self) -> npt.NDArray[np.float32] | None:
        """[T, M] float32 x_tj where kept (``keep_observations``), else None."""
        return np.stack(self._observations) if self._keep and self._observations else None

    def record(self, *, accountant: IAccountant) -> RunCanaryObservations:
        """The canaries' record against the accountant's ledger, in the engine's format (``save`` writes it and
        ``dpaudit audit --canary-record FILE`` scores it apart from training).

        ``noise_multipliers`` and ``sample_rates`` are the accountant's (the claim); ``noise_std`` is σ_t = z_t·C_t/c_t
        with the claimed z_t. The statistics are those summed online (module docstring).

        Raises:
            DPAuditError: no step yet, or an accountant whose history does not have the audit's T steps.
        """
        if self.steps == 0:
            raise DPAuditError("the canaries saw no optimizer step yet: train first")
        return RunCanaryObservations(
            **claimed_record(
                accountant,
                members=self.members,
                clip_norms=self.clip_norms,
                contributions=self.contributions,
                norm_factor=self._norm_factor,
            ),
            batch_size=int(round(self.divisors[-1])),
            sampling="poisson" if self.sampling.scheme == "poisson" else "shuffle",
            all_iterates_scores=self._all.cpu().numpy().copy(),
            final_model_scores=self._sum.cpu().numpy().copy(),
            observations=self.observations,
        )

    def _notes(self, record: RunCanaryObservations) -> tuple[str, ...]:
        """What the run did that its accountant's ledger does not record (configuration, not canaries)."""
        notes = []
        if self.sampling.scheme != "poisson":
            notes.append(
                f"the loader is {self.sampling.scheme}, not Poisson: the accountant's ε assumes Poisson sampling"
            )
        rates, recorded = np.asarray(self.sample_rates), record.sample_rates
        if not np.allclose(rates, recorded, rtol=1e-6, atol=0):
            worst = int(np.argmax(np.abs(rates - recorded)))
            notes.append(
                f"the loader samples at q_t = {rates.min():.4g}–{rates.max():.4g} over the steps but the accountant "
                f"recorded {recorded.min():.4g}–{recorded.max():.4g} (at step {worst}: {rates[worst]:.4g} against "
                f"{recorded[worst]:.4g})"
            )
        used = np.asarray(self.noise_multipliers)
        if not np.allclose(used, record.noise_multipliers, rtol=1e-6, atol=0):
            notes.append(
                f"the optimizer used noise multipliers {used.min():.4g}–{used.max():.4g} but the accountant recorded "
                f"{record.noise_multipliers.min():.4g}–{record.noise_multipliers.max():.4g}"
            )
        return tuple(notes)

    def save(self, path: str | Path, *, accountant: IAccountant) -> Path:
        """Write ``record(accountant=...)`` to ``path`` (npz, with its .json sidecar) for ``dpaudit audit
        --canary-record``; returns the path."""
        return self.record(accountant=accountant).save(path)

    def report(
        self,
        *,
        accountant: IAccountant,
        delta: float,
        confidence: float = 0.95,
        seed: int = 0,
        family_selection: str = "split",
    ) -> OpacusAuditReport:
        """Audit the run against the user's accountant: both bounds of both threat models, its ε beside them.

        Args:
            accountant: the Opacus accountant of the run (``privacy_engine.accountant``): its history is the claim.
            delta: δ in (0, 1) of every ε.
            confidence: 1 − α of every bound.
            seed: seed of the bounds' random halves.
            family_selection: where the family bounds choose their threshold: ``"split"`` (a held-out share) or
                ``"ledger"`` (a simulation of the mechanism the accountant recorded; every canary certifies), as in
                :func:`dpaudit.audit_whole_run`.

        Returns:
            An :class:`OpacusAuditReport`.

        Raises:
            DPAuditError: no step yet, a history of another length, fewer than 2 canaries per side, bad δ, a bad
                ``family_selection``.
        """
        record = self.record(accountant=accountant)
        whole_run = audit_record(
            record, spread=False, delta=delta, confidence=confidence, seed=seed, family_selection=family_selection
        )
        mechanism, claimed = accountant_epsilon(accountant, delta=whole_run.delta)
        findings = []
        assert whole_run.all_iterates is not None  # an audit of the observations has every statistic's report
        family = whole_run.all_iterates_family
        if family.noise_scale <= 1.0:
            findings.append(
                f"the canaries reject the mechanism the accountant records (composed subsampled Gaussian, noise scale "
                f"s = {family.noise_scale:.3g} ≤ 1 rejected at {100 * whole_run.confidence:g} %): all-iterates ε ≥ "
                f"{family.epsilon:.3f} against the claimed {claimed:.3f}."
            )
        if whole_run.all_iterates.epsilon_lower > claimed:
            findings.append(
                f"the assumption-free all-iterates bound ε ≥ {whole_run.all_iterates.epsilon_lower:.3f} exceeds the "
                f"{mechanism} accountant's ε = {claimed:.3f}."
            )
        return OpacusAuditReport(
            notes=self._notes(record),
            whole_run=whole_run,
            epsilon_accountant=claimed,
            accountant=mechanism,
            sampling=self.sampling,
            steps=self.steps,
            flagged=bool(findings),
            findings=tuple(findings),
            record=record,
        )


__all__ = [
    "CanaryAudit",
    "LoaderSampling",
    "OpacusAuditReport",
    "accountant_ledger",
    "loader_sampling",
]
