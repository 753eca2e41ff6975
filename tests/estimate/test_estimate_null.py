"""The null level of the eq. 20 point estimate (membership labels permuted): known answers from first principles."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.estimate import (
    ScoreCounts,
    epsilon_lower_bound,
    epsilon_point,
    epsilon_point_null,
    epsilon_point_null_at_threshold,
)


def test_constant_scores_give_a_null_level_equal_to_the_point_estimate():
    """Every score tied: every relabelling has the same counts, so the null distribution is one value, the point
    estimate itself (0: only the trivial thresholds exist)."""
    scores = np.full(50, 0.3)
    point = epsilon_point(scores, scores, delta=1e-5)
    assert point == 0.0
    assert epsilon_point_null(member_scores=scores, nonmember_scores=scores, delta=1e-5) == point


def test_two_members_two_nonmembers_by_hand():
    """Scores 4 > 3 > 2 > 1, P = N = 2, δ = 0: the 6 labellings are equally likely. By eq. 20, members {4, 3}
    (separated) give ln max(P, N) = ln 2; {4, 2} and {4, 1} have the threshold 4 with FPR = 0, FNR = 1/2, so
    ln((1 − 0)/(1/2)) = ln 2; {3, 2} has the threshold 2 with FPR = 1/2, FNR = 0, ln 2 again; {3, 1} and {2, 1}
    have no ratio above 1, so 0. The null distribution is ln 2 w.p. 4/6 and 0 w.p. 2/6: its 95 % quantile is ln 2
    and its 10 % quantile 0."""
    members, nonmembers = [4.0, 3.0], [2.0, 1.0]
    for labelled, expected in (([4, 3], 2), ([4, 2], 2), ([4, 1], 2), ([3, 2], 2), ([3, 1], 1), ([2, 1], 1)):
        rest = [s for s in (4.0, 3.0, 2.0, 1.0) if s not in labelled]
        assert epsilon_point(labelled, rest, delta=0.0) == pytest.approx(math.log(expected))
    null = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=0.0, permutations=400)
    assert null == pytest.approx(math.log(2))
    low = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=0.0, quantile=0.1)
    assert low == 0.0


@pytest.mark.parametrize("decimals", [1, None])  # rounded: many ties; None: no ties (the cached path)
def test_each_permutation_is_the_point_estimate_of_that_relabelling(decimals):
    """With one permutation the null level is epsilon_point of the relabelled scores (same seed, same shuffle), with
    and without ties: checked against ScoreCounts on the relabelling drawn the same way."""
    rng = np.random.default_rng(3)
    members, nonmembers = rng.normal(0.3, 1.0, 40), rng.normal(0.0, 1.0, 25)
    if decimals is not None:
        members, nonmembers = np.round(members, decimals), np.round(nonmembers, decimals)
    pooled = np.concatenate([members, nonmembers])
    order = np.argsort(-pooled, kind="stable")
    labels = np.zeros(pooled.size, dtype=np.int8)
    labels[: members.size] = 1
    for seed in range(5):
        permuted = np.random.default_rng(seed).permuted(labels[None, :], axis=1)[0]
        ranked = pooled[order]
        expected = ScoreCounts.from_scores(
            member_scores=ranked[permuted == 1], nonmember_scores=ranked[permuted == 0]
        ).epsilon_point(delta=1e-3)
        got = epsilon_point_null(
            member_scores=members, nonmember_scores=nonmembers, delta=1e-3, permutations=1, seed=seed
        )
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_identical_distributions_give_a_positive_null_level_and_a_zero_lower_bound():
    """No leakage (both classes from one distribution, 360 each as in the pipeline): the point estimate is biased
    upwards, its null level is well above 0, and the certified lower bound is 0."""
    rng = np.random.default_rng(0)
    members, nonmembers = rng.normal(size=360), rng.normal(size=360)
    null = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
    assert null > 1.0
    bound = epsilon_lower_bound(members, nonmembers, delta=1e-5, confidence=0.95)
    assert bound.epsilon == 0.0


def test_the_null_level_ignores_which_scores_are_the_members():
    """Only the pooled scores and the class sizes enter: swapping scores between classes, or a strictly increasing
    transform of every score, leaves the null level unchanged, while the point estimate changes."""
    rng = np.random.default_rng(1)
    members, nonmembers = rng.normal(2.0, 1.0, 100), rng.normal(0.0, 1.0, 100)
    swapped_m = np.concatenate([nonmembers[:50], members[50:]])
    swapped_n = np.concatenate([members[:50], nonmembers[50:]])
    null = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
    assert epsilon_point_null(member_scores=swapped_m, nonmember_scores=swapped_n, delta=1e-5) == null
    assert epsilon_point_null(member_scores=np.exp(members), nonmember_scores=np.exp(nonmembers), delta=1e-5) == null
    assert epsilon_point(members, nonmembers, delta=1e-5) > null  # strong signal: the point clears its null level
    assert epsilon_point(swapped_m, swapped_n, delta=1e-5) < epsilon_point(members, nonmembers, delta=1e-5)


def test_the_null_level_does_not_vanish_as_n_grows():
    """Eq. 20 over all thresholds keeps its bias at any n. If the top k scores are all members and the next one is a
    non-member, the threshold at that non-member has TPR = k/P, FPR = 1/N, so (δ = 0, P = N) the estimate is
    ≥ ln k. Under no signal the top 4 are members with probability ≈ 1/16 > 5 % (and the bottom tail adds as much),
    so the 95 % null level is ≥ ln 4 at every n. It is also ≤ ln max(P, N), eq. 20's largest value."""
    rng = np.random.default_rng(2)
    for n in (50, 500, 5000):
        null = epsilon_point_null(member_scores=rng.normal(size=n), nonmember_scores=rng.normal(size=n), delta=0.0)
        assert math.log(4) <= null <= math.log(n), (n, null)


def test_under_no_leakage_the_point_exceeds_its_null_level_about_5_percent_of_the_time():
    """Exchangeability: with no signal the observed labelling is one more draw from the permutation distribution,
    so P[point > 95 % null level] ≤ 5 % (ties make it smaller). 200 independent no-leakage data sets: the count
    is Binomial(200, ≤ 0.05), mean ≤ 10, so more than 20 would be a 3.2 σ excess."""
    rng = np.random.default_rng(7)
    above = 0
    for _ in range(200):
        members, nonmembers = rng.normal(size=60), rng.normal(size=60)
        point = epsilon_point(members, nonmembers, delta=1e-5)
        null = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5, permutations=100)
        above += point > null
    assert above <= 20, above


def test_fast_enough_for_the_pipeline():
    """360 + 360 scores (the pipeline's loss attack) well under a second; median of 3 calls."""
    rng = np.random.default_rng(0)
    members, nonmembers = rng.normal(size=360), rng.normal(size=360)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
        times.append(time.perf_counter() - start)
    assert np.median(times) < 0.5, times


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"permutations": 0}, "permutations"),
        ({"quantile": 1.0}, "quantile"),
        ({"seed": -1}, "seed"),
        ({"delta": 1.0}, "delta"),
        ({"member_scores": []}, "member_scores"),
        ({"nonmember_scores": [np.nan]}, "nonmember_scores"),
    ],
)
def test_bad_input_is_a_one_line_error(kwargs, match):
    args = {"member_scores": [1.0, 2.0], "nonmember_scores": [0.0, 1.0], "delta": 1e-5, **kwargs}
    with pytest.raises(DPAuditError, match=match):
        epsilon_point_null(**args)


def test_the_audit_report_carries_the_null_level_from_one_place(monkeypatch):
    """:func:`dpaudit.audit_scores` computes the null level where it computes the point: the report's field (and its
    JSON) equals :func:`epsilon_point_null` on the same scores; above ``POINT_NULL_MAX_SCORES`` it is None (JSON null),
    not an error. The 2 + 2 case by hand (see above): separated members {4, 3} have the 95 % null level ln 2, the
    point ln 2 too (separated, ln max(P, N)), so the point says nothing."""
    import json

    import dpaudit.audit as audit_module
    from dpaudit import audit_scores

    report = audit_scores([4.0, 3.0], [2.0, 1.0], delta=1e-9)
    assert report.epsilon_point_null == pytest.approx(math.log(2.0), rel=1e-6)
    assert report.epsilon_point == pytest.approx(math.log(2.0), rel=1e-6)
    rng = np.random.default_rng(3)
    members, nonmembers = rng.normal(size=40).round(1), rng.normal(size=30).round(1)  # ties: the uncached path
    report = audit_scores(members, nonmembers, delta=1e-5)
    expected = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
    assert report.epsilon_point_null == expected
    payload = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert payload["epsilon_point_null"] == expected and "permutations" in payload["methods"]["epsilon_point_null"]
    assert "null 95 %" in report.summary()
    monkeypatch.setattr(audit_module, "POINT_NULL_MAX_SCORES", 69)
    report = audit_scores(members, nonmembers, delta=1e-5)
    assert report.epsilon_point_null is None and report.to_dict()["epsilon_point_null"] is None
    assert "null level n/a" in report.summary()


# --- the null of one attack's own decision rule (a fixed threshold) ----------------------------------------------


def test_at_a_threshold_every_score_above_it_gives_ln_one_minus_delta():
    """Every score above the threshold: every relabelling predicts all "member", FPR = 1 and FNR = 0, so eq. 20 is
    max(ln((1 − δ − 1)/0) → −inf, ln((1 − δ − 0)/1)) = ln(1 − δ) whatever the permutation and quantile."""
    scores = np.linspace(0.6, 0.9, 20)
    for quantile in (0.05, 0.5, 0.95):
        null = epsilon_point_null_at_threshold(
            member_scores=scores[:8], nonmember_scores=scores[8:], threshold=0.5, delta=1e-3, quantile=quantile
        )
        assert null == math.log(1 - 1e-3)


def test_at_a_threshold_two_members_two_nonmembers_by_hand():
    """Two scores above the threshold and two below, P = N = 2: of the 6 equally likely labellings, one puts both
    members above (FPR = FNR = 0: +inf), one both below (FPR = FNR = 1: −inf) and four one each (FPR = FNR = 1/2:
    ln((1/2 − δ)/(1/2))). The median of many relabellings is that middle value; the score values themselves, and which
    of them are the members, do not matter; the strict threshold counts a score equal to it as "non-member"."""
    delta = 1e-2
    middle = math.log((0.5 - delta) / 0.5)
    options = dict(threshold=0.5, delta=delta, permutations=600, quantile=0.5, seed=3)
    with pytest.warns(UserWarning, match="zero FPR or FNR"):  # the +inf relabellings
        null = epsilon_point_null_at_threshold(member_scores=[0.9, 0.1], nonmember_scores=[0.8, 0.2], **options)
    assert null == pytest.approx(middle, rel=1e-12)
    with pytest.warns(UserWarning):
        assert epsilon_point_null_at_threshold(member_scores=[0.1, 0.5], nonmember_scores=[0.7, 0.6], **options) == null


def test_at_a_threshold_the_seed_fixes_the_draws_and_bad_input_is_one_line():
    rng = np.random.default_rng(0)
    members, nonmembers = rng.uniform(size=40), rng.uniform(size=40)
    first, again = (
        epsilon_point_null_at_threshold(member_scores=members, nonmember_scores=nonmembers, threshold=0.5, delta=1e-5)
        for _ in range(2)
    )
    assert first == again and math.isfinite(first)
    for bad, message in (
        (dict(threshold=float("nan")), "threshold must be a finite number"),
        (dict(threshold=True), "threshold must be a finite number"),
        (dict(permutations=0), "permutations"),
        (dict(quantile=1.0), "quantile"),
        (dict(delta=1.0), "delta"),
    ):
        options = {"threshold": 0.5, "delta": 1e-5, **bad}
        with pytest.raises(DPAuditError, match=message):
            epsilon_point_null_at_threshold(member_scores=members, nonmember_scores=nonmembers, **options)
