"""Statistics and lower bounds of a whole-run audit of DP-SGD with Dirac canaries.

The audit game: each of M canaries is a member with probability ½. A member joins the batch of step t
with probability q_t (Poisson sampling); its gradient is a Dirac of norm C on a coordinate of its own,
and the optimizer adds Gaussian noise of standard deviation z_t·C. Normalised so that a present canary
contributes exactly 1, the released update of the canary's coordinate at step t is

    x_t = B_t + N(0, z_t²),   B_t ~ Bernoulli(q_t) for a member, B_t ≡ 0 for a non-member,

independently over steps and canaries. From the observations x = (x_1, …, x_T) of every canary:

* :func:`likelihood_ratio_scores`: Λ = Σ_t log(1 − q_t + q_t·exp((x_t − ½)/z_t²)), the log likelihood
  ratio of member against non-member — the Neyman–Pearson optimal statistic when all iterates are seen;
  its ceiling is the accountant's (PLD) ε;
* :func:`final_model_scores`: Σ_t x_t, what the final model reveals (plain SGD without momentum: the
  final coordinate is a multiple of it); its ceiling is the last-iterate heuristic ε
  (:func:`dpaudit.theory.tradeoff.last_iterate_epsilon`);
* :func:`spread_scores`: Σ_t (x_t/z_t − mean)², each canary's spread over the steps, a test of the noise's
  independence across steps (a non-member's is χ²_{T−1} under the mechanism, 0 if one noise draw is reused at
  every step); no ceiling from the subsampled-Gaussian family, only the assumption-free bound applies;
* :func:`family_lower_bound`: a lower bound on ε valid if the mechanism's trade-off curve lies in the
  family of composed Poisson-subsampled Gaussians with the run's q_t and T (and any noise scale);
  the assumption-free bound is :func:`dpaudit.estimate.epsilon_lower_bound` on the same scores;
* :func:`simulate_observations`, :func:`simulate_scores`: exact draws of the game, for tests and benchmarks
  (:func:`simulate_scores` streams over the steps: no [M, T] array).

ε is in nats, δ a probability, z = σ/C, q a probability in (0, 1], T the number of steps. ``dp_accounting``
loads only inside the functions that need it; importing this module loads scipy (through ``dpaudit.theory``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from dpaudit._validation import (
    DPAuditError,
    check_confidence,
    check_count,
    check_delta,
    check_probability,
    check_scores,
    check_seed,
    check_split_sizes,
)
from dpaudit.estimate import ScoreCounts, clopper_pearson_upper
from dpaudit.theory import accounting
from dpaudit.theory.tradeoff import StepGroup, TradeoffLowerBound, group_steps, sgm_epsilon, sgm_tradeoff

if TYPE_CHECKING:
    import torch

#: Share of each class's canaries that choose the family bound's threshold (the rest certify it), and the
#: Clopper–Pearson level at which each candidate threshold's counts are judged while choosing. Stricter than the
#: certificate's α/2, it keeps a threshold deep in a tail, whose few counts make its selection-part bound noisy,
#: from winning on luck and then failing on the certifying part. Both were chosen on exact simulations
#: (benchmarks/family_selection.py, results in benchmarks/results/family_selection.json), never on audited runs.
SELECTION_SHARE = 0.3
SELECTION_ALPHA = 1e-3

#: ``selection="ledger"``: canaries per side of the simulation of the ledger's own mechanism on which the
#: threshold is chosen (its scores' rates estimate each candidate's to ≈ 1/√(4·10⁵) ≈ 0.002 or better), the
#: simulation's seed (fixed: the threshold is a function of the ledger alone), and the number of candidate
#: thresholds (quantiles of the simulation's pooled scores).
LEDGER_REFERENCE_SIZE = 400_000
LEDGER_REFERENCE_SEED = 0
LEDGER_CANDIDATES = 2047
#: The statistics whose simulation ``selection="ledger"`` can draw: Λ and Σ_t x_t.
STATISTICS = ("all-iterates", "final-model")
#: What a family bound is, as reports label it: a test of the ledger's parameters, not what an adversary demonstrates
#: without that assumption (the assumption-free bounds, ``dpaudit.privacy_profile``).
FAMILY_TEST = "test of the ledger's σ, q and T"
FAMILY_LABEL = (
    f"{FAMILY_TEST}: a lower bound on ε only if the run is a composed Poisson-subsampled Gaussian with its q_t and T"
)

#: PLD discretisation (nats) of the hypotheses' privacy profiles: an upper estimate of δ(ε), so coarser
#: only makes the test more conservative (it costs ≈ 0.3 % of ε at T = 100–200).
HYPOTHESIS_DISCRETIZATION = 1e-2
#: Spacing (nats) of the ε grid whose (ε, δ(ε)) constraints each hypothesis is tested against.
HYPOTHESIS_EPSILON_STEP = 0.01
#: Coarsest PLD discretisation of the lower (optimistic) estimate of the rejected hypothesis' ε.
REPORT_DISCRETIZATION = 1e-4
#: The hypothesis grid spans ε ≈ 0.01 … min(4·ε_run, 30) (at least 1.25·ε_run).
EPSILON_GRID_FLOOR = 0.01
EPSILON_GRID_CAP = 30.0

_ROWS_PER_CHUNK = 1 << 20  # observations converted to scores at a time (elements), to bound temporaries


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------


def _check_observations(observations: npt.ArrayLike, steps: int | None = None) -> npt.NDArray[np.float64]:
    try:
        array = np.asarray(observations, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError("observations must be a 2-D array of numbers [canaries, steps]") from None
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise DPAuditError(f"observations must be a non-empty 2-D array [canaries, steps], got shape {array.shape}")
    if steps is not None and array.shape[1] != steps:
        raise DPAuditError(f"observations have {array.shape[1]} steps but the ledger has {steps}")
    if not np.all(np.isfinite(array)):
        raise DPAuditError("observations must be finite (no NaN or inf)")
    return array


def _ledger(
    noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)  # one-line errors
    return np.asarray(noise_multipliers, dtype=float), np.asarray(sample_rates, dtype=float)


# ----------------------------------------------------------------------------------------------
# Scores
# ----------------------------------------------------------------------------------------------


_EXP_CAP = 700.0  # step_log_ratio: the largest exponent it exponentiates (e^700 ≈ 1e304)


@overload
def step_log_ratio(x: torch.Tensor, z: float, q: float) -> torch.Tensor: ...
@overload
def step_log_ratio(x: npt.NDArray[np.float64], z: npt.ArrayLike, q: npt.ArrayLike) -> npt.NDArray[np.float64]: ...
def step_log_ratio(
    x: torch.Tensor | npt.NDArray[np.float64],
    z: Any,  # a number for a tensor x, numbers or arrays for an array x (the overloads)
    q: Any,
) -> torch.Tensor | npt.NDArray[np.float64]:
    """log(1 − q + q·exp((x − ½)/z²)), elementwise and stable; exactly (x − ½)/z² where q = 1.

    One step's term of :func:`likelihood_ratio_scores`. The online sums of the canaries during training
    (``dpaudit._online.OnlineSums``) compute it in float32, and with this function where an exponent would exceed
    float32's range.

    Args:
        x: normalised observations: a numpy array, or a float64 torch tensor (then z and q are numbers and the
            term is computed by torch on the tensor's device).
        z: the noise std(s), > 0, broadcasting against ``x`` (numpy) or a number (torch).
        q: the sample rate(s), in (0, 1], broadcasting against ``x`` (numpy) or a number (torch).

    Returns:
        The terms, of the type and shape of ``x``.
    """
    torch = sys.modules.get("torch")  # loaded by a caller passing a tensor; never imported here
    if torch is not None and isinstance(x, torch.Tensor):  # on x's device, in place on one new tensor
        u = x - 0.5
        u.div_(float(np.square(z)))
        q = float(q)
        if q >= 1.0:
            return u
        # log(1 − q + q·e^u) = log(1 − q + q·e^min(u, L)) + max(u − L, 0) up to a factor 1 + (1 − q)/(q·e^L) in
        # the ratio (L = 700: e^L is finite), i.e. exact in float64: one exp and one log (torch's logaddexp costs
        # about as much again on the CPU); where 1 − q + q·e^u rounds near 1 its log is off by ≲ 1e-16, absolute
        if u.device.type == "cpu" and float(u.max()) <= _EXP_CAP:  # nothing to cap (the usual case; on the CPU the
            # max is one pass and no device wait): the terms below, whose correction adds zeros, in 3 passes fewer
            return u.exp_().mul_(q).add_(1.0 - q).log_()
        terms = u.clamp(max=_EXP_CAP)
        terms.exp_().mul_(q).add_(1.0 - q).log_()
        return terms.add_(u.sub_(_EXP_CAP).clamp_(min=0.0))
    u = (x - 0.5) / np.square(z)
    q = np.broadcast_to(q, u.shape)
    full = q >= 1.0
    with np.errstate(divide="ignore"):
        mixed = np.logaddexp(np.log1p(-q), np.log(q) + u)
    return np.where(full, u, mixed)


def likelihood_ratio_scores(
    observations: npt.ArrayLike, *, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Λ_i = Σ_t log(1 − q_t + q_t·exp((x_{i,t} − ½)/z_t²)): the log likelihood ratio member vs non-member.

    A member's x_t has density (1 − q_t)·φ_z(x_t) + q_t·φ_z(x_t − 1), a non-member's φ_z(x_t) (φ_z the
    N(0, z_t²) density); the ratio of the two is 1 − q_t + q_t·exp((x_t − ½)/z_t²) and the steps are
    independent, so Λ is the Neyman–Pearson optimal statistic of the whole run when every iterate is seen.
    Computed as logaddexp(log(1 − q_t), log q_t + u_t) with u_t = (x_t − ½)/z_t² (exactly u_t where q_t = 1).

    Args:
        observations: [M, T] normalised per-step canary updates x_{i,t} (finite).
        noise_multipliers: z_t per step, finite and > 0 (length T).
        sample_rates: q_t per step, in (0, 1] (length T).

    Returns:
        Λ, a float array of length M (higher = more likely member).

    Raises:
        DPAuditError: a bad ledger, observations that are not a finite [M, T] array with T ledger steps.
    """
    z, q = _ledger(noise_multipliers, sample_rates)
    x = _check_observations(observations, z.size)
    scores = np.empty(x.shape[0])
    rows = max(1, _ROWS_PER_CHUNK // x.shape[1])
    for start in range(0, x.shape[0], rows):
        scores[start : start + rows] = step_log_ratio(x[start : start + rows], z, q).sum(axis=1)
    return scores


def final_model_scores(observations: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Σ_t x_{i,t}: the canary coordinate's total update, the statistic of the last-iterate threat model.

    For plain SGD without momentum the final value of the canary's coordinate is −(learning rate)·C times
    this sum (plus its initial value), so an attacker who sees only the final model sees exactly this. Its
    member/non-member pair is Binomial(T, q) + N(0, z²T) against N(0, z²T) for constant z and q.

    Args:
        observations: [M, T] normalised per-step canary updates (finite).

    Returns:
        A float array of length M (higher = more likely member).

    Raises:
        DPAuditError: observations that are not a finite non-empty 2-D array.
    """
    return _check_observations(observations).sum(axis=1)


def spread_scores(
    *,
    noise_std: npt.ArrayLike,
    observations: npt.ArrayLike | None = None,
    standardised_sum: npt.ArrayLike | None = None,
    standardised_sum_of_squares: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """S_j = Σ_t (y_tj − ȳ_j)² with y_tj = x_tj/σ_t: each canary's spread over the steps, a test of the noise's
    independence across steps.

    Under the mechanism, y_t = B_t/σ_t + ξ_t with ξ_t ~ N(0, 1) independent over steps, so a non-member's S is
    exactly χ² with T − 1 degrees of freedom (mean T − 1, variance 2(T − 1)) whatever the schedule σ_t, and a
    member's adds Σ_t (B_t/σ_t − mean)², ≈ T·q(1 − q)/σ² for constant σ and q. If the noise's standard draw ξ is
    drawn once and reused at every step (scaled by each step's σ_t), y_t − y_s = B_t/σ_t − B_s/σ_s: every
    non-member's S is 0 and a member's is the spread of its presences alone, so members and non-members separate
    perfectly. Higher = more likely member in both cases. The standardisation by σ_t is what makes S exactly 0 under
    reuse when σ_t varies (for constant σ it only scales S). Computed as Q − s²/T from the sums s = Σ_t y_t and
    Q = Σ_t y_t² (a training run sums them online: ``RunCanaryObservations.standardised_sum`` and
    ``standardised_sum_of_squares``), clipped at 0 against rounding.

    Args:
        noise_std: σ_t per step, finite and > 0 (length T), in the units of the observations.
        observations: [M, T] normalised per-step canary updates x_tj (finite); or give both sums instead.
        standardised_sum: [M] Σ_t x_tj/σ_t, with ``standardised_sum_of_squares``, instead of ``observations``.
        standardised_sum_of_squares: [M] Σ_t x_tj²/σ_t².

    Returns:
        S, a float array of length M (dimensionless, in units of the noise variance; higher = more likely member).

    Raises:
        DPAuditError: a σ_t that is not finite and > 0, both or neither of ``observations`` and the two sums, sums
            that are not finite [M] arrays of the same shape, observations that are not a finite [M, T] array.
    """
    try:
        sigma = np.asarray(noise_std, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError("noise_std must be a 1-D array of numbers (σ_t per step)") from None
    if sigma.ndim != 1 or sigma.size == 0 or not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
        raise DPAuditError("noise_std must be a non-empty 1-D array of finite σ_t > 0")
    sums_given = standardised_sum is not None or standardised_sum_of_squares is not None
    if (observations is not None) == sums_given:
        raise DPAuditError("give exactly one of observations [M, T] and the two standardised sums")
    if observations is not None:
        standardised = _check_observations(observations, sigma.size) / sigma
        total, squares = standardised.sum(axis=1), np.square(standardised).sum(axis=1)
    else:
        if standardised_sum is None or standardised_sum_of_squares is None:
            raise DPAuditError("give both standardised_sum and standardised_sum_of_squares")
        total = np.asarray(standardised_sum, dtype=float)
        squares = np.asarray(standardised_sum_of_squares, dtype=float)
        if total.ndim != 1 or total.shape != squares.shape:
            raise DPAuditError(
                f"the standardised sums must be two [M] arrays of one shape, got {total.shape} and {squares.shape}"
            )
        if not (np.all(np.isfinite(total)) and np.all(np.isfinite(squares))):
            raise DPAuditError("the standardised sums must be finite (no NaN or inf)")
    return np.maximum(squares - np.square(total) / sigma.size, 0.0)


# ----------------------------------------------------------------------------------------------
# Simulation of the game
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SimulatedScores:
    """Both statistics of simulated canaries (see :func:`simulate_scores`).

    Attributes:
        member_lr: Λ of the member canaries (:func:`likelihood_ratio_scores`), length M.
        nonmember_lr: Λ of the non-member canaries, length N.
        member_sum: Σ_t x_t of the members (:func:`final_model_scores`).
        nonmember_sum: Σ_t x_t of the non-members.
    """

    member_lr: npt.NDArray[np.float64]
    nonmember_lr: npt.NDArray[np.float64]
    member_sum: npt.NDArray[np.float64]
    nonmember_sum: npt.NDArray[np.float64]


def _simulated_steps(
    members: int, nonmembers: int, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike, seed: int
) -> Iterator[tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    """Yield (t, member x_t, non-member x_t) step by step; the one random stream of both simulators."""
    z, q = _ledger(noise_multipliers, sample_rates)
    members = check_count("members", members, allow_zero=False)
    nonmembers = check_count("nonmembers", nonmembers, allow_zero=False)
    seed = check_seed(seed)
    rng = np.random.default_rng(seed)
    for t in range(z.size):
        present = rng.random(members) < q[t]
        member_x = present + z[t] * rng.standard_normal(members)
        nonmember_x = z[t] * rng.standard_normal(nonmembers)
        yield t, member_x, nonmember_x


def simulate_observations(
    *, members: int, nonmembers: int, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike, seed: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Draw the observations of the whole-run canary game exactly (float64).

    At step t, in this order from ``np.random.default_rng(seed)``: the members' Bernoulli(q_t) presences
    (uniform < q_t), the members' N(0, z_t²) noise, the non-members' noise. :func:`simulate_scores` uses
    the same stream, so its scores equal those computed from these observations.

    Args:
        members: M ≥ 1 member canaries.
        nonmembers: N ≥ 1 non-member canaries.
        noise_multipliers: z_t per step, finite and > 0 (length T).
        sample_rates: q_t per step, in (0, 1] (length T).
        seed: non-negative integer seed.

    Returns:
        ``(member_observations [M, T], nonmember_observations [N, T])``; memory 8·(M + N)·T bytes — use
        :func:`simulate_scores` for large runs.

    Raises:
        DPAuditError: a bad ledger, counts < 1, a negative or non-integer seed.
    """
    steps = np.asarray(noise_multipliers).size
    member_obs = nonmember_obs = np.empty((0, steps))  # replaced at the first step (a ledger has at least one)
    for t, member_x, nonmember_x in _simulated_steps(members, nonmembers, noise_multipliers, sample_rates, seed):
        if t == 0:
            member_obs = np.empty((member_x.size, steps))
            nonmember_obs = np.empty((nonmember_x.size, steps))
        member_obs[:, t] = member_x
        nonmember_obs[:, t] = nonmember_x
    return member_obs, nonmember_obs


def simulate_scores(
    *, members: int, nonmembers: int, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike, seed: int
) -> SimulatedScores:
    """Simulate the game and return Λ and Σ_t x_t of every canary, streaming over steps (memory O(M + N)).

    Same random stream as :func:`simulate_observations`: the result equals
    :func:`likelihood_ratio_scores` and :func:`final_model_scores` of its observations (up to summation order).

    Args:
        members: M ≥ 1 member canaries.
        nonmembers: N ≥ 1 non-member canaries.
        noise_multipliers: z_t per step, finite and > 0 (length T).
        sample_rates: q_t per step, in (0, 1] (length T).
        seed: non-negative integer seed.

    Returns:
        A :class:`SimulatedScores`.

    Raises:
        DPAuditError: a bad ledger, counts < 1, a negative or non-integer seed.
    """
    z, q = _ledger(noise_multipliers, sample_rates)
    sums: list[npt.NDArray[np.float64]] = []  # filled at the first step (a ledger has at least one)
    for t, member_x, nonmember_x in _simulated_steps(members, nonmembers, noise_multipliers, sample_rates, seed):
        if not sums:
            sums = [
                np.zeros(member_x.size),
                np.zeros(nonmember_x.size),
                np.zeros(member_x.size),
                np.zeros(nonmember_x.size),
            ]
        sums[0] += step_log_ratio(member_x, z[t], q[t])
        sums[1] += step_log_ratio(nonmember_x, z[t], q[t])
        sums[2] += member_x
        sums[3] += nonmember_x
    return SimulatedScores(*sums)


# ----------------------------------------------------------------------------------------------
# Family (composed SGM) lower bound
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyBound:
    """A lower bound on ε under the assumption that the run is a composed Poisson-subsampled Gaussian.

    Attributes:
        epsilon: the bound in nats (0 when no hypothesis is rejected). A lower estimate of the ε at ``delta``
            of the rejected hypothesis with the least noise.
        capped: True when even the strongest (least private) hypothesis on the grid was rejected; then
            ``epsilon`` is the grid's cap, not a measurement, and the true bound may be larger.
        noise_scale: s of the rejected hypothesis (noise multipliers s·z_t); inf when nothing is rejected.
        threshold: the certified threshold (score ≥ threshold predicts member).
        false_positives: FP of the threshold on the certifying half of the non-members.
        false_negatives: FN of the threshold on the certifying half of the members.
        fpr_upper: Clopper–Pearson upper bound on FPR (α/2).
        fnr_upper: Clopper–Pearson upper bound on FNR (α/2).
        n_members: member scores in the certifying half.
        n_nonmembers: non-member scores in the certifying half.
        delta: the δ at which ε is read.
        confidence: 1 − α.
        epsilon_cap: ε (PLD upper estimate) of the strongest hypothesis tested: the most this bound can show.
        hypotheses: number of noise scales tested.
        method: one sentence saying what was rejected and what it assumes.
    """

    epsilon: float
    capped: bool
    noise_scale: float
    threshold: float
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float
    epsilon_cap: float
    hypotheses: int
    method: str

    def __float__(self) -> float:
        return self.epsilon


class _Hypotheses:
    """The grid of hypotheses H_s of one ledger: increasing noise scales s, and their trade-off lower bounds,
    each built when first asked for (:meth:`curve`): a bound needs the curves of a bisection, not the grid's."""

    def __init__(self, groups: tuple[StepGroup, ...], delta: float, scales: npt.NDArray[np.float64]) -> None:
        self.groups, self.delta, self.scales = groups, delta, scales
        self._curves: dict[int, TradeoffLowerBound] = {}

    def curve(self, index: int) -> TradeoffLowerBound:
        """The trade-off lower bound of H_{scales[index]}."""
        if index not in self._curves:
            self._curves[index] = _curve(self.groups, float(self.scales[index]))
        return self._curves[index]

    @property
    def epsilon_cap(self) -> float:
        """ε (PLD upper estimate at δ, coarse) of the strongest hypothesis: the most a bound can show."""
        return _profile_epsilon(self.curve(0), self.delta)


#: the noise scales s (of the ledger's z) the family bound's scout may try: beyond them ε(s) is numerically 0 or ∞
SCALE_RANGE = (2.0**-40, 2.0**40)


def _scaled(groups: tuple[StepGroup, ...], scale: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per-step (z·scale, q) arrays of grouped steps."""
    counts = [count for _, _, count in groups]
    z = np.repeat([g[0] * scale for g in groups], counts)
    q = np.repeat([g[1] for g in groups], counts)
    return z, q


def _epsilon_of_scale(groups: tuple[StepGroup, ...], scale: float, delta: float) -> float:
    z, q = _scaled(groups, scale)
    return sgm_epsilon(noise_multipliers=z, sample_rates=q, delta=delta, discretization=HYPOTHESIS_DISCRETIZATION)


def _rdp_epsilon_of_scale(groups: tuple[StepGroup, ...], scale: float, delta: float) -> float:
    z, q = _scaled(groups, scale)
    return accounting.epsilon(noise_multiplier=z, sample_rate=q, delta=delta)


def _curve(groups: tuple[StepGroup, ...], scale: float) -> TradeoffLowerBound:
    z, q = _scaled(groups, scale)
    return sgm_tradeoff(
        noise_multipliers=z,
        sample_rates=q,
        epsilon_step=HYPOTHESIS_EPSILON_STEP,
        discretization=HYPOTHESIS_DISCRETIZATION,
    )


def _profile_epsilon(curve: TradeoffLowerBound, delta: float) -> float:
    """The first grid ε with δ(ε) ≤ delta (an upper estimate within one grid step)."""
    below = curve.deltas <= delta
    return float(curve.epsilons[np.argmax(below)]) if below.any() else math.inf


@lru_cache(maxsize=8)
def _hypotheses(groups: tuple[StepGroup, ...], delta: float, grid: int) -> _Hypotheses:
    """Build (once per ledger, δ and grid size) the hypotheses H_s and their trade-off lower bounds.

    The noise scales span s_min, with ε(s_min) ≈ min(4·ε_run, 30) (at least 1.25·ε_run), to s_max with
    ε(s_max) ≈ 0.01. They are placed by their ε (log-spaced; s read off a scout table of ε(s) at s = √2^k,
    k = 0, ±1, … until it spans both ends, interpolated log-log: ε(s) is smooth). The scout table is the RDP ε
    rescaled to agree with the PLD ε at s = 1: a PLD composition costs about a second per distinct step on a
    ledger whose noise changes, RDP milliseconds, and the placement needs only the shape of ε(s):
    a sixth of the grid over [0.01, ε_run/4], half over [ε_run/4, 1.5·ε_run] (≈ 2 % apart for the default
    grid, where a good audit's bound lies), a third over [1.5·ε_run, ε(s_min)] (where an audit of a run
    with under-stated noise lands). The grid depends on the ledger only, never on the scores.
    """
    eps_pld = _epsilon_of_scale(groups, 1.0, delta)
    rdp_at_one = _rdp_epsilon_of_scale(groups, 1.0, delta)
    # where either ε is 0 at s = 1 (a δ so large that ε reaches 0) the rescaled RDP says nothing: PLD alone
    ratio = eps_pld / rdp_at_one if rdp_at_one > 0 else 0.0

    def scout_epsilon(scale: float) -> float:
        if not 0 < ratio < math.inf:
            return _epsilon_of_scale(groups, scale, delta)
        try:
            return ratio * _rdp_epsilon_of_scale(groups, scale, delta)
        except DPAuditError:  # RDP infinite at every order (z near 0): no finite ε there
            return math.inf

    table: dict[float, float] = {1.0: eps_pld}  # the scout table s → ε(s)
    eps_run = max(table[1.0], 4 * EPSILON_GRID_FLOOR)
    eps_hi = max(min(4 * eps_run, EPSILON_GRID_CAP), 1.25 * eps_run)
    ends = ((1 / math.sqrt(2), lambda eps: eps >= eps_hi), (math.sqrt(2), lambda eps: eps <= EPSILON_GRID_FLOOR))
    for factor, reached in ends:
        scale, eps = 1.0, table[1.0]
        while not reached(eps):
            scale *= factor
            if not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
                goal = f"up to {eps_hi:.3g}" if factor < 1 else f"down to {EPSILON_GRID_FLOOR:g}"
                raise DPAuditError(
                    f"the family bound cannot place its hypotheses at δ = {delta:g}: no noise scale in "
                    f"[{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}] of the ledger's brings its ε {goal} "
                    "(choose a δ nearer the usual 1e-5)"
                )
            eps = table[scale] = scout_epsilon(scale)
    scout = np.array(sorted(table))
    scout_eps = np.array([table[s] for s in scout])
    low, upper = max(grid // 6, 1), max(grid // 3, 1)
    middle = max(grid - low - upper, 1)
    targets = np.concatenate(
        [
            np.geomspace(EPSILON_GRID_FLOOR, eps_run / 4, low, endpoint=False),
            np.geomspace(eps_run / 4, 1.5 * eps_run, middle, endpoint=False),
            np.geomspace(1.5 * eps_run, eps_hi, upper),
        ]
    )
    usable = scout_eps > 0  # ε decreases in s: interpolate log s against log ε (ascending ε)
    order = np.argsort(scout_eps[usable])

    def scale_at(epsilons: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.exp(np.interp(np.log(epsilons), np.log(scout_eps[usable][order]), np.log(scout[usable][order])))

    s_min, s_max = scale_at([eps_hi, EPSILON_GRID_FLOOR])
    placed = scale_at(targets)
    scales = np.unique(np.concatenate([[s_min, s_max], np.clip(placed, s_min, s_max)]))
    return _Hypotheses(groups, delta, scales)


@lru_cache(maxsize=256)
def _reported_epsilon(groups: tuple[StepGroup, ...], scale: float, delta: float) -> float:
    """A lower estimate of the true ε at δ of H_scale (what the bound reports).

    dp_accounting's lower (optimistic, privacy-buckets) PLD rounds each step's privacy loss down by less
    than its discretisation d, so it sits about T·d/2 below the true ε; d is chosen so that this is ≤ 1 % of
    the RDP ε, an upper bound (within [1e-5, 1e-4] nats; finer costs a PLD of proportionally more points).
    """
    z, q = _scaled(groups, scale)
    upper = _rdp_epsilon_of_scale(groups, scale, delta)
    step = min(REPORT_DISCRETIZATION, max(1e-5, 0.02 * upper / z.size))
    lower = sgm_epsilon(noise_multipliers=z, sample_rates=q, delta=delta, discretization=step, estimate="lower")
    return min(lower, upper)


def _first_rejected(
    hypotheses: _Hypotheses, rejects: Callable[[TradeoffLowerBound, bool], npt.NDArray[np.bool_]], points: int
) -> tuple[int, npt.NDArray[np.bool_]]:
    """The smallest noise scale's index whose hypothesis some of the ``points`` rejects (the grid's size if none),
    and which points reject it. ``rejects(curve, exact)`` says which points lie below a hypothesis's trade-off
    curve; with ``exact`` False it may leave some out, as long as it finds one where there is one.

    A point that rejects H_s rejects every H_s' with s' > s (more noise only raises the trade-off curve), so
    "some point rejects H_{scales[i]}" is monotone in i and a bisection over the grid finds the smallest such i
    with about log₂(grid) curves instead of one per scale. Its rejecting points are exactly those whose own
    smallest rejected scale it is, since none rejects a smaller one.
    """
    count = hypotheses.scales.size
    lo, hi = 0, count  # invariant: no point rejects a scale below lo; some point rejects scales[hi] (hi < count)
    while lo < hi:
        middle = (lo + hi) // 2
        if rejects(hypotheses.curve(middle), False).any():
            hi = middle
        else:
            lo = middle + 1
    return lo, rejects(hypotheses.curve(lo), True) if lo < count else np.zeros(points, dtype=bool)


def _split(
    scores: npt.NDArray[np.float64], share: float, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(selection part, certifying part) of one class: a permutation drawn from ``rng``, its first
    round(share·n) scores (at least one, at most n − 1) and the rest."""
    order = rng.permutation(scores.size)
    size = min(max(1, round(share * scores.size)), scores.size - 1)
    return scores[order[:size]], scores[order[size:]]


#: Every this many candidates :func:`_candidate_test` inverts first; the rest only where they could reject.
_CANDIDATE_STRIDE = 64


def _candidate_test(
    fp: npt.NDArray[np.int64], n_nonmembers: int, fn: npt.NDArray[np.int64], n_members: int, level: float
) -> Callable[[TradeoffLowerBound, bool], npt.NDArray[np.bool_]]:
    """``(curve, exact) → curve.rejects(FPR_u, FNR_u)`` on the candidates, their Clopper–Pearson upper bounds (at
    ``level``) FPR_u of FP among ``n_nonmembers`` and FNR_u of FN among ``n_members``, each inverted only where needed
    (for :func:`_first_rejected`).

    Where the counts are monotone along the candidates (as a threshold's are), every
    :data:`_CANDIDATE_STRIDE`-th candidate (and the last) is inverted first; if one of them rejects the curve and
    ``exact`` is False, that is the answer. Otherwise: between two of them the counts lie between theirs, so each
    candidate's FPR_u and FNR_u are at least the two's smaller ones (the bounds grow with the count); the trade-off
    curve β is non-increasing, so no candidate there lies below it unless the smaller FNR_u is below β at the smaller
    FPR_u, with a margin of 1e-9 for rounding. Only such gaps are inverted, so the rejecting candidates are exactly
    those of every bound (each count's bound is the same inversion)."""
    size = fp.size
    fpr_u, fnr_u = np.full(size, np.nan), np.full(size, np.nan)  # NaN: not inverted yet

    def invert(index: npt.NDArray[np.int64]) -> None:
        new = index[np.isnan(fpr_u[index])]
        if new.size:
            fpr_u[new] = clopper_pearson_upper(fp[new], n_nonmembers, alpha=level)
            fnr_u[new] = clopper_pearson_upper(fn[new], n_members, alpha=level)

    monotone = all(np.all(np.diff(c) >= 0) or np.all(np.diff(c) <= 0) for c in (fp, fn))
    scouts = np.unique(np.r_[np.arange(0, size, _CANDIDATE_STRIDE), size - 1]) if monotone else np.arange(size)
    invert(scouts)
    left, right = scouts[:-1], scouts[1:]  # each gap between two scouts: its smallest bounds, the same for every curve
    floor_fpr, floor_fnr = np.minimum(fpr_u[left], fpr_u[right]), np.minimum(fnr_u[left], fnr_u[right])

    def rejects(curve: TradeoffLowerBound, exact: bool) -> npt.NDArray[np.bool_]:
        rejected = np.zeros(size, dtype=bool)
        rejected[scouts] = curve.rejects(fpr_u[scouts], fnr_u[scouts])
        if rejected.any() and not exact:
            return rejected
        open_gaps = np.flatnonzero((right > left + 1) & (floor_fnr < curve.fnr_lower(floor_fpr) + 1e-9))
        if open_gaps.size:
            invert(np.concatenate([np.arange(left[g] + 1, right[g]) for g in open_gaps.tolist()]))
        known = np.flatnonzero(~np.isnan(fpr_u))
        rejected[known] = curve.rejects(fpr_u[known], fnr_u[known])
        return rejected

    return rejects


def _best_candidate(
    hypotheses: _Hypotheses,
    fp: npt.NDArray[np.int64],
    n_nonmembers: int,
    fn: npt.NDArray[np.int64],
    n_members: int,
    youden: npt.NDArray[np.float64],
    level: float,
) -> int:
    """The candidate threshold whose Clopper–Pearson upper bounds (at ``level`` each) on FPR and FNR reject the
    smallest noise scale; ties (or nothing rejected) go to the largest TPR − FPR, then the last candidate."""
    smallest, rejecting = _first_rejected(hypotheses, _candidate_test(fp, n_nonmembers, fn, n_members, level), fp.size)
    candidates = np.flatnonzero(rejecting) if smallest < hypotheses.scales.size else np.arange(youden.size)
    return int(candidates[np.lexsort((youden[candidates],))[-1]])


@lru_cache(maxsize=16)
def _ledger_reference(
    groups: tuple[StepGroup, ...], statistic: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Candidate thresholds and their (FPR, FNR) on a simulation of the ledger's own mechanism: the quantiles of
    ``LEDGER_REFERENCE_SIZE`` simulated canaries per side (seed ``LEDGER_REFERENCE_SEED``), cached per ledger."""
    z, q = _scaled(groups, 1.0)
    reference = simulate_scores(
        members=LEDGER_REFERENCE_SIZE,
        nonmembers=LEDGER_REFERENCE_SIZE,
        noise_multipliers=z,
        sample_rates=q,
        seed=LEDGER_REFERENCE_SEED,
    )
    if statistic == "all-iterates":
        members, nonmembers = np.sort(reference.member_lr), np.sort(reference.nonmember_lr)
    else:
        members, nonmembers = np.sort(reference.member_sum), np.sort(reference.nonmember_sum)
    levels = np.linspace(0.0, 1.0, LEDGER_CANDIDATES + 2)[1:-1]
    cuts = np.unique(np.quantile(np.concatenate([members, nonmembers]), levels))
    fpr = 1.0 - np.searchsorted(nonmembers, cuts, side="left") / nonmembers.size  # score ≥ cut predicts member
    fnr = np.searchsorted(members, cuts, side="left") / members.size
    return cuts, fpr, fnr


def _ledger_threshold(
    groups: tuple[StepGroup, ...],
    statistic: str,
    hypotheses: _Hypotheses,
    n_members: int,
    n_nonmembers: int,
    level: float,
) -> float:
    """The threshold chosen on the ledger's simulation: each candidate judged by the counts its simulated rates
    predict on ``n_members`` and ``n_nonmembers`` certifying canaries, at Clopper–Pearson ``level``."""
    cuts, fpr, fnr = _ledger_reference(groups, statistic)
    false_pos = np.rint(fpr * n_nonmembers).astype(np.int64)
    false_neg = np.rint(fnr * n_members).astype(np.int64)
    best = _best_candidate(hypotheses, false_pos, n_nonmembers, false_neg, n_members, 1.0 - fnr - fpr, level)
    return float(cuts[best])


def family_lower_bound(
    member_scores: npt.ArrayLike,
    nonmember_scores: npt.ArrayLike,
    *,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
    grid: int = 192,
    selection_share: float = SELECTION_SHARE,
    selection_alpha: float = SELECTION_ALPHA,
    selection: str | Sequence[npt.ArrayLike] | None = None,
    statistic: str | None = None,
) -> FamilyBound:
    """Lower bound on ε: the largest ε whose composed-SGM hypothesis the scores reject, at confidence 1 − α.

    Hypotheses. H_s: the run is the composition over its T steps of Poisson-subsampled Gaussians with the
    run's q_t and noise multipliers s·z_t. More noise (larger s) makes every test harder, so the trade-off
    curve β_s (smallest FNR at each FPR) rises with s and ε(s) falls. A point (a, b) = (FPR upper bound,
    FNR upper bound) rejects H_s when b < β̂_s(a), where β̂_s ≤ β_s is read from the PLD's upper estimate of
    the privacy profile δ_s(ε) (:func:`dpaudit.theory.tradeoff.sgm_tradeoff`): for some ε on a grid,
    1 − b − e^ε·a > δ_s(ε) or 1 − a − e^ε·b > δ_s(ε). A strong attack rejects the *more private*
    hypotheses (large s) first; a rejected s is also rejected for every larger s. The bound is the ε of the
    least private hypothesis rejected, i.e. of the *smallest* rejected s, read conservatively (the grid rounds
    toward larger s, and ε is the PLD's lower estimate).

    Procedure. Each class is permuted with ``np.random.default_rng(seed)`` (members first); the first
    ``round(selection_share·n)`` (at least one, at most n − 1) choose the threshold, the rest certify it. On
    the selection part, every distinct threshold gets Clopper–Pearson upper bounds on FPR and FNR at
    ``selection_alpha`` each, and the threshold that rejects the smallest s wins (ties: largest TPR − FPR); it
    is placed mid-gap below its score. On the certifying part its FP and FN give Clopper–Pearson upper bounds
    at α/2 each, and the smallest rejected s on the grid gives ε. If no hypothesis is rejected, ε = 0.
    With ``selection`` (scores from an independent source, e.g. a second run of the same configuration), the
    threshold is chosen on those instead and every given score certifies it: nothing is held out.
    With ``selection="ledger"`` it is chosen before any score is read, on a simulation of the mechanism the
    ledger claims (``LEDGER_REFERENCE_SIZE`` canaries per side of the given ``statistic``, a fixed seed): each
    candidate is judged by the counts its simulated FPR and FNR predict on the certifying canaries, and again
    every given score certifies. It needs no second run and holds nothing out; it is the most powerful rule when
    the run is the mechanism it claims (on exact simulations, benchmarks/family_selection.py), but it does not
    adapt to a run that departs from its claim, as the data-driven rules do.

    Why it is valid. The threshold is fixed before the certifying half is looked at, so with probability
    ≥ 1 − α (union bound) its true FPR and FNR are at most the two upper bounds. Suppose the mechanism is
    H_{s*}. Its true (FPR, FNR) lies on or above β_{s*}, and β_{s*} is non-increasing, so the upper-bound
    point does too: it satisfies every (ε, δ_{s*}(ε)) constraint, hence also those of any s ≤ s* (their δ is
    larger, and the PLD over-estimates it). So, with probability ≥ 1 − α, no s ≤ s* is rejected: the smallest
    rejected s exceeds s*, and its ε is at most ε(s*) (H_s is H_{s*} with extra noise added, a
    post-processing). Hence ε̂ ≤ ε_true with probability ≥ 1 − α *under the family assumption*. The bound
    falsifies "the run is at least as private as the composed SGM with these q_t and noise s·z_t", not
    "(ε̂, δ)-DP" for an arbitrary mechanism; for the latter use :func:`dpaudit.estimate.epsilon_lower_bound`.

    The hypotheses are built once per (ledger, δ, grid) and cached (a few seconds for T = 200).

    Args:
        member_scores: 1-D finite member scores (higher = member), ≥ 2, one independent canary each.
        nonmember_scores: 1-D finite non-member scores, ≥ 2.
        noise_multipliers: the run's z_t per step, finite and > 0 (length T).
        sample_rates: the run's q_t per step, in (0, 1] (length T).
        delta: δ in (0, 1) at which ε is read.
        confidence: 1 − α, in (0, 1).
        seed: non-negative integer seed of the split.
        grid: number of noise scales tested, ≥ 8.
        selection_share: share of each class that chooses the threshold, in (0, 1).
        selection_alpha: the Clopper–Pearson level at which the selection part judges thresholds, in (0, 1);
            any value keeps the bound valid (only the certifying part's α/2 per side enters the guarantee).
        selection: optional ``(member_scores, nonmember_scores)`` (≥ 2 each, same statistic) on which to choose
            the threshold, independent of the scores certified: another run of the same configuration and
            canary design (its own seed); or ``"ledger"``: a simulation of the ledger's own mechanism. Then
            ``selection_share`` and ``seed`` are unused.
        statistic: with ``selection="ledger"``, which statistic the scores are: ``"all-iterates"`` (Λ of
            :func:`likelihood_ratio_scores` with these noise multipliers and q_t) or ``"final-model"`` (Σ_t x_t).

    Returns:
        A :class:`FamilyBound`; ``float(bound)`` is ε̂ in nats. Never present a ``capped`` bound as a measurement.

    Raises:
        DPAuditError: scores that are not finite 1-D arrays of ≥ 2 values, a bad ledger, δ or confidence
            outside (0, 1), a bad seed or grid, a bad ``selection``, ``selection="ledger"`` without a statistic.
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    check_split_sizes(members, nonmembers)
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    delta = check_delta(delta, allow_zero=False)
    alpha = check_confidence(confidence)
    confidence = float(confidence)
    seed = check_seed(seed)
    if check_count("grid", grid, allow_zero=False) < 8:
        raise DPAuditError(f"grid must be an integer ≥ 8, got {grid!r}")
    selection_share = check_probability("selection_share", selection_share)
    selection_alpha = check_probability("selection_alpha", selection_alpha)
    ledger_selection = isinstance(selection, str) and selection == "ledger"
    if ledger_selection and statistic not in STATISTICS:
        raise DPAuditError(f"selection='ledger' needs statistic in {STATISTICS}, got {statistic!r}")
    hypotheses = _hypotheses(groups, delta, grid)

    if ledger_selection:  # chosen before any score is read: every score certifies
        assert statistic is not None  # checked above: one of STATISTICS
        certify_m, certify_n = members, nonmembers
        cut = _ledger_threshold(groups, statistic, hypotheses, members.size, nonmembers.size, selection_alpha)
    else:
        if selection is None:  # the selection and certifying parts: members first, then non-members
            rng = np.random.default_rng(seed)
            select_m, certify_m = _split(members, selection_share, rng)
            select_n, certify_n = _split(nonmembers, selection_share, rng)
        else:
            if not isinstance(selection, (tuple, list)) or len(selection) != 2:
                raise DPAuditError(
                    "selection must be a pair (member_scores, nonmember_scores) from an independent run, or 'ledger'"
                )
            select_m = check_scores("selection member_scores", selection[0])
            select_n = check_scores("selection nonmember_scores", selection[1])
            check_split_sizes(select_m, select_n)
            certify_m, certify_n = members, nonmembers
        chosen = ScoreCounts.from_scores(member_scores=select_m, nonmember_scores=select_n)
        best = _best_candidate(
            hypotheses,
            chosen.fp,
            chosen.n_nonmembers,
            chosen.fn,
            chosen.n_members,
            chosen.tpr - chosen.fpr,
            selection_alpha,
        )
        cut = chosen.gap_threshold(best)

    false_pos = int(np.count_nonzero(certify_n >= cut))
    false_neg = int(np.count_nonzero(certify_m < cut))
    a = float(clopper_pearson_upper(false_pos, certify_n.size, alpha=alpha / 2))
    b = float(clopper_pearson_upper(false_neg, certify_m.size, alpha=alpha / 2))
    index = _first_rejected(hypotheses, lambda curve, exact: curve.rejects(a, b).reshape(1), 1)[0]
    if index < hypotheses.scales.size:
        scale = float(hypotheses.scales[index])
        epsilon = _reported_epsilon(groups, scale, delta)
    else:
        scale, epsilon = math.inf, 0.0
    method = (
        "largest ε whose composed Poisson-subsampled Gaussian hypothesis (the run's q_t and T, noise multipliers"
        f" s·z_t) is rejected at {100 * confidence:g} %; assumes the mechanism's trade-off curve lies in that family"
    )
    return FamilyBound(
        epsilon=float(epsilon),
        capped=index == 0,
        noise_scale=scale,
        threshold=float(cut),
        false_positives=false_pos,
        false_negatives=false_neg,
        fpr_upper=a,
        fnr_upper=b,
        n_members=int(certify_m.size),
        n_nonmembers=int(certify_n.size),
        delta=delta,
        confidence=confidence,
        epsilon_cap=float(hypotheses.epsilon_cap),
        hypotheses=int(hypotheses.scales.size),
        method=method,
    )


__all__ = [
    "FamilyBound",
    "SimulatedScores",
    "family_lower_bound",
    "final_model_scores",
    "likelihood_ratio_scores",
    "simulate_observations",
    "simulate_scores",
    "spread_scores",
]
