"""Whole-run Dirac canaries: an audit of the whole training run's composed, subsampled ε.

The designs of ``dpaudit.attacks.canary`` put each canary in each step with probability ½ whatever the run's
sampling, so each trial faces one Gaussian step. Here (``canary_design: "whole-run"``) each canary is a record
of the run, and each canary is one trial of the whole run:

* **Membership, once.** M canaries live on one extra parameter tensor of size M (the optimizer's last parameter,
  a coordinate per canary, which no loss touches). Canary j is a member with probability ½, drawn once per run
  (from the target's noise seed, a stream of the auditor's own: the coin of the membership game) and recorded; a
  non-member never joins a batch.
* **Sampled by the run's own sampler.** The canaries are extra records of the run (``extra_records``): the
  engine's sampler draws them in the same call, from the same stream and by the same rule as the model's records
  (:func:`dpaudit.sampling.sample_batches`), and a member in the batch is present: with ``sampling: poisson``
  independently with probability q = b/n at every step; with ``sampling: shuffle`` in exactly one batch per
  epoch, batch s with probability |batch s|/n as a record of a permutation cut into ceil(n/b) batches does. A
  bug in the run's sampling is therefore a bug in the canaries' presence, which is recorded as it happened
  (the members' present steps, against the ledger's q: :meth:`RunCanaryObservations.presence_p_value`).
* **Through the optimizer.** A present canary is a record whose per-sample gradient is a Dirac of norm
  K = ``norm_factor``·C at its own coordinate; ``Optimizer.accumulate_diracs`` adds the k present canaries'
  φ(K)·K at their coordinates, exactly what ``accumulate`` adds for the dense [k, M] per-sample gradients
  (zeros on the model's parameters), without building them. The canary block is the optimizer's audit block
  (``Optimizer.set_audit_block``): its noise comes from the model's own noise generator through the model's own
  code path, so a bug in the model's noise (a generator re-seeded, a wrong scale) is a bug in the canaries'.
  ``canary_randomness`` (``AuditConfig``) chooses how: "derived" (default: the canaries' values come from
  generators seeded by the state each of the model's draws leaves, ``dpaudit._streams``: the model trains bit for
  bit as without canaries) or "joint" (one draw for the model's and the canaries' coordinates, and one sampler call
  for records and canaries: the model's later noise and batches then differ from a run without canaries).
* **Observations.** After step t the released update u_t (before momentum; ``optimizer.last_update``) is read
  at every canary coordinate and normalised so that a present canary contributes 1: x_tj = u_tj · b / c with
  c = φ(K)·K the canary's clipped contribution (the optimizer's own φ; c = C for clipping) and b the expected
  batch size. For the supported optimizers that keep their DP claim x_tj = B_tj + N(0, σ_t²) with B_tj the
  canary's presence and σ_t = z_t·C/c (z_t the step's noise multiplier, from its ``StepCost``).

Three statistics score the canaries (``RunCanaryObservations.scores``), each against the run's composed ε
(``claim="run"`` of the ``canary-run``, ``canary-final`` and ``canary-spread`` attacks of
:data:`dpaudit.attacks.ATTACKS`):

* every iterate: Λ_j = Σ_t log(1 − q_t + q_t·exp((x_tj − ½)/σ_t²)), the log likelihood ratio of member
  against non-member under Poisson sampling (:func:`dpaudit.whole_run.likelihood_ratio_scores`);
* the final model only: Σ_t x_tj, the canary coordinate's total update (:func:`dpaudit.whole_run.final_model_scores`;
  the final coordinate is −η·c/b times it for SGD without momentum);
* every iterate, a test of the noise's independence across steps: S_j = Σ_t (x_tj/σ_t − mean)², the spread over
  the steps (:func:`dpaudit.whole_run.spread_scores`): 0 for every non-member if one noise draw is reused at every
  step, which Λ and Σ_t x_t cannot see.

They are summed online, step by step, on the block's device (``dpaudit._online.OnlineSums``: each step in the
released values' float32, into float64 sums every 16 steps; Λ's terms, those
:func:`~dpaudit.whole_run.likelihood_ratio_scores` sums; Σ_t x_tj; and the spread's Σ_t x_tj/σ_t and Σ_t x_tj²/σ_t²),
and saved as [M] arrays. The steps' released blocks wait (up to :data:`WAITING_BYTES`, at most an epoch) and are
summed one after the other: the same sums in the same order, while their code and data stay in the caches that a
step of the model evicts. A block released in place in the optimizer's own buffer waits there, with no copy
(``Optimizer.exchange_block_release``: a free buffer takes its place). The [T, M] observations themselves (float32)
are kept and saved only when asked (``keep_observations``) or small (T·M ≤ :data:`KEEP_OBSERVATIONS_MAX_VALUES`): no
statistic reads them, and at 2·10⁵ canaries and 200 steps they are 160 MB to fill and write
(``benchmarks/whole_run_overhead.py`` measures the cost per step).

Supported optimizers: those whose per-sample processing is ``PrivateOptimizer.accumulate`` — each record's
gradient g_i weighted by φ(‖g_i‖), a function of its norm, and summed — so that a Dirac record's contribution
is φ(K)·K at its coordinate and nothing elsewhere (``Optimizer.takes_dirac_records``): dpsgd-gc, dpsgd-dc,
dpsgd-no-noise, dpsgd-no-clip, dpsgd-gc-understated-q, dpsgd-gc-reused-noise, dpsgd-gc-skipped-noise, auto-s (nsgd),
auto-v, dp-psac, dp-psac-batch-noise, dpsgd-auto, d2p-sgd; and the random-projection optimizers in the DP order
(dp2-sgd, d2p2-sgd), where the weighting and the noise happen in the projected space: there the canary block is a block
of projected coordinates (``ProjectedNoise``: a canary's gradient designed against the public projection A as
√p·(Aᵀ)⁺·K·e_j projects to K·e_j, a Dirac where clipping and noise happen), released before A maps it back;
in the authors' order (dp2-sgd-as-published, d2p2-sgd-as-published: clipped, then projected) each canary is a
record on a tensor of its own, stretched κ_j = s_max(A_j)/√p by that tensor's public matrix after clipping, so
that a present canary adds κ_j > 1 in the units of the ledger's claim;
and the sparse optimizers of the TP-TopK paper (tp-topk, tp-rand, on-topk, on-rand), whose canary block is left
out of the support's ranking and kept in the support (``MaskedSupport``): the support is public once chosen, so
canaries on released coordinates are each one subsampled-Gaussian trial per step at that step's σ; and AdaDPIGU,
whose block is also left out of the real records' standardisation and top-k (a canary designed against the public
α and √β + μ, gradient α + K·(√β + μ)·e_j, is K·e_j once standardised; the block's release is read before the
de-standardisation).
DPSGD-DC projects the model's parameters alone (the canary block is not in the domain). DP-PSAC with
batch-scaled noise counts the canaries as records: their clipped norms enter the batch's largest, and they
are records of the realised batch size it divides by (its recorded σ_t is the claimed one, which its
data-dependent noise departs from: what the audit is there to find). With ``ranked`` the supports learned once
(tp-topk, tp-rand, adadpigu and their variants) rank the block by their own score among itself, so that a support
chosen from un-noised gradients (tp-topk-clean-support, adadpigu-code) shows in which canaries it freezes.
Refused, before any training: non-private SGD (no per-record processing and no noise).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as np
import numpy.typing as npt
import torch

from dpaudit._device import host_to_device
from dpaudit._io import atomic_write_stream, read_json, write_json
from dpaudit._online import OnlineSums, partial_dtype
from dpaudit._validation import DPAuditError, check_choice
from dpaudit.config import SAMPLING_SCHEMES
from dpaudit.integrity import verify_file
from dpaudit.observers import TrainingObserver
from dpaudit.optim import StepCost
from dpaudit.rundir import RunDir
from dpaudit.theory.tradeoff import group_steps
from dpaudit.whole_run import final_model_scores, likelihood_ratio_scores, spread_scores

if TYPE_CHECKING:
    from dpaudit.optim import MaskedSupport, Optimizer, PrivateOptimizer

DESIGN = "whole-run"
NORM_FACTOR = 1e3  # K = 1e3·C: clipping (or normalising) brings a canary to (about) C, as GradientCanaries
# Seconds between two writes of the observations before the last epoch's: a write holding the whole [T, M] array
# so far (up to 80 MB) at every epoch end would cost O(E²) and outweigh the training itself
SAVE_EVERY_SECONDS = 60.0
# keep_observations=None keeps (and saves) the [T, M] float32 observations when T·M is at most this many values
# (8 MB); beyond it only the [M] statistics, summed online. Read when the observer attaches. Keeping them costs a
# copy at every step and their write: at 2·10⁴ canaries over 600 steps on digits (48 MB) about half of what the
# canaries added to the training loop, for values no statistic reads
KEEP_OBSERVATIONS_MAX_VALUES = 2_000_000
# The released block of this many bytes of steps at most waits before its statistics are summed (``RunCanaries``)
WAITING_BYTES = 1 << 24
# The direct parameter checks (``RunCanaryObservations.noise_check``, ``contribution_check``) read every step's sums
# over the first this many canaries (a few hundred already catch 15 % less noise; more cost nothing that matters)
CHECK_CANARIES = 1 << 16
# every iterate (Λ), the final model only (Σ_t x_t), the spread over the steps (Σ_t (x_t/σ_t − mean)²)
STATISTICS = ("all", "final", "spread")
NORMALISATION = (
    "x = u·b/c: u the released update (before momentum) at the canary's coordinate, b the expected batch size, "
    "c = φ(K)·K the canary's clipped contribution; a present canary adds 1, the noise std is σ_t = z_t·C/c"
)
_STREAM = 0xC0A7  # the canaries' membership stream: the first child of SeedSequence([noise seed, _STREAM])


@dataclass(frozen=True)
class ParameterCheck:
    """A direct check of one of the ledger's parameters from the whole-run canaries' step sums.

    Attributes:
        name: "step_noise" (σ_t at every step) or "contribution" (q_t times a present canary's contribution).
        p_value: one-sided p-value of "the run is at least as private as the ledger says" on this parameter (small:
            the run departs in the direction that costs privacy).
        estimate: the measured parameter over the ledger's (1 if the run is its claim).
        interval: its 95 % interval.
        worst: the step whose measurement departs most in the costly direction (its ratio).
        worst_step: that step's index (0-based).
        canaries: the canaries the measurement uses.
        meaning: what the ratio is, one line.
    """

    name: str
    p_value: float
    estimate: float
    interval: tuple[float, float]
    worst: float
    worst_step: int
    canaries: int
    meaning: str


@dataclass(eq=False)
class RunCanaryObservations:
    """Membership, statistics and normalised observations of the whole-run canaries of one training run.

    Attributes:
        members: [M] bool, canary j is a member (drawn once per run).
        noise_multipliers: [T] z_t of each step (its ``StepCost``).
        sample_rates: [T] q_t of each step.
        noise_std: [T] σ_t = z_t·C/c, the noise std in the units of ``observations``.
        clip_norm: C.
        magnitude: K, the canary gradient's norm.
        contribution: c = φ(K)·K, a present canary's clipped contribution to the summed gradient.
        batch_size: b, the expected batch size the release divides by.
        sampling: the run's sampling ("poisson" or "shuffle"), which the canaries follow.
        all_iterates_scores: [M] float64 Λ_j = Σ_t log(1 − q_t + q_t·exp((x_tj − ½)/σ_t²)) (nats), the log
            likelihood ratio of every iterate (:func:`dpaudit.whole_run.likelihood_ratio_scores`).
        final_model_scores: [M] float64 Σ_t x_tj, the final model's statistic
            (:func:`dpaudit.whole_run.final_model_scores`).
        observations: [T, M] float32, x_tj = u_tj·b/c: 1 per present canary plus noise of std σ_t; None where
            the run did not keep them (``RunCanaries``' ``keep_observations``).
        standardised_sum: [M] float64 Σ_t x_tj/σ_t, with ``standardised_sum_of_squares`` the sums of the spread
            over the steps (:func:`dpaudit.whole_run.spread_scores`); None for a file written before they were
            summed that kept no observations.
        standardised_sum_of_squares: [M] float64 Σ_t x_tj²/σ_t²; None where ``standardised_sum`` is.
        sampled: [T] int64, how many of the members the run's sampler drew into each step's batch, as it happened
            (:meth:`presence_p_value` tests it against the ledger; the sampler draws no non-member); None for a file
            written before it was recorded this way.
        step_sums: [T, 3] float64, per step over the first ``min(M, CHECK_CANARIES)`` canaries: the members' Σ x_t,
            the non-members' Σ x_t and Σ x_t² (the direct parameter checks, :meth:`noise_check` and
            :meth:`contribution_check`); None where not recorded (an older file, or ``canary_support: ranked``,
            whose frozen canaries release no noise).
    """

    members: npt.NDArray[np.bool_]
    noise_multipliers: npt.NDArray[np.float64]
    sample_rates: npt.NDArray[np.float64]
    noise_std: npt.NDArray[np.float64]
    clip_norm: float
    magnitude: float
    contribution: float
    batch_size: int
    sampling: str
    all_iterates_scores: npt.NDArray[np.float64]
    final_model_scores: npt.NDArray[np.float64]
    observations: npt.NDArray[np.float32] | None = None
    standardised_sum: npt.NDArray[np.float64] | None = None
    standardised_sum_of_squares: npt.NDArray[np.float64] | None = None
    sampled: npt.NDArray[np.int64] | None = None
    step_sums: npt.NDArray[np.float64] | None = None

    @property
    def steps(self) -> int:
        """T, the number of steps recorded."""
        return int(np.size(self.noise_std))

    @staticmethod
    def statistics_of(
        observations: npt.ArrayLike, *, noise_std: npt.ArrayLike, sample_rates: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(Λ, Σ_t x_t), each [M] float64, recomputed from [T, M] observations: the statistics of
        :func:`dpaudit.whole_run.likelihood_ratio_scores` (with the noise std σ_t and the sample rates q_t) and
        :func:`dpaudit.whole_run.final_model_scores`; NaN where one is undefined (non-finite observations, σ_t = 0),
        which ``scores`` refuses, and zeros for no step."""
        by_canary = np.asarray(observations).T  # [M, T]
        count, steps = by_canary.shape
        if steps == 0:
            return np.zeros(count), np.zeros(count)
        statistics: list[npt.NDArray[np.float64]] = []
        for statistic in (
            lambda: likelihood_ratio_scores(by_canary, noise_multipliers=noise_std, sample_rates=sample_rates),
            lambda: final_model_scores(by_canary),
        ):
            try:
                statistics.append(statistic())
            except DPAuditError:
                statistics.append(np.full(count, np.nan))
        return statistics[0], statistics[1]

    @staticmethod
    def spread_sums_of(
        observations: npt.ArrayLike, *, noise_std: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(Σ_t x_t/σ_t, Σ_t x_t²/σ_t²), each [M] float64, recomputed from [T, M] observations (zeros for no step):
        the sums of :func:`dpaudit.whole_run.spread_scores`."""
        by_canary = np.asarray(observations, dtype=float).T  # [M, T]
        if by_canary.shape[1] == 0:
            return np.zeros(by_canary.shape[0]), np.zeros(by_canary.shape[0])
        with np.errstate(divide="ignore", invalid="ignore"):
            standardised = by_canary / np.asarray(noise_std, dtype=float)
        return standardised.sum(axis=1), np.square(standardised).sum(axis=1)

    def spread(self) -> npt.NDArray[np.float64]:
        """[M] S_j = Σ_t (x_tj/σ_t − mean)², each canary's spread over the steps
        (:func:`dpaudit.whole_run.spread_scores`), from the sums summed online.

        Raises:
            DPAuditError: the file predates the spread's sums and kept no observations to recompute them from.
        """
        if self.standardised_sum is None or self.standardised_sum_of_squares is None:
            raise DPAuditError(
                "these whole-run canary observations have no spread sums (written before they were summed, without "
                "the observations to recompute them): retrain to audit the spread over the steps"
            )
        return spread_scores(
            noise_std=self.noise_std,
            standardised_sum=self.standardised_sum,
            standardised_sum_of_squares=self.standardised_sum_of_squares,
        )

    def scores(self, statistic: str = "all") -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(member scores, non-member scores), one per canary.

        Args:
            statistic: "all" (every iterate seen: the log likelihood ratio Λ of
                :func:`dpaudit.whole_run.likelihood_ratio_scores` with the noise std σ_t and the sample rates
                q_t), "final" (the final model: Σ_t x_t, :func:`dpaudit.whole_run.final_model_scores`) or
                "spread" (every iterate: the spread over the steps, :meth:`spread`).
        """
        check_choice("whole-run canary statistic", statistic, STATISTICS)
        if self.steps == 0:
            raise DPAuditError("the whole-run canaries have no observations yet (no step was recorded)")
        if statistic == "all":
            group_steps(noise_multipliers=self.noise_std, sample_rates=self.sample_rates)  # σ_t > 0: one-line errors
            values = self.all_iterates_scores
        elif statistic == "spread":
            group_steps(noise_multipliers=self.noise_std, sample_rates=self.sample_rates)  # σ_t > 0: one-line errors
            values = self.spread()
        else:
            values = self.final_model_scores
        values = np.asarray(values, dtype=float)
        if not np.all(np.isfinite(values)):
            raise DPAuditError(f"the whole-run canaries' {statistic!r} statistic is not finite (non-finite updates?)")
        return values[self.members], values[~self.members]

    def _check_classes(self) -> tuple[int, int]:
        """(members, non-members) among the canaries the step sums cover."""
        assert self.step_sums is not None
        covered = self.members[: min(self.members.size, CHECK_CANARIES)]
        return int(covered.sum()), int((~covered).sum())

    def noise_check(self) -> ParameterCheck | None:
        """σ_t from the non-members' noise at every step, against the ledger's: a step released with less noise
        than claimed (or none) shows as a sample variance far below σ_t², whatever the other steps do.

        Under the claim a non-member's x_t is N(0, σ_t²), so (n − 1)·s_t²/σ_t² is χ²_{n−1} at each step (n the
        non-members covered). The p-value is the smallest one-sided (less noise) p-value over the steps times T
        (Bonferroni; capped at 1); more noise than claimed is never a violation. The estimate is the pooled
        s/σ over the steps, with its 95 % interval; ``worst`` the smallest per-step s_t/σ_t. None where the step
        sums were not recorded or fewer than 3 non-members are covered.
        """
        if self.step_sums is None or self.steps == 0:
            return None
        from scipy import stats

        _, count = self._check_classes()
        if count < 3:
            return None
        total, squares = self.step_sums[:, 1], self.step_sums[:, 2]
        variance = np.maximum(squares - total**2 / count, 0.0) / (count - 1)
        ratio = variance / np.asarray(self.noise_std, dtype=float) ** 2
        p_values = stats.chi2.cdf((count - 1) * ratio, count - 1)
        dof = self.steps * (count - 1)
        pooled = float(np.mean(ratio))
        low, high = (float(np.sqrt(pooled * dof / stats.chi2.ppf(p, dof))) for p in (0.975, 0.025))
        return ParameterCheck(
            name="step_noise",
            p_value=float(min(1.0, p_values.min() * self.steps)),
            estimate=math.sqrt(pooled),
            interval=(low, high),
            worst=float(np.sqrt(ratio.min())),
            worst_step=int(np.argmin(ratio)),
            canaries=count,
            meaning="σ_t measured on the non-members / the ledger's σ_t (1 if the run adds the noise it claims)",
        )

    def contribution_check(self) -> ParameterCheck | None:
        """q_t times what a present canary adds, from the members' mean at every step, against the ledger's q_t: a
        larger sample rate (or sensitivity) than claimed shows as members that move more than q_t on average.

        Per step d_t = mean of the members' x_t − mean of the non-members' (E d_t = q_t·c with c = 1 under the
        claim; variance (q_t(1 − q_t) + σ_t²)/n₁ + σ_t²/n₀ under Poisson sampling, less under shuffling; the steps
        independent, so noise reused across steps can make it reject the claimed mechanism too). The
        estimate is Σ_t d_t / Σ_t q_t with its 95 % interval; the p-value one-sided (more than claimed). None where
        the step sums were not recorded or a class has no canary covered.
        """
        if self.step_sums is None or self.steps == 0:
            return None
        from scipy import stats

        n1, n0 = self._check_classes()
        if n1 == 0 or n0 == 0:
            return None
        q, sigma = np.asarray(self.sample_rates, dtype=float), np.asarray(self.noise_std, dtype=float)
        shift = self.step_sums[:, 0] / n1 - self.step_sums[:, 1] / n0
        std = float(np.sqrt(np.sum((q * (1 - q) + sigma**2) / n1 + sigma**2 / n0)))
        expected = float(q.sum())
        estimate = float(shift.sum())
        return ParameterCheck(
            name="contribution",
            p_value=float(stats.norm.sf((estimate - expected) / std)),
            estimate=estimate / expected,
            interval=((estimate - 1.96 * std) / expected, (estimate + 1.96 * std) / expected),
            worst=float(np.max(shift / q)),
            worst_step=int(np.argmax(shift / q)),
            canaries=n0 + n1,
            meaning="the members' mean shift per step / the ledger's q_t (1 if the run samples at q_t a canary of "
            "sensitivity C)",
        )

    def presence_p_value(self) -> float | None:
        """Two-sided p-value of "the run's sampler drew the members at the ledger's sample rates", from the
        members it really drew (``sampled``); None where they were not recorded.

        ``sampling: poisson``: N_t of the M₁ members drawn at step t are independent Binomial(M₁, q_t) under the
        ledger: an exact binomial test of Σ_t N_t where every q_t is equal, else a normal approximation (mean
        Σ_t M₁·q_t, variance Σ_t M₁·q_t(1 − q_t)). ``sampling: shuffle``: each member is in exactly one batch of each
        epoch, so Σ_t N_t over the run must be M₁ times the epochs (1 if so, else 0; None for a part of an epoch).
        """
        if self.sampled is None or self.steps == 0:
            return None
        from scipy import stats

        drawn, canaries = np.asarray(self.sampled, dtype=np.int64), int(self.members.sum())
        total, rates = int(drawn.sum()), np.asarray(self.sample_rates, dtype=float)
        if self.sampling == "shuffle":  # ceil(n/b) = ceil(1/q) steps per epoch, each canary in one of them
            epochs, rest = divmod(self.steps, math.ceil(1 / float(rates[0]) - 1e-9))
            return None if rest else float(total == canaries * epochs)
        if np.all(rates == rates[0]):
            return float(stats.binomtest(total, canaries * self.steps, float(rates[0])).pvalue)
        mean = float(np.sum(canaries * rates))
        std = float(np.sqrt(np.sum(canaries * rates * (1 - rates))))
        if std == 0:
            return 1.0 if total == round(mean) else 0.0
        return float(2 * stats.norm.sf(abs(total - mean) / std))

    def save(self, path: str | Path) -> Path:
        """Write the arrays to ``path`` (npz; ``observations`` only where kept) and the settings to its .json
        sidecar, each atomically."""
        path = Path(path)
        write_json(
            path.with_suffix(".json"),
            {
                "design": DESIGN,
                "canaries": int(self.members.size),
                "members": int(self.members.sum()),
                "steps": self.steps,
                "clip_norm": self.clip_norm,
                "sampling": self.sampling,
                "magnitude": self.magnitude,
                "contribution": self.contribution,
                "batch_size": self.batch_size,
                "normalisation": NORMALISATION,
                "observations_kept": self.observations is not None,
            },
        )
        arrays = {
            "members": self.members.astype(bool),
            "noise_multipliers": np.asarray(self.noise_multipliers, dtype=float),
            "sample_rates": np.asarray(self.sample_rates, dtype=float),
            "noise_std": np.asarray(self.noise_std, dtype=float),
            "all_iterates_scores": np.asarray(self.all_iterates_scores, dtype=float),
            "final_model_scores": np.asarray(self.final_model_scores, dtype=float),
        }
        if self.standardised_sum is not None and self.standardised_sum_of_squares is not None:
            arrays["standardised_sum"] = np.asarray(self.standardised_sum, dtype=float)
            arrays["standardised_sum_of_squares"] = np.asarray(self.standardised_sum_of_squares, dtype=float)
        if self.observations is not None:
            arrays["observations"] = self.observations.astype(np.float32, copy=False)
        if self.sampled is not None:
            arrays["members_sampled"] = np.asarray(self.sampled, dtype=np.int64)
        if self.step_sums is not None:
            arrays["step_sums"] = np.asarray(self.step_sums, dtype=float)
        # the keys are array names, never savez's own keyword allow_pickle
        return atomic_write_stream(path, lambda stream: np.savez(stream, **arrays))  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | Path) -> RunCanaryObservations:
        """Read a ``save``d file; a file written before the statistics (or the spread's sums) were stored gets them
        recomputed from its observations (``statistics_of``, ``spread_sums_of``), or no spread sums (None) where it
        kept no observations."""
        path = Path(path)
        if not path.is_file():
            raise DPAuditError(
                f"no whole-run canary observations at {path}; train with --canaries M --canary-design whole-run"
            )
        verify_file(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                names = ("members", "noise_multipliers", "sample_rates", "noise_std")
                arrays: dict[str, Any] = {name: data[name] for name in names}  # the fields, by name
                arrays["observations"] = data["observations"] if "observations" in data.files else None
                # per step, the members drawn (an older file's "sampled" counted non-members too: not read)
                arrays["sampled"] = data["members_sampled"] if "members_sampled" in data.files else None
                arrays["step_sums"] = data["step_sums"] if "step_sums" in data.files else None
                if "all_iterates_scores" in data.files:
                    arrays["all_iterates_scores"] = data["all_iterates_scores"]
                    arrays["final_model_scores"] = data["final_model_scores"]
                else:  # an older file: the observations only
                    arrays["all_iterates_scores"], arrays["final_model_scores"] = cls.statistics_of(
                        arrays["observations"], noise_std=arrays["noise_std"], sample_rates=arrays["sample_rates"]
                    )
                if "standardised_sum" in data.files:
                    arrays["standardised_sum"] = data["standardised_sum"]
                    arrays["standardised_sum_of_squares"] = data["standardised_sum_of_squares"]
                elif arrays["observations"] is not None:  # an older file with its observations
                    arrays["standardised_sum"], arrays["standardised_sum_of_squares"] = cls.spread_sums_of(
                        arrays["observations"], noise_std=arrays["noise_std"]
                    )
            sidecar = read_json(path.with_suffix(".json"))
            settings: dict[str, Any] = {
                "clip_norm": float(sidecar["clip_norm"]),
                "magnitude": float(sidecar["magnitude"]),
                "contribution": float(sidecar["contribution"]),
                "batch_size": int(sidecar["batch_size"]),
                "sampling": str(sidecar["sampling"]),
            }
        except Exception as error:  # noqa: BLE001 - any failure means an unusable file
            raise DPAuditError(
                f"cannot read whole-run canary observations {path}: {str(error).splitlines()[0]}"
            ) from None
        return cls(**arrays, **settings)


def load_run_canaries(run_dir: str | Path) -> RunCanaryObservations:
    """The whole-run canary observations of the target of run ``run_dir`` (``RunDir(run_dir).target.canaries_run``)."""
    return RunCanaryObservations.load(RunDir(run_dir).target.canaries_run)


class RunCanaries(TrainingObserver):
    """The engine's side of the whole-run canaries (module docstring), an observer of the target's training loop:
    the canary block (the optimizer's last parameter, its audit block: ``attach``), the members' insertion through
    the optimizer's own per-sample weighting (``before_update``) and the observation (``after_update``).

    The real records' gradients are not touched (``sees_gradients`` is False): the target keeps the ensemble's
    shared accumulation, and the canaries join each batch as Dirac records just before the step. They are the
    run's ``extra_records``: the engine's sampler draws them with the records and hands over which it drew
    (``sampled``); their noise is the model's generator's (``set_audit_block``).

    Args:
        count: M, the number of canaries.
        clip_norm: C of the run (the canary gradient's norm is ``norm_factor``·C).
        seed: the target's noise seed; the membership stream (the auditor's coin) derives from it.
        sampling: the run's sampling ("poisson" or "shuffle"), recorded with the observations.
        device, dtype: of the model's parameters.
        joint: the block's noise in one draw with the model's (``Optimizer.set_audit_block``); False: from a
            generator derived from the model's (the model's noise as without canaries).
        ranked: an optimizer's learned support ranks the block by its own score (``MaskedSupport.audit_ranked``);
            False: the block is left out of the ranking and released at every step.
        norm_factor: ≥ 1, so that clipping or normalisation brings each canary to (about) C.
        path: where the statistics and observations are written (``RunCanaryObservations.save``; None: keep in
            memory): at the last epoch's end, and before it at the first epoch end ``save_every`` seconds after
            the last write or the observer's creation (an interrupted run resumes from its training state, which
            holds them).
        save_every: seconds between two writes before the last epoch (0: every epoch end).
        keep_observations: keep (and save) the [T, M] float32 observations besides the two [M] statistics, which
            are summed online in any case; None: keep them where T·M ≤ :data:`KEEP_OBSERVATIONS_MAX_VALUES`.
    """

    name = "canaries_run"
    sees_gradients = False  # the records' gradients go through untouched (and the shared path); canaries: before_update
    reads_updates = True  # the observations are read from the released update
    reads_model_updates = False  # the canary block's alone
    # the output file and when it was written; the steps waiting to be summed (none at an epoch end), the free
    # buffers their releases go to and the parameter checks' work buffers; this step's members; what derives from the
    # members
    transient_state: tuple[str, ...] = (
        *("path", "save_every", "_saved_at", "_save_seconds"),
        *("_waiting", "_free", "_waiting_costs", "_check_work", "_present", "_member_index", "_check_weights"),
    )

    def __init__(
        self,
        *,
        count: int,
        clip_norm: float,
        seed: int,
        sampling: str,
        device: torch.device | str,
        dtype: torch.dtype,
        joint: bool = False,
        ranked: bool = False,
        norm_factor: float = NORM_FACTOR,
        path: str | Path | None = None,
        save_every: float = SAVE_EVERY_SECONDS,
        keep_observations: bool | None = None,
    ) -> None:
        check_choice("sampling", sampling, SAMPLING_SCHEMES)
        if norm_factor < 1:
            raise DPAuditError(f"norm_factor must be ≥ 1 (a canary's norm K ≥ C); got {norm_factor}")
        (membership,) = np.random.SeedSequence([seed, _STREAM]).spawn(1)
        self.count = count
        self.members = np.random.default_rng(membership).random(count) < 0.5
        # the run's sampler draws the members (a non-member never joins a batch, so drawing it would be idle work)
        self._member_index = np.flatnonzero(self.members)
        self.extra_records = int(self._member_index.size)
        self.sampling = sampling
        self.joint = joint
        self.ranked = ranked
        self.clip_norm = float(clip_norm)
        self.magnitude = float(norm_factor * clip_norm)
        self.parameter = torch.zeros(count, device=device, dtype=dtype)
        self._present: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)  # the members in this step's batch
        self.path = Path(path) if path is not None else None
        self.save_every = save_every
        self._saved_at = time.perf_counter()  # of the last write, or of the creation (a short run writes once)
        self._save_seconds = 0.0  # how long the last write took
        # set by ``attach`` from the optimizer
        self.contribution = float("nan")
        self.batch_size = 0
        self.epochs = 0
        self.keep_observations = keep_observations
        self.keeps_observations = bool(keep_observations)  # decided by ``attach`` where None
        self._observations = np.zeros((0, count), dtype=np.float32)  # [T, M] where kept
        # per canary, summed online: Λ_j, Σ_t x_tj and the spread's Σ_t x_tj/σ_t and Σ_t x_tj²/σ_t² (``spread_scores``)
        self._sums = OnlineSums(count, device=device, dtype=dtype)
        # per step
        self._noise_multipliers: list[float] = []
        self._sample_rates: list[float] = []
        self._sampled: list[int] = []  # how many members the sampler drew, per step
        self._recorded = 0  # steps whose observations are in ``_observations``
        # the released blocks of the steps not summed yet (``_sum_waiting``), and their (z, q); the free buffers that
        # the next steps' releases go to (``attach``: none where one step at a time)
        self._waiting: list[torch.Tensor] = []
        self._free: list[torch.Tensor] = []
        self._waiting_costs: list[tuple[float, float]] = []
        # per step, over the first CHECK_CANARIES canaries: the members' Σ x, the non-members' Σ x and Σ x² (float64,
        # ``attach``); the members' and non-members' 0/1 weights, and work buffers of the waiting steps' sums of u
        # and of one step's u², in the block's dtype (float32 for a float32 model: ``_check_sums``)
        self._step_sums: torch.Tensor | None = None
        self._check_work: tuple[torch.Tensor, torch.Tensor] | None = None
        covered = torch.from_numpy(self.members[:CHECK_CANARIES]).to(device=device, dtype=partial_dtype(dtype))
        self._check_weights = torch.stack([covered, 1.0 - covered])

    @property
    def parameters(self) -> tuple[torch.Tensor, ...]:
        """The canary block, the optimizer's last parameter."""
        return (self.parameter,)

    def attach(self, optimizer: Optimizer) -> None:
        """Make the canary block the optimizer's audit block (noise from the model's generator), read the
        normalisation c = φ(K)·K and b from it, and decide whether to keep the observations (T·M)."""
        if optimizer.params[-1] is not self.parameter:
            raise DPAuditError("whole-run canaries need their block as the optimizer's last parameter")
        optimizer.set_audit_block(1, joint=self.joint)  # a one-line error for optimizers that cannot keep one
        if self.ranked:
            if not getattr(optimizer, "ranks_audit_block", False):
                raise DPAuditError(f"{type(optimizer).__name__} learns no support that could rank the canary block")
            cast("MaskedSupport", optimizer).audit_ranked = True
        hyper = optimizer.hyper
        # set_audit_block succeeded: a PrivateOptimizer (the only optimizers that take Dirac records)
        self.contribution = cast("PrivateOptimizer", optimizer).dirac_contribution(self.magnitude)
        self.batch_size = hyper.expected_batch_size
        self.epochs = hyper.epochs
        steps = hyper.steps_per_epoch * hyper.epochs
        self.keeps_observations = (
            steps * self.count <= KEEP_OBSERVATIONS_MAX_VALUES
            if self.keep_observations is None
            else bool(self.keep_observations)
        )
        if self.keeps_observations:
            self._observations = np.zeros((steps, self.count), dtype=np.float32)
        rows = min(hyper.steps_per_epoch, WAITING_BYTES // (self.count * self.parameter.element_size()))
        self._free = [torch.empty_like(self.parameter) for _ in range(rows)] if rows > 1 else []
        if not self.ranked:  # the parameter checks' sums (a ranked support freezes canaries: no noise to measure)
            self._step_sums = torch.zeros((steps, 3), device=self.parameter.device, dtype=torch.float64)
            weights = self._check_weights
            self._check_work = (weights.new_empty((max(rows, 1), 3)), weights.new_empty(weights.shape[1]))

    def sampled(self, present: npt.NDArray[np.intp]) -> None:
        """The members the run's sampler drew into this step's batch (indices among the members), which join it."""
        self._sampled.append(int(present.size))
        self._present = self._member_index[present]

    def before_update(self, optimizer: Optimizer, *, epoch: int) -> None:
        """The members in this step's batch join it as Dirac records, through the optimizer's own weighting."""
        coordinates = self._present
        if coordinates.size:
            optimizer.accumulate_diracs(
                coordinates=host_to_device(coordinates, self.parameter.device), magnitude=self.magnitude
            )

    def after_update(self, optimizer: Optimizer, cost: StepCost | None, *, epoch: int) -> None:
        """Keep the released update at the canary block, and the step's z and q, for ``_sum_waiting``: the steps are
        summed together when up to :data:`WAITING_BYTES` of them wait, and at every epoch end (the same sums, in the
        same order, as step by step; one after the other, the sums' code and data stay in the caches, which the
        model's work of a step evicts)."""
        # a private optimizer (attach) returns a cost, and keeps last_update for an observer that reads_updates
        assert cost is not None and optimizer.last_update is not None
        update = optimizer.last_update[-1].detach()
        self._waiting_costs.append((float(cost.noise_multiplier), float(cost.sample_rate)))
        if not self._free:  # one step at a time: no copy
            self._sum_waiting([update])
            return
        # a release in the block's own buffer is taken as it is (a free buffer takes its place); another is copied
        spare = self._free.pop()
        taken = optimizer.exchange_block_release(spare)
        self._waiting.append(spare.copy_(update) if taken is None else taken)
        if not self._free:
            self._sum_waiting()

    def _sum_waiting(self, updates: list[torch.Tensor] | None = None) -> None:
        """Add the waiting steps' released values (x = u·b/c; ``updates``, else the waiting blocks, whose buffers are
        then free) to the statistics (``OnlineSums``, on the block's device), keep x where asked (float32), and record
        each step's z and q."""
        count = len(self._waiting_costs)
        if not count:
            return
        if updates is None:
            updates, self._waiting = self._waiting, []
            self._free.extend(updates)  # summed below, before any later step is released into them
        scale = self.batch_size / self.contribution  # x = u·scale
        if self.keeps_observations:  # x in float32, into the host array
            kept = torch.from_numpy(self._observations[self._recorded : self._recorded + count])
            if updates[0].device.type == "cpu":
                for row, update in zip(kept, updates):
                    torch.mul(update, scale, out=row)
            else:
                kept.copy_(torch.mul(torch.stack(updates), scale).to(torch.float32))
            self._recorded += count
        if self._step_sums is not None:
            self._check_sums(updates, scale=scale)
        for update, (z, q) in zip(updates, self._waiting_costs):
            self._sums.add(update, contribution=1 / scale, noise_std=self._noise_std(z) / scale, rate=q)
            self._noise_multipliers.append(z)
            self._sample_rates.append(q)
        self._waiting_costs = []

    def _check_sums(self, updates: list[torch.Tensor], *, scale: float) -> None:
        """The parameter checks' sums of the steps released as ``updates`` (the next rows of ``step_sums``): per step,
        over the first canaries, the released u's members' and non-members' Σu by one matrix–vector product with their
        0/1 weights, and the non-members' Σu² as the squares' product with theirs, in the block's dtype (float32 for a
        float32 model, as the statistics' partial sums: about 1e-7·√M relative, far below the sums' spread between
        steps); then x = u·``scale`` in float64. Three passes over a step's M values in their own dtype, not over
        float64 copies of twice their size (what they add to a training loop: ``benchmarks/whole_run_overhead.py``)."""
        assert self._step_sums is not None and self._check_work is not None  # attach makes both
        weights, (sums, squares) = self._check_weights, self._check_work
        first, covered = len(self._noise_multipliers), weights.shape[1]
        for row, update in zip(sums[: len(updates)], updates, strict=True):  # at most the waiting steps (attach)
            head = update[:covered].to(weights.dtype)
            torch.mv(weights, head, out=row[:2])
            torch.mul(head, head, out=squares)
            torch.dot(squares, weights[1], out=row[2])
        rows = self._step_sums[first : first + len(updates)]
        rows.copy_(sums[: len(updates)])
        rows[:, :2] *= scale  # scalars: no host-to-device copy on a GPU
        rows[:, 2] *= scale * scale

    @overload
    def _noise_std(self, z: float) -> float: ...
    @overload
    def _noise_std(self, z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...
    def _noise_std(self, z: float | npt.NDArray[np.float64]) -> float | npt.NDArray[np.float64]:
        """σ_t = z_t·C/c: the noise std of the normalised observations at noise multiplier ``z``."""
        return z * self.clip_norm / self.contribution

    def end_epoch(self, *, epoch: int) -> None:
        """Sum the waiting steps; write the statistics (and kept observations) so far to ``path`` (if any) at the last
        epoch, and before it every ``save_every`` seconds."""
        self._sum_waiting()
        now = time.perf_counter()
        # before the last epoch, at most one write per save_every seconds, and (at millions of canaries, where one
        # write takes seconds) at most 1 % of the time in writes (the training state holds them for a resume)
        wait = max(self.save_every, 100 * self._save_seconds)
        if self.path is None or (epoch < self.epochs and now - self._saved_at < wait):
            return
        self.result().save(self.path)
        self._saved_at = time.perf_counter()
        self._save_seconds = self._saved_at - now

    def result(self) -> RunCanaryObservations:
        self._sum_waiting()
        z = np.array(self._noise_multipliers, dtype=float)
        sums = self._sums.result()
        return RunCanaryObservations(
            members=self.members.copy(),
            observations=self._observations[: self._recorded] if self.keeps_observations else None,
            all_iterates_scores=sums[0],
            final_model_scores=sums[1],
            standardised_sum=sums[2],
            standardised_sum_of_squares=sums[3],
            noise_multipliers=z,
            sample_rates=np.array(self._sample_rates, dtype=float),
            noise_std=self._noise_std(z),
            clip_norm=self.clip_norm,
            magnitude=self.magnitude,
            contribution=self.contribution,
            batch_size=self.batch_size,
            sampling=self.sampling,
            sampled=np.array(self._sampled, dtype=np.int64),
            step_sums=None if self._step_sums is None else self._step_sums[: z.size].cpu().numpy().copy(),
        )
