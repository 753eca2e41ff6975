"""dp-accounting's PLD of the Poisson-subsampled Gaussian, built and composed with its Python loops vectorised.

dp-accounting (0.6.0) spends most of a family bound's report in Python loops, not in its FFTs:

* ``from_gaussian_mechanism`` calls the mechanism's ``inverse_privacy_loss`` once per point of the privacy-loss grid
  and adjacency: for the lower (privacy-buckets) estimate on every point k·d it walks down (about 70,000 per
  adjacency at z ≈ 1 on the 1e-4-nat grid the family bound reads its reported ε on), for the upper
  (connect-the-dots) estimate on every ε whose hockey-stick divergence it takes;
* ``self_compose`` computes its Chernoff truncation bounds with 40 scipy ``logsumexp`` calls, milliseconds each
  mostly in their overhead, on the small PMFs of the family bound's hypotheses;
* ``compose`` finds the tails it truncates by adding the PMF's masses one by one in Python;
* ``get_delta_for_epsilon`` walks the losses and the ε grid in one Python loop (with an ``np.isposinf`` call each
  turn), and ``get_epsilon_for_delta`` the losses above ε, on the fine grids of the reported ε a hundred thousand.

:func:`gaussian_pld`, :func:`self_compose`, :func:`compose`, :func:`delta_for_epsilons` and :func:`epsilon_for_delta`
compute the same in numpy — the formulas of ``GaussianPrivacyLoss`` (``inverse_privacy_loss``,
``get_delta_for_epsilon``) and ``common.log_a_times_exp_b_plus_c`` in the same order of operations, running sums by
``np.cumsum`` (which adds in sequence as the loop does) — and hand the results to dp-accounting's own PMF classes, so
their PLDs, δ and ε equal dp-accounting's bit for bit (``tests/theory/test_gaussian_pld.py`` compares them). Where a
result could differ (a grid point outside the mechanism's range, a truncation bound within rounding of an integer, a
log close to the loss it is compared with) the step is left to dp-accounting's own code or Python's ``math``.

Units: z = σ/C (sensitivity 1), q a probability in (0, 1], d the privacy-loss grid in nats.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from dp_accounting.pld.pld_pmf import PLDPmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss


def _isclose(values: npt.NDArray[np.float64], reference: float) -> npt.NDArray[np.bool_]:
    """``math.isclose(value, reference)`` (relative tolerance 1e-9, no absolute one) for each value."""
    return np.abs(values - reference) <= 1e-9 * np.maximum(np.abs(values), abs(reference))


def _inverse_losses(
    losses: npt.NDArray[np.float64], z: float, q: float, remove: bool
) -> npt.NDArray[np.float64] | None:
    """``GaussianPrivacyLoss(z, sampling_prob=q).inverse_privacy_loss`` at each loss; None where dp-accounting would
    raise or take a branch not reproduced here."""
    if q == 1.0:
        unsubsampled = losses
        edge = np.zeros(losses.shape, dtype=bool)
    else:
        # inverse loss without subsampling: ±log(a·exp(±loss) + c), a = 1/q > 0, c = 1 − 1/q < 0
        boundary = math.log(1 - q) if remove else -math.log(1 - q)
        edge = _isclose(losses, boundary)
        if (~edge & (losses <= boundary) if remove else ~edge & (losses > boundary)).any():
            return None
        exponent = losses if remove else -losses
        a, c = 1 / q, 1 - 1 / q
        shifted = exponent + np.log(a)
        log_c = np.log(-c)
        if ((log_c >= shifted) & (exponent != 0) & ~edge).any():
            return None
        with np.errstate(invalid="ignore", divide="ignore"):  # at the edge; replaced below
            log_sum = np.where(exponent == 0, np.log(a + c), shifted + np.log1p(-np.exp(log_c - shifted)))
        unsubsampled = log_sum if remove else -log_sum
    x = -0.5 - unsubsampled * z**2 / 1.0
    if not remove:
        x = 1.0 + x
    return np.where(edge, np.inf if remove else -np.inf, x)


def _lower_pmf(mechanism: GaussianPrivacyLoss, z: float, q: float, d: float, remove: bool) -> PLDPmf | None:
    """One adjacency's privacy-buckets PMF (dp-accounting's ``_create_pld_pmf_from_monotone_privacy_loss``), or None
    where it takes a branch not reproduced here."""
    from dp_accounting.pld import pld_pmf

    tail = mechanism.privacy_loss_tail()
    lower_x, upper_x = tail.lower_x_truncation, tail.upper_x_truncation
    start = math.floor(mechanism.privacy_loss(lower_x) / d)
    upper_loss = mechanism.privacy_loss(upper_x)
    # the grid k = start, start − 1, … down to the first k with k·d ≤ the loss at upper_x (whose point is upper_x)
    ks = np.arange(start, math.floor(upper_loss / d) - 3, -1, dtype=np.int64)
    losses = d * ks.astype(float)
    below = np.flatnonzero(losses <= upper_loss)
    inverse = _inverse_losses(losses[: below[0]], z, q, remove) if below.size else None
    if inverse is None:
        return None
    points = np.concatenate([[lower_x], inverse, [upper_x]])
    points = points[: int(np.flatnonzero(points[1:] >= upper_x)[0]) + 2]  # the walk stops at the first x ≥ upper_x
    cdf = np.asarray(mechanism.mu_upper_cdf(points), dtype=float)
    infinity = tail.tail_probability_mass_function.get(math.inf, 0)
    masses: dict[int, float] = {}  # in dp-accounting's order of insertion and addition: the tail, then the walk
    for loss, mass in tail.tail_probability_mass_function.items():
        if loss != math.inf:
            masses[math.floor(loss / d)] = masses.get(math.floor(loss / d), 0) + mass
    walk = ks[: points.size - 1]
    if len(masses) == 1 and start in masses and walk.size > pld_pmf._MAX_PMF_SPARSE_SIZE:
        probabilities = cdf[1:] - cdf[:-1]
        probabilities[0] = masses[start] + probabilities[0]
        return pld_pmf.DensePLDPmf(d, int(walk[-1]), probabilities[::-1].copy(), infinity, False)
    for key, mass in zip(walk.tolist(), (cdf[1:] - cdf[:-1]).tolist()):
        masses[key] = masses.get(key, 0) + mass
    return pld_pmf.create_pmf(masses, d, infinity, pessimistic_estimate=False)


def _upper_pmf(mechanism: GaussianPrivacyLoss, z: float, q: float, d: float, remove: bool) -> PLDPmf | None:
    """One adjacency's connect-the-dots PMF (dp-accounting's ``_create_pld_pmf_from_monotone_privacy_loss`` with
    ``use_connect_dots=True``), or None where it takes a branch not reproduced here."""
    from dp_accounting.pld import pld_pmf

    bounds = mechanism.connect_dots_bounds()
    assert bounds.epsilon_upper is not None and bounds.epsilon_lower is not None  # always, for the Gaussian
    lowest, highest = math.floor(bounds.epsilon_lower / d), math.ceil(bounds.epsilon_upper / d)
    epsilons = np.arange(lowest, highest + 1) * d
    # the hockey-stick divergence at each ε (GaussianPrivacyLoss.get_delta_for_epsilon)
    deltas = np.zeros_like(epsilons, dtype=float)
    if q == 1.0:
        inverted = np.full_like(epsilons, True, dtype=bool)
    elif remove:
        inverted = epsilons > math.log1p(-q)
        deltas[~inverted] = -np.expm1(epsilons[~inverted])
    else:
        inverted = epsilons < -math.log1p(-q)
    cutoffs = _inverse_losses(epsilons[inverted], z, q, remove)
    if cutoffs is None:
        return None
    deltas[inverted] = mechanism.mu_upper_cdf(cutoffs) - np.exp(
        epsilons[inverted] + mechanism.mu_lower_log_cdf(cutoffs)
    )
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(d, lowest, highest, np.clip(deltas, 0, 1))


def gaussian_pld(*, z: float, q: float, discretization: float, upper: bool) -> PrivacyLossDistribution:
    """``from_gaussian_mechanism(standard_deviation=z, sensitivity=1, sampling_prob=q,
    value_discretization_interval=discretization, pessimistic_estimate=upper, use_connect_dots=upper)``, equal to
    it bit for bit.

    Args:
        z: the noise multiplier σ/C, > 0.
        q: the Poisson sample rate, in (0, 1].
        discretization: the privacy-loss grid in nats, > 0.
        upper: True for connect-the-dots (the upper, pessimistic estimate of δ(ε)), False for privacy buckets (the
            lower, optimistic one).

    Returns:
        The PLD: remove and add adjacency for q < 1, one PMF for q = 1.
    """
    from dp_accounting.pld import privacy_loss_distribution as pld_module
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    def pmf(adjacency: AdjacencyType) -> PLDPmf:
        mechanism = GaussianPrivacyLoss(
            z, sensitivity=1.0, pessimistic_estimate=upper, sampling_prob=q, adjacency_type=adjacency
        )
        build = _upper_pmf if upper else _lower_pmf
        built = build(mechanism, z, q, discretization, adjacency == AdjacencyType.REMOVE)
        if built is None:  # dp-accounting's own loop
            built = pld_module._create_pld_pmf_from_monotone_privacy_loss(
                mechanism,
                pessimistic_estimate=upper,
                value_discretization_interval=discretization,
                use_connect_dots=upper,
            )
        return built

    remove = pmf(AdjacencyType.REMOVE)
    if q == 1.0:
        return pld_module.PrivacyLossDistribution(remove)
    return pld_module.PrivacyLossDistribution(remove, pmf(AdjacencyType.ADD))


#: dp-accounting's orders of the Chernoff bounds, λ = j/size for these j
_BOUND_ORDERS = np.concatenate((np.arange(-20, 0), np.arange(1, 21)))


def _log_mgfs(probabilities: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log Σ_i p_i·e^(i·λ) (the log moment-generating function of the grid index i) at each order λ = j/size of
    :data:`_BOUND_ORDERS`, for p ≥ 0 with some p > 0.

    Since |i·λ| < 20, no term overflows and the sums need no shift: e^(i·j/size) is e^(±i/size) raised to |j| by
    repeated multiplication, one exp per index instead of one per index and order. Each power carries at most 21
    roundings, so each log-MGF is within about 5e-15 of its exact value; −∞ for a sum below 1e-250 (the PMF's
    masses so small that their subnormal products could count).
    """
    kept = np.flatnonzero(probabilities > 0)
    masses, size = probabilities[kept], probabilities.size
    values = {}
    for sign in (1, -1):
        base, power = np.exp(sign * kept / size), masses
        for j in range(1, 21):
            power = power * base
            values[sign * j] = power.sum()
    sums = np.array([values[j] for j in _BOUND_ORDERS.tolist()])
    # a sum so small that subnormal terms could matter: −∞, so that the bound is left to dp-accounting
    return np.log(sums, out=np.full(sums.size, -np.inf), where=sums > 1e-250)


def _convolve_bounds(probabilities: npt.NDArray[np.float64], count: int, tail: float) -> tuple[int, int]:
    """dp-accounting's ``common.compute_self_convolve_bounds(probabilities, count, tail)``: the Chernoff bounds, at
    40 orders, on the grid indices outside which a count-fold self-convolution has mass ≤ tail.

    Its 40 scipy ``logsumexp`` calls cost a few milliseconds each, mostly their overhead, on the small PMFs of the
    family bound's hypotheses, and 40 exps a grid point on the large ones; here the 40 logs of moment-generating
    functions take one exp a grid point (:func:`_log_mgfs`). They agree with scipy's to about 1e-14, which moves a
    bound only where it lies within that of an integer: such bounds (and PMFs with a negative mass) are left to
    dp-accounting's own function, so the integers are its.
    """
    from dp_accounting.pld import common

    size = probabilities.size
    lower, upper = 0, (size - 1) * count
    if tail == 0:
        return lower, upper
    if size == 0 or (probabilities < 0).any() or not (probabilities > 0).any():
        return common.compute_self_convolve_bounds(probabilities, count, tail)
    orders = _BOUND_ORDERS / size
    bounds = (count * _log_mgfs(probabilities) + math.log(2 / tail)) / orders
    # an error of ≲ 1e-14 in a log-MGF moves a bound by ≲ count·size·1e-14: a margin 1000 times that
    margin = 1e-11 * count * size
    if not np.isfinite(bounds).all() or (np.abs(bounds - np.rint(bounds)) <= margin).any():
        return common.compute_self_convolve_bounds(probabilities, count, tail)
    for order, bound in zip(orders.tolist(), bounds.tolist()):
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _self_compose_pmf(pmf: PLDPmf, count: int, tail: float) -> PLDPmf:
    """``pmf.self_compose(count, tail)`` (dp-accounting's ``DensePLDPmf.self_compose``) with its truncation bounds
    from :func:`_convolve_bounds`."""
    from dp_accounting.pld import pld_pmf
    from scipy import fft

    if isinstance(pmf, pld_pmf.SparsePLDPmf) and pmf.size**count <= pld_pmf._MAX_PMF_SPARSE_SIZE:
        return pmf.self_compose(count, tail)  # composed sparse, step by step
    dense = pmf.to_dense_pmf()
    probabilities = dense._probs
    lower, upper = _convolve_bounds(probabilities, count, tail)
    size = upper - lower + 1
    spectrum = fft.fft(probabilities, fft.next_fast_len(max(size, len(probabilities)))) ** count
    composed = np.array(np.roll(np.real(fft.ifft(spectrum)), -lower)[:size])
    infinity = tail - math.expm1(count * math.log1p(-dense._infinity_mass))
    return pld_pmf.DensePLDPmf(
        dense._discretization, dense._lower_loss * count + lower, composed, infinity, dense._pessimistic_estimate
    )


def self_compose(pld: PrivacyLossDistribution, *, count: int, tail_mass_truncation: float) -> PrivacyLossDistribution:
    """``pld.self_compose(count, tail_mass_truncation)``, equal to dp-accounting's bit for bit and faster on small
    PMFs (see :func:`_convolve_bounds`).

    Args:
        pld: a PLD of this module's (or dp-accounting's).
        count: the number of compositions, ≥ 2.
        tail_mass_truncation: the probability mass the composition may drop from its tails (added to +∞), ≥ 0.

    Returns:
        The composed PLD.
    """
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    remove = _self_compose_pmf(pld._pmf_remove, count, tail_mass_truncation)
    if pld._symmetric:
        return PrivacyLossDistribution(remove)
    return PrivacyLossDistribution(remove, _self_compose_pmf(pld._pmf_add, count, tail_mass_truncation))


def _prefix_to_truncate(probabilities: npt.NDArray[np.float64], threshold: float) -> int:
    """The index at which the running sum of ``probabilities`` (added left to right) first exceeds ``threshold``,
    or their length: dp-accounting's ``_find_prefix_to_truncate`` (a Python loop), by cumulative sums of chunks
    carried on (``np.cumsum`` adds in sequence, so every running sum is the loop's)."""
    carry, start, chunk = 0.0, 0, 4096
    while start < probabilities.size:
        running = np.cumsum(np.concatenate(([carry], probabilities[start : start + chunk])))[1:]
        over = np.flatnonzero(running > threshold)
        if over.size:
            return start + int(over[0])
        carry, start = running[-1], start + chunk
    return probabilities.size


def _compose_pmfs(first: PLDPmf, second: PLDPmf, tail: float) -> PLDPmf:
    """dp-accounting's ``pld_pmf.compose_pmfs(first, second, tail)``, its tail truncation by
    :func:`_prefix_to_truncate`."""
    from dp_accounting.pld import pld_pmf
    from scipy import signal

    if isinstance(first, pld_pmf.SparsePLDPmf) and isinstance(second, pld_pmf.SparsePLDPmf):
        if first.size * second.size <= pld_pmf._MAX_PMF_SPARSE_SIZE:
            return first.compose(second, tail)
    first, second = first.to_dense_pmf(), second.to_dense_pmf()
    first.validate_composable(second)
    probabilities = signal.fftconvolve(first._probs, second._probs)
    infinity = first._infinity_mass + second._infinity_mass - first._infinity_mass * second._infinity_mass
    left, right = 0, probabilities.size
    if tail != 0:  # the largest prefix and suffix of mass ≤ tail/2 each go to the neighbouring end or to +∞
        left = _prefix_to_truncate(probabilities, tail / 2)
        right = max(probabilities.size - _prefix_to_truncate(np.flip(probabilities), tail / 2), left + 1)
        left_mass, right_mass = np.sum(probabilities[:left]), np.sum(probabilities[right:])
        probabilities = probabilities[left:right]
        if first._pessimistic_estimate:
            probabilities[0] += left_mass
            infinity = infinity + right_mass
        else:  # the left mass is dropped
            probabilities[-1] += right_mass
    return pld_pmf.DensePLDPmf(
        first._discretization,
        first._lower_loss + second._lower_loss + left,
        probabilities,
        infinity,
        first._pessimistic_estimate,
    )


def compose(
    first: PrivacyLossDistribution, second: PrivacyLossDistribution, *, tail_mass_truncation: float
) -> PrivacyLossDistribution:
    """``first.compose(second, tail_mass_truncation)``, equal to dp-accounting's bit for bit (its tails found by
    :func:`_prefix_to_truncate`).

    Args:
        first: a PLD.
        second: a PLD on the same grid and of the same estimate.
        tail_mass_truncation: the probability mass the composition may drop from its tails, ≥ 0.

    Returns:
        The composed PLD.
    """
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    remove = _compose_pmfs(first._pmf_remove, second._pmf_remove, tail_mass_truncation)
    if first._symmetric and second._symmetric:
        return PrivacyLossDistribution(remove)
    return PrivacyLossDistribution(remove, _compose_pmfs(first._pmf_add, second._pmf_add, tail_mass_truncation))


def _pmf_deltas(pmf: PLDPmf, epsilons: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``pmf.get_delta_for_epsilon(list(epsilons))`` for finite ε: dp-accounting's running sums from the largest loss
    down (``_get_delta_for_epsilon_vectorized``, a Python loop over the losses and the ascending ε, with numpy's exp)
    as ``np.cumsum`` of the reversed masses, read at each ε's count of losses above it (so ε in any order)."""
    from dp_accounting.pld import pld_pmf

    if isinstance(pmf, pld_pmf.DensePLDPmf):
        losses = (np.arange(pmf.size) + pmf._lower_loss) * pmf._discretization
        probabilities = pmf._probs
    else:
        keys, masses = pmf._get_losses_probs()
        losses, probabilities = np.asarray(keys, dtype=float), np.asarray(masses, dtype=float)
    upper = np.cumsum(np.concatenate(([pmf._infinity_mass], probabilities[::-1])))
    lower = np.cumsum(np.concatenate(([0.0], (probabilities * np.exp(-losses))[::-1])))
    above = losses.size - np.searchsorted(losses, epsilons, side="right")  # losses > ε, the ones the loop adds
    return upper[above] - np.exp(epsilons) * lower[above]


def delta_for_epsilons(pld: PrivacyLossDistribution, epsilons: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``pld.get_delta_for_epsilon(list(epsilons))``, equal to dp-accounting's bit for bit, without its Python loop;
    where dp-accounting refuses ε out of order, each ε gets the δ it has in ascending order.

    Args:
        pld: a PLD of this module's (or dp-accounting's).
        epsilons: ε in nats (1-D).

    Returns:
        δ(ε) = max of the two adjacencies' hockey-stick divergences at each ε.
    """
    epsilons = np.asarray(epsilons, dtype=float)
    if epsilons.ndim != 1 or not np.all(np.isfinite(epsilons)):  # +∞ (δ = the mass at +∞), NaN: dp-accounting's
        return np.asarray(pld.get_delta_for_epsilon(epsilons.tolist()), dtype=float)
    remove = _pmf_deltas(pld._pmf_remove, epsilons)
    if pld._symmetric:
        return remove
    return np.maximum(remove, _pmf_deltas(pld._pmf_add, epsilons))


def _exact_logs(values: npt.NDArray[np.float64], near: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``np.log(values)``, with ``math.log`` (the loop's) where the result lies within 1e-12 relative of ``near``:
    there a last-place difference between the two could decide a comparison with ``near``."""
    logs = np.log(values)
    close = np.flatnonzero(np.abs(logs - near) <= 1e-12 * np.maximum(np.abs(near), 1e-300))
    logs[close] = [math.log(value) for value in values[close].tolist()]
    return logs


def _pmf_epsilon(pmf: PLDPmf, delta: float) -> float:
    """``pmf.get_epsilon_for_delta(delta)``: dp-accounting's ``_get_epsilon_for_delta``, a Python loop from the largest
    loss down that stops at the first loss ε(δ) reaches, run in chunks of running sums (``np.cumsum``, as the loop
    adds; its ``math.exp`` and, where a comparison is close, its ``math.log``), each stop condition found by a search
    of the chunk."""
    from dp_accounting.pld import pld_pmf

    infinity = pmf._infinity_mass
    if infinity > delta:
        return math.inf
    if isinstance(pmf, pld_pmf.DensePLDPmf):
        top = (pmf._lower_loss + len(pmf._probs) - 1) * pmf._discretization
        step, probabilities, losses = -pmf._discretization, np.flip(pmf._probs), None
    else:
        keys, masses = pmf._get_losses_probs()
        top, step, probabilities = 0.0, 0.0, np.asarray(masses[::-1], dtype=float)
        losses = np.asarray(keys[::-1], dtype=float)
    upper, lower, loss = infinity, 0.0, top  # the running sums, and the next loss of a dense PMF (losses counted down)
    start, chunk = 0, 256
    while start < probabilities.size:  # chunks of doubling size: the loop often stops within the first hundreds
        masses = probabilities[start : start + chunk]
        if losses is None:  # itertools.count(top, −d): each loss the one before plus −d
            chunk_losses = np.cumsum(np.concatenate(([loss], np.full(masses.size - 1, step))))
            loss = chunk_losses[-1] + step
        else:
            chunk_losses = losses[start : start + chunk]
        exps = np.fromiter(map(math.exp, (-chunk_losses).tolist()), dtype=float, count=masses.size)
        uppers = np.cumsum(np.concatenate(([upper], masses)))  # before the k-th loss: uppers[k]; after it: [k + 1]
        lowers = np.cumsum(np.concatenate(([lower], exps * masses)))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (uppers[:-1] - delta) / lowers[:-1]
            stops = (uppers[:-1] > delta) & (lowers[:-1] > 0)
            stops[stops] = _exact_logs(ratio[stops], chunk_losses[stops]) >= chunk_losses[stops]
        ends = (uppers[1:] >= delta) & (lowers[1:] == 0)
        first_stop = int(np.argmax(stops)) if stops.any() else masses.size
        first_end = int(np.argmax(ends)) if ends.any() else masses.size
        if first_end < first_stop:
            return max(0, float(chunk_losses[first_end]))
        if first_stop < masses.size:
            upper, lower = float(uppers[first_stop]), float(lowers[first_stop])
            break
        upper, lower = float(uppers[-1]), float(lowers[-1])
        start, chunk = start + chunk, min(2 * chunk, 1 << 16)
    if upper <= lower + delta:
        return 0
    return math.log((upper - delta) / lower)


def epsilon_for_delta(pld: PrivacyLossDistribution, delta: float) -> float:
    """``pld.get_epsilon_for_delta(delta)``, equal to dp-accounting's bit for bit, without its Python loop over the
    losses above ε.

    Args:
        pld: a PLD of this module's (or dp-accounting's).
        delta: δ.

    Returns:
        The smallest ε ≥ 0 (nats) whose δ(ε) of both adjacencies is at most δ; ``math.inf`` where none is.
    """
    remove = _pmf_epsilon(pld._pmf_remove, delta)
    if pld._symmetric:
        return remove
    return max(remove, _pmf_epsilon(pld._pmf_add, delta))
