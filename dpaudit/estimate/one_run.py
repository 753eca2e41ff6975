"""Lower bounds on ε from one training run (Steinke, Nasr & Jagielski 2023).

m canaries are each included independently with probability ½; the auditor makes r guesses (IN or
OUT) and v of them are correct. ε is in nats, δ a probability, α = 1 − confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_confidence, check_count, check_delta, check_positive, check_scores


def _check_one_run_counts(guesses: int, correct: int, canaries: int) -> tuple[int, int, int]:
    m = check_count("canaries", canaries, allow_zero=False)
    r = check_count("guesses", guesses, allow_zero=False)
    v = check_count("correct", correct, allow_zero=True)
    if r > m:
        raise DPAuditError(f"guesses ({r}) cannot exceed canaries ({m})")
    if v > r:
        raise DPAuditError(f"correct ({v}) cannot exceed guesses ({r})")
    return r, v, m


def _one_run_p(epsilon: float, delta: float, r: int, v: int, m: int) -> float:
    from scipy import special, stats

    if v == 0:
        return 1.0
    q = float(special.expit(epsilon))  # e^ε / (1 + e^ε)
    beta = float(stats.binom.sf(v - 1, r, q))  # P[Binom(r, q) ≥ v]
    if delta == 0:
        return min(1.0, beta)
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # k = v−1, v−2, …, 0
    alpha_star = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))  # max_i P[v > B ≥ v−i] / i
    return min(1.0, beta + alpha_star * delta * 2 * m)


def one_run_p_value(*, epsilon: float, delta: float, guesses: int, correct: int, canaries: int) -> float:
    """p-value of the null "the training run is (ε, δ)-DP" from a one-run audit (Steinke et al. 2023).

    With q = e^ε/(1+e^ε), β = P[Binom(r, q) ≥ v], α* = max_{i=1..v} P[v > Binom(r, q) ≥ v − i]/i:
    p = min(1, β + α*·δ·2m), for m canaries (each included independently with probability ½), r
    guesses and v correct guesses.

    Args:
        epsilon: ε ≥ 0 of the null hypothesis, in nats.
        delta: δ in [0, 1).
        guesses: r ≥ 1 guesses made (abstentions excluded).
        correct: v correct guesses, 0 ≤ v ≤ r.
        canaries: m ≥ r canaries.

    Returns:
        p in (0, 1].

    Raises:
        DPAuditError: bad counts, ε negative or not finite, δ outside [0, 1).
    """
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    delta = check_delta(delta)
    r, v, m = _check_one_run_counts(guesses, correct, canaries)
    return _one_run_p(epsilon, delta, r, v, m)


def _epsilon_one_run(r: int, v: int, m: int, delta: float, alpha: float) -> float:
    from scipy import optimize

    def excess(eps: float) -> float:
        return _one_run_p(eps, delta, r, v, m) - alpha

    if excess(0.0) >= 0:
        return 0.0
    high = 1.0
    while excess(high) < 0:
        high *= 2
        if high > 1e4:  # pragma: no cover - would need astronomically many guesses
            return math.inf
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-10, maxiter=500))


def epsilon_one_run(*, guesses: int, correct: int, canaries: int, delta: float, confidence: float = 0.95) -> float:
    """Lower bound on ε from one training run: sup{ε : one_run_p_value(ε) < 1 − confidence}.

    Valid when the guesses were fixed without looking at which canaries were included (for instance a
    number of top-scored canaries decided in advance); found by root-finding (brentq) on p(ε) = α.

    Args:
        guesses: r ≥ 1 guesses made.
        correct: v correct guesses, 0 ≤ v ≤ r.
        canaries: m ≥ r canaries, each included independently with probability ½.
        delta: δ in [0, 1).
        confidence: 1 − α in (0, 1).

    Returns:
        ε lower bound in nats (0 when even ε = 0 is not rejected).

    Raises:
        DPAuditError: bad counts, δ outside [0, 1), confidence outside (0, 1).
    """
    delta = check_delta(delta)
    alpha = check_confidence(confidence)
    r, v, m = _check_one_run_counts(guesses, correct, canaries)
    return _epsilon_one_run(r, v, m, delta, alpha)


@dataclass(frozen=True)
class OneRunBound:
    """A one-run ε lower bound from scores: ``epsilon`` (nats) and the counts it came from.

    Attributes:
        epsilon: the lower bound on ε in nats, ≥ 0.
        guesses: r, canaries guessed IN.
        correct: v, correct guesses among them.
        canaries: m, all canaries scored.
        delta: δ of the bound.
        confidence: 1 − α.
    """

    epsilon: float
    guesses: int
    correct: int
    canaries: int
    delta: float
    confidence: float

    def __float__(self) -> float:
        return self.epsilon


def epsilon_one_run_scores(
    scores: npt.ArrayLike, is_member: npt.ArrayLike, *, delta: float, confidence: float = 0.95, guesses: int
) -> OneRunBound:
    """One-run ε lower bound guessing IN for the ``guesses`` highest scores (k₋ = 0, no OUT guesses).

    ``guesses`` must be fixed by the caller before looking at these scores and labels (e.g. from a
    pilot run or a rule of thumb): choosing it to maximise the result on the same data invalidates the
    bound. Ties at the cut are resolved against the auditor (non-members first), so the count of
    correct guesses is the smallest any tie-breaking could give and the bound stays valid.

    Args:
        scores: 1-D finite scores of all m canaries (higher = member).
        is_member: booleans of the same shape, True where the canary was included.
        delta: δ in [0, 1).
        confidence: 1 − α in (0, 1).
        guesses: r, the number of top-scored canaries guessed IN, 1 ≤ r ≤ m.

    Returns:
        A :class:`OneRunBound`; ``float(bound)`` is ε_lo in nats.

    Raises:
        DPAuditError: empty or non-finite scores, labels not boolean or of another shape, bad
            ``guesses``, δ outside [0, 1), confidence outside (0, 1).
    """
    values = check_scores("scores", scores)
    labels = np.asarray(is_member)
    if labels.shape != values.shape:
        raise DPAuditError(f"is_member {labels.shape} and scores {values.shape} differ in shape")
    if labels.dtype != bool:
        if labels.dtype.kind not in "iuf" or not np.all((labels == 0) | (labels == 1)):
            raise DPAuditError("is_member must hold booleans (or 0/1)")
        labels = labels.astype(bool)
    delta = check_delta(delta)
    alpha = check_confidence(confidence)
    r, _, m = _check_one_run_counts(guesses, 0, values.size)
    order = np.lexsort((labels, -values))  # by score descending, non-members first among ties
    v = int(np.count_nonzero(labels[order[:r]]))
    return OneRunBound(_epsilon_one_run(r, v, m, delta, alpha), r, v, m, delta, 1.0 - alpha)


__all__ = ["OneRunBound", "epsilon_one_run", "epsilon_one_run_scores", "one_run_p_value"]
