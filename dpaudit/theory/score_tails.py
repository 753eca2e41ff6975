"""Exact tails of the whole-run canaries' statistics under the mechanism a ledger claims.

For the audit game of :mod:`dpaudit.whole_run` (x_t = B_t + N(0, z_t²), B_t ~ Bernoulli(q_t) for a member, 0 for a
non-member, independent over the T steps), the distributions of

* Λ = Σ_t ℓ_t(x_t), ℓ_t(x) = log(1 − q_t + q_t·exp((x − ½)/z_t²)), the log likelihood ratio of every iterate, and
* S = Σ_t x_t, the final model's statistic,

for a member and for a non-member, as tail probabilities P(statistic ≥ τ) on a grid of thresholds τ. They let an
audit fix its threshold from the ledger alone, before any score is read (``dpaudit.privacy_profile``), and tell what
an audit of m canaries per side can certify if the run is the mechanism its ledger claims.

Λ: each step's ℓ_t is discretised on a grid of ``resolution`` nats (the exact Gaussian mass of each bin, under either
hypothesis, placed at the bin's centre), and the T steps are composed by one FFT per group of equal (z, q); the
rounding moves Λ by at most T·resolution/2 (typically √T·resolution/√12). S: for a non-member N(0, Σ_t z_t²); for a
member the Poisson-binomial count of presences plus that Gaussian, exactly. z is the noise std in the units where a
present canary adds 1 (σ_t of ``RunCanaryObservations.noise_std``), q_t in (0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError
from dpaudit.theory.tradeoff import StepGroup, group_steps

#: Standard deviations of the Gaussian noise beyond which a step's mass is treated as 0 (Φ(−14) ≈ 8e-45).
_TAIL_SIGMAS = 14.0
#: Standard deviations of Λ around its mean (under either hypothesis) that the composed grid must cover.
_WINDOW_SIGMAS = 40.0
#: The largest composed grid (points); a finer resolution than that allows is coarsened.
_MAX_POINTS = 1 << 22


@dataclass(frozen=True)
class ScoreTails:
    """P(statistic ≥ τ) for a member and a non-member, on increasing thresholds τ.

    Attributes:
        statistic: "all-iterates" (Λ) or "final-model" (S).
        thresholds: [K] increasing τ.
        member_tail: [K] P_member(statistic ≥ τ) (the TPR of the test "≥ τ predicts member").
        nonmember_tail: [K] P_non-member(statistic ≥ τ) (its FPR).
    """

    statistic: str
    thresholds: npt.NDArray[np.float64]
    member_tail: npt.NDArray[np.float64]
    nonmember_tail: npt.NDArray[np.float64]


def _step_masses(z: float, q: float, h: float) -> tuple[float, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(ℓ of the first bin, non-member masses, member masses) of one step's ℓ on bins of width h."""
    from scipy.special import ndtr

    def ell(x: float) -> float:
        u = (x - 0.5) / z**2
        return u if q >= 1 else float(np.logaddexp(math.log1p(-q), math.log(q) + u))

    low, high = ell(-_TAIL_SIGMAS * z), ell(1 + _TAIL_SIGMAS * z)
    bins = int(math.ceil((high - low) / h)) + 1
    edges = low + (np.arange(bins - 1) + 0.5) * h  # the upper edges of bins 0 … bins − 2 (the last is open)
    if q >= 1:
        x = z**2 * edges + 0.5
    else:  # ℓ⁻¹: x = z²·log((e^ℓ − (1 − q))/q) + ½, with e^ℓ − (1 − q) = (1 − q)·expm1(ℓ − log(1 − q))
        with np.errstate(divide="ignore"):
            x = z**2 * (np.log1p(-q) + np.log(np.expm1(edges - np.log1p(-q))) - np.log(q)) + 0.5

    def masses(shift: float) -> npt.NDArray[np.float64]:
        # P(bin) of N(shift, z²): from the lower CDF where the bin lies below the mean, from the upper one above it,
        # so that both tails keep their relative precision
        s = (x - shift) / z
        lower = np.diff(np.concatenate([[0.0], ndtr(s), [1.0]]))
        upper = -np.diff(np.concatenate([[1.0], ndtr(-s), [0.0]]))
        return np.maximum(np.where(np.concatenate([[-np.inf], s]) > 0, upper, lower), 0.0)

    nonmember = masses(0.0)
    member = (1 - q) * nonmember + q * masses(1.0) if q < 1 else masses(1.0)
    return low, nonmember, member


def _moments(values: npt.NDArray[np.float64], masses: npt.NDArray[np.float64]) -> tuple[float, float]:
    total = masses.sum()
    mean = float(np.dot(values, masses) / total)
    return mean, float(np.dot((values - mean) ** 2, masses) / total)


def likelihood_ratio_tails(*, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike, resolution: float = 1e-3):
    """The tails of Λ = Σ_t log(1 − q_t + q_t·exp((x_t − ½)/z_t²)) for a member and a non-member (module docstring).

    Args:
        noise_multipliers: z_t per step (the observations' noise std), finite and > 0 (length T).
        sample_rates: q_t per step, in (0, 1] (length T).
        resolution: the grid of ℓ_t and Λ, in nats, > 0 (coarsened where the composed grid would exceed
            :data:`_MAX_POINTS` points).

    Returns:
        A :class:`ScoreTails` ("all-iterates").

    Raises:
        DPAuditError: a bad ledger, a resolution ≤ 0.
    """
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    if not resolution > 0:
        raise DPAuditError(f"resolution must be > 0 nats, got {resolution!r}")
    return _likelihood_ratio_tails(groups, float(resolution))


def _likelihood_ratio_tails(groups: tuple[StepGroup, ...], h: float) -> ScoreTails:
    # the window of Λ that holds all but a negligible mass: its means and variances under both hypotheses
    steps = [(_step_masses(z, q, h), count) for z, q, count in groups]
    bounds = []
    for which in (1, 2):
        mean = var = 0.0
        for (low, *masses), count in steps:
            values = low + h * np.arange(masses[0].size, dtype=np.float64)
            m, v = _moments(values, masses[which - 1])
            mean, var = mean + count * m, var + count * v
        bounds.append((mean - _WINDOW_SIGMAS * math.sqrt(var) - 1.0, mean + _WINDOW_SIGMAS * math.sqrt(var) + 1.0))
    span = [min(b[0] for b in bounds), max(b[1] for b in bounds)]
    if (span[1] - span[0]) / h > _MAX_POINTS:  # coarsen: recompute the steps on the coarser grid
        return _likelihood_ratio_tails(groups, (span[1] - span[0]) / _MAX_POINTS * 1.01)
    size = 1 << int(math.ceil(math.log2((span[1] - span[0]) / h + 2)))
    origin = sum(count * low for (low, *_), count in steps)  # Λ of index 0 (mod size)
    composed = []
    for which in (0, 1):  # non-member, member
        spectrum = np.ones(size // 2 + 1, dtype=complex)
        for (low, *masses), count in steps:
            folded = np.bincount(np.arange(masses[which].size) % size, weights=masses[which], minlength=size)
            spectrum *= np.fft.rfft(folded) ** count
        composed.append(np.maximum(np.fft.irfft(spectrum, size), 0.0))
    # index k holds Λ = origin + h·(k + j·size) for the j that puts it in the window [span[0], span[0] + h·size)
    start = int(math.floor((span[0] - origin) / h))
    shift = start % size
    values = origin + h * (start + np.arange(size, dtype=np.float64))
    nonmember, member = (np.roll(p, -shift) for p in composed)
    tail = lambda p: np.cumsum(p[::-1])[::-1]  # noqa: E731 - P(Λ ≥ value), summed from the top (small tails exact)
    return ScoreTails("all-iterates", values, np.minimum(tail(member), 1.0), np.minimum(tail(nonmember), 1.0))


def final_model_tails(
    *, noise_multipliers: npt.ArrayLike, sample_rates: npt.ArrayLike, points: int = 20_001
) -> ScoreTails:
    """The tails of S = Σ_t x_t for a member (Poisson-binomial presences + N(0, Σ z_t²)) and a non-member (the
    Gaussian alone), on ``points`` thresholds from −10 to T + 10 standard deviations of the noise.

    Args:
        noise_multipliers: z_t per step, finite and > 0 (length T).
        sample_rates: q_t per step, in (0, 1] (length T).
        points: the number of thresholds, ≥ 2.

    Returns:
        A :class:`ScoreTails` ("final-model").
    """
    from scipy.special import ndtr

    group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)  # one-line errors
    z = np.asarray(noise_multipliers, dtype=float)
    q = np.asarray(sample_rates, dtype=float)
    std = float(np.sqrt(np.sum(z**2)))
    presences = np.ones(1)  # the Poisson-binomial pmf of Σ_t B_t, one step at a time
    for rate in q:
        presences = np.convolve(presences, [1 - rate, rate])
    thresholds = np.linspace(-10 * std, z.size + 10 * std, int(points))
    nonmember = ndtr(-thresholds / std)
    counts = np.flatnonzero(presences > 1e-300)
    member = np.zeros_like(thresholds)
    for k in counts:  # at most T + 1 terms
        member += presences[k] * ndtr((k - thresholds) / std)
    return ScoreTails("final-model", thresholds, np.minimum(member, 1.0), nonmember)


__all__ = ["ScoreTails", "final_model_tails", "likelihood_ratio_tails"]
