"""Gaussian differential privacy (Dong, Roth & Su): δ(ε) of μ-GDP, its inverse, and the ε estimate of
Nasr et al. (2023) from membership scores (an estimate, not a bound).

ε is in nats, δ a probability, μ ≥ 0 the GDP parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpaudit._validation import check_confidence, check_delta, check_positive, check_scores
from dpaudit.estimate.bounds import BonferroniSelection
from dpaudit.estimate.counts import ScoreCounts, _best_threshold, _cp_upper


def _gdp_log_delta(mu: float, epsilon: float) -> float:
    """log δ(ε) of μ-GDP, computed in the log domain (−inf where δ underflows to 0)."""
    from scipy import special

    if mu == 0:
        return -math.inf
    first = float(special.log_ndtr(-epsilon / mu + mu / 2))
    second = epsilon + float(special.log_ndtr(-epsilon / mu - mu / 2))
    if not second < first:
        return -math.inf
    return first + math.log(-math.expm1(second - first))


def gdp_delta(*, mu: float, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su).

    Computed as exp(log Φ(a)) · (1 − exp(ε + log Φ(b) − log Φ(a))) with ``scipy.special.log_ndtr``, so it
    stays accurate in the far tail.

    Args:
        mu: the GDP parameter μ ≥ 0 (μ = 0 gives δ = 0).
        epsilon: ε ≥ 0 in nats.

    Returns:
        δ in [0, 1).

    Raises:
        DPAuditError: μ or ε negative or not finite.
    """
    mu = check_positive("mu", mu, allow_zero=True)
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    return math.exp(_gdp_log_delta(mu, epsilon))


def _gdp_epsilon(mu: float, delta: float) -> float:
    from scipy import optimize

    if mu == 0 or delta >= math.exp(_gdp_log_delta(mu, 0.0)):
        return 0.0
    target = math.log(delta)
    high = 1.0
    while _gdp_log_delta(mu, high) > target:
        high *= 2
        if high > 1e12:  # pragma: no cover - needs μ ~ 1e6
            return math.inf
    return float(
        optimize.brentq(
            lambda eps: _gdp_log_delta(mu, eps) - target,
            0.0,
            high,
            xtol=1e-12,
            rtol=4 * np.finfo(float).eps,
            maxiter=500,
        )
    )


def gdp_epsilon(*, mu: float, delta: float) -> float:
    """The ε at which a μ-GDP mechanism is (ε, δ)-DP: the root of :func:`gdp_delta` (ε) = δ.

    Args:
        mu: the GDP parameter μ ≥ 0.
        delta: δ in (0, 1) (δ = 0 is excluded: μ-GDP with μ > 0 is (ε, 0)-DP for no finite ε).

    Returns:
        ε ≥ 0 in nats; 0 when μ = 0 or δ ≥ gdp_delta(μ, 0) = 2Φ(μ/2) − 1.

    Raises:
        DPAuditError: μ negative or not finite, δ outside (0, 1).
    """
    mu = check_positive("mu", mu, allow_zero=True)
    delta = check_delta(delta, allow_zero=False)
    return _gdp_epsilon(mu, delta)


_GDP_TEXT = (
    "Gaussian-DP estimate (Nasr et al. 2023): mu from simultaneous Clopper-Pearson bounds over all "
    "thresholds, converted to epsilon at delta; assumes a Gaussian trade-off curve; not a bound"
)


@dataclass(frozen=True)
class GDPEstimate:
    """The Gaussian-DP ε estimate of Nasr et al. (2023); an estimate, not a bound.

    Attributes:
        epsilon: gdp_epsilon(μ̂, δ) in nats.
        mu: μ̂ = max_t Φ⁻¹(1 − FPR_u) − Φ⁻¹(FNR_u), clamped at 0.
        threshold: the maximising threshold (score ≥ threshold predicts member).
        fpr_upper: FPR upper bound at that threshold.
        fnr_upper: FNR upper bound at that threshold.
        n_members: member scores used.
        n_nonmembers: non-member scores used.
        delta: δ of the conversion.
        confidence: 1 − α of the Clopper–Pearson band.
        method: a one-line description.
    """

    epsilon: float
    mu: float
    threshold: float
    fpr_upper: float
    fnr_upper: float
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float
    method: str

    def __float__(self) -> float:
        return self.epsilon

    @classmethod
    def from_counts(cls, counts: ScoreCounts, *, delta: float, confidence: float = 0.95) -> GDPEstimate:
        """The estimate of :func:`epsilon_gdp` from the counts of already sorted scores.

        Args:
            counts: the :class:`~dpaudit.estimate.ScoreCounts` of member vs non-member scores.
            delta: δ in (0, 1) for the conversion.
            confidence: 1 − α of the Clopper–Pearson band, in (0, 1).

        Returns:
            The :class:`GDPEstimate`.

        Raises:
            DPAuditError: δ outside (0, 1), confidence outside (0, 1).
        """
        from scipy import special

        delta = check_delta(delta, allow_zero=False)
        alpha = check_confidence(confidence)
        alpha_fp, alpha_fn = BonferroniSelection().side_alphas(
            alpha, n_members=counts.n_members, n_nonmembers=counts.n_nonmembers
        )

        def mus(fpr_upper: np.ndarray, fnr_upper: np.ndarray) -> np.ndarray:
            # Φ⁻¹(1 − x) = −Φ⁻¹(x); upper bounds are > 0, so no NaN (a bound of 1 gives −inf).
            return -special.ndtri(fpr_upper) - special.ndtri(fnr_upper)

        # np.argmax of μ over the simultaneous band (BonferroniSelection.band), without inverting every count
        best = _best_threshold(mus, counts, alpha_fp=alpha_fp, alpha_fn=alpha_fn)
        fpr_upper = _cp_upper(counts.fp[best : best + 1], counts.n_nonmembers, alpha_fp)
        fnr_upper = _cp_upper(counts.fn[best : best + 1], counts.n_members, alpha_fn)
        mu = max(0.0, float(mus(fpr_upper, fnr_upper)[0]))
        return cls(
            _gdp_epsilon(mu, delta),
            mu,
            float(counts.thresholds[best]),
            float(fpr_upper[0]),
            float(fnr_upper[0]),
            counts.n_members,
            counts.n_nonmembers,
            delta,
            1.0 - alpha,
            _GDP_TEXT,
        )


def epsilon_gdp(
    member_scores: npt.ArrayLike, nonmember_scores: npt.ArrayLike, *, delta: float, confidence: float = 0.95
) -> GDPEstimate:
    """Gaussian-DP ε estimate of Nasr et al. (2023), "Tight auditing of differentially private ML".

    At every threshold, FPR_u and FNR_u are Clopper–Pearson upper bounds from the same simultaneous
    band as ``epsilon_lower_bound(selection="bonferroni")`` (α/(2N) and α/(2P) per side, valid over all
    thresholds at once); μ̂ = max_t Φ⁻¹(1 − FPR_u) − Φ⁻¹(FNR_u), clamped at 0, and ε = gdp_epsilon(μ̂, δ).
    The result is an *estimate*: it assumes the attack's trade-off curve is Gaussian (true for a
    Gaussian mechanism audited with an optimal white-box canary), and is no assumption-free bound.

    Args:
        member_scores: 1-D finite member scores.
        nonmember_scores: 1-D finite non-member scores.
        delta: δ in (0, 1) for the conversion.
        confidence: 1 − α of the Clopper–Pearson band, in (0, 1).

    Returns:
        A :class:`GDPEstimate`; ``float(estimate)`` is ε in nats.

    Raises:
        DPAuditError: empty or non-finite scores, δ outside (0, 1), confidence outside (0, 1).
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    delta = check_delta(delta, allow_zero=False)
    check_confidence(confidence)
    counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
    return GDPEstimate.from_counts(counts, delta=delta, confidence=confidence)


__all__ = ["GDPEstimate", "epsilon_gdp", "gdp_delta", "gdp_epsilon"]
