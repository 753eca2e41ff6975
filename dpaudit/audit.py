"""One-call audit of membership-inference scores: every ε estimate and bound, AUC, TPR at low FPR, ROC.

``audit_scores(member_scores, nonmember_scores)`` sorts the scores once and reuses the counts for the
ROC, AUC, TPR at FPR, the eq. 20 point estimate, the simultaneous ("bonferroni") Clopper–Pearson bound
and the Gaussian-DP estimate; the split bound sorts its two halves. numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, TypedDict

import numpy as np

from dpaudit._validation import (
    DPAuditError,
    check_choice,
    check_confidence,
    check_delta,
    check_scores,
    check_seed,
    check_split_sizes,
)
from dpaudit.estimate import (
    SELECTIONS,
    BonferroniSelection,
    GDPEstimate,
    ScoreCounts,
    ThresholdSelection,
    epsilon_ceiling,
    epsilon_point_null,
    resolve_selection,
)

#: FPR targets reported in :attr:`AuditReport.tpr_at_fpr`.
REPORT_FPRS = (0.001, 0.01)

#: Most ROC points kept in a report.
MAX_ROC_POINTS = 1000

#: Above this many scores (members + non-members) a report's :attr:`AuditReport.epsilon_point_null` is None: the
#: permutations cost about 1 s per 60,000 tied scores (scores without ties are cached by class sizes), and the large
#: score sets are per-step canary audits whose point estimate no figure shows.
POINT_NULL_MAX_SCORES = 100_000

#: How :attr:`AuditReport.epsilon_point_null` is computed (its entry in :attr:`AuditReport.methods`).
POINT_NULL_METHOD = (
    "95 % quantile of the eq. 20 point estimate over 200 seeded permutations of the membership labels (no membership "
    "signal); a point estimate at or below it says nothing about leakage"
)

#: The selections ``audit_scores`` accepts for ``epsilon_lower``: those that choose on held-out scores
#: ("bonferroni" is always reported, as ``epsilon_lower_bonferroni``).
_HELD_OUT = tuple(name for name, selection in SELECTIONS.items() if selection.holds_out)


def _json_float(value: float) -> float | str:
    """Finite floats stay floats; ±inf and NaN become the strings "inf", "-inf", "nan"."""
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


@dataclass(frozen=True, eq=False)
class AuditReport:
    """Everything one audit of member vs non-member scores says about ε.

    Attributes:
        epsilon_point: eq. 20 point estimate (nats) over all thresholds; an estimate, not a bound.
        epsilon_point_null: the point estimate's null level (nats): the 95 % quantile of ``epsilon_point`` on the same
            scores with the membership labels permuted (:func:`dpaudit.estimate.epsilon_point_null`), what chance
            alone gives; None above :data:`POINT_NULL_MAX_SCORES` scores. A reference level, not a bound.
        epsilon_lower: Clopper–Pearson lower bound on ε (nats), threshold chosen on held-out scores
            (``selection``), holding with probability ≥ ``confidence``.
        epsilon_lower_bonferroni: the same bound over all thresholds on all data, simultaneous band.
        epsilon_gdp: Gaussian-DP estimate (Nasr et al. 2023) in nats; assumes a Gaussian trade-off curve.
        gdp_mu: the μ̂ behind ``epsilon_gdp``.
        epsilon_ceiling: the largest ``epsilon_lower`` a perfect attack could certify with the split's
            held-out sizes at this δ and confidence.
        epsilon_ceiling_bonferroni: the same for ``epsilon_lower_bonferroni``.
        threshold_lower: the certified threshold of ``epsilon_lower`` (score ≥ threshold predicts member).
        auc: area under the ROC curve, P[member > non-member] + ½ P[tie].
        tpr_at_fpr: ``{0.001: tpr, 0.01: tpr}``, best deterministic threshold with FPR ≤ target.
        methods: field name → one-line description of how it was computed.
        n_members: member scores given.
        n_nonmembers: non-member scores given.
        delta: δ of every ε here.
        confidence: 1 − α of the bounds and of the GDP estimate's band.
        seed: seed of the split.
        selection: "split" or "gaussian", how ``epsilon_lower`` chose its threshold.
        roc: ``{"fpr": array, "tpr": array}``, the ROC curve thinned to ≤ 1000 points (both end points and
            the low-FPR corners kept; see :func:`thin_roc`).
    """

    epsilon_point: float
    epsilon_point_null: float | None
    epsilon_lower: float
    epsilon_lower_bonferroni: float
    epsilon_gdp: float
    gdp_mu: float
    epsilon_ceiling: float
    epsilon_ceiling_bonferroni: float
    threshold_lower: float
    auc: float
    tpr_at_fpr: dict[float, float]
    methods: dict[str, str]
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float
    seed: int
    selection: str
    roc: dict[str, np.ndarray] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy: plain floats and ints, lists for the ROC, string keys for ``tpr_at_fpr``.

        Non-finite floats (none arise from finite scores, but a threshold can be ±inf) are written as the
        strings "inf", "-inf" or "nan", so ``json.dumps(report.to_dict(), allow_nan=False)`` always works.
        ``tpr_at_fpr`` keys are ``repr(fpr)``, e.g. "0.001".
        """
        out: dict[str, Any] = {}
        for name in (
            "epsilon_point",
            "epsilon_lower",
            "epsilon_lower_bonferroni",
            "epsilon_gdp",
            "gdp_mu",
            "epsilon_ceiling",
            "epsilon_ceiling_bonferroni",
            "threshold_lower",
            "auc",
            "delta",
            "confidence",
        ):
            out[name] = _json_float(getattr(self, name))
        out["epsilon_point_null"] = None if self.epsilon_point_null is None else _json_float(self.epsilon_point_null)
        out["tpr_at_fpr"] = {repr(float(key)): _json_float(value) for key, value in self.tpr_at_fpr.items()}
        out["methods"] = dict(self.methods)
        out["n_members"] = int(self.n_members)
        out["n_nonmembers"] = int(self.n_nonmembers)
        out["seed"] = int(self.seed)
        out["selection"] = self.selection
        out["roc"] = {
            key: [_json_float(value) for value in np.asarray(values, dtype=float)] for key, values in self.roc.items()
        }
        return out

    def summary(self) -> str:
        """One paragraph of text for logs and reports."""
        level = f"{100 * self.confidence:g}%"
        null = "null level n/a" if self.epsilon_point_null is None else f"null 95 %: {self.epsilon_point_null:.2f}"
        tprs = ", ".join(f"{value:.3g} at FPR {key:g}" for key, value in self.tpr_at_fpr.items())
        limited = (
            " (at the sample-size ceiling: more scores, not a stronger attack, would raise it)"
            if self.epsilon_lower >= self.epsilon_ceiling
            else ""
        )
        return (
            f"Audit of {self.n_members} member and {self.n_nonmembers} non-member scores at δ = {self.delta:g}: "
            f"AUC {self.auc:.3f}; TPR {tprs}. Point estimate ε̂ = {self.epsilon_point:.2f} "
            f"(eq. 20, not a bound; {null}). "
            f"With {level} confidence ε ≥ {self.epsilon_lower:.2f} ({self.methods['epsilon_lower']}; "
            f"ceiling {self.epsilon_ceiling:.2f}){limited} and ε ≥ {self.epsilon_lower_bonferroni:.2f} "
            f"(all thresholds, simultaneous; ceiling {self.epsilon_ceiling_bonferroni:.2f}). Gaussian-DP "
            f"estimate ε ≈ {self.epsilon_gdp:.2f} (μ̂ = {self.gdp_mu:.2f}; assumes a Gaussian trade-off "
            f"curve, not a bound)."
        )


def thin_roc(fpr, tpr, *, max_points: int = MAX_ROC_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Keep at most ``max_points`` ROC points: both end points, ~half evenly spaced along the curve's
    index, ~half at log-spaced FPR targets (the last point at or below each target), so log–log plots
    keep their low-FPR detail.

    Args:
        fpr: non-decreasing false-positive rates.
        tpr: matching true-positive rates.
        max_points: the most points to keep (≥ 4).

    Returns:
        ``(fpr, tpr)`` subsets, in order.
    """
    fpr = np.asarray(fpr, dtype=float)
    tpr = np.asarray(tpr, dtype=float)
    if fpr.size <= max_points:
        return fpr.copy(), tpr.copy()
    half = max_points // 2
    even = np.linspace(0, fpr.size - 1, half).round().astype(np.int64)
    positive = fpr[fpr > 0]
    smallest = positive[0] if positive.size else 1.0
    targets = np.geomspace(smallest, 1.0, max_points - half - 2)
    logged = np.searchsorted(fpr, targets, side="right") - 1
    keep = np.unique(np.concatenate([[0, fpr.size - 1], even, np.clip(logged, 0, fpr.size - 1)]))
    return fpr[keep], tpr[keep]


def audit_scores(
    member_scores,
    nonmember_scores,
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
    selection: str | ThresholdSelection = "split",
) -> AuditReport:
    """Audit membership-inference scores (higher = member): estimates, lower bounds and the ROC.

    Args:
        member_scores: 1-D finite scores of members, one independent trial each (≥ 2).
        nonmember_scores: 1-D finite scores of non-members (≥ 2).
        delta: the DP δ of every ε, in (0, 1).
        confidence: 1 − α of the lower bounds (and of the GDP estimate's band), in (0, 1).
        seed: non-negative integer seed of the split bound's random halves.
        selection: how ``epsilon_lower`` chooses its threshold: "split" (empirically, on a held-out
            half) or "gaussian" (normal fits to a held-out fifth; for near-Gaussian scores such as
            white-box canaries), or the :class:`~dpaudit.estimate.SplitSelection` /
            :class:`~dpaudit.estimate.GaussianSelection` object. Fix it before seeing the scores:
            choosing the better of the two afterwards would void the confidence.

    Returns:
        An :class:`AuditReport`.

    Raises:
        DPAuditError: empty or non-finite scores, fewer than 2 scores in a class, δ outside (0, 1),
            confidence outside (0, 1), a bad seed.

    Examples:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> report = audit_scores(rng.normal(2, 1, 1000), rng.normal(0, 1, 1000), delta=1e-5, confidence=0.95)
        >>> bool(0 < report.epsilon_lower <= report.epsilon_ceiling)
        True
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    delta = check_delta(delta, allow_zero=False)
    alpha = check_confidence(confidence)
    seed = check_seed(seed)
    chosen: ThresholdSelection = resolve_selection(selection, choices=_HELD_OUT)
    check_split_sizes(members, nonmembers)
    confidence = float(confidence)

    counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
    split = chosen.lower_bound(members, nonmembers, delta=delta, alpha=alpha, seed=seed)
    bonferroni = BonferroniSelection().lower_bound_from_counts(counts, delta=delta, alpha=alpha)
    gdp = GDPEstimate.from_counts(counts, delta=delta, confidence=confidence)
    ceiling = epsilon_ceiling(
        n_members=counts.n_members,
        n_nonmembers=counts.n_nonmembers,
        delta=delta,
        confidence=confidence,
        selection=chosen,
    )
    ceiling_bonferroni = epsilon_ceiling(
        n_members=counts.n_members,
        n_nonmembers=counts.n_nonmembers,
        delta=delta,
        confidence=confidence,
        selection="bonferroni",
    )
    if split.epsilon > ceiling or bonferroni.epsilon > ceiling_bonferroni:  # pragma: no cover - invariant
        raise DPAuditError("internal error: a lower bound exceeds its sample-size ceiling")
    roc_fpr, roc_tpr = thin_roc(counts.fpr, counts.tpr)
    methods = {
        "epsilon_point": "eq. 20 (Kairouz-Oh-Viswanath) point estimate, max over all thresholds of the finite "
        "ratios; not a bound",
        "epsilon_point_null": POINT_NULL_METHOD,
        "epsilon_lower": split.method,
        "epsilon_lower_bonferroni": bonferroni.method,
        "epsilon_gdp": gdp.method,
        "epsilon_ceiling": "largest epsilon_lower a perfect attack could certify with the certifying sample sizes",
        "epsilon_ceiling_bonferroni": "largest epsilon_lower_bonferroni a perfect attack could certify",
        "auc": "area under the ROC curve (Mann-Whitney, ties count one half)",
        "tpr_at_fpr": "largest TPR over deterministic thresholds with FPR <= target (no interpolation)",
    }
    return AuditReport(
        epsilon_point=counts.epsilon_point(delta=delta),
        epsilon_point_null=(
            None
            if counts.n_members + counts.n_nonmembers > POINT_NULL_MAX_SCORES
            else epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=delta)
        ),
        epsilon_lower=split.epsilon,
        epsilon_lower_bonferroni=bonferroni.epsilon,
        epsilon_gdp=gdp.epsilon,
        gdp_mu=gdp.mu,
        epsilon_ceiling=ceiling,
        epsilon_ceiling_bonferroni=ceiling_bonferroni,
        threshold_lower=split.threshold,
        auc=counts.auc(),
        tpr_at_fpr={target: counts.tpr_at(target) for target in REPORT_FPRS},
        methods=methods,
        n_members=counts.n_members,
        n_nonmembers=counts.n_nonmembers,
        delta=delta,
        confidence=confidence,
        seed=seed,
        selection=chosen.name,
        roc={"fpr": roc_fpr, "tpr": roc_tpr},
    )


@dataclass(frozen=True, eq=False)
class WholeRunReport:
    """A whole-run audit with Dirac canaries under two threat models (and a test of the noise's independence across
    steps), beside the run's theoretical ε.

    Every ε is in nats at ``delta``; each says what it is. A statistic that was not audited (``statistics`` given as
    a mapping without it) has None for its report and its family bound.

    Attributes:
        all_iterates: the audit of Λ, the log likelihood ratio over every released update (white box, all
            iterates): its ``epsilon_lower`` is the assumption-free Clopper–Pearson lower bound.
        all_iterates_family: the family lower bound on Λ (:func:`dpaudit.whole_run.family_lower_bound`), valid if
            the run's trade-off curve is that of a composed Poisson-subsampled Gaussian with its q_t and T.
        final_model: the audit of Σ_t x_t, what the final model alone shows (last-iterate threat model) when the
            optimizer is SGD without momentum; otherwise a statistic of all iterates, still a valid bound.
        final_model_family: the family lower bound on Σ_t x_t.
        epsilon_pld: the ε its ledger claims, from the PLD (upper estimate; the tightest accountant): a guarantee
            if the run is the mechanism its ledger describes, which the audit tests.
        epsilon_rdp: the same claim from the RDP accountant (looser).
        epsilon_last_iterate: the last-iterate heuristic ε (Steinke et al. 2025) for the final model: a heuristic,
            not a guarantee; None where the noise or the sample rate varies between steps, or where the final model
            was not audited.
        delta: δ.
        confidence: 1 − α of every bound.
        all_iterates_profile: the assumption-free privacy profile of Λ (:class:`dpaudit.privacy_profile.
            PrivacyProfile`): ε̂(δ') for δ' from δ to 10⁻², each threshold fixed by the ledger before the scores are
            read, every canary certifying, beside the ledger's ε(δ'); its ``headline`` (at δ) is the assumption-free
            number to quote. None where Λ was not audited.
        final_model_profile: the same for Σ_t x_t.
        spread: the audit of S_j = Σ_t (x_tj/σ_t − mean)², each canary's spread over the steps
            (:func:`dpaudit.whole_run.spread_scores`; white box, every iterate): a test of the noise's independence
            across steps, which sees noise drawn once and reused (Λ does not). Its ``epsilon_lower`` is the
            assumption-free bound; no family bound (S is not a test within the subsampled-Gaussian family, whose
            best test is Λ). None where the statistics given lack it.
    """

    all_iterates: AuditReport | None
    all_iterates_family: Any
    final_model: AuditReport | None
    final_model_family: Any
    epsilon_pld: float
    epsilon_rdp: float
    epsilon_last_iterate: float | None
    delta: float
    confidence: float
    spread: AuditReport | None = None
    all_iterates_profile: Any = None
    final_model_profile: Any = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy: the :class:`AuditReport` s as ``to_dict`` gives them, without their ROC curves
        (None, with its family bound, where a statistic was not audited), and the privacy profiles."""
        out: dict[str, Any] = {}
        for name in ("all_iterates_profile", "final_model_profile"):
            profile = getattr(self, name)
            out[name] = None if profile is None else profile.to_dict()
        for name in ("all_iterates", "final_model"):
            if getattr(self, name) is None:
                out[name] = out[f"{name}_family"] = None
                continue
            report = getattr(self, name).to_dict()
            report.pop("roc")
            out[name] = report
            out[f"{name}_family"] = {
                key: _json_float(v) if isinstance(v, float) else v
                for key, v in asdict(getattr(self, f"{name}_family")).items()
            }
        out["epsilon_pld"] = _json_float(self.epsilon_pld)
        out["epsilon_rdp"] = _json_float(self.epsilon_rdp)
        out["epsilon_last_iterate"] = (
            None if self.epsilon_last_iterate is None else _json_float(self.epsilon_last_iterate)
        )
        out["spread"] = None
        if self.spread is not None:
            out["spread"] = self.spread.to_dict()
            out["spread"].pop("roc")
        out["delta"], out["confidence"] = self.delta, self.confidence
        return out

    def summary(self) -> str:
        """One paragraph of text for logs and reports."""
        from dpaudit.whole_run import FAMILY_LABEL, FAMILY_TEST

        level = f"{100 * self.confidence:g} %"
        heuristic = (
            "" if self.epsilon_last_iterate is None else f", last-iterate heuristic {self.epsilon_last_iterate:.2f}"
        )

        def family(bound) -> str:
            return f"{bound.epsilon:.2f}" + (" (capped: the grid's strongest hypothesis)" if bound.capped else "")

        audited = next(r for r in (self.all_iterates, self.final_model, self.spread) if r is not None)
        parts = [
            f"Whole-run audit of {audited.n_members} member and {audited.n_nonmembers} "
            f"non-member canaries at δ = {self.delta:g}; the ledger claims ε = {self.epsilon_pld:.2f} (PLD), "
            f"{self.epsilon_rdp:.2f} (RDP). Each bound at {level} confidence."
        ]

        def fixed(profile) -> str:
            if profile is None:
                return ""
            point = profile.headline
            return f"ε ≥ {point.epsilon_lower:.2f} (assumption-free, threshold fixed by the ledger), "

        if self.all_iterates is not None:
            parts.append(
                f" All iterates: {fixed(self.all_iterates_profile)}ε ≥ {self.all_iterates.epsilon_lower:.2f} "
                f"(assumption-free, threshold chosen on held-out canaries), ε ≥ {family(self.all_iterates_family)} "
                f"({FAMILY_LABEL})."
            )
        if self.final_model is not None:
            parts.append(
                f" Final model: {fixed(self.final_model_profile)}ε ≥ {self.final_model.epsilon_lower:.2f} "
                f"(assumption-free, held-out threshold), ε ≥ {family(self.final_model_family)} "
                f"(family: {FAMILY_TEST}){heuristic}."
            )
        if self.spread is not None:
            parts.append(
                f" Spread over the steps (noise independence): ε ≥ {self.spread.epsilon_lower:.2f} (assumption-free)."
            )
        return "".join(parts)


def audit_whole_run(
    observations=None,
    members=None,
    *,
    noise_multipliers,
    sample_rates,
    noise_std=None,
    statistics=None,
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
    family_selection: str | Mapping[str, tuple[Any, Any]] = "split",
    selection: str | ThresholdSelection = "split",
) -> WholeRunReport:
    """Audit a whole training run from its Dirac canaries' released updates, under two threat models.

    Each canary was a member of the training set with probability ½ (independently); a member joined each
    step's batch through the run's sampling, its gradient went through the optimizer's clipping and noise on a
    coordinate of its own. ``observations[j, t]`` is canary j's coordinate of step t's released update,
    normalised so that a present canary contributes exactly 1; the noise on it then has std ``noise_std[t]``
    (for plain clipping, where a present canary contributes C, the run's noise multiplier z_t). The canaries must
    be independent trials (no coordinate mixing between them). The run's theoretical ε is that of its ledger
    (``noise_multipliers``, ``sample_rates``): what it claims.
    Instead of the observations, their statistics may be given (``statistics``), e.g. those a training run
    summed online (``RunCanaryObservations.all_iterates_scores`` and ``final_model_scores``, and its
    ``spread()``). From the observations (or a third statistic) the report also audits each canary's spread over
    the steps (``spread``: a test of the noise's independence across steps, assumption-free bound only). Given as a
    mapping, only the statistics it names are audited (e.g. one attack's scores, pooled over trials).

    Args:
        observations: [M, T] normalised updates x_t of the M canaries (exactly one of it and ``statistics``).
        members: [M] bool, which canaries were members (≥ 2 of each).
        noise_multipliers: [T] the noise multiplier z_t = σ/C the run's ledger records for each step (its claim).
        sample_rates: [T] the sample rate q_t the run's ledger records for each step.
        noise_std: [T] the noise std σ_t of the observations in their normalised units (default:
            ``noise_multipliers``, right when a present canary contributes exactly C; ``RunCanaryObservations``
            records it as ``noise_std``). The statistic Λ and the family bound's hypotheses use it.
        statistics: (all_iterates_scores, final_model_scores) or (all_iterates_scores, final_model_scores,
            spread_scores), each [M] float: Λ_j (nats) of :func:`dpaudit.whole_run.likelihood_ratio_scores` with
            these σ_t and q_t, Σ_t x_tj of :func:`dpaudit.whole_run.final_model_scores` and S_j of
            :func:`dpaudit.whole_run.spread_scores` (without it, no ``spread`` audit); or a mapping from some of
            the names "all_iterates", "final_model" and "spread" to those [M] arrays (the others are not audited,
            and the last-iterate heuristic only with "final_model"); instead of ``observations``.
        delta: δ of every ε, in (0, 1).
        confidence: 1 − α of every bound, in (0, 1).
        seed: the seed of the bounds' random halves.
        family_selection: how the family bounds choose their threshold: ``"split"`` (on a held-out share of these
            canaries), ``"ledger"`` (before any score is read, on a simulation of the mechanism the ledger
            claims; every canary certifies), or a mapping from each audited "all_iterates"/"final_model" statistic
            to ``(member_scores, nonmember_scores)`` of the same statistic from independent runs of the same ledger
            (every canary certifies): ``selection`` of :func:`dpaudit.whole_run.family_lower_bound`.
        selection: how the assumption-free bounds choose their threshold: ``selection`` of :func:`audit_scores`.

    Returns:
        A :class:`WholeRunReport`.

    Raises:
        DPAuditError: both or neither of ``observations`` and ``statistics``, a bad shape, non-finite statistics,
            an unknown or no statistic name, fewer than 2 canaries in a class, a bad ledger, δ or confidence, a bad
            ``family_selection`` or ``selection``.

    Examples:
        200 member and 200 non-member canaries over T = 50 steps at z = 1, q = 0.2, drawn by the simulation of
        the game (:func:`dpaudit.whole_run.simulate_observations`):

        >>> import numpy as np
        >>> from dpaudit.whole_run import simulate_observations
        >>> ledger = {"noise_multipliers": np.ones(50), "sample_rates": np.full(50, 0.2)}
        >>> member_obs, nonmember_obs = simulate_observations(members=200, nonmembers=200, seed=0, **ledger)
        >>> members = np.arange(400) < 200
        >>> report = audit_whole_run(np.concatenate([member_obs, nonmember_obs]), members, delta=1e-5, **ledger)
        >>> bool(report.all_iterates.epsilon_lower <= report.epsilon_pld <= report.epsilon_rdp)
        True
    """
    # the accountants load scipy: imported on first use, so that ``import dpaudit.audit`` stays light
    from dpaudit.theory.tradeoff import group_steps
    from dpaudit.whole_run import family_lower_bound, final_model_scores, likelihood_ratio_scores, spread_scores

    delta = check_delta(delta, allow_zero=False)
    check_confidence(confidence)
    seed = check_seed(seed)
    chosen_on = None if isinstance(family_selection, str) else family_selection
    if chosen_on is None and family_selection not in ("split", "ledger"):
        raise DPAuditError(f"family_selection must be 'split' or 'ledger', got {family_selection!r}")
    if chosen_on is not None and not isinstance(chosen_on, Mapping):
        raise DPAuditError(
            "family_selection must be 'split', 'ledger' or a mapping of statistic name → (member, non-member) scores"
        )
    if (observations is None) == (statistics is None):
        raise DPAuditError("give exactly one of observations [M, T] and statistics (all-iterates, final-model scores)")
    if members is None:
        raise DPAuditError("members ([M] bool) is required")
    flags = np.asarray(members)
    if flags.dtype != bool or flags.ndim != 1:
        raise DPAuditError(f"members must be a 1-D bool array, got dtype {flags.dtype} and shape {flags.shape}")
    group_steps(noise_multipliers=noise_multipliers, sample_rates=sample_rates)  # the ledger's one-line errors
    z = np.asarray(noise_multipliers, dtype=float)
    q = np.asarray(sample_rates, dtype=float)
    if noise_std is not None:
        group_steps(noise_multipliers=noise_std, sample_rates=sample_rates)
    sigma = z if noise_std is None else np.asarray(noise_std, dtype=float)
    ledger = {"noise_multipliers": sigma, "sample_rates": q}  # the observations' mechanism
    if statistics is not None:
        names: tuple[str, ...] = _WHOLE_RUN_STATISTICS
        if isinstance(statistics, Mapping):
            unknown = [name for name in statistics if name not in _WHOLE_RUN_STATISTICS]
            if unknown or not statistics:
                raise DPAuditError(
                    f"statistics names some of {', '.join(_WHOLE_RUN_STATISTICS)}, got {list(statistics) or 'none'}"
                )
            names = tuple(name for name in _WHOLE_RUN_STATISTICS if name in statistics)
            statistics = [statistics[name] for name in names]
        try:
            given = [np.asarray(values, dtype=float) for values in statistics]
        except (TypeError, ValueError):
            given = []
        if len(given) not in ((2, 3) if len(names) == len(_WHOLE_RUN_STATISTICS) else (len(names),)):
            raise DPAuditError(
                "statistics must be two or three [M] arrays (all-iterates, final-model[, spread] scores), or a "
                "mapping of statistic name → [M] array"
            )
        for name, values in zip(names, given):
            if values.shape != flags.shape:
                raise DPAuditError(
                    f"the {name.replace('_', '-')} statistic must be [M] with M = len(members) = {flags.size}, got "
                    f"shape {values.shape}"
                )
            if not np.all(np.isfinite(values)):
                raise DPAuditError(f"the {name.replace('_', '-')} statistic must be finite (no NaN or inf)")
        scores = dict(zip(names, given))
    else:
        try:
            values = np.asarray(observations, dtype=float)
        except (TypeError, ValueError):
            raise DPAuditError("observations must be a 2-D array of numbers [canaries, steps]") from None
        if values.ndim != 2 or values.shape[0] != flags.size:
            raise DPAuditError(
                f"observations must be [M, T] with M = len(members) = {flags.size}, got shape {values.shape}"
            )
        scores = {
            "all_iterates": likelihood_ratio_scores(values, **ledger),
            "final_model": final_model_scores(values),
            "spread": spread_scores(observations=values, noise_std=sigma),
        }
    if chosen_on is not None:
        missing = [name for name in scores if name != "spread" and name not in chosen_on]
        if missing:
            raise DPAuditError(f"family_selection gives no selection scores for the {missing[0]} statistic")
    reports: dict[str, Any] = dict.fromkeys(
        ("all_iterates", "all_iterates_family", "final_model", "final_model_family")
    )
    from dpaudit.privacy_profile import assumption_free_profile

    for name, statistic in scores.items():
        member_scores, nonmember_scores = statistic[flags], statistic[~flags]
        reports[name] = audit_scores(
            member_scores, nonmember_scores, delta=delta, confidence=confidence, seed=seed, selection=selection
        )
        if name != "spread":  # the family bound tests within the subsampled-Gaussian family: Λ and Σ_t x_t only
            reports[f"{name}_profile"] = assumption_free_profile(
                member_scores,
                nonmember_scores,
                statistic=name.replace("_", "-"),
                noise_multipliers=sigma,
                sample_rates=q,
                claimed_noise_multipliers=z,
                delta=delta,
                confidence=confidence,
            )
            chooser: str | tuple[Any, ...] | None = None
            statistic_name = None
            if chosen_on is not None:
                chooser = tuple(chosen_on[name])
            elif family_selection == "ledger":
                chooser, statistic_name = "ledger", name.replace("_", "-")
            reports[f"{name}_family"] = family_lower_bound(
                member_scores,
                nonmember_scores,
                noise_multipliers=sigma,
                sample_rates=q,
                delta=delta,
                confidence=confidence,
                seed=seed,
                selection=chooser,
                statistic=statistic_name,
            )
    claims = ledger_claims(noise_multipliers=z, sample_rates=q, delta=delta, last_iterate="final_model" in scores)
    return WholeRunReport(
        **reports,
        epsilon_pld=claims["epsilon_pld"],
        epsilon_rdp=claims["epsilon_rdp"],
        epsilon_last_iterate=claims["epsilon_last_iterate"],
        delta=delta,
        confidence=float(confidence),
    )


#: The statistics of a whole-run audit, in the order :func:`audit_whole_run` takes them as a tuple.
_WHOLE_RUN_STATISTICS = ("all_iterates", "final_model", "spread")


class LedgerClaims(TypedDict):
    """The ε a ledger claims (:func:`ledger_claims`), in nats."""

    epsilon_pld: float
    epsilon_rdp: float
    epsilon_last_iterate: float | None


def ledger_claims(*, noise_multipliers, sample_rates, delta: float, last_iterate: bool) -> LedgerClaims:
    """The ε that a run's ledger claims at δ, each labelled by its key.

    Args:
        noise_multipliers: [T] z_t = σ_t/C of each step, as the ledger records them.
        sample_rates: [T] q_t of each step.
        delta: δ of every ε.
        last_iterate: also the last-iterate heuristic ε (the final model's threat model).

    Returns:
        ``epsilon_pld`` (the PLD accountant's upper bound, tightest), ``epsilon_rdp`` (RDP's) and
        ``epsilon_last_iterate`` (Steinke et al. 2025's heuristic, not a guarantee; None unless asked for and
        every step has the same z and q), all in nats.
    """
    from dpaudit.theory.tradeoff import last_iterate_epsilon

    z, q = (tuple(np.asarray(values, dtype=float).tolist()) for values in (noise_multipliers, sample_rates))
    constant = len(set(z)) == 1 and len(set(q)) == 1
    claims = _accountant_claims(z, q, float(delta))
    return {
        "epsilon_pld": claims["epsilon_pld"],
        "epsilon_rdp": claims["epsilon_rdp"],
        "epsilon_last_iterate": last_iterate_epsilon(noise_multiplier=z[0], sample_rate=q[0], steps=len(z), delta=delta)
        if last_iterate and constant
        else None,
    }


@lru_cache(maxsize=16)
def _accountant_claims(z: tuple, q: tuple, delta: float) -> dict[str, float]:
    """The PLD and RDP ε of a ledger, once per ledger (the attacks of one ``dpaudit audit`` share it; the PLD
    of a ledger whose steps differ takes seconds)."""
    from dpaudit.theory import epsilon as rdp_epsilon
    from dpaudit.theory.tradeoff import sgm_epsilon

    return {
        "epsilon_pld": sgm_epsilon(noise_multipliers=z, sample_rates=q, delta=delta),
        "epsilon_rdp": rdp_epsilon(noise_multiplier=list(z), sample_rate=list(q), delta=delta),
    }


#: The three lower bounds of :func:`validation_flag`, in the order ``ValidationFlag.flagged_by`` lists them.
VALIDATION_BOUNDS = ("all_iterates_family", "all_iterates", "spread")
#: The checks of :func:`validation_flag`: the three bounds, then the test of the canaries' presence against the
#: ledger's sample rates (where the run recorded which canaries its sampler drew).
VALIDATION_CHECKS = (*VALIDATION_BOUNDS, "presence", "step_noise", "contribution")


@dataclass(frozen=True, eq=False)
class ValidationFlag:
    """Whether a whole-run canary audit flags a run as breaking its claimed ε (:func:`validation_flag`).

    Attributes:
        flagged: True when any of the three lower bounds exceeds ``epsilon_claimed``, or the canaries' presence
            refutes the ledger's sample rates.
        flagged_by: the names of the checks that flag it, in :data:`VALIDATION_CHECKS` order (empty when not
            flagged): "all_iterates_family" (the family bound on Λ), "all_iterates" (the assumption-free bound on
            Λ), "spread" (the assumption-free bound on the spread over the steps), "presence" (the run's sampler
            drew the canaries at other rates than the ledger's: ``presence_p_value`` below 1 − ``confidence``),
            "step_noise" (a step released with less noise than its σ_t, or none:
            ``RunCanaryObservations.noise_check``),
            "contribution" (members that move more than q_t: a larger sample rate or sensitivity,
            ``contribution_check``), then the names of ``checks`` below 1 − ``confidence``.
        bounds: each bound's ε (nats, a lower bound at ``confidence``), by name.
        epsilon_claimed: the ε the run claims (nats, at ``delta``), which the bounds are compared with.
        delta: δ of every ε.
        confidence: 1 − α of each check: 1 − ``false_alarm``/k (Bonferroni over the k checks: 4, or 3 where the
            run did not record its canaries' presence).
        false_alarm: the most probability with which a run that keeps its claim is flagged.
        all_iterates_family: the :class:`dpaudit.whole_run.FamilyBound` on Λ (its ``capped`` flag included).
        all_iterates: the :class:`AuditReport` of Λ.
        spread: the :class:`AuditReport` of the spread over the steps.
        presence_p_value: two-sided p-value of the canaries' presence under the ledger's sample rates
            (``RunCanaryObservations.presence_p_value``); None where the run did not record it.
        checks: the further checks' p-values, by name (``validation_flag``'s ``checks``).
        parameter_checks: the direct checks of σ_t and q_t (``dpaudit.attacks.canary_run.ParameterCheck``), by name
            ("step_noise", "contribution"); empty where the run recorded no step sums.
    """

    flagged: bool
    flagged_by: tuple[str, ...]
    bounds: dict[str, float]
    epsilon_claimed: float
    delta: float
    confidence: float
    false_alarm: float
    all_iterates_family: Any = field(repr=False)
    all_iterates: AuditReport = field(repr=False)
    spread: AuditReport = field(repr=False)
    presence_p_value: float | None = None
    checks: dict[str, float] = field(default_factory=dict)
    parameter_checks: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy of the flag, the bounds and the claim (not the full reports)."""
        return {
            "flagged": bool(self.flagged),
            "flagged_by": list(self.flagged_by),
            "bounds": {name: _json_float(value) for name, value in self.bounds.items()},
            "family_capped": bool(self.all_iterates_family.capped),
            "epsilon_claimed": _json_float(self.epsilon_claimed),
            "delta": self.delta,
            "confidence": self.confidence,
            "false_alarm": self.false_alarm,
            "presence_p_value": self.presence_p_value,
            "checks": dict(self.checks),
            "parameter_checks": {name: asdict(check) for name, check in self.parameter_checks.items()},
        }

    def summary(self) -> str:
        """One line for logs and reports."""
        bounds = ", ".join(f"{name} {value:.2f}" for name, value in self.bounds.items())
        verdict = f"flagged by {', '.join(self.flagged_by)}" if self.flagged else "not flagged"
        p_value = self.presence_p_value
        presence = "" if p_value is None else f"; presence at the ledger's q: p = {p_value:.3g}"
        presence += "".join(
            f"; {name} {check.estimate:.3g} of the ledger's (worst step {check.worst:.3g}): p = {check.p_value:.3g}"
            for name, check in self.parameter_checks.items()
        )
        presence += "".join(f"; {name}: p = {value:.3g}" for name, value in self.checks.items())
        return (
            f"{verdict}: claimed ε = {self.epsilon_claimed:.2f} at δ = {self.delta:g}; lower bounds on ε at "
            f"{100 * self.confidence:.4g} % each ({bounds}{presence}; false alarms ≤ {100 * self.false_alarm:g} %)"
        )


def validation_flag(
    *,
    canaries,
    epsilon: float | None,
    delta: float,
    false_alarm: float = 0.05,
    seed: int = 0,
    checks: Mapping[str, float] | None = None,
) -> ValidationFlag:
    """Flag a run whose whole-run canaries refute its claimed ε: the auditor validation's rule.

    Three lower bounds on ε, each at confidence 1 − ``false_alarm``/3, so that (union bound) a run that keeps its
    claim is flagged with probability at most ``false_alarm``: on Λ, the log likelihood ratio of every iterate,
    the family bound (:func:`dpaudit.whole_run.family_lower_bound`; above the claim it rejects "at least as private
    as the ledger's composed Poisson-subsampled Gaussian", on which the claim rests) and the assumption-free
    Clopper–Pearson bound; on the spread over the steps (:func:`dpaudit.whole_run.spread_scores`, a test of the
    noise's independence across steps that sees one noise draw reused at every step), the assumption-free bound
    alone (it is no test within the subsampled-Gaussian family). The run is flagged when any exceeds the claim.
    Each bound's threshold is chosen on a held-out half of the canaries (seeded by ``seed``). Where the run
    recorded how many canaries its sampler drew at each step, a fourth check tests that against the ledger's
    sample rates (``RunCanaryObservations.presence_p_value``; a sampler departing from the ledger in either
    direction is flagged); where it recorded its step sums, two direct checks of the ledger's parameters (σ_t at
    every step, from the non-members' noise, and q_t times a present canary's contribution, from the members'
    shift: ``RunCanaryObservations.noise_check`` and ``contribution_check``, each flagging a departure that costs
    privacy). Each of the k checks gets ``false_alarm``/k.

    Args:
        canaries: a ``dpaudit.attacks.canary_run.RunCanaryObservations`` (with the spread's sums), or the output
            folder of a ``dpaudit train`` run with whole-run canaries (str or Path; loads torch).
        epsilon: the claimed ε (nats, at ``delta``); None: the ε its own ledger claims (the PLD accountant on the
            recorded z_t and q_t, an upper estimate).
        delta: δ of every ε, in (0, 1).
        false_alarm: the most probability of flagging a run that keeps its claim, in (0, 1).
        seed: non-negative integer seed of the bounds' held-out halves.
        checks: further tests of the run, by name → p-value (e.g. the measured noise scale of record-level
            canaries); each is one more check in the Bonferroni split and flags below its share of ``false_alarm``.

    Returns:
        A :class:`ValidationFlag`: the flag, which bounds raised it, the three bounds and the claim.

    Raises:
        DPAuditError: a bad ε, δ, false-alarm level or seed, a missing run folder or canary file, observations
            without the spread's sums, fewer than 2 canaries in a class, a bad ledger — before any bound is computed.
    """
    from pathlib import Path

    from dpaudit.theory.tradeoff import sgm_epsilon
    from dpaudit.whole_run import family_lower_bound

    delta = check_delta(delta, allow_zero=False)
    if isinstance(false_alarm, bool) or not isinstance(false_alarm, (int, float)) or not 0 < false_alarm < 1:
        raise DPAuditError(f"false_alarm must be a probability in (0, 1), got {false_alarm!r}")
    false_alarm = float(false_alarm)
    seed = check_seed(seed)
    if epsilon is not None and not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
        raise DPAuditError(f"the claimed epsilon must be a finite number ≥ 0 (nats) or None, got {epsilon!r}")
    if isinstance(canaries, (str, Path)):
        from dpaudit.attacks.canary_run import load_run_canaries

        canaries = load_run_canaries(canaries)
    if not hasattr(canaries, "scores") or not hasattr(canaries, "noise_std"):
        raise DPAuditError(
            "canaries must be a RunCanaryObservations or a run folder with whole-run canaries, "
            f"got {type(canaries).__name__}"
        )
    members_lr, nonmembers_lr = canaries.scores("all")
    members_spread, nonmembers_spread = canaries.scores("spread")
    if epsilon is None:
        epsilon = sgm_epsilon(
            noise_multipliers=canaries.noise_multipliers, sample_rates=canaries.sample_rates, delta=delta
        )
    presence = canaries.presence_p_value() if hasattr(canaries, "presence_p_value") else None
    extra = dict(checks or {})
    for name, p_value in extra.items():
        if name in VALIDATION_CHECKS or not (isinstance(p_value, (int, float)) and 0 <= p_value <= 1):
            raise DPAuditError(f"checks maps new check names to p-values in [0, 1], got {name!r}: {p_value!r}")
    parameters = {  # σ_t at every step and q_t·c, from the step sums where the run recorded them
        check.name: check
        for method in ("noise_check", "contribution_check")
        if (check := getattr(canaries, method, lambda: None)()) is not None
    }
    count = len(VALIDATION_BOUNDS) + (presence is not None) + len(parameters) + len(extra)
    confidence = 1.0 - false_alarm / count
    family = family_lower_bound(
        members_lr,
        nonmembers_lr,
        noise_multipliers=canaries.noise_std,
        sample_rates=canaries.sample_rates,
        delta=delta,
        confidence=confidence,
        seed=seed,
    )
    all_iterates = audit_scores(members_lr, nonmembers_lr, delta=delta, confidence=confidence, seed=seed)
    spread = audit_scores(members_spread, nonmembers_spread, delta=delta, confidence=confidence, seed=seed)
    bounds = {
        "all_iterates_family": float(family.epsilon),
        "all_iterates": float(all_iterates.epsilon_lower),
        "spread": float(spread.epsilon_lower),
    }
    flagged_by = tuple(name for name in VALIDATION_BOUNDS if bounds[name] > epsilon)
    if presence is not None and presence < 1.0 - confidence:
        flagged_by += ("presence",)
    flagged_by += tuple(name for name, check in parameters.items() if check.p_value < 1.0 - confidence)
    flagged_by += tuple(name for name, p_value in extra.items() if p_value < 1.0 - confidence)
    return ValidationFlag(
        flagged=bool(flagged_by),
        flagged_by=flagged_by,
        bounds=bounds,
        epsilon_claimed=float(epsilon),
        delta=delta,
        confidence=confidence,
        false_alarm=false_alarm,
        all_iterates_family=family,
        all_iterates=all_iterates,
        spread=spread,
        presence_p_value=presence,
        checks=extra,
        parameter_checks=parameters,
    )


@dataclass(frozen=True, eq=False)
class PooledScores:
    """One attack's scores on several runs of one configuration (independent trials), pooled.

    Attributes:
        members: the runs' member scores, concatenated in run order (higher = member).
        nonmembers: their non-member scores, likewise.
        epoch: the checkpoint epoch attacked on the last run; None for the attacks that score the whole run.
        epsilon_run: the ε the last run claims (its planned ε, at its own δ); None where it has none.
        epsilon_mechanism: the largest over the runs of the ε (at the audit's δ) of the mechanism each trial of a
            whole-run attack faces; None for the attacks that score a checkpoint.
        mechanism: what ``epsilon_mechanism`` accounts for, one line (the last run's); None with it.
        selection: the threshold selection the scores call for in :func:`audit_scores` (the last run's that names
            one); None: the caller's default.
        ledger: for whole-run canaries, the ledger every run shares (``noise_multipliers`` z_t, ``noise_std`` σ_t,
            ``sample_rates`` q_t, each [T]); None for the other attacks.
    """

    members: np.ndarray
    nonmembers: np.ndarray
    epoch: int | None = None
    epsilon_run: float | None = None
    epsilon_mechanism: float | None = None
    mechanism: str | None = None
    selection: str | None = None
    ledger: Mapping[str, np.ndarray] | None = None


def same_ledger(*, first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether two whole-run ledgers (arrays by name: z_t, σ_t, q_t) are equal: the same names, each array equal
    entry by entry."""
    return first.keys() == second.keys() and all(np.array_equal(first[key], second[key]) for key in first)


def pool_attack_scores(*, runs, attack: str, epoch: int | None = None, delta: float) -> PooledScores:
    """Score each of ``runs`` with one attack (:data:`dpaudit.attacks.ATTACKS`) and pool the scores over them.

    The runs are independent trials of one configuration: pooling a folder twice, or two runs of the same seed and
    trial, is refused (:func:`dpaudit.integrity.check_distinct_runs`). Whole-run canaries are pooled over runs of
    one ledger only: their claim and the family bound rest on it.

    Args:
        runs: ``dpaudit train`` output folders (≥ 1).
        attack: the attack's name.
        epoch: the checkpoint epoch to attack; None: each run's last evaluated epoch. Unused by the attacks that
            score the whole run.
        delta: δ of ``epsilon_mechanism``.

    Returns:
        :class:`PooledScores`.

    Raises:
        DPAuditError: an unknown attack, no runs, a run named twice or two runs of the same draws, whole-run
            canaries of different ledgers, and whatever the attack refuses (a run that lacks what it needs).
    """
    from dpaudit.attacks import get_attack
    from dpaudit.integrity import check_distinct_runs
    from dpaudit.run import load_run_config  # imports torch

    spec = get_attack(attack)
    runs = list(runs)
    if not runs:
        raise DPAuditError("pool_attack_scores needs at least one run")
    configs = [load_run_config(run) for run in runs]
    check_distinct_runs(runs, configs=[config.to_dict() for config in configs])
    members, nonmembers, found_epoch = [], [], None
    claims: dict[str, Any] = {"epsilon_run": None, "epsilon_mechanism": None, "mechanism": None, "selection": None}
    ledger = None
    for run, config in zip(runs, configs):
        found_epoch = None if spec.whole_run else epoch or max(config.audit.eval_epochs)
        found = spec.scores(run, epoch=found_epoch, delta=delta)
        claims["epsilon_run"] = found.epsilon_run
        if found.epsilon_mechanism is not None:
            claims["epsilon_mechanism"] = max(claims["epsilon_mechanism"] or 0.0, found.epsilon_mechanism)
            claims["mechanism"] = found.mechanism
        if found.selection is not None:
            claims["selection"] = found.selection
        if found.ledger is not None:  # whole-run canaries: trials pooled over runs of one ledger only
            if ledger is not None and not same_ledger(first=ledger, second=found.ledger):
                raise DPAuditError(f"the {attack} audit pools runs of one ledger (z_t, q_t); {run} has another")
            ledger = found.ledger
        members.append(found.members)
        nonmembers.append(found.nonmembers)
    return PooledScores(np.concatenate(members), np.concatenate(nonmembers), found_epoch, **claims, ledger=ledger)


__all__ = [
    "AuditReport",
    "MAX_ROC_POINTS",
    "POINT_NULL_MAX_SCORES",
    "POINT_NULL_METHOD",
    "PooledScores",
    "REPORT_FPRS",
    "VALIDATION_BOUNDS",
    "VALIDATION_CHECKS",
    "ValidationFlag",
    "WholeRunReport",
    "audit_scores",
    "audit_whole_run",
    "pool_attack_scores",
    "same_ledger",
    "thin_roc",
    "validation_flag",
]


def audit_model(
    model,
    members,
    nonmembers,
    *,
    attack: str = "loss",
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
    selection: str | ThresholdSelection = "split",
    device: str = "cpu",
) -> AuditReport:
    """Attack a trained model on known members and non-members and audit the scores.

    Args:
        model: a trained ``torch.nn.Module`` (logits out).
        members: ``dpaudit.data.ArrayDataset`` of records the model trained on.
        nonmembers: ``ArrayDataset`` of records from the same distribution it did not train on.
        attack: an attack of :data:`dpaudit.attacks.ATTACKS` that scores a model in memory (its
            ``model_scorer``): "loss" (−cross-entropy, Yeom et al. 2018), "confidence" (true-class probability),
            or one registered with a ``model_scorer`` (:func:`dpaudit.attacks.register_attack`).
        delta, confidence, seed, selection: as :func:`audit_scores` (δ, 1 − α, the threshold selection).
        device: where the model runs.

    Returns:
        The :class:`AuditReport` of the attack's scores.

    Raises:
        DPAuditError: on an unknown attack or bad δ / confidence, before the model is run.
    """
    from dpaudit.attacks import ATTACKS

    scorers = {name: spec.model_scorer for name, spec in ATTACKS.items() if spec.model_scorer is not None}
    check_choice("attack", attack, scorers)
    resolve_selection(selection, choices=_HELD_OUT)
    check_delta(delta, allow_zero=False)
    check_confidence(confidence)
    for name, data in (("members", members), ("nonmembers", nonmembers)):
        if not hasattr(data, "images") or len(data.labels) == 0:
            raise DPAuditError(f"{name} must be a non-empty dpaudit.data.ArrayDataset")
    member_scores = scorers[attack](model, members, device=device)
    nonmember_scores = scorers[attack](model, nonmembers, device=device)
    return audit_scores(
        member_scores, nonmember_scores, delta=delta, confidence=confidence, seed=seed, selection=selection
    )
