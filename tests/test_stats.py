"""dpaudit.stats: confidence intervals, three-valued verdicts, and the paired and Welch t tests over trials. Golden
values are by hand from the normal and Student's t quantiles (t(0.975; 1, 2, 3) = 12.7062, 4.302653, 3.182446)."""

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.stats import decide, equivalent, interval, paired_verdict, trials_verdict

T2 = 4.302653  # t quantile 0.975, 2 degrees of freedom
T3 = 3.182446  # 3 degrees of freedom


def test_equivalence_known_answers():
    """By hand: TOST at 95 % each side is the 90 % interval d ± 1.644854·SE inside (−m, m)."""
    assert equivalent(difference=0.0, standard_error=0.006, margin=0.01)  # ±0.00987 inside ±0.01
    assert not equivalent(difference=0.0, standard_error=0.0061, margin=0.01)  # ±0.01003 reaches past 0.01
    assert equivalent(difference=0.004, standard_error=0.003, margin=0.01)  # [−0.00093, 0.00893]
    assert not equivalent(difference=0.005, standard_error=0.0031, margin=0.01)  # upper end 0.0101
    assert not equivalent(difference=float("nan"), standard_error=0.001, margin=0.01)
    with pytest.raises(DPAuditError, match="margin must be > 0"):
        equivalent(difference=0.0, standard_error=0.001, margin=0.0)


def test_decide_known_answers():
    """By hand: the 95 % normal interval is d ± 1.959964·SE; the 95 % t interval with 2 dof is d ± 4.302653·SE."""
    assert decide(difference=0.05, standard_error=0.02) == "holds"  # [0.0108, 0.0892] > 0
    assert decide(difference=0.03, standard_error=0.02) == "inconclusive"  # [−0.0092, 0.0692] contains 0
    assert decide(difference=-0.05, standard_error=0.02) == "contradicted"  # [−0.0892, −0.0108] < 0
    assert decide(difference=0.0392, standard_error=0.02) == "holds"  # lower end 0.0392 − 0.0391993 > 0
    assert decide(difference=0.0391, standard_error=0.02) == "inconclusive"
    # a margin shifts the claimed side: "more than 2 points better"
    assert decide(difference=0.05, standard_error=0.01, margin=0.02) == "holds"  # [0.0304, 0.0696] > 0.02
    assert decide(difference=0.03, standard_error=0.01, margin=0.02) == "inconclusive"
    assert decide(difference=0.0, standard_error=0.005, margin=0.02) == "contradicted"  # upper 0.0098 < 0.02
    # t with 2 dof is wider: 0.1 ± 1.96·0.03 = 0.1 ± 0.0588 excludes 0; 0.1 ± 4.3027·0.03 = 0.1 ± 0.129 does not
    assert decide(difference=0.1, standard_error=0.03) == "holds"
    assert decide(difference=0.1, standard_error=0.03, dof=2) == "inconclusive"
    assert decide(difference=0.2, standard_error=0.03, dof=2) == "holds"  # 0.2 − 0.1291 > 0
    assert decide(difference=0.01, standard_error=0.0) == "holds"  # no uncertainty: an exact comparison
    assert decide(difference=float("nan"), standard_error=0.01) == "inconclusive"
    # the interval the verdicts rest on, as reported in the manifest (`interval_95`)
    assert interval(difference=0.05, standard_error=0.02) == pytest.approx((0.0108007, 0.0891993), abs=1e-7)
    assert interval(difference=0.1, standard_error=0.03, dof=2) == pytest.approx((-0.0290796, 0.2290796), abs=1e-7)
    assert all(v != v for v in interval(difference=0.1, standard_error=-1.0))  # NaN
    with pytest.raises(DPAuditError, match="level"):
        interval(difference=0.1, standard_error=0.03, level=1.0)


def test_one_sample_t_on_paired_differences():
    # [1, 2, 3]: mean 2, s = 1, SE = 1/√3; 2 ± 4.302653/√3 = 2 ± 2.48414 contains 0
    verdict, numbers = trials_verdict(more=[1.0, 2.0, 3.0])
    assert verdict == numbers["verdict"] == "inconclusive"
    assert numbers["difference"] == 2.0 and numbers["standard_error"] == pytest.approx(1 / np.sqrt(3), rel=1e-12)
    assert numbers["interval_95"] == pytest.approx([2 - T2 / np.sqrt(3), 2 + T2 / np.sqrt(3)], abs=1e-5)
    assert numbers["means"] == [2.0]
    # [1, 1.1, 0.9, 1]: mean 1, s² = 0.02/3, SE = 0.0408248; 1 ± 3.182446·SE = [0.870077, 1.129923] > 0
    verdict, numbers = trials_verdict(more=[1.0, 1.1, 0.9, 1.0])
    assert verdict == "holds"
    assert numbers["interval_95"] == pytest.approx([1 - T3 * 0.0408248, 1 + T3 * 0.0408248], abs=1e-5)


def test_welch_interval_of_two_sets_of_trials():
    # means 11 and 3, s² = 1 and 2.5: SE = √(1/3 + 2.5/5) = 0.912871; dof = 3 − 1 = 2: 8 ± 3.92772 > 0
    verdict, numbers = trials_verdict(more=[10.0, 11.0, 12.0], less=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert verdict == "holds" and numbers["means"] == [11.0, 3.0] and numbers["difference"] == 8.0
    assert numbers["standard_error"] == pytest.approx(np.sqrt(1 / 3 + 0.5), rel=1e-12)
    assert numbers["interval_95"] == pytest.approx([8 - T2 * 0.912871, 8 + T2 * 0.912871], abs=1e-5)
    # the other way round: −9 ± 4.302653·√(2/3) = −9 ± 3.51313 < 0
    assert trials_verdict(more=[1.0, 2.0, 3.0], less=[10.0, 11.0, 12.0])[0] == "contradicted"


def test_non_finite_trials_are_left_out_and_too_few_are_inconclusive():
    # [1, NaN, 2]: mean 1.5, SE = 0.5, dof 1: 1.5 ± 12.7062·0.5 contains 0
    verdict, numbers = trials_verdict(more=[1.0, float("nan"), 2.0])
    assert verdict == "inconclusive" and numbers["difference"] == 1.5 and numbers["standard_error"] == 0.5
    assert numbers["interval_95"] == pytest.approx([1.5 - 12.7062 * 0.5, 1.5 + 12.7062 * 0.5], abs=1e-4)
    verdict, numbers = trials_verdict(more=[float("inf"), 1.0], less=[1.0, 2.0])
    assert verdict == "inconclusive" and numbers == {"verdict": "inconclusive", "means": [1.0, 1.5], "trials": [1, 2]}
    assert trials_verdict(more=[])[1]["means"] == [None]


def test_paired_by_trial_key_whatever_the_order():
    # by key: t1 5 − 4, t2 7 − 5, t3 6 − 5 → differences 1, 2, 1: mean 4/3, s = 1/√3, SE = 1/3, dof 2:
    # 4/3 ± 4.302653/3 = [−0.1009, 2.7676] contains 0
    verdict, numbers = paired_verdict(
        more=[5.0, 7.0, 6.0], less=[5.0, 4.0, 5.0], more_trials=["t1", "t2", "t3"], less_trials=["t3", "t1", "t2"]
    )
    assert verdict == "inconclusive" and numbers["paired"] is True
    assert numbers["difference"] == pytest.approx(4 / 3, rel=1e-12)
    assert numbers["standard_error"] == pytest.approx(1 / 3, rel=1e-12)
    assert numbers["means"] == pytest.approx([6.0, 14 / 3], rel=1e-12)


def test_pairing_removes_the_variation_the_trials_share():
    more, less = [10.1, 20.1, 30.1], [10.0, 20.0, 30.0]  # every trial 0.1 larger; trials differ by 10
    paired = paired_verdict(more=more, less=less, more_trials=[0, 1, 2], less_trials=[0, 1, 2])
    assert paired[0] == "holds" and paired[1]["paired"] is True
    unpaired = paired_verdict(more=more, less=less, more_trials=[0, 1, 2], less_trials=[3, 4, 5])  # other trials
    assert unpaired[0] == "inconclusive" and unpaired[1]["paired"] is False
    assert unpaired[1]["difference"] == pytest.approx(0.1, rel=1e-9)
    # a trial key twice on one side cannot be paired: Welch on all values
    twice = paired_verdict(more=more, less=less, more_trials=[0, 0, 1], less_trials=[0, 0, 1])
    assert twice[1]["paired"] is False


def test_paired_verdict_needs_one_trial_key_per_value():
    with pytest.raises(DPAuditError, match="one trial key per value"):
        paired_verdict(more=[1.0, 2.0], less=[1.0, 2.0], more_trials=[0], less_trials=[0, 1])


def test_keyword_only():
    with pytest.raises(TypeError):
        trials_verdict([1.0, 2.0])  # type: ignore[misc]
    with pytest.raises(TypeError):
        interval(0.1, 0.02)  # type: ignore[misc]
