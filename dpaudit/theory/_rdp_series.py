"""dpaudit's own RDP of the Poisson-subsampled Gaussian mechanism, summed with the signs of its series.

:func:`dpaudit.theory.rdp_subsampled_gaussian` (the exact RDP of one step at any order, which the DPSGD-GC/DC
claim checks read at α = 1.1) is this module. The RDP accountant (:func:`dpaudit.theory.epsilon`,
:func:`dpaudit.theory.calibrate_noise`, the ledger replay) uses it at fractional orders and dp-accounting's
``RdpAccountant`` at integer ones; the tests check dp-accounting's RDP against this one at integer orders (the test
oracle) and both against the defining integral.

Integer orders: the binomial expansion of A_α = E_{x~N(0,σ²)}[((1−q) + q·e^{(2x−1)/(2σ²)})^α]. Fractional
orders: the two-sided series of Mironov, Talwar & Zhang (2019, §3.3), summed *with the signs* of the generalised
binomial coefficients. dp-accounting 0.6.0 (``_compute_log_a_frac``) adds their absolute values, which overstates
the RDP at fractional orders (7 % at α = 1.1, z = 1, q = 0.01; 6× at α = 1.1, z = 4, q = 0.25: the toy parameters
of the DPSGD-GC/DC paper's Fig. 1), and gives up (+inf) after 1000 terms; it agrees at integer orders.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt
from scipy import special

_SERIES_TOLERANCE = math.log(1e-12)  # stop the fractional-order series once terms are 1e-12 of the total
_SERIES_TERMS = 1 << 21  # at most this many terms a side per fractional order (q = 0.5, σ = 1e100 needs 2.6e5)
_HUGE_SIGMA = 1e150  # above this z, σ² nears overflow and any RDP is below 1e-290: the unsubsampled α/(2σ²) is used


def _log_a_integers(alphas: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """log A_α at integer orders α: log Σ_k C(α,k) (1−q)^(α−k) q^k exp((k²−k)/(2σ²)), every order's terms laid
    end to end in one array."""
    if alphas.size == 0:
        return np.empty(0)
    lengths = alphas + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    alpha = np.repeat(alphas, lengths).astype(float)
    k = np.arange(lengths.sum()) - np.repeat(starts, lengths)
    log_binom = special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1)
    log_terms = log_binom + k * math.log(q) + (alpha - k) * math.log1p(-q) + (k * k - k) / (2 * sigma**2)
    top = np.maximum.reduceat(log_terms, starts)
    with np.errstate(invalid="ignore", over="ignore"):
        sums = np.add.reduceat(np.exp(log_terms - np.repeat(top, lengths)), starts)
        return np.where(np.isfinite(top), top + np.log(sums), top)


def _log_a_fractionals(alphas: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """log A_α at fractional orders α by the two-sided series of Mironov, Talwar & Zhang (2019, §3.3).

    The integral is split at z₀, where the two mixture components are equal, and each side is expanded in a
    binomial series that converges there. Terms decay polynomially (alternating signs) for large q, so the series
    is summed in blocks of doubling size, for every order that has not converged yet at once, until a block's
    largest term is 1e-12 of the total. Where the sum cannot be evaluated in floating point (its alternating terms
    cancel below the precision, or it has not converged after :data:`_SERIES_TERMS` terms), the order gets the RDP
    of the Gaussian mechanism without subsampling, log A_α ≤ α(α−1)/(2σ²): a valid upper bound.
    """
    z0 = sigma**2 * (math.log1p(-q) - math.log(q)) + 0.5  # log(1/q − 1), without 1/q overflowing at tiny q
    log_q, log_1q = math.log(q), math.log1p(-q)
    result = np.full(len(alphas), np.nan)
    active = np.arange(len(alphas))
    terms, signs = np.empty((len(alphas), 0)), np.empty((len(alphas), 0))
    start, block = 0, 64
    while active.size:
        i = np.arange(start, start + block, dtype=float)[None, :]
        a = alphas[active, None]
        coef = special.binom(a, i)
        j = a - i
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            log_coef = np.log(np.abs(coef))
            two_var = 2 * sigma**2
            # below z0: powers of the likelihood ratio, N(i, σ²) mass below z0; above z0: around the q·N(1, σ²)
            # component, N(j, σ²) mass above z0
            left = log_coef + i * log_q + j * log_1q + (i * i - i) / two_var + special.log_ndtr((z0 - i) / sigma)
            right = log_coef + j * log_q + i * log_1q + (j * j - j) / two_var + special.log_ndtr((j - z0) / sigma)
            terms = np.concatenate([terms, left, right], axis=1)
            signs = np.concatenate([signs, np.sign(coef), np.sign(coef)], axis=1)
            top = terms.max(axis=1)
            totals = top + np.log(np.einsum("ij,ij->i", signs, np.exp(terms - top[:, None])))
        converged = np.maximum(left.max(axis=1), right.max(axis=1)) < totals + _SERIES_TOLERANCE
        failed = ~np.isfinite(totals) | (~converged & (start + block >= _SERIES_TERMS))
        done = converged | failed
        result[active[done]] = np.where(failed[done], a[done, 0] * (a[done, 0] - 1) / (2 * sigma**2), totals[done])
        active, terms, signs = active[~done], terms[~done], signs[~done]
        start += block
        block *= 2
    return result


def subsampled_gaussian_rdp(*, noise_multiplier: float, sample_rate: float, orders: npt.ArrayLike) -> np.ndarray:
    """RDP (nats) of one Poisson-subsampled Gaussian step at each order α > 1 (add/remove-one neighbours).

    Args:
        noise_multiplier: z > 0, noise std / ℓ2 sensitivity C.
        sample_rate: q ∈ (0, 1].
        orders: Rényi orders α > 1.

    Returns:
        RDP(α) ≥ 0 per order (+inf where σ² underflows).
    """
    values = np.asarray(orders, dtype=float)
    z, q = float(noise_multiplier), float(sample_rate)
    if z * z == 0:  # σ² underflows: no noise to speak of, the divergence is infinite at every order
        return np.full(len(values), np.inf)
    if q == 1.0 or z > _HUGE_SIGMA:  # without subsampling; above _HUGE_SIGMA a bound below 1e-290 (σ² overflows)
        return values / 2 / z / z
    return _cached(z, q, tuple(values)).copy()


@functools.lru_cache(maxsize=4096)
def _cached(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP per order, cached: the claim checks and the tests ask for the same (z, q) repeatedly."""
    values = np.asarray(orders)
    integer = values == np.round(values)
    log_a = np.empty(len(values))
    log_a[integer] = _log_a_integers(values[integer].astype(int), sample_rate, noise_multiplier)
    log_a[~integer] = _log_a_fractionals(values[~integer], sample_rate, noise_multiplier)
    return np.maximum(log_a / (values - 1), 0.0)  # RDP ≥ 0: at large σ the sums round to ±1e-16
