"""Known-answer and coverage tests of the ε estimates and lower bounds (dpaudit.estimate, dpaudit.audit).

Every expected number comes from first principles (exact binomial tails, closed forms, brute force,
numerical integration) or from the reference tables dpaudit was specified against (perfect-attack ceilings;
one-run bounds).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import integrate, stats

from dpaudit._validation import DPAuditError
from dpaudit.audit import AuditReport, audit_scores, thin_roc
from dpaudit.estimate import (
    auc,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_ceiling,
    epsilon_from_counts,
    epsilon_gdp,
    epsilon_lower_bound,
    epsilon_one_run,
    epsilon_one_run_scores,
    epsilon_point,
    gdp_delta,
    gdp_epsilon,
    one_run_p_value,
    roc_curve,
    tpr_at_fpr,
)

SELECTIONS = ("split", "gaussian", "bonferroni")


def _perfect_attack_epsilon(n: int, alpha: float) -> float:
    """Perfect-attack ceiling: ln(p/(1−p)) with p = (α/2)^(1/n), δ = 0, n scores per class, no errors."""
    p = (alpha / 2) ** (1 / n)
    return math.log(p / (1 - p))


# ------------------------------------------------------------------------------------------------
# eq. 20 point estimate, ROC, AUC, TPR at FPR
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [0.0, 0.01])
def test_epsilon_point_hand_example(delta):
    # Thresholds by hand: the best is t = 3 with FPR = 1/4 and FNR = 1/4, giving ln((3/4 − δ)/(1/4)).
    members = [2, 3, 4, 5]
    nonmembers = [0, 1, 2.5, 6]
    assert epsilon_point(members, nonmembers, delta=delta) == pytest.approx(math.log((0.75 - delta) / 0.25))


def test_epsilon_point_leaves_out_infinite_ratios():
    # Perfectly separated: at t = 3 FPR = 0, FNR = 1/2; ratio 1 = ln((1 − δ)/(1/2)), ratio 2 = +inf is left out.
    delta = 1e-3
    value = epsilon_point([2, 3], [0, 1], delta=delta)
    assert math.isfinite(value)
    assert value == pytest.approx(math.log(2 * (1 - delta)))
    # identical scores: only the trivial thresholds, ln(1 − δ) < 0, clamped at 0
    assert epsilon_point([1.0, 1.0], [1.0, 1.0, 1.0], delta=delta) == 0.0


def test_tied_perfect_separation_is_no_weaker_than_untied():
    """Two values, all members above all non-members: no threshold misses exactly one score, yet the attack is
    perfect; it gets what untied perfectly separated scores get, ln(max(P, N)·(1 − δ)) (here N = 5), not 0."""
    delta = 1e-3
    tied = epsilon_point([1.0, 1.0, 1.0], [0.0] * 5, delta=delta)
    untied = epsilon_point([1.0, 1.1, 1.2], [0.0, 0.1, 0.2, 0.3, 0.4], delta=delta)
    assert tied == untied == pytest.approx(math.log(5 * (1 - delta)))


def _brute_roc(members, nonmembers):
    thresholds = np.concatenate([[np.inf], np.unique(np.concatenate([members, nonmembers]))[::-1]])
    fpr = np.array([np.mean([s >= t for s in nonmembers]) for t in thresholds])
    tpr = np.array([np.mean([s >= t for s in members]) for t in thresholds])
    return fpr, tpr, thresholds


def _brute_auc(members, nonmembers):
    wins = sum((m > n) + 0.5 * (m == n) for m in members for n in nonmembers)
    return wins / (len(members) * len(nonmembers))


@pytest.mark.parametrize("seed", range(6))
def test_roc_and_auc_match_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    members = rng.integers(0, 6, size=rng.integers(1, 25)).astype(float) + 1
    nonmembers = rng.integers(0, 6, size=rng.integers(1, 25)).astype(float)
    fpr, tpr, thresholds = roc_curve(members, nonmembers)
    want_fpr, want_tpr, want_thresholds = _brute_roc(members, nonmembers)
    np.testing.assert_array_equal(thresholds, want_thresholds)
    np.testing.assert_allclose(fpr, want_fpr, rtol=0, atol=1e-15)
    np.testing.assert_allclose(tpr, want_tpr, rtol=0, atol=1e-15)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert auc(members, nonmembers) == pytest.approx(_brute_auc(members, nonmembers), abs=1e-12)


def test_auc_known_values():
    assert auc([1, 2, 3], [-1, 0]) == 1.0
    assert auc([-1, 0], [1, 2, 3]) == 0.0
    assert auc([1, 1, 1], [1, 1]) == 0.5  # all ties count one half
    assert auc([2, 0], [1]) == 0.5


def test_tpr_at_fpr_hand_example():
    nonmembers = np.arange(100.0)  # FPR(t) = #(nonmembers ≥ t)/100
    members = [100.5, 99.5, 98.5, 50, 10]
    got = tpr_at_fpr(members, nonmembers, fprs=(0.0, 0.001, 0.01, 0.5, 1.0))
    # FPR ≤ 0.001 → no false positive → t = 99.5 catches 2 of 5; FPR ≤ 0.01 → t = 98.5 catches 3;
    # FPR ≤ 0.5 → t = 50 catches 4; FPR ≤ 1 → everything.
    assert got == {0.0: 0.4, 0.001: 0.4, 0.01: 0.6, 0.5: 0.8, 1.0: 1.0}
    assert tpr_at_fpr(members, nonmembers) == {0.001: 0.4, 0.01: 0.6}


# ------------------------------------------------------------------------------------------------
# Clopper–Pearson
# ------------------------------------------------------------------------------------------------

CP_CASES = [
    (0, 10, 0.05),
    (1, 10, 0.05),
    (3, 17, 0.01),
    (50, 100, 0.025),
    (7, 1000, 1e-6),
    (999, 1000, 0.05),
    (12345, 20000, 1.25e-6),
    (2, 5, 0.5),
]


@pytest.mark.parametrize("k, n, alpha", CP_CASES)
def test_clopper_pearson_tails_are_exact(k, n, alpha):
    upper = clopper_pearson_upper(k, n, alpha=alpha)
    assert stats.binom.cdf(k, n, upper) == pytest.approx(alpha, rel=1e-8)
    lower = clopper_pearson_lower(k, n, alpha=alpha) if k > 0 else None
    if lower is not None:
        assert stats.binom.sf(k - 1, n, lower) == pytest.approx(alpha, rel=1e-8)  # P[Binom(n, l) ≥ k] = α
        assert lower < k / n < upper


@pytest.mark.parametrize("n, alpha", [(1, 0.05), (10, 0.05), (500, 0.005), (10_000, 1e-7)])
def test_clopper_pearson_edges(n, alpha):
    assert clopper_pearson_upper(n, n, alpha=alpha) == 1.0
    assert clopper_pearson_lower(0, n, alpha=alpha) == 0.0
    # k = 0: (1 − u)^n = α; k = n: l^n = α
    assert clopper_pearson_upper(0, n, alpha=alpha) == pytest.approx(1 - alpha ** (1 / n), rel=1e-10)
    assert clopper_pearson_lower(n, n, alpha=alpha) == pytest.approx(alpha ** (1 / n), rel=1e-10)


def test_clopper_pearson_vectorised_matches_scalar():
    k = np.array([0, 3, 10, 10])
    n = np.array([10, 10, 10, 40])
    upper = clopper_pearson_upper(k, n, alpha=0.05)
    lower = clopper_pearson_lower(k, n, alpha=0.05)
    assert upper.shape == lower.shape == (4,)
    for i in range(4):
        assert upper[i] == clopper_pearson_upper(int(k[i]), int(n[i]), alpha=0.05)
        assert lower[i] == clopper_pearson_lower(int(k[i]), int(n[i]), alpha=0.05)


# ------------------------------------------------------------------------------------------------
# Lower bounds and the sample-size ceiling
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, alpha, spec", [(500, 0.01, 4.54), (1000, 0.05, 5.60), (10_000, 0.05, 7.90)])
def test_ceiling_known_answers(n, alpha, spec):
    # The reference table prints 7.91 for n = 10⁴, α = 0.05; the exact ln(p/(1−p)) is 7.9048 → 7.90
    # (7.91 is what the approximation ln(1/(1−p)) = 7.9050 rounds to).
    value = epsilon_from_counts(false_positives=0, nonmembers=n, false_negatives=0, members=n, delta=0.0, alpha=alpha)
    assert value == pytest.approx(_perfect_attack_epsilon(n, alpha), rel=1e-9)
    assert round(value, 2) == spec


def test_split_ceiling_uses_held_out_half():
    # 1000 per class → 500 held out per class; reference table, n = 500, α = 0.05: 4.91.
    value = epsilon_ceiling(n_members=1000, n_nonmembers=1000, delta=0.0, confidence=0.95, selection="split")
    assert round(value, 2) == 4.91
    assert value == pytest.approx(_perfect_attack_epsilon(500, 0.05), rel=1e-9)
    # odd sizes: the held-out half is the larger one, ⌈n/2⌉
    odd = epsilon_ceiling(n_members=1001, n_nonmembers=1001, delta=0.0, selection="split")
    assert odd == pytest.approx(_perfect_attack_epsilon(501, 0.05), rel=1e-9)


def test_gaussian_selection_certifies_four_fifths():
    # 1000 per class → ⌊1000/5⌋ = 200 fit the threshold, 800 certify.
    value = epsilon_ceiling(n_members=1000, n_nonmembers=1000, delta=0.0, selection="gaussian")
    assert value == pytest.approx(_perfect_attack_epsilon(800, 0.05), rel=1e-9)


def test_gaussian_selection_nears_the_best_threshold_on_gaussian_scores():
    # N(μ,1) vs N(0,1) with 50,000 per class: the best fixed threshold, known from the true curves and
    # certified at expected counts on the same 40,000 scores, bounds what the method can reach; the
    # empirical half split loses more to its noisy choice in the tail.
    from scipy import stats

    mu, n, delta, alpha = 1.0, 50_000, 1e-5, 0.05
    cuts = np.linspace(0, 6, 1201)
    fp = np.round(0.8 * n * stats.norm.sf(cuts)).astype(int)
    fn = np.round(0.8 * n * stats.norm.cdf(cuts - mu)).astype(int)
    best = max(_naive_same_data_bound_from_counts(a, b, int(0.8 * n), delta, alpha) for a, b in zip(fp, fn))
    values = {"gaussian": [], "split": []}
    for rep in range(5):
        rng = np.random.default_rng(rep)
        members, nonmembers = rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)
        for selection in values:
            values[selection].append(
                epsilon_lower_bound(members, nonmembers, delta=delta, selection=selection, seed=rep).epsilon
            )
    assert 0.85 * best <= np.mean(values["gaussian"]) <= 1.1 * best
    assert np.mean(values["gaussian"]) > np.mean(values["split"])


def _naive_same_data_bound_from_counts(fp, fn, n, delta, alpha):
    fpr_u = clopper_pearson_upper(fp, n, alpha=alpha / 2)
    fnr_u = clopper_pearson_upper(fn, n, alpha=alpha / 2)
    return max(0.0, math.log(max(1 - delta - fnr_u, 1e-300) / fpr_u), math.log(max(1 - delta - fpr_u, 1e-300) / fnr_u))


def test_bonferroni_ceiling_closed_form():
    # All n scores per class, each side at α/(2n): (1 − FPR_u)^n = α/(2n) → p = (α/(2n))^(1/n).
    n, alpha = 2000, 0.05
    p = (alpha / (2 * n)) ** (1 / n)
    value = epsilon_ceiling(n_members=n, n_nonmembers=n, delta=0.0, confidence=1 - alpha, selection="bonferroni")
    assert value == pytest.approx(math.log(p / (1 - p)), rel=1e-9)


def test_from_counts_reaches_zero_at_the_chance_line():
    # FP = FN = half: the rectangle straddles FPR + FNR = 1 − δ.
    assert (
        epsilon_from_counts(false_positives=50, nonmembers=100, false_negatives=50, members=100, delta=1e-5, alpha=0.05)
        == 0.0
    )


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("sizes", [(500, 500), (301, 200), (2, 3), (1000, 40)])
def test_perfect_separation_gives_exactly_the_ceiling(selection, sizes):
    rng = np.random.default_rng(sum(sizes))
    members = rng.normal(20.0, 1.0, sizes[0])
    nonmembers = rng.normal(0.0, 1.0, sizes[1])
    for delta, confidence in ((0.0, 0.95), (1e-5, 0.99)):
        bound = epsilon_lower_bound(
            members, nonmembers, delta=delta, confidence=confidence, selection=selection, seed=3
        )
        ceiling = epsilon_ceiling(
            n_members=sizes[0], n_nonmembers=sizes[1], delta=delta, confidence=confidence, selection=selection
        )
        assert bound.epsilon == ceiling
        if ceiling > 0:  # with 2 + 3 scores not even a perfect attack certifies anything
            assert bound.false_positives == bound.false_negatives == 0


@pytest.mark.parametrize("selection", SELECTIONS)
def test_bound_never_exceeds_ceiling(selection):
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n_m, n_n = rng.integers(2, 300, size=2)
        members = rng.normal(rng.uniform(0, 6), 1, n_m).round(1)
        nonmembers = rng.normal(0, 1, n_n).round(1)
        bound = epsilon_lower_bound(members, nonmembers, delta=1e-5, selection=selection, seed=seed)
        assert (
            0.0
            <= bound.epsilon
            <= epsilon_ceiling(n_members=int(n_m), n_nonmembers=int(n_n), delta=1e-5, selection=selection)
        )


@pytest.mark.parametrize("selection", SELECTIONS)
def test_same_distribution_gives_no_evidence(selection):
    rng = np.random.default_rng(7)
    scores = rng.normal(size=4000)
    bound = epsilon_lower_bound(scores[:2000], scores[2000:], delta=1e-5, selection=selection)
    assert bound.epsilon <= 0.1
    constant = epsilon_lower_bound(np.ones(50), np.ones(60), delta=1e-5, selection=selection)
    assert constant.epsilon == 0.0


def test_split_depends_on_seed_only_through_the_halves():
    rng = np.random.default_rng(0)
    members, nonmembers = rng.normal(1, 1, 300), rng.normal(0, 1, 300)
    first = epsilon_lower_bound(members, nonmembers, delta=1e-5, seed=11)
    again = epsilon_lower_bound(members, nonmembers, delta=1e-5, seed=11)
    assert first == again
    assert (first.n_members, first.n_nonmembers) == (150, 150)


# ------------------------------------------------------------------------------------------------
# Gaussian DP
# ------------------------------------------------------------------------------------------------


def _hockey_stick(mu: float, epsilon: float) -> float:
    """δ(ε) = ∫ max(0, φ(x − μ) − e^ε φ(x)) dx, by quadrature (first principles, Dong–Roth–Su)."""
    crossing = epsilon / mu + mu / 2  # φ(x − μ) ≥ e^ε φ(x) ⇔ x ≥ ε/μ + μ/2
    value, _ = integrate.quad(
        lambda x: stats.norm.pdf(x - mu) - math.exp(epsilon) * stats.norm.pdf(x),
        crossing,
        np.inf,
        epsabs=1e-14,
        epsrel=1e-12,
    )
    return value


def test_gdp_delta_known_answers():
    assert gdp_delta(mu=1.0, epsilon=0.0) == pytest.approx(2 * stats.norm.cdf(0.5) - 1, rel=1e-12)
    assert gdp_delta(mu=0.0, epsilon=1.0) == 0.0
    for mu, epsilon in ((0.5, 0.3), (1.0, 1.0), (2.0, 3.0), (3.0, 6.0)):
        assert gdp_delta(mu=mu, epsilon=epsilon) == pytest.approx(_hockey_stick(mu, epsilon), rel=1e-7)
    grid = [gdp_delta(mu=0.5, epsilon=eps) for eps in np.linspace(0.0, 40.0, 81)]  # deep tail: no NaN, no < 0
    assert all(0.0 <= value < 1.0 for value in grid) and all(np.diff(grid) <= 0)
    assert gdp_delta(mu=1.0, epsilon=12.0) == pytest.approx(_hockey_stick(1.0, 12.0), rel=1e-5)


@pytest.mark.parametrize("mu, epsilon", [(0.5, 0.2), (1.0, 1.0), (1.0, 4.0), (2.0, 9.0), (5.0, 20.0)])
def test_gdp_epsilon_inverts_gdp_delta(mu, epsilon):
    assert gdp_epsilon(mu=mu, delta=gdp_delta(mu=mu, epsilon=epsilon)) == pytest.approx(epsilon, rel=1e-9)


def test_gdp_epsilon_edges():
    assert gdp_epsilon(mu=0.0, delta=1e-5) == 0.0
    assert gdp_epsilon(mu=1.0, delta=gdp_delta(mu=1.0, epsilon=0.0)) == 0.0
    assert gdp_epsilon(mu=1.0, delta=0.9) == 0.0
    assert gdp_epsilon(mu=1.0, delta=1e-5) < gdp_epsilon(mu=1.0, delta=1e-6) < gdp_epsilon(mu=2.0, delta=1e-6)


@pytest.mark.parametrize("mu", [1.0, 2.0])
def test_gdp_estimate_and_bound_on_simulated_gaussian_scores(mu):
    rng = np.random.default_rng(int(mu * 10))
    members = rng.normal(mu, 1.0, 20_000)
    nonmembers = rng.normal(0.0, 1.0, 20_000)
    true = gdp_epsilon(mu=mu, delta=1e-5)
    estimate = epsilon_gdp(members, nonmembers, delta=1e-5)
    assert 0.85 * true <= estimate.epsilon <= 1.01 * true
    assert 0.9 * mu <= estimate.mu <= 1.01 * mu
    assert epsilon_lower_bound(members, nonmembers, delta=1e-5).epsilon <= true
    assert epsilon_lower_bound(members, nonmembers, delta=1e-5, selection="bonferroni").epsilon <= true


# ------------------------------------------------------------------------------------------------
# Coverage: P[ε_lo > true ε] ≤ α
# ------------------------------------------------------------------------------------------------


def _naive_same_data_bound(members, nonmembers, delta, alpha):
    """An invalid bound (max over thresholds on the same data, α/2 per side): shows the test has power."""
    fpr, tpr, _ = roc_curve(members, nonmembers)
    n_m, n_n = len(members), len(nonmembers)
    fp = np.round(fpr * n_n).astype(int)
    fn = np.round((1 - tpr) * n_m).astype(int)
    fpr_u = clopper_pearson_upper(fp, n_n, alpha=alpha / 2)
    fnr_u = clopper_pearson_upper(fn, n_m, alpha=alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.log(np.maximum(1 - delta - fpr_u, 0) / fnr_u)
        second = np.log(np.maximum(1 - delta - fnr_u, 0) / fpr_u)
    return max(0.0, float(np.max(np.maximum(first, second))))


@pytest.mark.integration
@pytest.mark.parametrize("mu, delta, confidence, repetitions", [(2.0, 1e-5, 0.95, 200), (0.0, 1e-5, 0.8, 400)])
def test_coverage_of_lower_bounds(mu, delta, confidence, repetitions):
    # μ = 2 is the brief's setting (true ε ≈ 10, far above what 200 scores per class can certify);
    # μ = 0 (identical distributions, true ε = 0) is where an invalid selection shows up.
    true = gdp_epsilon(mu=mu, delta=delta)
    alpha = 1 - confidence
    tolerance = 3 * math.sqrt(alpha * (1 - alpha) / repetitions)
    exceed = {"split": 0, "gaussian": 0, "bonferroni": 0, "naive": 0}
    for rep in range(repetitions):
        rng = np.random.default_rng(10_000 + rep)
        members, nonmembers = rng.normal(mu, 1.0, 200), rng.normal(0.0, 1.0, 200)
        for selection in SELECTIONS:
            bound = epsilon_lower_bound(
                members, nonmembers, delta=delta, confidence=confidence, selection=selection, seed=rep
            )
            exceed[selection] += bound.epsilon > true
        exceed["naive"] += _naive_same_data_bound(members, nonmembers, delta, alpha) > true
    assert exceed["split"] / repetitions <= alpha + tolerance
    assert exceed["gaussian"] / repetitions <= alpha + tolerance
    assert exceed["bonferroni"] / repetitions <= alpha + tolerance
    if mu == 0:
        assert exceed["naive"] / repetitions > alpha + tolerance


# ------------------------------------------------------------------------------------------------
# One run (Steinke, Nasr & Jagielski 2023)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "canaries, guesses, delta, spec",
    [
        (1000, 100, 0.0, 3.49),
        (1000, 1000, 0.0, 5.81),
        (1000, 1000, 1e-5, 5.78),
        (10_000, 10_000, 0.0, 8.11),
        (10_000, 10_000, 1e-5, 7.83),
    ],
)
def test_one_run_known_answers(canaries, guesses, delta, spec):
    value = epsilon_one_run(guesses=guesses, correct=guesses, canaries=canaries, delta=delta, confidence=0.95)
    assert round(value, 2) == spec
    # at ε̂ the p-value is the target 0.05
    assert one_run_p_value(
        epsilon=value, delta=delta, guesses=guesses, correct=guesses, canaries=canaries
    ) == pytest.approx(0.05, rel=1e-6)
    if delta == 0:  # all correct, δ = 0: q^r = 0.05 with q = e^ε/(1 + e^ε)
        q = 0.05 ** (1 / guesses)
        assert value == pytest.approx(math.log(q / (1 - q)), rel=1e-8)


def test_one_run_p_value_from_first_principles():
    # ε = 0: q = ½, counts C(10, k) of 1024. β = P[Binom(10, ½) ≥ 8] = (45 + 10 + 1)/1024.
    # α* = max_i P[8 > B ≥ 8 − i]/i over i = 1..8: 120, 330/2, 582/3, 792/4, 912/5, … (/1024) → 198/1024 (i = 4).
    p = one_run_p_value(epsilon=0.0, delta=1e-3, guesses=10, correct=8, canaries=50)
    assert p == pytest.approx(56 / 1024 + 198 / 1024 * 1e-3 * 2 * 50, rel=1e-12)
    assert one_run_p_value(epsilon=1.0, delta=0.0, guesses=10, correct=0, canaries=10) == 1.0
    assert epsilon_one_run(guesses=10, correct=5, canaries=10, delta=0.0) == 0.0


def test_one_run_from_scores():
    rng = np.random.default_rng(0)
    is_member = rng.random(1000) < 0.5
    scores = np.where(is_member, 10.0, 0.0) + rng.random(1000)
    guesses = 100
    bound = epsilon_one_run_scores(scores, is_member, delta=1e-5, confidence=0.95, guesses=guesses)
    assert bound.correct == guesses and bound.canaries == 1000
    assert float(bound) == epsilon_one_run(guesses=guesses, correct=guesses, canaries=1000, delta=1e-5)
    # ties at the cut go against the auditor: all scores equal → every guess counted as a non-member first
    tied = epsilon_one_run_scores(np.zeros(10), np.arange(10) < 5, delta=0.0, confidence=0.95, guesses=5)
    assert tied.correct == 0 and tied.epsilon == 0.0


# ------------------------------------------------------------------------------------------------
# Bad input: one-line DPAuditError before any work
# ------------------------------------------------------------------------------------------------

GOOD_M = [1.0, 2.0, 3.0]
GOOD_N = [0.0, 1.5, -1.0]

BAD_CALLS = {
    "empty members": lambda: epsilon_lower_bound([], GOOD_N, delta=1e-5),
    "empty nonmembers": lambda: roc_curve(GOOD_M, np.array([])),
    "nan score": lambda: auc([1.0, float("nan")], GOOD_N),
    "inf score": lambda: epsilon_point(GOOD_M, [0.0, float("inf")], delta=1e-5),
    "-inf score gdp": lambda: epsilon_gdp(GOOD_M, [-np.inf, 0.0], delta=1e-5),
    "2-D scores": lambda: tpr_at_fpr(np.ones((2, 2)), GOOD_N),
    "text scores": lambda: auc(["a", "b"], GOOD_N),
    "delta negative": lambda: epsilon_lower_bound(GOOD_M, GOOD_N, delta=-0.1),
    "delta one": lambda: epsilon_point(GOOD_M, GOOD_N, delta=1.0),
    "delta nan": lambda: epsilon_ceiling(n_members=10, n_nonmembers=10, delta=float("nan")),
    "delta zero gdp": lambda: gdp_epsilon(mu=1.0, delta=0.0),
    "delta zero audit": lambda: audit_scores(GOOD_M, GOOD_N, delta=0.0),
    "delta above one gdp": lambda: epsilon_gdp(GOOD_M, GOOD_N, delta=1.5),
    "delta one-run": lambda: epsilon_one_run(guesses=10, correct=10, canaries=10, delta=2.0),
    "confidence zero": lambda: epsilon_lower_bound(GOOD_M, GOOD_N, delta=1e-5, confidence=0.0),
    "confidence one": lambda: epsilon_gdp(GOOD_M, GOOD_N, delta=1e-5, confidence=1.0),
    "confidence above one": lambda: audit_scores(GOOD_M, GOOD_N, confidence=1.2),
    "confidence nan": lambda: epsilon_one_run(guesses=10, correct=10, canaries=10, delta=0.0, confidence=float("nan")),
    "alpha zero": lambda: clopper_pearson_upper(1, 10, alpha=0.0),
    "k above n": lambda: clopper_pearson_upper(11, 10, alpha=0.05),
    "k negative": lambda: clopper_pearson_lower(-1, 10, alpha=0.05),
    "n zero": lambda: clopper_pearson_upper(0, 0, alpha=0.05),
    "k fractional": lambda: clopper_pearson_upper(1.5, 10, alpha=0.05),
    "k bool": lambda: clopper_pearson_upper(True, 10, alpha=0.05),
    "fp above n": lambda: epsilon_from_counts(
        false_positives=5, nonmembers=4, false_negatives=0, members=4, delta=0.0, alpha=0.05
    ),
    "members zero": lambda: epsilon_from_counts(
        false_positives=0, nonmembers=4, false_negatives=0, members=0, delta=0.0, alpha=0.05
    ),
    "ceiling size zero": lambda: epsilon_ceiling(n_members=0, n_nonmembers=10, delta=1e-5),
    "ceiling size fractional": lambda: epsilon_ceiling(n_members=10.5, n_nonmembers=10, delta=1e-5),
    "split with one score": lambda: epsilon_lower_bound([1.0], GOOD_N, delta=1e-5, selection="split"),
    "unknown selection": lambda: epsilon_lower_bound(GOOD_M, GOOD_N, delta=1e-5, selection="holm"),
    "negative seed": lambda: epsilon_lower_bound(GOOD_M, GOOD_N, delta=1e-5, seed=-1),
    "guesses above canaries": lambda: epsilon_one_run(guesses=11, correct=1, canaries=10, delta=0.0),
    "correct above guesses": lambda: one_run_p_value(epsilon=1.0, delta=0.0, guesses=3, correct=4, canaries=10),
    "guesses zero": lambda: epsilon_one_run(guesses=0, correct=0, canaries=10, delta=0.0),
    "negative epsilon": lambda: one_run_p_value(epsilon=-1.0, delta=0.0, guesses=3, correct=3, canaries=10),
    "negative mu": lambda: gdp_delta(mu=-1.0, epsilon=1.0),
    "labels shape": lambda: epsilon_one_run_scores([1.0, 2.0], [True], delta=0.0, guesses=1),
    "labels not boolean": lambda: epsilon_one_run_scores([1.0, 2.0], [0.5, 1.0], delta=0.0, guesses=1),
    "fprs outside": lambda: tpr_at_fpr(GOOD_M, GOOD_N, fprs=(0.01, 1.5)),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_raises_one_line_error(case):
    with pytest.raises(DPAuditError) as info:
        BAD_CALLS[case]()
    message = str(info.value)
    assert message and "\n" not in message


# ------------------------------------------------------------------------------------------------
# audit_scores and import hygiene
# ------------------------------------------------------------------------------------------------


def test_audit_scores_report_is_consistent():
    rng = np.random.default_rng(5)
    members, nonmembers = rng.normal(1.0, 1.0, 10_000), rng.normal(0.0, 1.0, 10_000)
    report = audit_scores(members, nonmembers, delta=1e-5, confidence=0.95, seed=0)
    assert isinstance(report, AuditReport)
    true = gdp_epsilon(mu=1.0, delta=1e-5)
    numbers = [
        report.epsilon_point,
        report.epsilon_lower,
        report.epsilon_lower_bonferroni,
        report.epsilon_gdp,
        report.epsilon_ceiling,
        report.epsilon_ceiling_bonferroni,
        report.auc,
        report.gdp_mu,
    ]
    assert all(math.isfinite(value) for value in numbers)
    assert 0 <= report.epsilon_lower <= report.epsilon_ceiling
    assert 0 <= report.epsilon_lower_bonferroni <= report.epsilon_ceiling_bonferroni
    assert report.epsilon_lower <= true and report.epsilon_lower_bonferroni <= true
    assert report.epsilon_ceiling == epsilon_ceiling(n_members=10_000, n_nonmembers=10_000, delta=1e-5)
    assert 0.5 < report.auc < 1
    assert report.auc == pytest.approx(stats.norm.cdf(1 / math.sqrt(2)), abs=0.01)  # P[N(1,1) > N(0,1)]
    assert set(report.tpr_at_fpr) == {0.001, 0.01}
    assert 0 <= report.tpr_at_fpr[0.001] <= report.tpr_at_fpr[0.01] <= 1
    assert set(report.methods) >= {
        "epsilon_point",
        "epsilon_lower",
        "epsilon_lower_bonferroni",
        "epsilon_gdp",
        "epsilon_ceiling",
        "auc",
        "tpr_at_fpr",
    }
    assert (report.n_members, report.n_nonmembers, report.delta, report.confidence) == (10_000, 10_000, 1e-5, 0.95)
    fpr, tpr = report.roc["fpr"], report.roc["tpr"]
    assert 2 <= len(fpr) == len(tpr) <= 1000
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    # same numbers as the individual functions
    assert report.epsilon_lower == epsilon_lower_bound(members, nonmembers, delta=1e-5, seed=0).epsilon
    assert report.epsilon_point == epsilon_point(members, nonmembers, delta=1e-5)
    assert report.auc == auc(members, nonmembers)
    text = json.dumps(report.to_dict(), allow_nan=False)
    back = json.loads(text)
    assert back["tpr_at_fpr"] == {"0.001": report.tpr_at_fpr[0.001], "0.01": report.tpr_at_fpr[0.01]}
    assert back["epsilon_lower"] == report.epsilon_lower and len(back["roc"]["fpr"]) == len(fpr)
    assert "\n" not in report.summary()


def test_thin_roc_keeps_ends_and_low_fpr_points():
    fpr = np.linspace(0, 1, 50_001)
    tpr = np.sqrt(fpr)
    thin_fpr, thin_tpr = thin_roc(fpr, tpr)
    assert len(thin_fpr) <= 1000
    assert (thin_fpr[0], thin_fpr[-1]) == (0.0, 1.0)
    assert thin_fpr[1] == fpr[1]  # the smallest positive FPR survives
    np.testing.assert_array_equal(thin_tpr, np.sqrt(thin_fpr))


def test_import_does_not_load_torch():
    code = "import sys, dpaudit, dpaudit.estimate, dpaudit.audit; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
