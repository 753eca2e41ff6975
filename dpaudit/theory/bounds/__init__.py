"""Closed-form RDP bounds on DP-SGD, one :class:`Bound` record each, in a registry keyed by name.

* :mod:`dpaudit.theory.bounds.dpsgd_dc` — the DPSGD-GC / DPSGD-DC bounds of Liang et al. (AAAI 2026,
  arXiv 2502.17772): ``dpsgd-gc``, ``dpsgd-dc``, ``dpsgd-gc-strong``, ``dpsgd-dc-strong``.
* :mod:`dpaudit.theory.bounds.baselines` — the bounds that paper compares with: ``feldman2018``,
  ``mironov-composition``, ``altschuler-talwar2022``, ``kong-ribero2024``, ``trivial``.

Every bound is an RDP ε at order α after T iterations; :func:`dpaudit.theory.rdp_to_dp` reads it as (ε, δ)-DP.
Adding a bound is adding one :class:`Bound` to one of those modules' ``BOUNDS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_choice
from dpaudit.theory._params import as_nonneg_array, check_params, shape_like
from dpaudit.theory.bounds import baselines, dpsgd_dc
from dpaudit.theory.bounds.base import DEFAULT_VARIANT, Bound
from dpaudit.theory.bounds.dpsgd_dc import DCCap, dc_cap

__all__ = [
    "BOUNDS",
    "Bound",
    "DCCap",
    "available_bounds",
    "bound_parameters",
    "check_conditions",
    "condition_parameters",
    "dc_cap",
    "get_bound",
    "rdp_bound",
]

BOUNDS: dict[str, Bound] = {bound.name: bound for bound in (*dpsgd_dc.BOUNDS, *baselines.BOUNDS)}
"""Every bound by name: the DPSGD-GC/DC paper's own first, then the baselines it compares with."""


def get_bound(name: str) -> Bound:
    """The :class:`Bound` record called ``name`` (one of :func:`available_bounds`)."""
    check_choice("bound name", name, BOUNDS)
    return BOUNDS[name]


def available_bounds() -> list[str]:
    """Names accepted by :func:`rdp_bound` and :func:`check_conditions`."""
    return list(BOUNDS)


def bound_parameters(name: str) -> tuple[str, ...]:
    """The keyword parameters that :func:`rdp_bound` requires for bound ``name`` (besides T)."""
    return get_bound(name).parameters


def condition_parameters(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) keyword parameters of :func:`check_conditions` for bound ``name``."""
    bound = get_bound(name)
    return (*bound.parameters, *bound.condition_parameters), bound.optional_condition_parameters


def _collect(
    name: str, params: Mapping[str, float], required: Sequence[str], optional: Sequence[str] = ()
) -> dict[str, float]:
    missing = [k for k in required if k not in params]
    extra = [k for k in params if k not in required and k not in optional]
    if missing:
        raise DPAuditError(f"{name}: missing parameter(s) {', '.join(missing)}; it takes {', '.join(required)}")
    if extra:
        raise DPAuditError(
            f"{name}: unexpected parameter(s) {', '.join(extra)}; it takes {', '.join((*required, *optional))}"
        )
    return check_params(params)


def check_conditions(name: str, /, **params: float) -> list[str]:
    """Violated numeric validity conditions of a bound (Table 1, Lemma A.13, eqs. 35/42/48 of Liang et al.).

    Each bound's conditions are its record's :attr:`Bound.conditions`:

    * ``dpsgd-gc-strong``: b ≤ n/5, σ > 8C/b, α ≤ α*(b/n, bσ/(2C)) (eq. 42, β → 1).
    * ``dpsgd-dc-strong``: b ≤ n/5, σ > 8C/(b√β*), α ≤ α*(b/n, b√β*σ/(2C)) at β* of the
      strengthened cap (eq. 48, explicit analogue).
    * ``mironov-composition``: Lemma A.13 with q = b/n, σ' = bσ/(2C): q ≤ 1/5, σ' > 4, α ≤ α*(q, σ').
      Needs the extra parameter ``b``.
    * ``altschuler-talwar2022``: b ≤ n/5, σ > 8√2·C/b, α ≤ α*(b/n, bσ/(2√2C)) and, if ``L`` is
      given, η ≤ 2/L. Needs the extra parameter ``b``.
    * ``feldman2018``: η ≤ 2/L if the optional ``eta`` and ``L`` are given.
    * ``kong-ribero2024``: η ≤ 1/(2(m+L)).
    * ``dpsgd-gc``, ``dpsgd-dc``, ``trivial``: none (L-smoothness is an assumption, not checkable).

    Qualitative assumptions (convexity, Lipschitzness) are not checked.

    Args:
        name: a bound from :func:`available_bounds`.
        **params: the bound's parameters (:func:`bound_parameters`) plus the extras named above.

    Returns:
        One human-readable line per violated condition; empty if none.
    """
    bound = get_bound(name)
    p = _collect(name, params, *condition_parameters(name))
    return bound.violations(p)


@overload
def rdp_bound(
    name: str, T: float, /, *, check_conditions: bool = True, variant: str | None = None, **params: float
) -> float: ...
@overload
def rdp_bound(
    name: str,
    T: npt.NDArray[Any] | Sequence[float],
    /,
    *,
    check_conditions: bool = True,
    variant: str | None = None,
    **params: float,
) -> npt.NDArray[np.float64]: ...
def rdp_bound(
    name: str,
    T: float | npt.NDArray[Any] | Sequence[float],
    /,
    *,
    check_conditions: bool = True,
    variant: str | None = None,
    **params: float,
) -> float | npt.NDArray[np.float64]:
    """RDP ε at order α after T iterations for one of the bounds of Liang et al.'s Figure 1 (vectorised over T).

    Bounds (σ = σ_DP; A = 2αC²/(nbσ²), A' = 8αC²/(n²σ²), B = α(1+ηL)²D²/(2η²σ²)):

    * ``dpsgd-gc``: A·T (Theorem 3.3, eq. 46).
    * ``dpsgd-dc``: min{A·T, (√A + √B)²}, 0 at T = 0 (Theorem 3.4, eq. 55).
    * ``dpsgd-gc-strong``: A'·T (eq. 42); valid only if b ≤ n/5, σ > 8C/b, α ≤ α*(b/n, bσ/(2C)).
    * ``dpsgd-dc-strong``: min{A'·T, (√A' + √B)²} (explicit analogue of eq. 48); conditions of eq. 48
      at β* = √A'/(√A' + √B).
    * ``feldman2018``: 2αC²T/(b²σ²) (Fig. 1; Feldman et al. 2018).
    * ``mironov-composition``: 8αC²T/(n²σ²), T-fold composition of 2αq²/σ'² (Fig. 1).
    * ``altschuler-talwar2022``: 8αC²/(n²σ²)·min{T, Dn/(ηC)} (Fig. 1).
    * ``kong-ribero2024``: α/(2σ²η²)·(√2·D·√(1+2ηm(1+m/(2(L+m)))) + 2ηC/b)², constant in T (Fig. 1);
      ``variant="table"`` gives the Table-1 form α/(η²σ²)·(D·√(…) + ηC/b)².
    * ``trivial``: 2α(D + ηC/b)²/(η²σ²), constant in T (Fig. 5, App. E.1); ``variant="text"`` gives the
      paper-text form 2α(D + ηC/b)²/σ².

    Args:
        name: bound name, one of :func:`available_bounds`.
        T: number of iterations (≥ 0), scalar or array.
        check_conditions: for the two ``*-strong`` bounds, raise :class:`DPAuditError` naming the
            violated validity condition (default); ``False`` computes anyway. Other bounds are never
            checked here; use :func:`check_conditions`.
        variant: ``"figure"`` (default) or ``"text"`` for ``trivial``; ``"figure"`` (default) or
            ``"table"`` for ``kong-ribero2024``; not accepted for other bounds.
        **params: exactly the parameters of :func:`bound_parameters` (alpha, C, sigma, n, b, eta, L,
            D, m as the bound needs).

    Returns:
        ε_RDP at order α: a float for scalar (or 0-d) T, else an array with T's shape.
    """
    bound = get_bound(name)
    p = _collect(name, params, bound.parameters)
    if variant is None:
        variant = DEFAULT_VARIANT
    elif bound.variant_names:
        check_choice(f"{name} variant", variant, bound.variant_names)
    else:
        with_variants = sorted(other.name for other in BOUNDS.values() if other.variants)
        raise DPAuditError(f"{name}: variant is not accepted (only for {', '.join(with_variants)})")
    T_arr = as_nonneg_array("T", T, "number of iterations")
    if bound.enforce_conditions and check_conditions:
        violated = bound.violations(p)
        if violated:
            raise DPAuditError(
                f"{name}: validity conditions violated: {'; '.join(violated)}; "
                "pass check_conditions=False to compute anyway"
            )
    values = bound.form(variant)(T_arr, p)
    return shape_like(values, T_arr)
