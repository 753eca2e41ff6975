"""The :class:`Bound` record: one closed-form RDP bound of a DP-SGD variant, with its parameters and conditions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Evaluate = Callable[[npt.NDArray[np.float64], Mapping[str, float]], npt.NDArray[np.float64]]
"""(T, params) → RDP ε at order ``params["alpha"]`` after T iterations (T a float array ≥ 0, params checked)."""

Violations = Callable[[Mapping[str, float]], list[str]]
"""checked params → one human-readable line per violated validity condition."""

DEFAULT_VARIANT = "figure"
"""Name of a bound's default form (as the DPSGD-GC/DC paper's figures draw it) when it has several."""


def no_violations(params: Mapping[str, float]) -> list[str]:
    """Conditions of a bound with no numeric validity condition (its assumptions are qualitative)."""
    return []


@dataclass(frozen=True)
class Bound:
    """One RDP bound on DP-SGD after T iterations, as a single record of everything dpaudit knows about it.

    Units throughout: ``alpha`` is the Rényi order α > 1, ``sigma`` is σ_DP (the noise std on the *averaged*
    clipped gradient), ``C`` the clipping norm, ``n`` the dataset size, ``b`` the batch size (q = b/n), ``eta`` the
    step size η, ``L`` the smoothness, ``D`` the domain diameter and ``m`` the weak-convexity constant.

    Attributes:
        name: registry name, accepted by :func:`~dpaudit.theory.bounds.rdp_bound` and ``dpaudit theory``.
        paper: the paper (and the place in it) the bound comes from.
        formula: the bound as text: RDP ε at order α after T iterations.
        parameters: the keyword parameters ``evaluate`` needs, besides T.
        evaluate: the default form, (T, params) → RDP ε.
        conditions: the numeric validity conditions as text ("none" if only qualitative assumptions).
        violations: checked params → the violated validity conditions, one line each.
        condition_parameters: parameters that only the validity conditions need (required by
            :func:`~dpaudit.theory.bounds.check_conditions`).
        optional_condition_parameters: parameters that the validity conditions use when given.
        variants: further published forms of the bound, as (name, evaluate) pairs; the default form is then
            called :data:`DEFAULT_VARIANT`.
        enforce_conditions: whether :func:`~dpaudit.theory.bounds.rdp_bound` refuses to evaluate the bound
            where its conditions are violated (unless told not to check).
        caveat: what the bound does not cover, in one line, shown wherever it is printed or drawn ("" if nothing
            is known to be missing).
    """

    name: str
    paper: str
    formula: str
    parameters: tuple[str, ...]
    evaluate: Evaluate
    conditions: str = "none"
    violations: Violations = no_violations
    condition_parameters: tuple[str, ...] = ()
    optional_condition_parameters: tuple[str, ...] = ()
    variants: tuple[tuple[str, Evaluate], ...] = ()
    enforce_conditions: bool = False
    caveat: str = ""

    @property
    def variant_names(self) -> tuple[str, ...]:
        """Accepted ``variant`` names, the default first; empty for a bound with one form."""
        return (DEFAULT_VARIANT, *(name for name, _ in self.variants)) if self.variants else ()

    def form(self, variant: str) -> Evaluate:
        """The evaluate function of ``variant`` (a name from :attr:`variant_names`, checked by the caller)."""
        return dict(self.variants).get(variant, self.evaluate)
