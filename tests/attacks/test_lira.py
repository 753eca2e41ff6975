"""LiRA (online/offline) and the paired-halves split it needs: known answers and end-to-end runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.attacks.lira import lira_scores, logit_confidence, run_lira_scores
from dpaudit.data import HalvesSplit, load_split, make_halves_split
from dpaudit.estimate import auc


def test_halves_split_puts_every_record_in_half_the_shadows():
    split = make_halves_split(dataset="digits", train_size=1000, target_size=150, num_shadows=8, trial=1, seed=4)
    assert split.pool.size == 300 and len(np.unique(split.pool)) == 300 and split.pool.max() < 1000
    assert (split.keep.sum(axis=1) == 150).all()
    assert (split.keep[1:].sum(axis=0) == 4).all()
    assert (split.keep[1::2] == ~split.keep[2::2]).all()  # complementary shadow pairs
    # no shadow's membership is tied to the target's (a paired target would make one agree on 0 records)
    agreement = (split.keep[1:] == split.keep[0]).mean(axis=1)
    assert ((agreement > 0.3) & (agreement < 0.7)).all()
    assert split.num_shadows == 8 and len(split.shadows) == 8
    assert np.array_equal(np.sort(np.concatenate([split.target_members, split.target_nonmembers])), split.pool)
    assert split.nonmember_source == "train"
    assert split == make_halves_split(
        dataset="digits", train_size=1000, target_size=150, num_shadows=8, trial=1, seed=4
    )
    assert split != make_halves_split(
        dataset="digits", train_size=1000, target_size=150, num_shadows=8, trial=2, seed=4
    )


def test_halves_split_round_trips_and_old_splits_still_load(tmp_path, tiny_config):
    split = make_halves_split(dataset="digits", train_size=500, target_size=50, num_shadows=4)
    split.save(tmp_path / "halves.json")
    assert load_split(tmp_path / "halves.json") == split
    disjoint = tiny_config.make_split()
    disjoint.save(tmp_path / "disjoint.json")
    assert load_split(tmp_path / "disjoint.json") == disjoint


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_shadows": 7}, "even num_shadows"),
        ({"num_shadows": 0}, "even num_shadows"),
        ({"target_size": 600}, "pool of 2·target_size = 1200"),
    ],
)
def test_bad_halves_split_is_a_one_line_error(kwargs, message):
    with pytest.raises(DPAuditError, match=message):
        make_halves_split(**{"dataset": "digits", "train_size": 1000, "target_size": 100, "num_shadows": 4, **kwargs})


def test_unbalanced_keep_matrix_is_rejected():
    with pytest.raises(DPAuditError, match="half the pool"):
        HalvesSplit(
            dataset="digits",
            trial=0,
            seed=0,
            pool=np.arange(4),
            keep=np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]], dtype=bool),
        )
    with pytest.raises(DPAuditError, match="even number"):
        HalvesSplit(dataset="digits", trial=0, seed=0, pool=np.arange(4), keep=np.array([[1, 1, 0, 0]], dtype=bool))


def test_logit_confidence_known_values():
    logits = np.array([[0.0, 0.0], [math.log(3), 0.0]])  # p_y = 1/2 and 3/4
    assert logit_confidence(logits, np.array([0, 0])) == pytest.approx([0.0, math.log(3)])
    # p_y = e^100 / (e^100 + 2): φ = 100 − log 2, with no overflow to inf
    assert logit_confidence(np.array([[100.0, 0.0, 0.0]]), np.array([0]))[0] == pytest.approx(100 - math.log(2))
    assert logit_confidence(np.array([[0.0, 5.0, 0.0]]), np.array([0]))[0] == pytest.approx(-math.log(math.exp(5) + 1))


def test_lira_known_answer_with_global_variance():
    # Two records, four shadows: each record's in-values are 1 and 3 (mean 2), out-values −1 and 1 (mean 0).
    # Pooled within-record variance per side: (1 + 1 + 1 + 1) / (4 − 2) = 2. Online score
    # = −(t−2)²/4 + t²/4 = t − 1; offline score = t / √2.
    shadow_in = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=bool)
    shadows = np.array([[1.0, -1.0], [3.0, 1.0], [-1.0, 1.0], [1.0, 3.0]])
    target = np.array([0.5, 4.0])
    assert lira_scores(target, shadows, shadow_in, variant="online") == pytest.approx(target - 1)
    assert lira_scores(target, shadows, shadow_in, variant="offline") == pytest.approx(target / math.sqrt(2))
    # per-example: each side's sample variance is 2 as well
    assert lira_scores(target, shadows, shadow_in, variance="per-example") == pytest.approx(target - 1)


def test_lira_calibrates_per_record_difficulty():
    # Records differ in difficulty (out-mean spread 3) far more than membership shifts φ (by 1): a global
    # threshold on φ barely separates, the per-record likelihood ratio does.
    rng = np.random.default_rng(0)
    records, shadows = 4000, 16
    base = rng.normal(0, 3, records)
    shadow_in = np.zeros((shadows, records), dtype=bool)
    for pair in range(0, shadows, 2):
        shadow_in[pair, rng.permutation(records)[: records // 2]] = True
        shadow_in[pair + 1] = ~shadow_in[pair]
    shadow_phi = base + shadow_in + rng.normal(0, 0.5, (shadows, records))
    member = rng.random(records) < 0.5
    target = base + member + rng.normal(0, 0.5, records)
    global_threshold_auc = auc(target[member], target[~member])
    for variant in ("online", "offline"):
        scores = lira_scores(target, shadow_phi, shadow_in, variant=variant)
        assert auc(scores[member], scores[~member]) > global_threshold_auc + 0.3
    # ideal: N(1, 0.5²) vs N(0, 0.5²) → AUC Φ(1 / (0.5·√2)) = 0.921
    online = lira_scores(target, shadow_phi, shadow_in)
    assert auc(online[member], online[~member]) == pytest.approx(0.921, abs=0.02)


def test_lira_needs_shadows_on_both_sides():
    shadow_in = np.array([[1, 0], [1, 1]], dtype=bool)
    with pytest.raises(DPAuditError, match="fewer than 1 'out' shadow"):
        lira_scores(np.zeros(2), np.zeros((2, 2)), shadow_in)
    with pytest.raises(DPAuditError, match="finite"):
        lira_scores(np.array([np.nan, 0.0]), np.zeros((2, 2)), ~shadow_in)
    with pytest.raises(DPAuditError, match="shadow_in"):
        lira_scores(np.zeros(3), np.zeros((2, 2)), shadow_in)


def test_lira_end_to_end_on_a_halves_run(tmp_path, tiny_config, trained_run):
    from dpaudit.train import train_configuration

    config = tiny_config.replaced(split_design="halves", num_shadows=2, target_size=100, epochs=2, eval_epochs=(2,))
    train_configuration(config, out_dir=tmp_path, progress=False)
    split = load_split(tmp_path / "split.json")
    assert isinstance(split, HalvesSplit) and split.num_shadows == 2
    for variant in ("online", "offline"):
        members, nonmembers = run_lira_scores(tmp_path, epoch=2, variant=variant)
        assert members.shape == (100,) and nonmembers.shape == (100,)
        assert np.isfinite(members).all() and np.isfinite(nonmembers).all()
    with pytest.raises(DPAuditError, match="split_design 'halves'"):
        run_lira_scores(trained_run, epoch=2)


def test_halves_design_rejects_odd_shadow_counts_before_training(tiny_config):
    with pytest.raises(DPAuditError, match="even num_shadows"):
        tiny_config.replaced(split_design="halves", num_shadows=3).validated()
    with pytest.raises(DPAuditError, match="leave shadow_size unset"):
        tiny_config.replaced(split_design="halves", num_shadows=2, shadow_size=50).validated()


def _null_lira_auc(keep: np.ndarray, seed: int) -> float:
    """AUC of online LiRA when membership changes nothing but every model has its own overall offset."""
    rng = np.random.default_rng(seed)
    records = keep.shape[1]
    phi = rng.normal(0, 1, records) + rng.normal(0, 1.0, (keep.shape[0], 1)) + rng.normal(0, 0.3, keep.shape)
    scores = lira_scores(phi[0], phi[1:], keep[1:])
    return auc(scores[keep[0]], scores[~keep[0]])


def test_model_wide_quirks_do_not_look_like_membership():
    # Without any membership signal the attack must be at chance. Pairing the target with a shadow (that
    # shadow then disagrees with the target on every record) fails this; the split's design does not.
    split = make_halves_split(dataset="digits", train_size=4000, target_size=2000, num_shadows=6, seed=1)
    paired = split.keep[1:]  # target = shadow pair 1's first half, its complement a shadow, two more pairs
    ours = [_null_lira_auc(split.keep, seed) for seed in range(20)]
    theirs = [_null_lira_auc(paired, seed) for seed in range(20)]
    assert abs(np.mean(ours) - 0.5) < 0.01 and np.std(ours) < 0.03
    assert np.std(theirs) > 2 * np.std(ours)
