"""Privacy accounting for any sequence of Poisson-subsampled Gaussian steps, through Google's dp-accounting.

Every DP optimizer in dpaudit releases, per step, the sum of per-record contributions of ℓ2 norm ≤ C
plus N(0, (z·C)² I) on a Poisson sample of rate q. A run is therefore described by its per-step
(z, q) — the privacy ledger. This module turns any such sequence into a dp-accounting ``DpEvent``
(:func:`dp_event`: one ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), count)`` per distinct
(z, q)) and has dp-accounting's accountants compose them into (ε, δ):

* ``accountant="rdp"``: ``dp_accounting.rdp.RdpAccountant`` (Rényi DP of the subsampled Gaussian, Mironov, Talwar &
  Zhang 2019, summed over steps per order α), converted to (ε, δ) with the ``"improved"`` conversion
  (dp-accounting's own: Balle et al. 2020, Prop. 12, what Opacus uses, with the KL bound where the RDP is below
  about δ²) or the ``"classic"`` one (Mironov 2017, ε = min_α RDP(α) + log(1/δ)/(α−1), what TF Privacy and older
  papers used; :func:`rdp_to_epsilon` on the accountant's RDP). dp-accounting computes the RDP at integer orders
  only: at fractional orders dp-accounting 0.6.0's series (``_compute_log_a_frac``) adds the absolute values of
  terms whose signs alternate and overestimates the RDP (7 % at α = 1.1, z = 1, q = 0.01; 6× at α = 1.1, z = 4,
  q = 0.25), so they are dpaudit's own series (:mod:`dpaudit.theory._rdp_series`), exact (see
  :func:`dpaudit.theory._dpaccounting_adapter.step_rdp`). One step's RDP is capped at the unsubsampled α/(2z²).
* ``accountant="pld"``: ``dp_accounting.pld.PLDAccountant`` (privacy-loss distributions, pessimistic estimate on
  a 1e-4 grid): the tightest, an upper bound on ε.
* ``accountant="prv"``: the privacy-random-variable accountant of Gopi, Lee & Wutschitz (2021), through
  Opacus's ``PRVAccountant`` (its upper estimate, ``eps_error`` 0.01 by default). Importing it imports
  torch, so it is loaded only when asked for. The truncation L of its grid, from Opacus's RDP bound, is computed with
  Opacus's series summed as arrays, which gives Opacus's grid bit for bit where a rounding of L cannot move it (else
  Opacus's own loop). Its grid is sized before it is built: one over
  :data:`PRV_MEMORY_BUDGET` is refused with a one-line error, and where the grid cannot represent the
  privacy loss (ε in the hundreds, e^t overflows) or Opacus fails numerically, the RDP bound is returned
  instead with an :class:`AccountingFallbackWarning`; a non-finite ε is never returned silently.

Noise calibration (:func:`calibrate_noise`) is ``dp_accounting.calibrate_dp_mechanism`` over an event factory
(log z → the run's ``DpEvent``), for every accountant. :func:`rdp_subsampled_gaussian`, the exact RDP of one step
at any order (read by the DPSGD-GC/DC claim checks), is dpaudit's own signed series at every order
(:mod:`dpaudit.theory._rdp_series`), which the tests also use as the oracle of dp-accounting's RDP at integer
orders. Only numpy, scipy and dp-accounting are needed for ``rdp`` and ``pld``; dp-accounting is imported on first
use.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpaudit._validation import (
    DPAuditError,
    brief,
    check_choice,
    check_count,
    check_number,
    check_positive,
    check_probability,
    check_ratio,
    real_array,
)

if TYPE_CHECKING:
    from dp_accounting import DpEvent

    from dpaudit.ledger import PrivacyLedger

OPACUS_ORDERS: tuple[float, ...] = tuple([1 + x / 10 for x in range(1, 100)] + list(range(12, 64)))
"""Rényi orders α used by Opacus (and TF Privacy's Tramer–Boneh experiments): 1.1 … 10.9, 12 … 63."""

DEFAULT_ORDERS: tuple[float, ...] = OPACUS_ORDERS + tuple(sorted({round(64 * 1.2**k) for k in range(25)}))
"""Opacus's orders, then integer orders 64 … 5,088 spaced by a factor of about 1.2.

With Opacus's orders alone the RDP ε can never fall below ≈ 0.10 at δ = 1e-5 (the conversion term
(log(1/δ) − log α)/(α − 1) at α = 63), however much noise is added; the larger orders lower that floor to
≈ 0.0004 (0.002 with the classic conversion; :func:`rdp_epsilon_floor`). Where the best order is below 64 the
ε is what the same orders give alone."""

ACCOUNTANTS = ("rdp", "pld", "prv")
CONVERSIONS = ("improved", "classic")

PRV_MEMORY_BUDGET = 1 << 30
"""Bytes the PRV accountant's grid may take (about 180 bytes a grid point for the first (z, q) pair and 24
for each further one, measured with Opacus 1.6); a larger grid is refused before it is built."""
_PRV_LARGEST_LOSS = 700.0  # e^t overflows float64 just above t = 709.78: PRV's domain must stay below
_MAX_ORDER = 1e6  # the integer orders' sums hold α + 1 terms each: bounded so that no order list is a memory bomb
_MAX_ORDER_TERMS = 1 << 22
_MAX_STEPS = 2**63 - 1


def rdp_subsampled_gaussian(
    *, noise_multiplier: float, sample_rate: float, orders: npt.ArrayLike = DEFAULT_ORDERS
) -> np.ndarray:
    """Exact RDP of one Poisson-subsampled Gaussian step at each order (add/remove-one neighbours).

    dpaudit's own series (Mironov, Talwar & Zhang 2019, §3.3, summed with its signs): the exact value at every
    order, which the DPSGD-GC/DC claim checks read at α = 1.1. The RDP accountant uses dp-accounting's
    ``RdpAccountant`` at integer orders, which equals this to 1e-9 relative, and this at fractional orders.

    Args:
        noise_multiplier: z, noise std divided by the ℓ2 sensitivity C (> 0).
        sample_rate: Poisson sampling probability q ∈ (0, 1].
        orders: Rényi orders α > 1.

    Returns:
        RDP(α) in nats, one entry per order (+inf at an order where σ is so small that the divergence
        overflows; :func:`rdp_to_epsilon` raises if every order is +inf).
    """
    from dpaudit.theory._rdp_series import subsampled_gaussian_rdp

    z = _positive("noise_multiplier (σ)", noise_multiplier)
    q = float(check_ratio("sample_rate (q)", sample_rate))
    return subsampled_gaussian_rdp(noise_multiplier=z, sample_rate=q, orders=_check_orders(orders))


def rdp_to_epsilon(
    *, rdp: np.ndarray, orders: npt.ArrayLike, delta: float, conversion: str = "improved"
) -> tuple[float, float]:
    """Convert an RDP curve to (ε, best order α) at δ.

    Args:
        rdp: total RDP at each order.
        orders: the orders α of ``rdp``.
        delta: target δ ∈ (0, 1).
        conversion: "improved" (Balle et al. 2020): ε = RDP + log((α−1)/α) − (log δ + log α)/(α−1);
            "classic" (Mironov 2017): ε = RDP + log(1/δ)/(α−1).

    Returns:
        (ε, α) minimising ε; ε is clipped at 0 from below.

    Raises:
        DPAuditError: when the RDP is infinite (or undefined) at every order.
    """
    eps = rdp_to_epsilon_per_order(rdp=rdp, orders=orders, delta=delta, conversion=conversion)
    orders = np.asarray(orders, dtype=float)
    eps = np.where(np.isnan(eps), np.inf, eps)
    best = int(np.argmin(eps))
    if not np.isfinite(eps[best]):
        raise DPAuditError(
            f"the RDP is infinite at every one of the {len(orders)} orders: no finite ε at δ = {delta:g}"
        )
    return max(float(eps[best]), 0.0), float(orders[best])


def rdp_to_epsilon_per_order(*, rdp, orders, delta: float, conversion: str = "improved") -> np.ndarray:
    """The (ε, δ)-DP ε that (α, RDP)-RDP gives at each order α, without minimising over α.

    This is the one RDP → (ε, δ) formula of dpaudit: :func:`rdp_to_epsilon` minimises it over the orders, and
    :func:`dpaudit.theory.rdp_to_dp` reads a closed-form bound at its own α with the classic form.

    Args:
        rdp: RDP ε at each order (nats), broadcast against ``orders``.
        orders: Rényi orders α > 1.
        delta: target δ ∈ (0, 1).
        conversion: "improved" (Balle et al. 2020): ε = RDP + log((α−1)/α) − (log δ + log α)/(α−1);
            "classic" (Mironov 2017, Proposition 3): ε = RDP + log(1/δ)/(α−1).

    Returns:
        ε at each order (broadcast shape; not clipped at 0).
    """
    check_choice("conversion", conversion, CONVERSIONS)
    check_probability("delta (δ)", delta)
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if conversion == "classic":
        return rdp + math.log(1 / delta) / (orders - 1)
    return rdp + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)


def linear_rdp_to_epsilon(*, slope: float, delta: float) -> tuple[float, float]:
    """Classic conversion minimised in closed form over every real α > 1, for RDP linear in α: RDP(α) = α·c.

    A named variant of :func:`rdp_to_epsilon_per_order` (``conversion="classic"``) for closed-form bounds such as
    those of :mod:`dpaudit.theory.bounds`: α·c + log(1/δ)/(α − 1) is smallest at α_opt = 1 + √(log(1/δ)/c),
    where ε = c + 2√(c·log(1/δ)) (Mironov 2017; Lemma 2.4 of Liang et al., AAAI 2026).

    Args:
        slope: c = RDP(α)/α, > 0.
        delta: target δ ∈ (0, 1).

    Returns:
        (ε, α_opt).
    """
    c = check_positive("slope", slope)
    check_probability("delta (δ)", delta)
    log_term = math.log(1.0 / delta)
    return c + 2.0 * math.sqrt(c * log_term), 1.0 + math.sqrt(log_term / c)


def _positive(name: str, value) -> float:
    """A finite number > 0 (booleans and strings refused)."""
    check_number(name, value)  # booleans, text, sequences and None refused
    return check_positive(name, value)


def _probability(name: str, value) -> float:
    """A number in (0, 1) (booleans and strings refused)."""
    check_number(name, value)  # booleans, text, sequences and None refused
    return check_probability(name, value)


def _check_steps(steps, *, allow_zero: bool = True) -> int:
    """T as an ``int`` ≥ 0 (> 0 unless ``allow_zero``); numpy integers and integral floats accepted, booleans,
    strings, fractions and counts beyond 2⁶³ − 1 refused."""
    count = check_count("steps", steps, allow_zero=allow_zero)
    if count > _MAX_STEPS:
        raise DPAuditError(f"steps must be at most 2⁶³ − 1, got {brief(steps)}")
    return count


def _per_step(name: str, value) -> np.ndarray:
    """A number (a 0-D array) or a 1-D sequence of numbers (one per step) as floats; anything else refused."""
    array = real_array(value, refused=f"{name} must be a number or a 1-D sequence of numbers (one per step)")
    if array.ndim > 1:
        raise DPAuditError(f"{name} must be a number or a 1-D sequence (one per step), got shape {array.shape}")
    return array


def _common_length(named: dict[str, np.ndarray | None], steps: int | None, *, single: str) -> int:
    """T: the length of the 1-D per-step arrays among ``named`` (each the same, and ``steps`` where given), or
    ``steps`` where every value is a single number (without it: "give steps when ``single``")."""
    lengths = {array.size for array in named.values() if array is not None and array.ndim == 1}
    if len(lengths) > 1:
        raise DPAuditError(f"per-step {' and '.join(named)} differ in length: {sorted(lengths)}")
    if lengths:
        length = lengths.pop()
        if steps is not None and steps != length:
            raise DPAuditError(f"steps={steps} but {length} per-step values were given")
        return length
    if steps is None:
        raise DPAuditError(f"give steps when {single}")
    return steps


def _steps_table(noise_multiplier, sample_rate, steps) -> list[tuple[float, float, int]]:
    """Group the steps into (z, q, count) triples, one per distinct (z, q), sorted; validates every value once.

    A number for both z and q with ``steps = T`` is the one triple (z, q, T), built without any per-step array:
    what the accountants cost grows with the number of distinct steps, not with T.
    """
    if steps is not None:
        steps = _check_steps(steps)
    z = _per_step("noise_multiplier (σ)", noise_multiplier)
    q = _per_step("sample_rate (q)", sample_rate)
    length = _common_length(
        {"noise_multiplier": z, "sample_rate": q}, steps, single="noise_multiplier and sample_rate are single values"
    )
    z, q = np.atleast_1d(z), np.atleast_1d(q)
    if not np.all(np.isfinite(z)) or np.any(z <= 0):
        raise DPAuditError(f"noise_multiplier (σ) must be > 0 and finite; got {z[~(np.isfinite(z) & (z > 0))][0]}")
    if not np.all(np.isfinite(q)) or np.any((q <= 0) | (q > 1)):
        raise DPAuditError(f"sample_rate (q) must be in (0, 1]; got {q[~((q > 0) & (q <= 1))][0]}")
    if length == 0:
        return []
    if z.size == 1 and q.size == 1:
        return [(float(z[0]), float(q[0]), length)]
    z, q = np.broadcast_to(z, (length,)), np.broadcast_to(q, (length,))
    pairs, counts = np.unique(np.stack([z, q], axis=1), axis=0, return_counts=True)
    return [(float(a), float(b), int(c)) for (a, b), c in zip(pairs, counts)]


def _merged(*tables: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """Several (z, q, count) tables as one: the counts of equal (z, q) summed, sorted."""
    counts: dict[tuple[float, float], int] = {}
    for table in tables:
        for z, q, count in table:
            counts[(z, q)] = counts.get((z, q), 0) + count
    return [(z, q, count) for (z, q), count in sorted(counts.items())]


def _check_options(*, delta, accountant, orders, conversion, eps_error) -> tuple[float, np.ndarray, float]:
    """(δ, orders, eps_error) after the one-line checks of every accounting option, whichever accountant uses it."""
    delta = _probability("delta (δ)", delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    orders = _check_orders(orders)
    check_choice("conversion", conversion, CONVERSIONS)
    eps_error = _positive("eps_error", eps_error)
    return delta, orders, eps_error


def _accountant(name: str, *, orders: np.ndarray, conversion: str, eps_error: float):
    """A fresh dp-accounting ``PrivacyAccountant`` for checked options: ``RdpAccountant`` (dp-accounting's improved
    conversion, or the classic one on its RDP), ``PLDAccountant``, or Opacus's PRV behind the same interface. Its
    ``get_epsilon`` is +inf where no finite ε exists (RDP infinite at every order, a step without noise)."""
    from dpaudit.theory import _dpaccounting_adapter as adapter

    if name == "rdp":
        if conversion == "improved":  # dp-accounting's own conversion
            return adapter.RdpAccountant(orders=orders)

        def classic(rdp: np.ndarray, alphas: np.ndarray, target_delta: float) -> float:
            return rdp_to_epsilon(rdp=rdp, orders=alphas, delta=target_delta, conversion="classic")[0]

        def classic_per_order(rdp: np.ndarray, alphas: np.ndarray, target_delta: float) -> np.ndarray:
            return rdp_to_epsilon_per_order(rdp=rdp, orders=alphas, delta=target_delta, conversion="classic")

        return adapter.RdpAccountant(orders=orders, to_epsilon=classic, per_order=classic_per_order)
    if name == "pld":
        # where PLD or PRV cannot give ε, the RDP bound at these orders and conversion
        return adapter.TableAccountant(
            lambda table, target_delta: _pld_epsilon(table, delta=target_delta, orders=orders, conversion=conversion)
        )
    return adapter.TableAccountant(
        lambda table, target_delta: _prv_epsilon(
            table, delta=target_delta, eps_error=eps_error, orders=orders, conversion=conversion
        )
    )


def _table_epsilon(
    table: list[tuple[float, float, int]],
    *,
    delta: float,
    accountant: str,
    orders: np.ndarray,
    conversion: str,
    eps_error: float,
) -> float:
    """ε of checked (z, q, count) steps (0 for none)."""
    if not table:
        return 0.0
    if accountant == "prv":
        return _prv_epsilon(table, delta=delta, eps_error=eps_error, orders=orders, conversion=conversion)
    if accountant == "pld":
        return _pld_epsilon(table, delta=delta, orders=orders, conversion=conversion)
    return _rdp_epsilon(table, delta=delta, orders=orders, conversion=conversion)


def dp_event(
    *,
    noise_multiplier: float | npt.ArrayLike | None = None,
    sample_rate: float | npt.ArrayLike | None = None,
    steps: int | None = None,
    ledger: PrivacyLedger | dict | None = None,
) -> DpEvent:
    """A run's steps as a dp-accounting ``DpEvent``, what dp-accounting's accountants and calibration compose.

    Each distinct (z, q) among the steps becomes ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
    GaussianDpEvent(z)), count)``, and the run is their ``ComposedDpEvent``, sorted by (z, q): composition does not
    depend on the order of the steps, and T identical steps are one event however large T.

    Args:
        noise_multiplier: z per step (a number for all steps, or one value per step), noise std / C.
        sample_rate: q per step (a number or one value per step), in (0, 1].
        steps: number of steps T, as in :func:`epsilon`.
        ledger: instead of the three above, a :class:`dpaudit.ledger.PrivacyLedger` (or its ``to_dict()`` form):
            every step it recorded. A ledger of a run that made no DP claim and recorded no steps is a
            ``NonPrivateDpEvent`` (infinite ε).

    Returns:
        A ``dp_accounting.ComposedDpEvent`` (with no events for zero steps), or ``NonPrivateDpEvent``.

    Raises:
        DPAuditError: one line naming a bad value, or a ledger given beside per-step values.

    Examples:
        >>> event = dp_event(noise_multiplier=[1.0, 2.0, 1.0], sample_rate=0.01)
        >>> [(part.event.event.noise_multiplier, part.event.sampling_probability, part.count) for part in event.events]
        [(1.0, 0.01, 2), (2.0, 0.01, 1)]
    """
    from dpaudit.theory import _dpaccounting_adapter as adapter

    if ledger is None:
        if noise_multiplier is None or sample_rate is None:
            raise DPAuditError("dp_event needs noise_multiplier and sample_rate, or a ledger")
        return adapter.table_event(_steps_table(noise_multiplier, sample_rate, steps))
    if noise_multiplier is not None or sample_rate is not None or steps is not None:
        raise DPAuditError("dp_event takes a ledger or noise_multiplier, sample_rate and steps, not both")
    ledger = _as_ledger(ledger)
    if ledger.steps == 0 and not ledger.dp_claim:
        import dp_accounting

        return dp_accounting.NonPrivateDpEvent()
    runs = [(run.noise_multiplier, run.sample_rate, _check_steps(run.steps)) for run in ledger.runs]
    _steps_table([z for z, _, _ in runs], [q for _, q, _ in runs], None)  # every value checked
    return adapter.table_event(_merged([(float(z), float(q), count) for z, q, count in runs]))


def epsilon(
    *,
    noise_multiplier: float | npt.ArrayLike,
    sample_rate: float | npt.ArrayLike,
    steps: int | None = None,
    delta: float,
    accountant: str = "rdp",
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "improved",
    eps_error: float = 0.01,
) -> float:
    """Theoretical ε of a composition of Poisson-subsampled Gaussian steps at δ.

    The steps become a ``DpEvent`` (:func:`dp_event`) composed by dp-accounting's ``RdpAccountant`` or
    ``PLDAccountant``, or by Opacus's PRV accountant.

    Args:
        noise_multiplier: z per step (a number for all steps, or one value per step), noise std / C.
        sample_rate: q per step (a number or one value per step), in (0, 1].
        steps: number of steps T (an integer ≥ 0, at most 2⁶³ − 1); required when both of the above are numbers.
            T identical steps cost what one step costs: the RDP is T × one step's RDP, the PLD is self-composed
            once, and the PRV accountant composes them in one go (its grid, sized before it is built, still
            grows as √T).
        delta: δ ∈ (0, 1).
        accountant: "rdp", "pld" or "prv".
        orders: Rényi orders 1 < α ≤ 10⁶ (rdp only; dp-accounting's improved conversion leaves out α ≤ 1.01).
        conversion: "improved" or "classic" RDP→(ε, δ) conversion (rdp only).
        eps_error: the PRV accountant's ε discretisation error (prv only).

    Returns:
        ε ≥ 0 (0 for zero steps), always finite. With ``accountant="prv"``, where the PRV grid cannot
        represent the run (ε in the hundreds) or Opacus fails numerically, and with ``accountant="pld"``, where
        δ is below the PLD's truncated tail mass (about 1e-15), the RDP upper bound with an
        :class:`AccountingFallbackWarning` saying so.

    Raises:
        DPAuditError: one line naming a bad argument (σ ≤ 0, q outside (0, 1], δ outside (0, 1), …), or
            the settings whose PRV grid would exceed :data:`PRV_MEMORY_BUDGET`.

    Examples:
        DP-SGD on MNIST (Abadi et al.): z = 1.1, b = 256 of n = 60,000, 60 epochs:

        >>> round(epsilon(noise_multiplier=1.1, sample_rate=256 / 60000, steps=14062, delta=1e-5), 2)
        2.6
    """
    table = _steps_table(noise_multiplier, sample_rate, steps)
    delta, orders, eps_error = _check_options(
        delta=delta, accountant=accountant, orders=orders, conversion=conversion, eps_error=eps_error
    )
    return _table_epsilon(
        table, delta=delta, accountant=accountant, orders=orders, conversion=conversion, eps_error=eps_error
    )


class AccountingFallbackWarning(UserWarning):
    """The PRV or PLD accountant could not compute ε here; the (valid, looser) RDP upper bound was returned."""


def prv_grid(
    *,
    noise_multiplier: float | npt.ArrayLike,
    sample_rate: float | npt.ArrayLike,
    steps: int | None = None,
    delta: float,
    eps_error: float = 0.01,
) -> dict:
    """Size of the grid on which the PRV accountant would discretise this run, without building it.

    Follows Opacus's ``PRVAccountant`` (Gopi, Lee & Wutschitz 2021, remark 5.6): the privacy loss t is
    truncated to [−L, L], L = 3 + an RDP bound on ε at δ_error / 4 (δ_error = δ/1000), on a mesh of
    ``eps_error`` / √(T · log(12/δ_error) / 2).

    Args:
        noise_multiplier, sample_rate, steps, delta, eps_error: as :func:`epsilon`.

    Returns:
        ``{"domain": L, "mesh": mesh, "points": grid points, "pairs": distinct (z, q), "bytes": estimated
        peak memory of the accountant in bytes}``.
    """
    table = _steps_table(noise_multiplier, sample_rate, steps)
    eps_error = _positive("eps_error", eps_error)
    delta = _probability("delta (δ)", delta)
    if not table:
        raise DPAuditError("a PRV grid needs at least one step; zero steps have ε = 0 without one")
    return _prv_grid(table, delta=delta, eps_error=eps_error)


@functools.lru_cache(maxsize=4096)
def _opacus_step_rdp(sample_rate: float, noise_multiplier: float) -> npt.NDArray[np.float64]:
    """One step's RDP at Opacus's ``RDPAccountant.DEFAULT_ALPHAS``, as its ``compute_rdp`` computes it (read-only;
    cached: a calibration asks for the same (q, z) several times)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import _compute_rdp

    rdp = np.array([_compute_rdp(sample_rate, noise_multiplier, order) for order in RDPAccountant.DEFAULT_ALPHAS])
    rdp.flags.writeable = False
    return rdp


_SERIES_FIRST_TERMS = 64  # the vectorised series' first chunk of terms, then 4× as many until the last is found
_SERIES_MOST_VALUES = 1 << 21  # the most terms computed at once (all orders' together): beyond, Opacus's own loop


@functools.lru_cache(maxsize=4096)
def _series_step_rdp(sample_rate: float, noise_multiplier: float) -> npt.NDArray[np.float64] | None:
    """One step's RDP at Opacus's ``RDPAccountant.DEFAULT_ALPHAS`` by Opacus's own series, its terms computed as
    arrays: at the fractional orders the terms of ``_compute_log_a_for_frac_alpha`` up to the same last one (the first
    whose two parts are both below e^−30), summed with their signs at once instead of one after the other; at the
    integer orders the α + 1 terms of ``_compute_log_a_for_int_alpha``, summed at once. Equal to
    :func:`_opacus_step_rdp` up to rounding (a test bounds the difference), many times faster; None where the series
    would take more than ``_SERIES_MOST_VALUES`` terms at once or a sum is not positive (only Opacus's loop then says
    what it gives)."""
    from opacus.accountants import RDPAccountant
    from scipy import special

    q, sigma = sample_rate, noise_multiplier
    if not (0 < q < 1 and sigma > 0):
        return _opacus_step_rdp(q, sigma)
    orders = np.array(RDPAccountant.DEFAULT_ALPHAS, dtype=np.float64)
    log_q, log_1q, scale = math.log(q), math.log(1 - q), math.sqrt(2) * sigma
    rdp = np.full(orders.shape, np.nan)
    # integer orders (``_compute_log_a_for_int_alpha``): log Σ_{i ≤ α} binom(α, i) q^i (1−q)^(α−i) e^((i²−i)/(2σ²))
    (integer,) = np.nonzero(orders == np.round(orders))
    alpha, i = orders[integer, None], np.arange(orders[integer].max() + 1)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):  # i > α: no term
        log_s = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(alpha - i + 1)
        log_s = np.where(i <= alpha, log_s + i * log_q + (alpha - i) * log_1q + (i * i - i) / (2 * sigma**2), -np.inf)
    rdp[integer] = special.logsumexp(log_s, axis=1) / (orders[integer] - 1)
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    (pending,) = np.nonzero(np.isnan(rdp))  # the fractional orders whose series has not ended yet
    size = _SERIES_FIRST_TERMS
    while pending.size:
        if pending.size * size > _SERIES_MOST_VALUES:
            return None
        alpha, i = orders[pending, None], np.arange(size, dtype=np.float64)[None, :]
        j = alpha - i
        # binom(α, i) = Π_{k ≤ i} (α − k + 1)/k: one product along the terms (special.binom's gamma functions cost
        # a hundred times more at thousands of terms)
        coef = np.cumprod(np.where(i > 0, (j + 1) / np.maximum(i, 1), 1.0), axis=1)
        log_coef = np.log(np.abs(coef))
        # Opacus's log ½·erfc(x) = log ½ + log 2 + log_ndtr(−x·√2)
        log_s0 = log_coef + i * log_q + j * log_1q + (i * i - i) / (2 * sigma**2)
        log_s0 = log_s0 + special.log_ndtr(-((i - z0) / scale) * 2**0.5)
        log_s1 = log_coef + j * log_q + i * log_1q + (j * j - j) / (2 * sigma**2)
        log_s1 = log_s1 + special.log_ndtr(-((z0 - j) / scale) * 2**0.5)
        below = np.maximum(log_s0, log_s1) < -30
        ended = below.any(axis=1)
        kept = i <= below.argmax(axis=1)[ended, None]  # each order's terms up to its first below e^−30
        parts = []
        for log_s in (log_s0[ended], log_s1[ended]):
            top = np.where(kept, log_s, -np.inf).max(axis=1, keepdims=True)
            with np.errstate(invalid="ignore"):
                total = np.sum(np.sign(coef[ended]) * np.exp(np.where(kept, log_s - top, -np.inf)), axis=1)
            if not (np.all(total > 0) and np.all(np.isfinite(top))):
                return None
            parts.append(top[:, 0] + np.log(total))
        rdp[pending[ended]] = np.logaddexp(*parts) / (orders[pending[ended]] - 1)
        pending, size = pending[~ended], size * 4
    rdp.flags.writeable = False
    return rdp


def _opacus_rdp_epsilon(
    table: list[tuple[float, float, int]], *, delta: float, step_rdp=_opacus_step_rdp
) -> float | None:
    """Opacus's ``RDPAccountant`` with history ``table`` (z, q, T): its ``get_epsilon(delta)``, bit for bit (None
    where ``step_rdp``, one step's RDP at its orders, has none)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import get_privacy_spent

    steps = [step_rdp(q, z) for z, q, _ in table]
    if any(rdp is None for rdp in steps):
        return None
    rdp = sum([rdp * count for rdp, (*_, count) in zip(steps, table)])
    return float(get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=rdp, delta=delta)[0])


def _prv_domain(
    table: list[tuple[float, float, int]], *, eps_error: float, delta_error: float, step_rdp=_opacus_step_rdp
) -> float | None:
    """L of Opacus's ``compute_safe_domain_size`` (remark 5.6 of Gopi, Lee & Wutschitz 2021) for this run, bit for bit,
    with each (z, q)'s RDP computed once (by ``step_rdp``; None where it has none)."""
    total = sum(count for *_, count in table)
    with warnings.catch_warnings():  # Opacus warns when its RDP bound's best order is an end of its grid
        warnings.simplefilter("ignore", UserWarning)
        bounds = [_opacus_rdp_epsilon(table, delta=delta_error / 4, step_rdp=step_rdp)]
        for z, q, _ in table:
            bounds.append(_opacus_rdp_epsilon([(z, q, 1)], delta=delta_error / (8 * total), step_rdp=step_rdp))
    found = [bound for bound in bounds if bound is not None]
    if len(found) < len(bounds):
        return None
    return max(max(found), eps_error) + 3


_SERIES_ERROR = 1e-10
"""A bound on how far :func:`_series_step_rdp` is from Opacus's RDP, relative to max(RDP, 1), at each order (measured:
at most 1.1e-12 over 10³ random (q, z); the tests check 1e-11)."""


def _aligned_mesh(steps: int, *, eps_error: float, delta_error: float) -> float:
    """The mesh on which ``_known_domain_accountant`` aligns the grid (Opacus's, in numpy): ``_settled`` must use the
    same one to say which L give the same grid."""
    return eps_error / np.sqrt(steps * np.log(12 / delta_error) / 2)


def _settled(domain: float, table: list[tuple[float, float, int]], *, delta_error: float, eps_error: float) -> bool:
    """Whether every L as close to ``domain`` as Opacus's L can be gives the grid that ``domain`` does (Opacus's
    ``Domain.create_aligned`` on ``_aligned_mesh``, as ``_known_domain_accountant``) and the same answers to the
    domain's limits (``_PRV_LARGEST_LOSS``, ``PRV_MEMORY_BUDGET``): then ε is the same bit for bit.

    ``domain`` is at least 3 + min_α of T·RDP(α) plus the conversion term, which is above −3.4 for α ≥ 1.1 and δ ≤ 1,
    so T·RDP(α) < L + 1 at the best order, and an error of at most ``_SERIES_ERROR``·max(RDP(α), 1) at each order moves
    L by less than ``_SERIES_ERROR``·(L + T + 1)."""
    steps = sum(count for *_, count in table)
    mesh = _aligned_mesh(steps, eps_error=eps_error, delta_error=delta_error)
    tolerance = _SERIES_ERROR * (domain + steps + 1)
    low, high = domain - tolerance, domain + tolerance
    aligned = np.floor(-high / mesh) == np.floor(-low / mesh) and np.ceil(low / mesh) == np.ceil(high / mesh)
    budget = PRV_MEMORY_BUDGET / (180 + 24 * (len(table) - 1)) * mesh / 2  # the L whose grid takes the budget
    return bool(aligned) and all((low > limit) == (high > limit) for limit in (_PRV_LARGEST_LOSS, budget))


def _prv_grid(table: list[tuple[float, float, int]], *, delta: float, eps_error: float, fast: bool = False) -> dict:
    """The PRV accountant's grid for this run (:func:`prv_grid`). ``fast``: L from the vectorised series
    (:func:`_series_step_rdp`) where it settles the grid (:func:`_settled`), else from Opacus's loop; the same grid."""
    delta_error = delta / 1000  # Opacus's default
    domain = (
        _prv_domain(table, eps_error=eps_error, delta_error=delta_error, step_rdp=_series_step_rdp) if fast else None
    )
    if domain is None or not _settled(domain, table, delta_error=delta_error, eps_error=eps_error):
        domain = _prv_domain(table, eps_error=eps_error, delta_error=delta_error)
        assert domain is not None  # Opacus's own RDP: always there
    steps = sum(count for *_, count in table)
    mesh = eps_error / math.sqrt(steps * math.log(12 / delta_error) / 2)
    points = 2 * domain / mesh
    return {
        "domain": float(domain),
        "mesh": mesh,
        "points": points,
        "pairs": len(table),
        "bytes": points * (180 + 24 * (len(table) - 1)),
    }


def _settings(table: list[tuple[float, float, int]], delta: float) -> str:
    """The smallest z, largest q, T and δ of a run, for messages."""
    z, q = min(z for z, _, _ in table), max(q for _, q, _ in table)
    return f"z = {z:g}, q = {q:g}, T = {sum(count for *_, count in table)}, δ = {delta:g}"


def _fallback(
    name: str, reason: str, table: list[tuple[float, float, int]], *, delta: float, orders, conversion: str
) -> float:
    """The RDP upper bound in place of the ``name`` accountant's ε, with an :class:`AccountingFallbackWarning`."""
    value = _rdp_epsilon(table, delta=delta, orders=orders, conversion=conversion)
    warnings.warn(
        f"{name} accountant: {reason} ({_settings(table, delta)}); returning the RDP upper bound ε = {value:.6g} "
        "instead",
        AccountingFallbackWarning,
        stacklevel=5,
    )
    return value


def _prv_epsilon(
    table: list[tuple[float, float, int]], *, delta: float, eps_error: float, orders: npt.ArrayLike, conversion: str
) -> float:
    grid = _prv_grid(table, delta=delta, eps_error=eps_error, fast=True)
    settings = _settings(table, delta)

    def fallback(reason: str) -> float:
        return _fallback("PRV", reason, table, delta=delta, orders=orders, conversion=conversion)

    if grid["domain"] > _PRV_LARGEST_LOSS:
        return fallback(f"the privacy loss reaches t = {grid['domain']:.4g}, beyond what e^t can hold")
    if grid["bytes"] > PRV_MEMORY_BUDGET:
        raise DPAuditError(
            f"the PRV accountant needs a grid of {grid['points']:.3g} points (about "
            f"{grid['bytes'] / 2**30:.1f} GiB, over dpaudit.theory.accounting.PRV_MEMORY_BUDGET = "
            f"{PRV_MEMORY_BUDGET / 2**30:.1f} GiB) for {settings}, eps_error = {eps_error:g}; use "
            f"accountant='rdp' or a larger eps_error"
        )
    prv = _known_domain_accountant()(grid["domain"])
    prv.history = list(table)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            value = float(prv.get_epsilon(delta=delta, eps_error=eps_error))
    except (RuntimeError, ValueError) as error:  # Opacus's numerical failures ("Cannot compute epsilon", …)
        return fallback(f"Opacus failed: {error}")
    if not math.isfinite(value):
        return fallback(f"the grid gave ε = {value}")
    return max(value, 0.0)


@functools.cache
def _known_domain_accountant() -> type:
    """Opacus's ``PRVAccountant``, made to discretise on [−L, L] for the L it is given (the one ``_prv_grid``
    computed, which its own ``compute_safe_domain_size`` would compute again); the class is made once, when Opacus is
    first needed."""
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import Domain

    class KnownDomain(PRVAccountant):
        def __init__(self, domain: float) -> None:
            super().__init__()
            self.domain = domain

        def _get_domain(self, prvs, num_self_compositions, eps_error, delta_error):  # noqa: ANN001, ANN202
            mesh = _aligned_mesh(sum(num_self_compositions), eps_error=eps_error, delta_error=delta_error)
            return Domain.create_aligned(-self.domain, self.domain, mesh)

    return KnownDomain


def _pld_epsilon(
    table: list[tuple[float, float, int]], *, delta: float, orders: npt.ArrayLike, conversion: str
) -> float:
    """ε of checked steps by dp-accounting's ``PLDAccountant`` (pessimistic estimate, 1e-4 grid): an upper bound on
    the exact ε; the RDP bound, warned, where δ is below the PLD's truncated tail mass and its ε is infinite."""
    from dpaudit.theory import _dpaccounting_adapter as adapter

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        value = float(adapter.pld_accountant().compose(adapter.table_event(table)).get_epsilon(delta))
    if not math.isfinite(value):
        reason = f"the privacy-loss distribution gave ε = {value}"
        return _fallback("PLD", reason, table, delta=delta, orders=orders, conversion=conversion)
    return max(value, 0.0)


def _rdp_epsilon(
    table: list[tuple[float, float, int]],
    *,
    delta: float,
    orders: npt.ArrayLike,
    conversion: str,
    finite: bool = True,
) -> float:
    """RDP ε of (z, q, count) steps by dp-accounting's ``RdpAccountant`` (count × one step's RDP, summed per order,
    converted at δ). Where the RDP is infinite at every order, a one-line error (``finite``) or +inf."""
    orders = _check_orders(orders)
    from dpaudit.theory import _dpaccounting_adapter as adapter

    accountant = _accountant("rdp", orders=orders, conversion=conversion, eps_error=1.0)
    value = accountant.compose(adapter.table_event(table)).get_epsilon(delta)
    if finite and not math.isfinite(value):
        raise DPAuditError(
            f"the RDP is infinite at every one of the {len(orders)} orders: no finite ε at δ = {delta:g}"
        )
    return value


def rdp_epsilon_floor(*, delta: float, orders: npt.ArrayLike = DEFAULT_ORDERS, conversion: str = "improved") -> float:
    """The smallest ε the RDP accountant's conversion term allows at δ with these orders (RDP → 0, infinite noise).

    dp-accounting's improved conversion also takes the KL bound δ ≤ √(1 − e^(−RDP)), which gives ε = 0 once the RDP
    at some order is below about δ²; :func:`calibrate_noise` still refuses a target at or below this floor.

    Args:
        delta: δ ∈ (0, 1).
        orders, conversion: as :func:`epsilon`.

    Returns:
        min over α of the conversion term alone: (log(1/δ) − log α)/(α − 1) + log(1 − 1/α) (improved) or
        log(1/δ)/(α − 1) (classic), at least 0.
    """
    orders = _check_orders(orders)
    return rdp_to_epsilon(rdp=np.zeros(len(orders)), orders=orders, delta=delta, conversion=conversion)[0]


def calibrate_noise(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float | npt.ArrayLike,
    steps: int | None = None,
    accountant: str = "rdp",
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "improved",
    noise_schedule: npt.ArrayLike | None = None,
    eps_error: float = 0.01,
    tolerance: float = 1e-5,
    grid: float | None = None,
    preceding: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
) -> float:
    """Smallest noise multiplier z whose run meets ``target_epsilon`` at δ.

    With ``noise_schedule`` (one relative factor per step, e.g. e^(−1/4) decay per epoch), step t uses
    z·noise_schedule[t] and the returned z is the schedule's scale.

    The search is dp-accounting's ``calibrate_dp_mechanism`` (Brent's method) over an event factory, log z → the
    run's ``DpEvent`` (the ``preceding`` steps, then the calibrated ones at z), within a bracket found first;
    with ``grid``, its discrete form over the multiples of ``grid``. The z it returns meets the target and is at
    most 1 + ``tolerance`` times the smallest z that does.

    Args:
        target_epsilon: ε to meet (> 0).
        delta: δ ∈ (0, 1).
        sample_rate: q (a number or one per step).
        steps: T, an integer > 0 (required unless per-step values fix it); T identical steps cost what one costs.
        accountant, orders, conversion, eps_error: as :func:`epsilon`.
        noise_schedule: optional per-step factors (> 0) multiplying z.
        tolerance: relative precision of z (the search's tolerance on log z is log(1 + tolerance)).
        grid: if given (≥ 1e-12), return the smallest multiple of ``grid`` meeting the target (papers that report
            σ to two decimals searched a 0.01 grid, e.g. AdaDPIGU's Table 3).
        preceding: (noise multipliers, sample rates) of steps already taken (e.g. a warm-up phase with its
            own noise); they are composed with the calibrated steps, so the *total* meets the target.

    Returns:
        z such that ε(z) ≤ target_epsilon, within ``tolerance`` (relative) of the smallest such z.

    Examples:
        The z that spends ε = 3 in 4,687 steps at q = 512/60,000, and the ε it gives back:

        >>> z = calibrate_noise(target_epsilon=3, delta=1e-5, sample_rate=512 / 60000, steps=4687)
        >>> round(z, 3)
        1.123
        >>> round(epsilon(noise_multiplier=z, sample_rate=512 / 60000, steps=4687, delta=1e-5), 3)
        3.0
    """
    target_epsilon = _positive("target_epsilon (ε)", target_epsilon)
    tolerance = _positive("tolerance", tolerance)
    if grid is not None:
        grid = _positive("grid", grid)
        if grid < 1e-12:
            raise DPAuditError(f"grid must be at least 1e-12 (z is returned to 12 decimals), got {brief(grid)}")
    delta, orders, eps_error = _check_options(
        delta=delta, accountant=accountant, orders=orders, conversion=conversion, eps_error=eps_error
    )
    if steps is not None:
        steps = _check_steps(steps, allow_zero=False)
    factors = None
    if noise_schedule is not None:
        try:
            factors = _per_step("noise_schedule", noise_schedule)
        except DPAuditError:
            factors = np.zeros(0)
        if factors.ndim != 1 or not factors.size or not np.all(np.isfinite(factors)) or np.any(factors <= 0):
            raise DPAuditError("noise_schedule must be a 1-D sequence of positive factors, one per step")
    rates = _per_step("sample_rate (q)", sample_rate)
    length = _common_length(
        {"sample_rate": rates, "noise_schedule": factors}, steps, single="sample_rate is a single value"
    )
    if length == 0:
        raise DPAuditError("calibrate_noise needs at least one step to calibrate; got none")
    # the calibrated steps as (factor, q, count) (q checked there): T identical steps are one triple, however large T
    groups = _steps_table(1.0 if factors is None else factors, rates, length)
    prior = [] if preceding is None else _preceding_table(preceding)

    from dp_accounting import ExplicitBracketInterval, NonPrivateDpEvent, calibrate_dp_mechanism

    from dpaudit.theory import _dpaccounting_adapter as adapter

    def event_at(z: float) -> DpEvent:
        """The run at scale z, after the preceding steps: z·factor underflowing is a step without noise (no finite
        ε); z·factor overflowing is noise without limit, a step that spends nothing."""
        scaled = [(z * factor, q, count) for factor, q, count in groups]
        if any(noise == 0 for noise, _, _ in scaled):
            return NonPrivateDpEvent()
        return adapter.table_event(_merged(prior, [step for step in scaled if math.isfinite(step[0])]))

    def fresh():
        return _accountant(accountant, orders=orders, conversion=conversion, eps_error=eps_error)

    def eps_at(x: float) -> float:
        """ε at z = e^x (the search runs on log z, so that ``tolerance`` is relative)."""
        return fresh().compose(event_at(math.exp(x))).get_epsilon(delta)

    def smallest(low: float, high: float) -> float:
        if grid is None:
            return math.exp(high)
        return _smallest_multiple(fresh, event_at, target_epsilon, delta, grid, low=low, high=math.exp(high))

    _check_reachable(
        target_epsilon,
        delta=delta,
        accountant=accountant,
        orders=orders,
        conversion=conversion,
        eps_error=eps_error,
        preceding=prior,
    )
    largest, smallest_low = math.log(1e6), math.log(1e-4)
    if accountant in ("prv", "pld"):
        # Bracket with the cheap RDP accountant: PRV's and PLD's grids grow without bound as z falls (about 10⁸
        # points at z = 0.05), so they are only asked near the answer, where their grids are modest.
        rdp_z = calibrate_noise(
            target_epsilon=target_epsilon,
            delta=delta,
            sample_rate=rates,
            steps=length,
            orders=orders,
            conversion=conversion,
            noise_schedule=factors,
            tolerance=1e-3,
            preceding=preceding,
        )
        step, high = math.log(1.25), math.log(rdp_z)
        while eps_at(high) > target_epsilon:  # their upper estimates exceed RDP's only by about their error
            high += step
            if high > largest:
                raise DPAuditError(
                    f"no noise multiplier below 1e6 reaches ε = {target_epsilon} at δ = {delta} by the "
                    f"{accountant.upper()} accountant"
                )
        low = high - step
        while eps_at(low) <= target_epsilon:
            high, low = low, low - step
            if low < smallest_low:
                return smallest(0.0, high)
    else:
        step, low, high = math.log(2), math.log(0.05), 0.0
        while eps_at(high) > target_epsilon:
            low, high = high, high + step
            if high > largest:
                raise DPAuditError(f"no noise multiplier below 1e6 reaches ε = {target_epsilon} at δ = {delta}")
        while eps_at(low) <= target_epsilon:
            high, low = low, low - step
            if low < smallest_low:
                return smallest(0.0, high)
    log_tolerance = math.log1p(tolerance)  # z within a factor 1 + tolerance: log z within log(1 + tolerance)
    while not math.isfinite(eps_at(low)):  # Brent's method needs finite values at both ends
        middle = (low + high) / 2
        low, high = (middle, high) if eps_at(middle) > target_epsilon else (low, middle)
        if high - low <= log_tolerance:
            return smallest(math.exp(low), high)
    if grid is not None:
        return smallest(math.exp(low), high)
    # dp-accounting's calibration: Brent's method on ε(e^x) − target over [low (too little noise), high (enough)],
    # to within log(1 + tolerance) in log z; the x it returns always meets the target
    root = calibrate_dp_mechanism(
        fresh,
        lambda x: event_at(math.exp(x)),
        target_epsilon,
        delta,
        bracket_interval=ExplicitBracketInterval(low, high),
        tol=log_tolerance,
    )
    return math.exp(root)


def _smallest_multiple(fresh, event_at, target_epsilon: float, delta: float, grid: float, *, low: float, high: float):
    """The smallest multiple of ``grid`` whose ε meets the target: dp-accounting's discrete calibration over the
    multiples between ``low`` (whose ε misses it, or 0) and ``high`` (whose ε meets it), about
    log₂((high − low)/grid) evaluations, then a step down where it stopped one multiple above the smallest."""
    from dp_accounting import ExplicitBracketInterval, calibrate_dp_mechanism

    def meets(multiple: int) -> bool:
        return fresh().compose(event_at(multiple * grid)).get_epsilon(delta) <= target_epsilon

    below = math.floor(low / grid)  # a multiple at most low: misses the target (ε falls as z grows), or 0
    above = max(math.ceil(round(high / grid, 9)), below + 1)
    while not meets(above):  # high/grid rounded down past high
        below, above = above, above + 1
    if below == 0:  # z = 0 is no noise: the search starts at one multiple
        if meets(1):
            return round(grid, 12)
        below = 1
    if above - below > 1:
        above = calibrate_dp_mechanism(
            fresh,
            lambda multiple: event_at(multiple * grid),
            target_epsilon,
            delta,
            bracket_interval=ExplicitBracketInterval(below, above),
            discrete=True,
        )
        while above - 1 > below and meets(above - 1):
            above -= 1
    return round(above * grid, 12)


def _check_reachable(
    target_epsilon: float,
    *,
    delta: float,
    accountant: str,
    orders: npt.ArrayLike,
    conversion: str,
    eps_error: float,
    preceding: list[tuple[float, float, int]],
) -> None:
    """One-line error, before any search, when no amount of noise can meet ``target_epsilon``."""
    if accountant == "rdp":
        floor = rdp_epsilon_floor(delta=delta, orders=orders, conversion=conversion)
        if target_epsilon <= floor:
            largest = float(np.max(_check_orders(orders)))
            raise DPAuditError(
                f"ε = {target_epsilon:g} is below the smallest ε the RDP accountant can report at "
                f"δ = {delta:g} with Rényi orders up to {largest:g} ({floor:.4g}, however large the "
                f"noise); pass larger orders or use accountant='prv'"
            )
    elif accountant == "prv" and target_epsilon <= eps_error:
        raise DPAuditError(
            f"ε = {target_epsilon:g} is not above the PRV accountant's error eps_error = "
            f"{eps_error:g}, which its upper bound includes; pass a smaller eps_error"
        )
    if accountant == "rdp" and preceding:  # PRV and PLD calibration bracket with RDP, which checks this first
        spent = _rdp_epsilon(preceding, delta=delta, orders=orders, conversion=conversion)
        if spent > target_epsilon:
            raise DPAuditError(
                f"the preceding steps alone spend ε = {spent:.4g} > {target_epsilon:g} at "
                f"δ = {delta:g}: no noise on the remaining steps can meet the target"
            )


def _preceding_table(preceding) -> list[tuple[float, float, int]]:
    """The steps already taken, ``(noise multipliers, sample rates)``, as (z, q, count) triples; a single value on
    either side stands for every step of the other (a pair of numbers is one step)."""
    if not isinstance(preceding, (tuple, list)) or len(preceding) != 2:
        raise DPAuditError(
            "preceding must be a pair (noise multipliers, sample rates) of the steps already taken, got "
            + brief(preceding)
        )
    z = np.atleast_1d(_per_step("preceding noise multipliers (σ)", preceding[0]))
    q = np.atleast_1d(_per_step("preceding sample rates (q)", preceding[1]))
    if q.size == 1 and z.size != 1:
        q = np.full(z.size, q[0])
    elif z.size == 1 and q.size != 1:
        z = np.full(q.size, z[0])
    return _steps_table(z, q, None)


def _check_orders(orders: npt.ArrayLike) -> np.ndarray:
    """The Rényi orders as a 1-D float array: non-empty, each in (1, 10⁶], their integer orders' series at most
    :data:`_MAX_ORDER_TERMS` terms together (the sums at integer α hold α + 1 terms each)."""
    refused = f"orders must be a non-empty sequence of Rényi orders 1 < α ≤ {_MAX_ORDER:g}"
    values = real_array(orders, refused=refused)
    if values.ndim != 1 or len(values) == 0 or not np.all(np.isfinite(values)) or np.any(values <= 1):
        raise DPAuditError(f"{refused}, got {brief(orders)}")
    if np.any(values > _MAX_ORDER):
        raise DPAuditError(f"{refused}, got {brief(orders)}")
    integer = values[values == np.round(values)]
    if np.sum(integer + 1) > _MAX_ORDER_TERMS:
        raise DPAuditError(
            f"orders: the RDP at {integer.size} integer orders sums {int(np.sum(integer + 1))} terms, over "
            f"{_MAX_ORDER_TERMS}; pass fewer or smaller orders"
        )
    return values


EPOCH_LOGGING = ("epoch-end", "first-step")


def ledger_epsilons(
    ledger,
    *,
    delta: float,
    accountant: str = "rdp",
    epochs: Sequence[int] | None = None,
    logging: str = "epoch-end",
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    conversion: str = "improved",
    eps_error: float = 0.01,
) -> list[float]:
    """Theoretical ε of a training run after each epoch, replayed from its privacy ledger.

    Args:
        ledger: a :class:`dpaudit.ledger.PrivacyLedger` (or its ``to_dict()`` form).
        delta: δ ∈ (0, 1).
        accountant, orders, conversion, eps_error: as :func:`epsilon`.
        epochs: 1-based epochs to report (default: every epoch of the ledger).
        logging: "epoch-end" (ε after the epoch's last step) or "first-step" (ε after the first step of
            the epoch — how the D2P2-SGD authors' scripts logged, which their reported numbers match).

    Returns:
        ε per requested epoch; +inf throughout for a run that made no DP claim and recorded no steps
        (non-private training). Each costs what the ledger's runs of identical steps cost, not its step count.

    Examples:
        A ledger of one epoch of 10 identical steps claims what 10 such steps give:

        >>> from dpaudit.ledger import PrivacyLedger
        >>> ledger = PrivacyLedger()
        >>> for _ in range(10):
        ...     ledger.record(noise_multiplier=1.0, sample_rate=0.1)
        >>> ledger.end_epoch()
        >>> ten_steps = epsilon(noise_multiplier=1.0, sample_rate=0.1, steps=10, delta=1e-5)
        >>> ledger_epsilons(ledger, delta=1e-5) == [ten_steps]
        True
    """
    check_choice("logging", logging, EPOCH_LOGGING)
    ledger, ends, epochs = _ledger_epochs(ledger, delta=delta, epochs=epochs)
    delta, orders, eps_error = _check_options(
        delta=delta, accountant=accountant, orders=orders, conversion=conversion, eps_error=eps_error
    )
    if ledger.steps == 0 and not ledger.dp_claim:
        return [math.inf] * len(epochs)
    # the ledger's runs of identical steps, checked once: (z, q, count) each, never one entry per step
    runs = [(run.noise_multiplier, run.sample_rate, _check_steps(run.steps)) for run in ledger.runs]
    _steps_table([z for z, _, _ in runs], [q for _, q, _ in runs], None)
    total = sum(count for *_, count in runs)
    prefixes = [
        ends[epoch - 1] if logging == "epoch-end" else min((ends[epoch - 2] if epoch > 1 else 0) + 1, ends[epoch - 1])
        for epoch in epochs
    ]
    if any(prefix > total for prefix in prefixes):
        raise DPAuditError(f"malformed privacy ledger: an epoch ends after step {max(prefixes)} of its {total} steps")

    def first_steps(prefix: int) -> list[tuple[float, float, int]]:
        taken, left = [], prefix
        for z, q, count in runs:
            if left <= 0:
                break
            taken.append((float(z), float(q), min(count, left)))
            left -= count
        return _merged(taken)

    return [
        _table_epsilon(
            first_steps(prefix),
            delta=delta,
            accountant=accountant,
            orders=orders,
            conversion=conversion,
            eps_error=eps_error,
        )
        for prefix in prefixes
    ]


SHUFFLED_UPPER_LABEL = "upper bound for shuffled batches: each epoch one unsubsampled Gaussian step per record"
"""How the valid ε of a shuffled-batch run is named wherever it is printed."""

POISSON_ON_SHUFFLED_LABEL = "Poisson-sampling ε, not a guarantee for shuffled batches"
"""How the Poisson accountants' ε of a shuffled-batch run is named: it may understate the true ε."""


def epsilon_labels(*, dp_claim: bool, sampling: str) -> dict[str, str]:
    """What a run's accounted ε is, as the labels saved beside it.

    Args:
        dp_claim: whether the run's optimizer makes a DP claim; without one every ε is only what it claims.
        sampling: the run's batch sampling ("poisson" or "shuffle").

    Returns:
        ``{"epsilon": ...}`` naming the accountants' ε ("theoretical ε"; the Poisson figure of a shuffled run; or
        "claimed … (no DP guarantee)"), and for shuffled batches ``"shuffled_upper"`` naming the valid upper bound.
    """
    if sampling != "shuffle":
        return {"epsilon": "theoretical ε" if dp_claim else "claimed ε (no DP guarantee)"}
    if dp_claim:
        return {"epsilon": POISSON_ON_SHUFFLED_LABEL, "shuffled_upper": SHUFFLED_UPPER_LABEL}
    return {
        "epsilon": f"claimed {POISSON_ON_SHUFFLED_LABEL} (no DP guarantee)",
        "shuffled_upper": f"claimed {SHUFFLED_UPPER_LABEL} (no DP guarantee)",
    }


def shuffled_upper_epsilon(*, noise_multipliers, epoch_ends: Sequence[int], delta: float) -> float:
    """A valid upper bound on ε at δ for shuffled fixed-size batches, where the Poisson accountants are not.

    With ``sampling: shuffle`` every record is in exactly one batch of each epoch. Under replace-with-zero
    adjacency (one record swapped for one that contributes nothing) the two runs differ, for any one shuffle, in
    one step of the epoch, by at most C in ℓ2; so each epoch is at most one Gaussian mechanism of the epoch's
    smallest noise multiplier z_e (joint convexity of the hockey-stick divergence over the shuffle, adaptive
    composition over the epoch's steps). E epochs compose to a Gaussian mechanism of μ = √(Σ_e 1/z_e²) (√E/z at
    constant z), whose ε at δ is exact (Balle & Wang 2018; Dong, Roth & Su's μ-GDP): no amplification by
    shuffling is claimed, so this can be far above the Poisson figure (Chua et al., ICML 2024).

    Args:
        noise_multipliers: z_t per step (noise std / C), finite and > 0, one per step of the run.
        epoch_ends: steps completed at the end of each epoch (increasing, the last ≤ the number of steps); steps
            after the last end form one more (partial) epoch.
        delta: δ in (0, 1).

    Returns:
        ε ≥ 0 in nats (0 for no steps).
    """
    from dpaudit.estimate.gdp import gdp_epsilon

    z = np.asarray(noise_multipliers, dtype=float).reshape(-1)
    check_probability("delta (δ)", delta)
    if z.size and not (np.all(np.isfinite(z)) and np.all(z > 0)):
        raise DPAuditError("noise_multipliers must be finite and > 0 for the shuffled-batch bound")
    ends = [int(end) for end in epoch_ends]
    if any(b < a for a, b in zip([0, *ends], ends)) or (ends and ends[-1] > z.size):
        raise DPAuditError(f"epoch_ends must increase and stay within the {z.size} steps, got {ends!r}")
    bounds = [0, *ends, *([z.size] if not ends or ends[-1] < z.size else [])]
    mu_squared = sum(1.0 / float(z[a:b].min()) ** 2 for a, b in zip(bounds, bounds[1:]) if b > a)
    return gdp_epsilon(mu=math.sqrt(mu_squared), delta=delta) if mu_squared else 0.0


def ledger_shuffled_epsilons(ledger, *, delta: float, epochs: Sequence[int] | None = None) -> list[float]:
    """:func:`shuffled_upper_epsilon` after each epoch of a run, replayed from its privacy ledger.

    Args:
        ledger: a :class:`dpaudit.ledger.PrivacyLedger` (or its ``to_dict()`` form).
        delta: δ ∈ (0, 1).
        epochs: 1-based epochs to report (default: every epoch of the ledger).

    Returns:
        ε per requested epoch (+inf throughout for a run that made no DP claim and recorded no steps).
    """
    ledger, ends, epochs = _ledger_epochs(ledger, delta=delta, epochs=epochs)
    if ledger.steps == 0 and not ledger.dp_claim:
        return [math.inf] * len(epochs)
    z, _ = ledger.per_step()
    return [
        shuffled_upper_epsilon(noise_multipliers=z[: ends[epoch - 1]], epoch_ends=ends[:epoch], delta=delta)
        for epoch in epochs
    ]


def _ledger_epochs(ledger, *, delta: float, epochs: Sequence[int] | None) -> tuple[PrivacyLedger, list[int], list[int]]:
    """A ledger (from its ``to_dict()`` form where given one), its epoch ends and the requested 1-based epochs
    (default: all), after the one-line checks of δ and of each epoch."""
    ledger = _as_ledger(ledger)
    check_probability("delta (δ)", delta)
    ends = list(ledger.epoch_ends)
    epochs = list(range(1, len(ends) + 1)) if epochs is None else list(epochs)
    for epoch in epochs:
        if not (isinstance(epoch, (int, np.integer)) and 1 <= epoch <= len(ends)):
            raise DPAuditError(f"epoch {epoch!r} is not in the ledger (it has {len(ends)} epochs)")
    return ledger, ends, epochs


def _as_ledger(ledger) -> PrivacyLedger:
    """A :class:`dpaudit.ledger.PrivacyLedger`, from its ``to_dict()`` form where given one."""
    from dpaudit.ledger import PrivacyLedger

    return PrivacyLedger.from_dict(ledger) if isinstance(ledger, dict) else ledger
