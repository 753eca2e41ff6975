"""Property-based tests (hypothesis) of the estimators and the theory: no crash on any finite input, and the
monotonicity the theory states — ε grows with steps and with the sampling rate, falls with noise; a better
attack (fewer errors) certifies more; a lower bound never exceeds its ceiling."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpaudit import estimate
from dpaudit._validation import DPAuditError
from dpaudit.theory import accounting

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
rates = st.floats(min_value=0.0, max_value=1.0)
deltas = st.floats(min_value=1e-9, max_value=0.1)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
scores = st.lists(finite, min_size=4, max_size=60)


@PROPERTY
@given(fpr=rates, fnr=rates, worse=st.floats(min_value=0.0, max_value=0.5), delta=deltas)
def test_empirical_epsilon_never_grows_with_more_errors(fpr, fnr, worse, delta):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = float(estimate.empirical_epsilon(fpr, fnr, delta=delta))
        more_fp = float(estimate.empirical_epsilon(min(1.0, fpr + worse), fnr, delta=delta))
        more_fn = float(estimate.empirical_epsilon(fpr, min(1.0, fnr + worse), delta=delta))
    assert not math.isnan(base)
    assert more_fp <= base + 1e-12 and more_fn <= base + 1e-12


@PROPERTY
@given(k=st.integers(0, 500), extra=st.integers(0, 500), alpha=st.floats(min_value=1e-6, max_value=0.5))
def test_clopper_pearson_brackets_the_observed_rate(k, extra, alpha):
    n = k + extra
    assume(n > 0)
    lower = float(estimate.clopper_pearson_lower(k, n, alpha=alpha))
    upper = float(estimate.clopper_pearson_upper(k, n, alpha=alpha))
    assert 0.0 <= lower <= k / n <= upper <= 1.0


@PROPERTY
@given(members=scores, nonmembers=scores, delta=deltas, selection=st.sampled_from(["split", "gaussian"]))
def test_lower_bound_is_finite_nonnegative_and_under_its_ceiling(members, nonmembers, delta, selection):
    try:
        bound = estimate.epsilon_lower_bound(members, nonmembers, delta=delta, selection=selection)
    except DPAuditError as error:  # too few scores for the selection split: a one-line refusal, not a crash
        assert "\n" not in str(error)
        return
    ceiling = estimate.epsilon_ceiling(
        n_members=len(members), n_nonmembers=len(nonmembers), delta=delta, selection=selection
    )
    assert 0.0 <= bound.epsilon <= ceiling + 1e-9


@PROPERTY
@given(members=scores, nonmembers=scores, delta=deltas)
def test_point_estimate_and_auc_accept_any_finite_scores(members, nonmembers, delta):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        point = estimate.epsilon_point(members, nonmembers, delta=delta)
    assert not math.isnan(point) and point >= 0
    assert 0.0 <= estimate.auc(members, nonmembers) <= 1.0


@PROPERTY
@given(mu=st.floats(min_value=1e-3, max_value=20), more=st.floats(min_value=0.0, max_value=5), delta=deltas)
def test_gdp_epsilon_grows_with_mu(mu, more, delta):
    assert 0.0 <= estimate.gdp_epsilon(mu=mu, delta=delta) <= estimate.gdp_epsilon(mu=mu + more, delta=delta) + 1e-9


@PROPERTY
@given(
    z=st.floats(min_value=0.5, max_value=20),
    q=st.floats(min_value=1e-3, max_value=1.0),
    steps=st.integers(1, 2000),
    delta=deltas,
)
def test_rdp_epsilon_grows_with_steps_and_rate_and_falls_with_noise(z, q, steps, delta):
    def eps(**changes):
        values = {"noise_multiplier": z, "sample_rate": q, "steps": steps, **changes}
        return accounting.epsilon(**values, delta=delta)

    base = eps()
    assert math.isfinite(base) and base >= 0
    tolerance = 1e-9 * max(1.0, base)
    assert eps(steps=steps + 10) >= base - tolerance
    assert eps(noise_multiplier=z * 1.5) <= base + tolerance
    assert eps(sample_rate=min(1.0, q * 2)) >= base - tolerance


@settings(max_examples=10, deadline=None)
@given(
    target=st.floats(min_value=0.2, max_value=20), q=st.floats(min_value=1e-3, max_value=0.5), steps=st.integers(1, 500)
)
def test_calibrated_noise_meets_its_target_and_falls_as_the_target_grows(target, q, steps):
    z = accounting.calibrate_noise(target_epsilon=target, delta=1e-5, sample_rate=q, steps=steps)
    assert accounting.epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=1e-5) <= target * (1 + 1e-6)
    assert accounting.calibrate_noise(target_epsilon=2 * target, delta=1e-5, sample_rate=q, steps=steps) <= z


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 2.0])
def test_rates_outside_the_unit_interval_are_one_line_errors(bad):
    with pytest.raises(DPAuditError) as info:
        estimate.empirical_epsilon(bad, 0.1)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scores_are_one_line_errors(bad):
    with pytest.raises(DPAuditError) as info:
        estimate.epsilon_lower_bound([0.0, 1.0, bad, 3.0], [0.0, 1.0, 2.0, 3.0], delta=1e-5)
    assert "\n" not in str(info.value)
