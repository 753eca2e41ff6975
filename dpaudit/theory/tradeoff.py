"""The composed Poisson-subsampled Gaussian mechanism (SGM): privacy profile, ε, trade-off curve, last iterate.

A DP-SGD run is a ledger of steps: at step t a record joins the batch with probability q_t (Poisson
sampling) and its clipped contribution (ℓ2 norm ≤ C) is released with Gaussian noise of standard
deviation z_t·C, z_t = σ_t/C being the noise multiplier. For one record, the worst case is the pair

    P_t = (1 − q_t)·N(0, z_t²) + q_t·N(1, z_t²)   (the record is in the data set)
    Q_t = N(0, z_t²)                              (it is not),

composed over the T steps. This module evaluates that pair with Google's ``dp_accounting`` privacy-loss
distributions (PLD; Koskela et al. 2020, Doroshenko et al. 2022; connect-the-dots discretisation, an
upper estimate of δ(ε) for every ε), built and composed by :mod:`dpaudit.theory._gaussian_pld` (dp_accounting's
construction with its Python loops vectorised, equal to it bit for bit):

* :func:`sgm_pld`: the PLD of the whole run, both adjacency directions (remove: P vs Q; add: Q vs P);
* :func:`sgm_epsilon`, :func:`sgm_delta`: ε at δ, and the privacy profile δ(ε) = max(H_{e^ε}(P‖Q),
  H_{e^ε}(Q‖P)) (H is the hockey-stick divergence) — the tightest accountant's guarantee;
* :func:`sgm_tradeoff`: a piecewise-linear lower bound on the run's (symmetrised) trade-off curve, read
  from the profile; what a hypothesis test of "this run is that SGM" rejects against;
* :func:`last_iterate_epsilon`: the last-iterate heuristic of Steinke et al. (ICLR 2025), a heuristic
  (not a guarantee) for a threat model that sees only the final model.

Units: ε in nats, δ a probability, z = σ/C, q a probability in (0, 1], T a number of steps.
``dp_accounting`` is imported inside the functions that need it (importing the ``dpaudit.theory`` package loads
scipy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_choice, check_count, check_delta, check_positive, check_ratio
from dpaudit.theory._gaussian_pld import compose, delta_for_epsilons, epsilon_for_delta, gaussian_pld, self_compose

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

#: One group of identical steps: (noise multiplier z, sample rate q, number of steps).
StepGroup = tuple[float, float, int]

#: δ below which the profile's lines no longer help a test (see :func:`sgm_tradeoff`).
_PROFILE_DELTA_FLOOR = 1e-12

#: Which side of the true privacy-loss distribution a PLD estimates (see :func:`sgm_pld`).
Estimate = Literal["upper", "lower"]
_ESTIMATES = ("upper", "lower")


# ----------------------------------------------------------------------------------------------
# Checks (one-line DPAuditError before any work)
# ----------------------------------------------------------------------------------------------


def _check_ledger(
    noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    arrays = []
    for name, values in (("noise_multipliers", noise_multipliers), ("sample_rates", sample_rates)):
        try:
            array = np.asarray(values, dtype=float)
        except (TypeError, ValueError):
            raise DPAuditError(f"{name} must be a 1-D sequence of numbers (one per step), got {values!r}") from None
        if array.ndim != 1 or array.size == 0:
            raise DPAuditError(f"{name} must be a non-empty 1-D sequence (one value per step), got shape {array.shape}")
        arrays.append(array)
    z, q = arrays
    if z.size != q.size:
        raise DPAuditError(f"noise_multipliers and sample_rates differ in length: {z.size} and {q.size}")
    bad = ~(np.isfinite(z) & (z > 0))
    if bad.any():
        step = int(np.argmax(bad))
        raise DPAuditError(f"noise_multipliers (z) must be finite and > 0; step {step} has {float(z[step])!r}")
    bad = ~((q > 0) & (q <= 1))
    if bad.any():
        step = int(np.argmax(bad))
        raise DPAuditError(f"sample_rates (q) must lie in (0, 1]; step {step} has {float(q[step])!r}")
    return z, q


def group_steps(*, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike) -> tuple[StepGroup, ...]:
    """Group a run's steps into (z, q, count) triples of identical steps (composition does not depend on order).

    Args:
        noise_multipliers: z_t = σ_t/C per step, each finite and > 0 (1-D, length T ≥ 1).
        sample_rates: Poisson sample rate q_t per step, each in (0, 1] (1-D, length T).

    Returns:
        A tuple of ``(z, q, count)`` sorted by (z, q); the counts sum to T. It is hashable, so it keys caches.

    Raises:
        DPAuditError: empty or non-1-D arrays, different lengths, z ≤ 0 or not finite, q outside (0, 1].
    """
    z, q = _check_ledger(noise_multipliers, sample_rates)
    pairs, counts = np.unique(np.stack([z, q], axis=1), axis=0, return_counts=True)
    return tuple((float(a), float(b), int(c)) for (a, b), c in zip(pairs, counts))


# ----------------------------------------------------------------------------------------------
# Privacy-loss distribution, ε and δ
# ----------------------------------------------------------------------------------------------


PLD_MEMORY_BUDGET = 4 << 30
"""Bytes a composed PLD may take; a ledger whose PLD would need more is refused before it is built. The need is
estimated from one step's support, about (1/z² + 8/z)/discretization points (an upper estimate for z ≥ 0.01 on the
default grid), times the steps, at :data:`_PLD_BYTES_PER_POINT` bytes per point (complex FFTs of the composition;
measured: 3.3 GiB asked at z = 0.01, q = 0.05, T = 200, where the estimate says 8 GiB)."""
_PLD_BYTES_PER_POINT = 4.0


def _pld_of_groups(
    groups: tuple[StepGroup, ...], discretization: float, estimate: str = "upper"
) -> PrivacyLossDistribution:
    """The composed PLD of checked groups: one self-composition per group, then one composition per group."""
    upper = estimate == "upper"
    needed = sum(_PLD_BYTES_PER_POINT * count * (1 / z**2 + 8 / z) / discretization for z, _, count in groups)
    if needed > PLD_MEMORY_BUDGET:
        smallest = min(z for z, _, _ in groups)
        raise DPAuditError(
            f"the PLD of this ledger would need about {needed / 2**30:.3g} GiB (noise multiplier down to "
            f"{smallest:.3g} on a {discretization:g}-nat grid, {sum(c for _, _, c in groups)} steps), over "
            f"dpaudit.theory.tradeoff.PLD_MEMORY_BUDGET = {PLD_MEMORY_BUDGET / 2**30:g} GiB: "
            "at such small noise use the RDP accountant or a coarser discretization"
        )
    composed = None
    for z, q, count in groups:
        # connect-the-dots is the tighter upper estimate; dp_accounting offers the lower (optimistic) estimate only
        # with privacy buckets
        step = gaussian_pld(z=z, q=q, discretization=discretization, upper=upper)
        if count > 1:
            # a short composition on a coarse grid (a ledger whose noise changes every epoch, in the family
            # bound's hypotheses) untruncated: exact, and it skips the Chernoff truncation bounds (40 log-MGFs a
            # call); a long or fine one keeps the truncation, without which its support, and every later operation
            # on it, would grow with the count
            exact = discretization >= 1e-2 and count <= 16
            step = self_compose(step, count=count, tail_mass_truncation=0.0 if exact else 1e-15)
        composed = step if composed is None else compose(composed, step, tail_mass_truncation=1e-15)
    return composed


def sgm_pld(
    *,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    discretization: float = 1e-3,
    estimate: Estimate = "upper",
) -> PrivacyLossDistribution:
    """Privacy-loss distribution of the composed Poisson-subsampled Gaussian mechanism (both adjacencies).

    Each distinct (z, q) builds ``dp_accounting``'s ``from_gaussian_mechanism(standard_deviation=z,
    sensitivity=1, sampling_prob=q)`` once, self-composes it over its count, and the groups are composed,
    so a constant-noise run of T steps costs one self-composition. For q < 1 the PLD keeps both the remove
    (P vs Q) and the add (Q vs P) distribution; ``get_delta_for_epsilon`` of the result returns the larger
    of the two hockey-stick divergences. For q = 1 the two coincide.

    Args:
        noise_multipliers: z_t = σ_t/C per step, finite and > 0 (1-D, length T ≥ 1).
        sample_rates: q_t per step, in (0, 1] (1-D, length T).
        discretization: the PLD's privacy-loss grid (nats), > 0; smaller is tighter and slower.
        estimate: "upper" (connect-the-dots, pessimistic: δ(ε) and ε are upper estimates, the guarantee) or
            "lower" (privacy buckets, optimistic: lower estimates, for conservative lower bounds).

    Returns:
        A ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution``.

    Raises:
        DPAuditError: a bad ledger (see :func:`group_steps`), discretization ≤ 0, unknown estimate.
    """
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    discretization = check_positive("discretization", discretization)
    return _pld_of_groups(groups, discretization, check_choice("estimate", estimate, _ESTIMATES))


def sgm_epsilon(
    *,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    delta: float,
    discretization: float = 1e-3,
    estimate: Estimate = "upper",
) -> float:
    """ε at δ of the composed Poisson-subsampled Gaussian mechanism, from its PLD (the tightest accountant).

    With ``estimate="upper"`` (default) this is an upper bound on the true ε, the run's guarantee; it is
    below the RDP accountant's ε (by about 9 % at q = 0.1, T = 200).

    Args:
        noise_multipliers: z_t = σ_t/C per step, finite and > 0 (1-D, length T ≥ 1).
        sample_rates: q_t per step, in (0, 1] (1-D, length T).
        delta: δ in (0, 1).
        discretization: the PLD's privacy-loss grid in nats, > 0.
        estimate: "upper" (guarantee) or "lower" (a lower estimate of the true ε).

    Returns:
        ε ≥ 0 in nats (``inf`` only if δ is below the PLD's truncated tail mass, about 1e-15).

    Raises:
        DPAuditError: a bad ledger, δ outside (0, 1), discretization ≤ 0, unknown estimate.
    """
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    delta = check_delta(delta, allow_zero=False)
    discretization = check_positive("discretization", discretization)
    pld = _pld_of_groups(groups, discretization, check_choice("estimate", estimate, _ESTIMATES))
    return float(epsilon_for_delta(pld, delta))


def sgm_delta(
    *,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    epsilons: npt.ArrayLike,
    discretization: float = 1e-3,
    estimate: Estimate = "upper",
) -> npt.NDArray[np.float64]:
    """The privacy profile δ(ε) = max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P)) of the composed Poisson-subsampled Gaussian.

    Args:
        noise_multipliers: z_t = σ_t/C per step, finite and > 0 (1-D, length T ≥ 1).
        sample_rates: q_t per step, in (0, 1] (1-D, length T).
        epsilons: ε values in nats (a number or a 1-D array in any order), finite and ≥ 0.
        discretization: the PLD's privacy-loss grid in nats, > 0.
        estimate: "upper" (δ(ε) upper estimates, the guarantee) or "lower".

    Returns:
        δ(ε) as a float array of the same shape as ``epsilons`` (0-d for a number), non-increasing in ε.

    Raises:
        DPAuditError: a bad ledger, non-finite or negative ε, discretization ≤ 0, unknown estimate.
    """
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    try:
        eps = np.asarray(epsilons, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError(f"epsilons must be numbers, got {epsilons!r}") from None
    if eps.ndim > 1 or eps.size == 0 or not np.all(np.isfinite(eps)) or np.any(eps < 0):
        raise DPAuditError(f"epsilons must be a number or a non-empty 1-D array of finite values ≥ 0, got {epsilons!r}")
    discretization = check_positive("discretization", discretization)
    pld = _pld_of_groups(groups, discretization, check_choice("estimate", estimate, _ESTIMATES))
    return delta_for_epsilons(pld, np.atleast_1d(eps)).reshape(eps.shape)


# ----------------------------------------------------------------------------------------------
# Trade-off curve (lower bound) from the privacy profile
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TradeoffLowerBound:
    """A convex, non-increasing, piecewise-linear lower bound β(a) on a trade-off curve (FNR against FPR).

    β(a) = max(0, max_j (1 − δ_j − e^{ε_j}·a), max_j e^{−ε_j}·(1 − δ_j − a)) over a grid of ε_j with
    δ_j = δ(ε_j) of a privacy profile. Every test of a mechanism with that profile (both directions) has
    FNR ≥ β(FPR): TPR − e^ε·FPR ≤ H_{e^ε}(P‖Q) and TNR − e^ε·FNR ≤ H_{e^ε}(Q‖P). Using a subset of ε only
    lowers β, so the bound stays valid on any grid. Stored as its upper envelope: line k (slope, intercept)
    is the maximum on [breakpoints[k−1], breakpoints[k]].

    Attributes:
        breakpoints: increasing FPR values where the maximising line changes (length K − 1).
        slopes: slope of each envelope line (length K, increasing, ≤ 0).
        intercepts: intercept of each envelope line (length K).
        epsilons: the ε grid the lines come from (nats).
        deltas: δ(ε) on that grid.
    """

    breakpoints: npt.NDArray[np.float64]
    slopes: npt.NDArray[np.float64]
    intercepts: npt.NDArray[np.float64]
    epsilons: npt.NDArray[np.float64]
    deltas: npt.NDArray[np.float64]

    def fnr_lower(self, fpr: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """β(FPR): the smallest FNR any test of the mechanism can have at this FPR (FPR in [0, 1]).

        Args:
            fpr: false-positive rate(s) in [0, 1] (number or array).

        Returns:
            β as a float array of the shape of ``fpr``.
        """
        a = np.asarray(fpr, dtype=float)
        index = np.searchsorted(self.breakpoints, a, side="left")
        return self.slopes[index] * a + self.intercepts[index]

    def rejects(self, fpr: npt.ArrayLike, fnr: npt.ArrayLike, *, tolerance: float = 1e-12) -> npt.NDArray[np.bool_]:
        """True where (FPR, FNR) lies strictly below the curve: no test of such a mechanism achieves it.

        Args:
            fpr: false-positive rate(s) in [0, 1].
            fnr: false-negative rate(s) in [0, 1], broadcast against ``fpr``.
            tolerance: margin below β required (guards against rounding; larger is more conservative).

        Returns:
            A boolean array.
        """
        return np.asarray(fnr, dtype=float) < self.fnr_lower(fpr) - tolerance


def _upper_envelope(
    slopes: npt.NDArray[np.float64], intercepts: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Upper envelope of lines y = m·x + c (max over lines): (breakpoints, slopes, intercepts) in order of x."""
    order = np.lexsort((intercepts, slopes))  # by slope, then intercept
    m_sorted, c_sorted = slopes[order], intercepts[order]
    last = np.r_[m_sorted[1:] != m_sorted[:-1], True]  # of equal slopes keep the largest intercept
    hull_m: list[float] = []
    hull_c: list[float] = []
    for m3, c3 in zip(m_sorted[last].tolist(), c_sorted[last].tolist()):
        while len(hull_m) >= 2:
            m1, c1, m2, c2 = hull_m[-2], hull_c[-2], hull_m[-1], hull_c[-1]
            # line 2 is never the maximum if line 3 overtakes line 1 no later than line 2 does
            if (c1 - c3) * (m2 - m1) <= (c1 - c2) * (m3 - m1):
                hull_m.pop()
                hull_c.pop()
            else:
                break
        hull_m.append(m3)
        hull_c.append(c3)
    m = np.asarray(hull_m)
    c = np.asarray(hull_c)
    breakpoints = (c[:-1] - c[1:]) / (m[1:] - m[:-1])
    return breakpoints, m, c


def sgm_tradeoff(
    *,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    epsilon_step: float = 0.01,
    discretization: float = 1e-2,
) -> TradeoffLowerBound:
    """A lower bound on the symmetrised trade-off curve of the composed Poisson-subsampled Gaussian.

    δ(ε) is the PLD's upper estimate (:func:`sgm_delta`) on ε = 0, ``epsilon_step``, … up to the first ε
    where δ ≤ 1e-12 (beyond it the lines add nothing a test could use); each ε gives the two lines of
    :class:`TradeoffLowerBound`. Because δ is over-estimated and only a subset of ε is used, the result is
    a valid lower bound on the true trade-off curve, for either role of the two distributions.

    Args:
        noise_multipliers: z_t = σ_t/C per step, finite and > 0 (1-D, length T ≥ 1).
        sample_rates: q_t per step, in (0, 1] (1-D, length T).
        epsilon_step: spacing of the ε grid in nats, > 0.
        discretization: the PLD's privacy-loss grid in nats, > 0.

    Returns:
        A :class:`TradeoffLowerBound`.

    Raises:
        DPAuditError: a bad ledger, epsilon_step or discretization ≤ 0.
    """
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    step = check_positive("epsilon_step", epsilon_step)
    discretization = check_positive("discretization", discretization)
    return _tradeoff_of_groups(groups, step, discretization)


def _tradeoff_of_groups(
    groups: tuple[StepGroup, ...], epsilon_step: float, discretization: float
) -> TradeoffLowerBound:
    pld = _pld_of_groups(groups, discretization)
    top = math.inf
    floor = _PROFILE_DELTA_FLOOR
    while not math.isfinite(top) and floor < 1e-3:  # δ never falls below the truncated tail mass
        top = float(epsilon_for_delta(pld, floor))
        floor *= 1e3
    if not math.isfinite(top):
        raise DPAuditError("the privacy profile does not fall below δ = 1e-3 at any ε; the run has no useful ε")
    eps = np.arange(0.0, top + 1.5 * epsilon_step, epsilon_step)
    deltas = np.minimum(delta_for_epsilons(pld, eps), 1.0)
    room = 1.0 - deltas
    slopes = np.concatenate([-np.exp(eps), -np.exp(-eps), [0.0]])
    intercepts = np.concatenate([room, np.exp(-eps) * room, [0.0]])  # the line 0 keeps β ≥ 0
    breakpoints, m, c = _upper_envelope(slopes, intercepts)
    return TradeoffLowerBound(breakpoints, m, c, eps, deltas)


# ----------------------------------------------------------------------------------------------
# Last-iterate heuristic (Steinke et al. 2025)
# ----------------------------------------------------------------------------------------------


def last_iterate_epsilon(*, noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε of the last-iterate heuristic of Steinke et al. ("The Last Iterate Advantage", ICLR 2025). A heuristic.

    It models what the final model alone reveals about one record under a linear loss: the record's
    contribution to the final parameters is P = Binomial(T, q) + N(0, z²T) if it is a member and
    Q = N(0, z²T) if not, and ε is the smallest ε ≥ 0 with max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P)) ≤ δ.
    This is a heuristic, not a guarantee: it is not an upper bound for every loss, and artificial
    counterexamples exceed it. For Dirac canaries it is exactly the ceiling of the summed statistic Σ_t x_t.

    Computed in closed form: with s² = z²T and w_k = Binomial(T, q) probabilities, the log likelihood
    ratio ℓ(x) = log Σ_k w_k exp((k·x − k²/2)/s²) is increasing in x, so {ℓ > ε} = {x > x*} and
    H(P‖Q) = Σ_k w_k Φ̄((x* − k)/s) − e^ε Φ̄(x*/s); likewise H(Q‖P) = Φ(x**/s) − e^ε Σ_k w_k Φ((x** − k)/s)
    with ℓ(x**) = −ε. x*, x** are found by Brent's method on ℓ (log-sum-exp), ε by Brent's method on δ(ε).

    Args:
        noise_multiplier: z = σ/C, the same at every step, finite and > 0.
        sample_rate: q, the same at every step, in (0, 1].
        steps: T ≥ 1.
        delta: δ in (0, 1).

    Returns:
        The heuristic ε ≥ 0 in nats.

    Raises:
        DPAuditError: a sequence for z or q (constant schedules only), z ≤ 0, q outside (0, 1], T < 1, δ
            outside (0, 1).
    """
    for name, value in (("noise_multiplier", noise_multiplier), ("sample_rate", sample_rate)):
        if np.ndim(value) != 0:
            raise DPAuditError(f"last_iterate_epsilon takes a constant {name} (a number), got a sequence")
    z = check_positive("noise_multiplier (z)", noise_multiplier)
    q = float(check_ratio("sample_rate (q)", sample_rate))
    steps = check_count("steps", steps, allow_zero=False)
    delta = check_delta(delta, allow_zero=False)
    return _last_iterate_epsilon(z, q, int(steps), delta)


def _last_iterate_epsilon(z: float, q: float, steps: int, delta: float) -> float:
    from scipy import optimize, special, stats

    s = z * math.sqrt(steps)
    k = np.arange(steps + 1, dtype=float)
    log_w = stats.binom.logpmf(k, steps, q)
    keep = log_w > -745.0  # weights that are not 0 in double precision
    k, log_w = k[keep], log_w[keep]
    # lim ℓ(x) as x → −∞: log w_0 if k = 0 has weight, else −∞ (q = 1)
    floor = float(log_w[0]) if k[0] == 0 else -math.inf

    def log_ratio(x: float) -> float:
        return float(special.logsumexp(log_w + (k * x - 0.5 * k * k) / (s * s)))

    def solve(level: float) -> float:
        """x with ℓ(x) = level (level > floor)."""
        width = s + 1.0
        lo, hi = -width, steps + width
        while log_ratio(lo) >= level:
            lo -= width
            width *= 2
        width = s + 1.0
        while log_ratio(hi) <= level:
            hi += width
            width *= 2
        return optimize.brentq(lambda x: log_ratio(x) - level, lo, hi, xtol=1e-12 * (1 + abs(hi)), rtol=1e-14)

    def difference(log_a: float, log_b: float) -> float:
        """exp(log_a) − exp(log_b), clipped at 0."""
        return 0.0 if log_b >= log_a else -math.expm1(log_b - log_a) * math.exp(log_a)

    def profile(eps: float) -> float:
        x_star = solve(eps)
        forward = difference(
            float(special.logsumexp(log_w + special.log_ndtr((k - x_star) / s))),
            eps + float(special.log_ndtr(-x_star / s)),
        )
        backward = 0.0
        if -eps > floor:  # otherwise {ℓ < −ε} is empty
            x_low = solve(-eps)
            backward = difference(
                float(special.log_ndtr(x_low / s)),
                eps + float(special.logsumexp(log_w + special.log_ndtr((x_low - k) / s))),
            )
        return max(forward, backward)

    if profile(0.0) <= delta:
        return 0.0
    hi = 1.0
    while profile(hi) > delta:
        hi *= 2.0
        if hi > 1e5:
            raise DPAuditError("last_iterate_epsilon: ε exceeds 1e5; the run is not private at this δ")
    return float(optimize.brentq(lambda eps: profile(eps) - delta, 0.0, hi, xtol=1e-9, rtol=1e-12))


__all__ = [
    "StepGroup",
    "TradeoffLowerBound",
    "group_steps",
    "last_iterate_epsilon",
    "sgm_delta",
    "sgm_epsilon",
    "sgm_pld",
    "sgm_tradeoff",
]
