"""The thin layer between dpaudit's (z, q, count) step tables and Google's dp-accounting.

Imported lazily by :mod:`dpaudit.theory.accounting` (dp-accounting takes about 0.8 s to import; ``import dpaudit``
stays light). Everything here takes checked values: validation and messages live in the accounting module.

* :func:`table_event`: steps → ``DpEvent``.
* :func:`step_rdp`: one step's RDP, dp-accounting's ``RdpAccountant`` at integer orders and dpaudit's own series
  (:mod:`dpaudit.theory._rdp_series`) at fractional ones, where dp-accounting 0.6.0 overestimates (see there);
  capped at the RDP of the Gaussian mechanism without subsampling, α/(2z²) — a valid bound (subsampling never
  increases a Rényi divergence), which also stands in where a sum cannot be evaluated (σ² overflowing or
  underflowing). Each (z, q, α) is computed once (a calibration and a ledger's epochs ask for the same steps again
  and again).
* :class:`RdpAccountant`: ``dp_accounting.rdp.RdpAccountant`` composing :func:`step_rdp`, with a choice of
  RDP → (ε, δ) conversion, and dp-accounting's Python sums left to the orders that can give the smallest ε.
* :func:`pld_accountant`: ``dp_accounting.pld.PLDAccountant`` at its default discretization.
* :class:`TableAccountant`: a ``PrivacyAccountant`` that hands the composed steps to a function (Opacus's PRV).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import dp_accounting
import numpy as np
import numpy.typing as npt
from dp_accounting import privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpaudit.theory._rdp_series import subsampled_gaussian_rdp

Table = list[tuple[float, float, int]]

PLD_DISCRETIZATION = 1e-4
"""The PLD accountant's privacy-loss grid in nats (dp-accounting's default ``value_discretization_interval``)."""

_HUGE_SIGMA = 1e150  # above this z, σ² nears overflow and any RDP is below 1e-290: the unsubsampled α/(2σ²) is used


def table_event(table: Table) -> dp_accounting.DpEvent:
    """``ComposedDpEvent`` of one ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), count)`` per
    (z, q, count) of ``table``, in its order."""
    return dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), count
            )
            for z, q, count in table
        ]
    )


SCREEN_MARGIN = 1e-6
"""Relative margin in ε of the integer orders that :class:`RdpAccountant` has dp-accounting sum (see there)."""


def _bounded(noise_multiplier: float, sample_rate: float, alphas: np.ndarray, values: Callable[[], np.ndarray]):
    """One step's RDP at ``alphas`` from ``values()``, at least 0 and at most the unsubsampled α/(2z²) (+inf and NaN,
    where a sum overflowed, become that bound); +inf at every order where z² underflows; α/(2z²) itself without
    subsampling (q = 1) or above :data:`_HUGE_SIGMA`, where ``values`` is not called."""
    z, q = noise_multiplier, sample_rate
    if z * z == 0:  # σ² underflows: no noise to speak of, the divergence is infinite at every order
        return np.full(len(alphas), np.inf)
    unsubsampled = alphas / 2 / z / z
    if q == 1.0 or z > _HUGE_SIGMA:  # without subsampling; above _HUGE_SIGMA a bound below 1e-290 (σ² overflows)
        return unsubsampled
    computed = values()
    # RDP ≥ 0: at large σ the sums round to ±1e-16
    return np.clip(np.where(np.isnan(computed), np.inf, computed), 0.0, unsubsampled)


@functools.lru_cache(maxsize=1 << 16)
def _dp_accounting_order(noise_multiplier: float, sample_rate: float, order: float) -> float:
    """dp-accounting's ``RdpAccountant``'s RDP of one Poisson-subsampled Gaussian step at one integer order."""
    accountant = rdp_privacy_accountant.RdpAccountant(orders=[order])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        accountant.compose(
            dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier))
        )
    return float(accountant._rdp[0])  # noqa: SLF001 - dp-accounting has no getter for the curve


def dp_accounting_rdp(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """One step's RDP (nats) at integer orders by dp-accounting's ``RdpAccountant``, bounded as :func:`_bounded`.

    dp-accounting sums the α + 1 binomial terms of each order in Python (about 3 µs a term): each (z, q, α) is
    computed once and cached."""
    alphas = np.asarray(orders, dtype=float)
    return _bounded(
        noise_multiplier,
        sample_rate,
        alphas,
        lambda: np.array([_dp_accounting_order(noise_multiplier, sample_rate, alpha) for alpha in orders]),
    )


def series_rdp(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """One step's RDP (nats) at any orders by dpaudit's own series (:mod:`dpaudit.theory._rdp_series`, cached there),
    bounded as :func:`_bounded`."""
    alphas = np.asarray(orders, dtype=float)
    return _bounded(
        noise_multiplier,
        sample_rate,
        alphas,
        lambda: subsampled_gaussian_rdp(noise_multiplier=noise_multiplier, sample_rate=sample_rate, orders=alphas),
    )


def step_rdp(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP (nats) of one Poisson-subsampled Gaussian step at each order α, as :class:`RdpAccountant` composes it.

    Integer orders go through dp-accounting's ``RdpAccountant`` (:func:`dp_accounting_rdp`); fractional orders
    through dpaudit's own series (:func:`series_rdp`), because dp-accounting 0.6.0's ``_compute_log_a_frac``
    log-adds the absolute values of the series' terms, whose signs alternate (its ``_log_comb`` is a log-gamma
    expression that drops the sign of the generalised binomial coefficient C(α, i) for i > α): an overestimate,
    7 % at α = 1.1, z = 1, q = 0.01 and 6× at α = 1.1, z = 4, q = 0.25, and +inf (the order left out) where its
    1000 terms do not converge, e.g. α = 1.5, z = 1, q = 0.1. At integer orders the two agree to 1e-9 relative.
    Both are capped at the unsubsampled α/(2z²) (a valid bound: subsampling never increases a Rényi divergence).
    """
    alphas = np.asarray(orders, dtype=float)
    integer = alphas == np.round(alphas)
    values = np.empty(len(alphas))
    values[integer] = dp_accounting_rdp(noise_multiplier, sample_rate, tuple(alphas[integer]))
    values[~integer] = series_rdp(noise_multiplier, sample_rate, tuple(alphas[~integer]))
    return values


def clear_caches() -> None:
    """Forget every cached RDP value (benchmarks time the accountants cold)."""
    from dpaudit.theory import _rdp_series

    _dp_accounting_order.cache_clear()
    _rdp_series._cached.cache_clear()  # noqa: SLF001


def improved_per_order(rdp: np.ndarray, orders: np.ndarray, delta: float) -> np.ndarray:
    """dp-accounting's improved conversion (``rdp_privacy_accountant.compute_epsilon``) order by order, clipped at 0:
    Balle et al. 2020, Prop. 12, ε = RDP + log(1 − 1/α) − log(δα)/(α − 1) for α > 1.01; 0 where the KL bound
    δ ≤ √(1 − e^(−RDP)) holds; +inf at α ≤ 1.01 otherwise. Its minimum over the orders is ``compute_epsilon``'s ε."""
    rdp = np.asarray(rdp, dtype=float)
    orders = np.asarray(orders, dtype=float)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        formula = rdp + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
        kl = (rdp <= 0) | (delta**2 + np.expm1(-rdp) > 0)
    values = np.where(kl, 0.0, np.where(orders > 1.01, formula, np.inf))
    return np.maximum(np.where(np.isnan(values), np.inf, values), 0.0)


class RdpAccountant(rdp_privacy_accountant.RdpAccountant):
    """dp-accounting's RDP accountant for Poisson-subsampled Gaussian steps, one step's RDP as :func:`step_rdp`:
    dp-accounting's at integer orders, dpaudit's own series at fractional ones.

    dp-accounting sums the α + 1 terms of each integer order in Python, about 0.1 s for the integer orders of
    :data:`dpaudit.theory.accounting.DEFAULT_ORDERS` (up to 5,088), where dpaudit's own vectorised series takes
    about 2 ms. So :meth:`get_epsilon` first evaluates ε at every order with dpaudit's series, then has dp-accounting
    sum only the integer orders whose ε there is within :data:`SCREEN_MARGIN` (relative) of the smallest, and the
    best integer order, and takes the minimum over those and the fractional orders. Where dp-accounting's RDP at
    one of them differs from the series' by more than half that margin, every integer order goes through
    dp-accounting instead. Both sum the same positive terms (equal to 1e-9 relative), so ε is what every integer
    order through dp-accounting gives; the series chooses orders, never a value, and a wrong choice could only leave
    out an order, which raises ε.

    Args:
        orders: Rényi orders α > 1.
        to_epsilon: ``(rdp, orders, δ) → ε`` for the conversion; ``None``: dp-accounting's own
            (``rdp_privacy_accountant.compute_epsilon``: Balle et al. 2020, Prop. 12, with the KL bound
            δ ≤ √(1 − e^(−RDP)) where that gives ε = 0, and orders ≤ 1.01 left out).
        per_order: ``(rdp, orders, δ) → ε per order``, non-decreasing in the RDP, whose minimum is ``to_epsilon``'s
            ε; ``None``: :func:`improved_per_order`.
    """

    def __init__(
        self,
        *,
        orders: npt.ArrayLike,
        to_epsilon: Callable[[np.ndarray, np.ndarray, float], float] | None = None,
        per_order: Callable[[np.ndarray, np.ndarray, float], np.ndarray] | None = None,
    ):
        super().__init__(orders=[float(order) for order in np.asarray(orders, dtype=float).reshape(-1)])
        self._to_epsilon = to_epsilon
        self._per_order = per_order or improved_per_order
        self._integer = self._orders == np.round(self._orders)
        self._steps: dict[tuple[float, float], int] = {}  # Poisson-subsampled Gaussian steps: (z, q) → count

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(
            event.event, dp_accounting.GaussianDpEvent
        ):
            if do_compose:
                key = (float(event.event.noise_multiplier), float(event.sampling_probability))
                self._steps[key] = self._steps.get(key, 0) + count
            return None
        return super()._maybe_compose(event, count, do_compose)

    def _total(self, rdp_of: Callable[[float, float, tuple[float, ...]], np.ndarray], which: np.ndarray) -> np.ndarray:
        """The composed RDP at the orders ``which`` selects, each step's by ``rdp_of``."""
        orders = tuple(float(order) for order in self._orders[which])
        total = np.array(self._rdp[which], dtype=float)  # the events dp-accounting composed itself
        with np.errstate(over="ignore", invalid="ignore"):
            for (z, q), count in self._steps.items():
                total += float(count) * rdp_of(z, q, orders)
        return total

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP at each order (nats), every integer order through dp-accounting."""
        return self._total(step_rdp, np.ones(len(self._orders), dtype=bool))

    def _epsilon_at(self, rdp: np.ndarray, which: np.ndarray, target_delta: float) -> float:
        orders, values = self._orders[which], rdp[which]
        if not np.any(np.isfinite(values)):
            return math.inf
        if self._to_epsilon is not None:
            return float(self._to_epsilon(values, orders, target_delta))
        return float(rdp_privacy_accountant.compute_epsilon(orders, values, target_delta)[0])

    def get_epsilon(self, target_delta: float) -> float:
        """ε at ``target_delta`` by the chosen conversion; +inf where the RDP is infinite at every order."""
        every = np.ones(len(self._orders), dtype=bool)
        screened = self._total(series_rdp, every)
        epsilons = self._per_order(screened, self._orders, target_delta)
        if not np.any(np.isfinite(epsilons)):
            return math.inf
        best = float(np.min(epsilons))
        margin = SCREEN_MARGIN * (1 + abs(best))
        summed = self._integer & (epsilons <= best + margin)
        if self._integer.any():  # and the best integer order, which checks the series where a fractional one wins
            summed[np.flatnonzero(self._integer)[np.argmin(epsilons[self._integer])]] = True
        rdp = screened.copy()
        rdp[summed] = self._total(dp_accounting_rdp, summed)
        with np.errstate(invalid="ignore"):
            agree = np.all(np.abs(rdp[summed] - screened[summed]) <= margin / 2)
        if not agree:  # the series cannot be trusted to choose here: every integer order through dp-accounting
            summed = self._integer
            rdp[summed] = self._total(dp_accounting_rdp, summed)
        return self._epsilon_at(rdp, ~self._integer | summed, target_delta)

    def get_epsilon_and_optimal_order(self, target_delta: float):
        rdp = self.rdp
        if self._to_epsilon is not None or not np.any(np.isfinite(rdp)):
            raise NotImplementedError("dpaudit reads ε through get_epsilon")
        epsilon, order = rdp_privacy_accountant.compute_epsilon(self._orders, rdp, target_delta)
        return float(epsilon), float(order)


def pld_accountant() -> dp_accounting.pld.PLDAccountant:
    """A fresh ``dp_accounting.pld.PLDAccountant`` (add/remove neighbours, pessimistic estimate, connect-the-dots,
    :data:`PLD_DISCRETIZATION`)."""
    return dp_accounting.pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)


class TableAccountant(privacy_accountant.PrivacyAccountant):
    """Composes Poisson-subsampled Gaussian events into a (z, q, count) table and asks ``epsilon_of`` for ε.

    Args:
        epsilon_of: ``(table, δ) → ε`` of the composed steps (the table merged: one row per distinct (z, q)).
    """

    def __init__(self, epsilon_of: Callable[[Table, float], float]):
        super().__init__(privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE)
        self._epsilon_of = epsilon_of
        self._counts: dict[tuple[float, float], int] = {}
        self._non_private = False

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, dp_accounting.NoOpDpEvent):
            return None
        if isinstance(event, dp_accounting.NonPrivateDpEvent):
            self._non_private = self._non_private or do_compose
            return None
        if isinstance(event, dp_accounting.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dp_accounting.ComposedDpEvent):
            for part in event.events:
                error = self._maybe_compose(part, count, do_compose)
                if error is not None:
                    return error
            return None
        if isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(
            event.event, dp_accounting.GaussianDpEvent
        ):
            if do_compose:
                key = (float(event.event.noise_multiplier), float(event.sampling_probability))
                self._counts[key] = self._counts.get(key, 0) + count
            return None
        return self.CompositionErrorDetails(
            invalid_event=event, error_message="only Poisson-subsampled Gaussian steps are supported"
        )

    def get_epsilon(self, target_delta: float) -> float:
        if self._non_private:
            return math.inf
        table = [(z, q, count) for (z, q), count in sorted(self._counts.items())]
        return float(self._epsilon_of(table, target_delta)) if table else 0.0
