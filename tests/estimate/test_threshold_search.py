"""The fast threshold searches give exactly the numbers of the brute-force searches they replace.

The Clopper–Pearson bounds of a count array are inverted once per distinct count (and kept per n and α), and the
best threshold of the simultaneous band, of the Gaussian-DP estimate and of the split selection is found without
inverting every count. Each test recomputes the result the plain way, from first principles (one inversion
``betainccinv(k + 1, n − k, α)`` per threshold, the KOV ε or μ at every threshold, ``np.argmax`` / ``np.lexsort``
over all of them) and asks for the same threshold and bit-identical floats, on score sets from perfectly separated
to indistinguishable, with and without ties.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from dpaudit.estimate import (
    BonferroniSelection,
    ScoreCounts,
    SplitSelection,
    clopper_pearson_upper,
    epsilon_gdp,
    epsilon_lower_bound,
)

DELTA = 1e-5
CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # as the public functions derive it from the confidence


def _cp_upper(k, n, alpha):
    """Clopper–Pearson upper bound, one inversion per count: u with P[Binom(n, u) ≤ k] = α, 1 where k = n."""
    k = np.asarray(k, dtype=float)
    full = k >= n
    return np.where(full, 1.0, special.betainccinv(k + 1.0, np.where(full, 1.0, n - k), alpha))


def _kov(fpr, fnr):
    """max(0, ln((1−δ−FPR)/FNR), ln((1−δ−FNR)/FPR)), the terms with a zero denominator or a numerator ≤ 0 left
    out."""
    first, second = np.full(fpr.shape, -np.inf), np.full(fpr.shape, -np.inf)
    ok = (1.0 - DELTA - fpr > 0) & (fnr > 0)
    first[ok] = np.log((1.0 - DELTA - fpr[ok]) / fnr[ok])
    ok = (1.0 - DELTA - fnr > 0) & (fpr > 0)
    second[ok] = np.log((1.0 - DELTA - fnr[ok]) / fpr[ok])
    return np.maximum(0.0, np.maximum(first, second))


def _score_sets():
    """(members, non-members): separations from none to perfect, ties, large and small, unequal sizes."""
    rng = np.random.default_rng(11)
    yield rng.normal(0, 1, 3000), rng.normal(0, 1, 2500)  # no signal: every KOV bound is 0
    yield rng.normal(0.3, 1, 4000), rng.normal(0, 1, 4000)
    yield rng.normal(2.5, 1, 5000), rng.normal(0, 1, 6000)
    yield rng.normal(8, 1, 1000), rng.normal(0, 1, 1000)  # separated
    yield np.round(rng.normal(1, 1, 5000), 1), np.round(rng.normal(0, 1, 5000), 1)  # heavy ties
    yield rng.integers(0, 3, 800).astype(float), rng.integers(0, 3, 900).astype(float)  # three distinct scores
    yield rng.exponential(1, 700) + 0.2, rng.exponential(1, 300)
    yield rng.normal(1, 1, 40), rng.normal(0, 1, 30)  # fewer thresholds than one scouting stride


@pytest.mark.parametrize("pair", list(_score_sets()), ids=lambda _: "")
def test_bounds_and_gdp_equal_the_brute_force_search(pair):
    members, nonmembers = pair
    counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
    alpha_fp, alpha_fn = ALPHA / (2 * counts.n_nonmembers), ALPHA / (2 * counts.n_members)
    fpr_u, fnr_u = _cp_upper(counts.fp, counts.n_nonmembers, alpha_fp), _cp_upper(counts.fn, counts.n_members, alpha_fn)
    band = BonferroniSelection().band(counts, ALPHA)
    assert np.array_equal(band[0], fpr_u) and np.array_equal(band[1], fnr_u)

    best = int(np.argmax(_kov(fpr_u, fnr_u)))
    bound = epsilon_lower_bound(members, nonmembers, delta=DELTA, confidence=CONFIDENCE, selection="bonferroni")
    assert bound.threshold == counts.thresholds[best]
    assert (bound.false_positives, bound.false_negatives) == (counts.fp[best], counts.fn[best])
    assert (bound.fpr_upper, bound.fnr_upper) == (fpr_u[best], fnr_u[best])

    mus = -special.ndtri(fpr_u) - special.ndtri(fnr_u)
    best = int(np.argmax(mus))
    gdp = epsilon_gdp(members, nonmembers, delta=DELTA, confidence=CONFIDENCE)
    assert (gdp.threshold, gdp.fpr_upper, gdp.fnr_upper) == (counts.thresholds[best], fpr_u[best], fnr_u[best])
    assert gdp.mu == max(0.0, float(mus[best]))

    for seed in (0, 3):
        split = SplitSelection()
        rng = np.random.default_rng(seed)
        select_m, _ = split.split(members.size, rng)
        select_n, _ = split.split(nonmembers.size, rng)
        chosen = ScoreCounts.from_scores(member_scores=members[select_m], nonmember_scores=nonmembers[select_n])
        bounds = _kov(
            _cp_upper(chosen.fp, chosen.n_nonmembers, ALPHA / 2), _cp_upper(chosen.fn, chosen.n_members, ALPHA / 2)
        )
        best = int(np.lexsort((chosen.tpr - chosen.fpr, bounds))[-1])  # largest bound, then TPR − FPR, then last
        bound = epsilon_lower_bound(members, nonmembers, delta=DELTA, confidence=CONFIDENCE, seed=seed)
        assert bound.threshold == chosen.gap_threshold(best)


def test_clopper_pearson_of_many_counts_equals_one_at_a_time():
    rng = np.random.default_rng(5)
    for n in (1, 7, 300, 5000):
        k = rng.integers(0, n + 1, 4 * n + 300)
        for alpha in (0.4, 1e-3, 1e-9):
            many = clopper_pearson_upper(k, n, alpha=alpha)
            assert np.array_equal(many, _cp_upper(k, n, alpha))
            assert np.array_equal(clopper_pearson_upper(k, np.full(k.shape, n), alpha=alpha), many)
            assert [clopper_pearson_upper(int(count), n, alpha=alpha) for count in k[:20]] == many[:20].tolist()
    k = rng.integers(0, 3, (30, 20))  # 2-D counts keep their shape
    assert np.array_equal(clopper_pearson_upper(k, 2, alpha=0.1), _cp_upper(k, 2, 0.1))
