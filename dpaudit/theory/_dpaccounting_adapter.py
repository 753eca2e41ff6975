"""The thin layer between dpaudit's (z, q, count) step tables and Google's dp-accounting.

Imported lazily by :mod:`dpaudit.theory.accounting` (dp-accounting takes about 0.8 s to import; ``import dpaudit``
stays light). Everything here takes checked values: validation and messages live in the accounting module.

* :func:`table_event`: steps → ``DpEvent``.
* :class:`RdpAccountant`: ``dp_accounting.rdp.RdpAccountant`` with one step's RDP computed once per (z, q, orders)
  (a calibration and a ledger's epochs ask for the same steps again and again), capped at the RDP of the Gaussian
  mechanism without subsampling, α/(2z²) — a valid bound (subsampling never increases a Rényi divergence), which
  also stands in where dp-accounting's fractional-order series does not converge (it returns +inf there) or
  cannot be evaluated (σ² overflowing or underflowing) — and a choice of RDP → (ε, δ) conversion.
* :func:`pld_accountant`: ``dp_accounting.pld.PLDAccountant`` at its default discretization.
* :class:`TableAccountant`: a ``PrivacyAccountant`` that hands the composed steps to a function (Opacus's PRV).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence

import dp_accounting
import numpy as np
from dp_accounting import privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

Table = list[tuple[float, float, int]]

PLD_DISCRETIZATION = 1e-4
"""The PLD accountant's privacy-loss grid in nats (dp-accounting's default ``value_discretization_interval``)."""

_HUGE_SIGMA = 1e150  # above this z, σ² nears overflow and any RDP is below 1e-290: the unsubsampled α/(2σ²) is used
_NOT_CONVERGED = "_compute_log_a_frac failed to converge"


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


class _DropSeriesWarnings(logging.Filter):
    """dp-accounting logs that an order whose fractional series did not converge is excluded from ε; here that
    order gets the unsubsampled bound instead, so the message would be false."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_NOT_CONVERGED)


@functools.lru_cache(maxsize=4096)
def step_rdp(noise_multiplier: float, sample_rate: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP (nats) of one Poisson-subsampled Gaussian step at each order, by dp-accounting's ``RdpAccountant``,
    capped at α/(2z²); +inf at every order where z² underflows. Cached: do not modify the returned array."""
    alphas = np.asarray(orders, dtype=float)
    z, q = noise_multiplier, sample_rate
    if z * z == 0:  # σ² underflows: no noise to speak of, the divergence is infinite at every order
        return np.full(len(alphas), np.inf)
    unsubsampled = alphas / 2 / z / z
    if q == 1.0 or z > _HUGE_SIGMA:  # without subsampling; above _HUGE_SIGMA a bound below 1e-290 (σ² overflows)
        return unsubsampled
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(orders))
    log = logging.getLogger("absl")
    quiet = _DropSeriesWarnings()
    log.addFilter(quiet)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)))
    finally:
        log.removeFilter(quiet)
    values = np.asarray(accountant._rdp, dtype=float)  # noqa: SLF001 - dp-accounting has no getter for the curve
    # RDP ≥ 0 (at large σ the sums round to ±1e-16) and ≤ the unsubsampled RDP (+inf and NaN where the series
    # failed become that bound)
    return np.clip(np.where(np.isnan(values), np.inf, values), 0.0, unsubsampled)


LAZY_ABOVE = 63.0
"""Orders above this (beyond Opacus's) are composed only when they could give the smallest ε (see
:class:`RdpAccountant`): dp-accounting sums α + 1 terms in Python for each, about three quarters of one step's cost
at :data:`dpaudit.theory.accounting.DEFAULT_ORDERS`, and they lower ε only for runs with ε below about 0.1."""


class RdpAccountant(rdp_privacy_accountant.RdpAccountant):
    """dp-accounting's RDP accountant for Poisson-subsampled Gaussian steps, with :func:`step_rdp`'s cache and cap.

    The RDP at orders above :data:`LAZY_ABOVE` is composed on demand: the RDP of a subsampled Gaussian step does
    not decrease with α, so at every such order ε ≥ RDP(α₀) + min over those orders of the conversion's order term,
    α₀ the largest order at most :data:`LAZY_ABOVE`; where that bound is not below the ε of the other orders, the
    large orders cannot give the minimum and ε is the one every order gives. Otherwise (and for :attr:`rdp`) they
    are composed like the others.

    Args:
        orders: Rényi orders α > 1.
        to_epsilon: ``(rdp, orders, δ) → ε`` for the conversion; ``None``: dp-accounting's own
            (``rdp_privacy_accountant.compute_epsilon``: Balle et al. 2020, Prop. 12, with the KL bound
            δ ≤ √(1 − e^(−RDP)) where that gives ε = 0, and orders ≤ 1.01 left out).
        order_term: ``(orders, δ) → c(α)``, the conversion's ε at RDP 0 per order (ε(α) = RDP(α) + c(α)); without
            it every order is composed at once.
    """

    def __init__(
        self,
        *,
        orders: Sequence[float],
        to_epsilon: Callable[[np.ndarray, np.ndarray, float], float] | None = None,
        order_term: Callable[[np.ndarray, float], np.ndarray] | None = None,
    ):
        super().__init__(orders=list(orders))
        alphas = np.asarray(orders, dtype=float)
        self._to_epsilon = to_epsilon
        self._order_term = order_term
        self._large = alphas > LAZY_ABOVE
        if order_term is None or self._large.all():
            self._large = np.zeros(len(alphas), dtype=bool)
        self._keys = (tuple(alphas[~self._large]), tuple(alphas[self._large]))
        self._pending: dict[tuple[float, float], int] = {}  # steps whose large orders are not composed yet

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(
            event.event, dp_accounting.GaussianDpEvent
        ):
            if do_compose:
                key = (float(event.event.noise_multiplier), float(event.sampling_probability))
                with np.errstate(over="ignore", invalid="ignore"):
                    self._rdp[~self._large] += float(count) * step_rdp(*key, self._keys[0])
                if self._large.any():
                    self._pending[key] = self._pending.get(key, 0) + count
            return None
        return super()._maybe_compose(event, count, do_compose)

    def _complete(self) -> None:
        """Compose the large orders of the pending steps."""
        for key, count in self._pending.items():
            with np.errstate(over="ignore", invalid="ignore"):
                self._rdp[self._large] += float(count) * step_rdp(*key, self._keys[1])
        self._pending.clear()

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP at each order (nats), a copy."""
        self._complete()
        return np.array(self._rdp, dtype=float)

    def _epsilon_at(self, which: np.ndarray, target_delta: float) -> float:
        orders, rdp = self._orders[which], np.asarray(self._rdp[which], dtype=float)
        if self._to_epsilon is not None:
            return float(self._to_epsilon(rdp, orders, target_delta))
        return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, target_delta)[0])

    def get_epsilon(self, target_delta: float) -> float:
        """ε at ``target_delta`` by the chosen conversion; +inf where the RDP is infinite at every order."""
        small = ~self._large
        if self._pending and small.any():
            if not np.any(np.isfinite(self._rdp[small])):
                return math.inf  # the large orders' RDP is at least as large
            value = self._epsilon_at(small, target_delta)
            largest_small = self._rdp[small][np.argmax(self._orders[small])]
            bound = largest_small + float(np.min(self._order_term(self._orders[self._large], target_delta)))
            if bound >= value + 1e-9 * (1 + abs(value)):  # margin for rounding in the RDP's monotonicity
                return value
        self._complete()
        if not np.any(np.isfinite(self._rdp)):
            return math.inf
        return self._epsilon_at(np.ones(len(self._orders), dtype=bool), target_delta)

    def get_epsilon_and_optimal_order(self, target_delta: float):
        self._complete()
        return super().get_epsilon_and_optimal_order(target_delta)


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
