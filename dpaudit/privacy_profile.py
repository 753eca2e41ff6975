"""The assumption-free privacy profile of a whole-run audit: ε̂(δ') for δ' from the run's δ to 10⁻², each threshold
fixed by the ledger before any score is read.

For each δ' the threshold τ of the test "score ≥ τ predicts member" is the one whose Kairouz–Oh–Viswanath +
Clopper–Pearson bound (:func:`dpaudit.estimate.epsilon_from_counts`) would be largest on these numbers of member and
non-member canaries *if the run were the mechanism its ledger claims*: its member and non-member tails are computed
exactly from the ledger (:mod:`dpaudit.theory.score_tails`), never from the scores. The threshold is therefore
independent of the certifying scores, and every canary certifies it: the bound holds for any mechanism (no family
assumption), with probability ≥ ``confidence`` at each δ' separately (pointwise, not simultaneously). Beside each
point: the ledger's ε(δ') (PLD, the claim) and the bound the threshold predicts (what these canaries can certify of a
run that is its claim, the ceiling the audit is measured against).

ε in nats, δ a probability.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_confidence, check_delta, check_scores
from dpaudit.estimate import clopper_pearson_upper, epsilon_from_rates
from dpaudit.theory.tradeoff import StepGroup, group_steps

#: The statistics a profile can be fixed for: Λ (every iterate) and Σ_t x_t (the final model).
STATISTICS = ("all-iterates", "final-model")
#: The largest δ' of the default profile.
LARGEST_DELTA = 1e-2
#: What every profile point is, as reports label it.
LABEL = "assumption-free lower bound (threshold fixed by the ledger before the scores are read)"


def profile_deltas(delta: float) -> tuple[float, ...]:
    """The default δ' of a profile: the run's δ, then every half decade above it up to :data:`LARGEST_DELTA`
    (δ = 10⁻⁵: 10⁻⁵, 3.2·10⁻⁵, 10⁻⁴, …, 10⁻²)."""
    delta = check_delta(delta, allow_zero=False)
    points = [delta]
    while points[-1] * math.sqrt(10) < LARGEST_DELTA * (1 + 1e-9):
        points.append(float(f"{points[-1] * math.sqrt(10):.6g}"))
    if points[-1] < LARGEST_DELTA * (1 - 1e-9):
        points.append(LARGEST_DELTA)
    return tuple(points)


@dataclass(frozen=True)
class ProfilePoint:
    """One δ' of a :class:`PrivacyProfile`.

    Attributes:
        delta: δ'.
        epsilon_lower: the assumption-free lower bound on ε(δ') (nats), at the profile's confidence.
        epsilon_pld: the ε(δ') the ledger claims (PLD upper estimate: the guarantee if the run is its claim).
        epsilon_expected: the bound this threshold predicts on these canary counts if the run is the mechanism its
            ledger claims (the expected counts' bound: what the audit can reach, not a measurement).
        threshold: τ, fixed from the ledger (score ≥ τ predicts member).
        false_positives: non-members with score ≥ τ.
        false_negatives: members with score < τ.
        fpr_upper: Clopper–Pearson upper bound on the FPR (α/2).
        fnr_upper: Clopper–Pearson upper bound on the FNR (α/2).
    """

    delta: float
    epsilon_lower: float
    epsilon_pld: float
    epsilon_expected: float
    threshold: float
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float


@dataclass(frozen=True)
class PrivacyProfile:
    """The assumption-free lower bounds ε̂(δ') of one statistic beside the ledger's ε(δ') (module docstring).

    Attributes:
        statistic: "all-iterates" or "final-model".
        points: one :class:`ProfilePoint` per δ', in increasing δ'; the first is at the run's δ (the headline).
        n_members: member canaries (all certify).
        n_nonmembers: non-member canaries.
        confidence: 1 − α of each point (pointwise).
        kind: :data:`LABEL`.
    """

    statistic: str
    points: tuple[ProfilePoint, ...]
    n_members: int
    n_nonmembers: int
    confidence: float
    kind: str = LABEL

    @property
    def headline(self) -> ProfilePoint:
        """The point at the run's δ (the first), never a δ' chosen after seeing the data."""
        return self.points[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy: the points as lists of their fields."""
        out = {key: value for key, value in asdict(self).items() if key != "points"}
        for name in ProfilePoint.__dataclass_fields__:
            out[name] = [getattr(point, name) for point in self.points]
        return out


@lru_cache(maxsize=16)
def _tails(groups: tuple[StepGroup, ...], statistic: str):
    from dpaudit.theory.score_tails import _likelihood_ratio_tails, final_model_tails

    if statistic == "all-iterates":
        return _likelihood_ratio_tails(groups, 1e-3)
    z = np.concatenate([np.full(count, sigma) for sigma, _, count in groups])
    q = np.concatenate([np.full(count, rate) for _, rate, count in groups])
    return final_model_tails(noise_multipliers=z, sample_rates=q)


@lru_cache(maxsize=16)
def _claimed_epsilons(groups: tuple[StepGroup, ...], deltas: tuple[float, ...]) -> dict[float, float]:
    """The ledger's ε(δ') (PLD upper estimate) at each δ', from one PLD."""
    from dpaudit.theory._gaussian_pld import epsilon_for_delta
    from dpaudit.theory.tradeoff import _pld_of_groups

    pld = _pld_of_groups(groups, 1e-3)
    return {value: float(epsilon_for_delta(pld, value)) for value in deltas}


def ledger_threshold(
    *,
    statistic: str,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    n_members: int,
    n_nonmembers: int,
    delta: float,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """The threshold a ledger fixes for ``n_members`` and ``n_nonmembers`` canaries at δ, and the bound it predicts.

    Each candidate τ of the statistic's exact tails (:mod:`dpaudit.theory.score_tails`) is judged by the bound its
    expected counts (the tails times the class sizes, rounded) would give; the best wins.

    Args:
        statistic: "all-iterates" (Λ with these σ_t and q_t) or "final-model" (Σ_t x_t).
        noise_multipliers: σ_t per step, the observations' noise std (length T).
        sample_rates: q_t per step (length T).
        n_members: member canaries that will certify, ≥ 1.
        n_nonmembers: non-member canaries that will certify, ≥ 1.
        delta: δ' in (0, 1).
        confidence: 1 − α, in (0, 1) (α/2 per side).

    Returns:
        (τ, the predicted bound in nats).
    """
    if statistic not in STATISTICS:
        raise DPAuditError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    alpha = check_confidence(confidence)
    return _ledger_threshold(_tails(groups, statistic), int(n_members), int(n_nonmembers), float(delta), alpha)


def _ledger_threshold(tails, n_members: int, n_nonmembers: int, delta: float, alpha: float) -> tuple[float, float]:
    fp = np.rint(tails.nonmember_tail * n_nonmembers).astype(np.int64)
    fn = np.rint((1.0 - tails.member_tail) * n_members).astype(np.int64)
    fp, fn = np.clip(fp, 0, n_nonmembers), np.clip(fn, 0, n_members)
    bounds = epsilon_from_rates(
        fpr_upper=clopper_pearson_upper(fp, n_nonmembers, alpha=alpha / 2),
        fnr_upper=clopper_pearson_upper(fn, n_members, alpha=alpha / 2),
        delta=delta,
    )
    best = int(np.argmax(bounds))
    return float(tails.thresholds[best]), float(bounds[best])


def assumption_free_profile(
    member_scores: npt.ArrayLike,
    nonmember_scores: npt.ArrayLike,
    *,
    statistic: str,
    noise_multipliers: npt.ArrayLike,
    sample_rates: npt.ArrayLike,
    claimed_noise_multipliers: npt.ArrayLike | None = None,
    deltas: tuple[float, ...] | None = None,
    delta: float = 1e-5,
    confidence: float = 0.95,
) -> PrivacyProfile:
    """ε̂(δ') of a whole run's canaries for each δ', every threshold fixed from the ledger (module docstring).

    Args:
        member_scores: the members' statistic (1-D, finite).
        nonmember_scores: the non-members'.
        statistic: which statistic the scores are: "all-iterates" (Λ of
            :func:`dpaudit.whole_run.likelihood_ratio_scores` with these σ_t and q_t) or "final-model" (Σ_t x_t).
        noise_multipliers: σ_t per step, the observations' noise std (length T).
        sample_rates: q_t per step (length T).
        claimed_noise_multipliers: z_t of the ledger, for its ε(δ') (default: ``noise_multipliers``).
        deltas: the δ' (default: :func:`profile_deltas` of ``delta``); the first is the headline.
        delta: the run's δ (used where ``deltas`` is None).
        confidence: 1 − α of each point.

    Returns:
        A :class:`PrivacyProfile`.

    Raises:
        DPAuditError: bad scores, ledger, δ' or confidence, an unknown statistic.
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    if statistic not in STATISTICS:
        raise DPAuditError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    groups = group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)
    alpha = check_confidence(confidence)
    chosen = profile_deltas(delta) if deltas is None else tuple(check_delta(d, allow_zero=False) for d in deltas)
    claimed = noise_multipliers if claimed_noise_multipliers is None else claimed_noise_multipliers
    claims = _claimed_epsilons(group_steps(noise_multipliers=claimed, sample_rates=sample_rates), chosen)
    tails = _tails(groups, statistic)
    members, nonmembers = np.sort(members), np.sort(nonmembers)
    points = []
    for value in chosen:
        threshold, expected = _ledger_threshold(tails, members.size, nonmembers.size, value, alpha)
        fp = int(nonmembers.size - np.searchsorted(nonmembers, threshold, side="left"))
        fn = int(np.searchsorted(members, threshold, side="left"))
        fpr_u = float(clopper_pearson_upper(fp, nonmembers.size, alpha=alpha / 2))
        fnr_u = float(clopper_pearson_upper(fn, members.size, alpha=alpha / 2))
        epsilon = float(epsilon_from_rates(fpr_upper=fpr_u, fnr_upper=fnr_u, delta=value))
        points.append(
            ProfilePoint(
                delta=value,
                epsilon_lower=epsilon,
                epsilon_pld=claims[value],
                epsilon_expected=expected,
                threshold=threshold,
                false_positives=fp,
                false_negatives=fn,
                fpr_upper=fpr_u,
                fnr_upper=fnr_u,
            )
        )
    return PrivacyProfile(statistic, tuple(points), int(members.size), int(nonmembers.size), 1.0 - alpha)


__all__ = [
    "LABEL",
    "PrivacyProfile",
    "ProfilePoint",
    "assumption_free_profile",
    "ledger_threshold",
    "profile_deltas",
]
