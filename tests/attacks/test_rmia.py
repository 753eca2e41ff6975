"""RMIA (Zarifzadeh et al. 2024), online and offline: known answers by hand, power on a planted signal, the
null, and an end-to-end run with the shadows of a halves split as reference models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.attacks import get_attack
from dpaudit.attacks.loss import loss_scores
from dpaudit.attacks.rmia import rmia_scores, run_rmia_scores
from dpaudit.data import ArrayDataset, make_halves_split
from dpaudit.estimate import auc

TARGET = np.array([0.8, 0.4])
SHADOWS = np.array([[0.6, 0.5], [0.2, 0.3]])
SHADOW_IN = np.array([[True, False], [False, True]])
POPULATION_TARGET = np.array([0.5, 0.5, 0.2, 0.9])
POPULATION_SHADOWS = np.array([[0.5, 0.25, 0.4, 0.3], [0.5, 0.75, 0.4, 0.3]])


def scores(**kwargs):
    return rmia_scores(
        TARGET,
        SHADOWS,
        SHADOW_IN,
        population_target=POPULATION_TARGET,
        population_shadows=POPULATION_SHADOWS,
        **kwargs,
    )


def test_true_class_probability_known_values():
    """RMIA's Pr(x | θ) is the loss attack's "confidence" signal; a model whose output is its input gives it for
    chosen logits: 1/2, 3/4, and no overflow at a logit of 1000."""
    import torch

    logits = np.array([[0.0, 0.0], [math.log(3), 0.0], [1000.0, 0.0]], dtype=np.float32)
    records = ArrayDataset("logits", logits[:, None, None, :], np.zeros(3, dtype=np.int64), 2)
    confidence = loss_scores(torch.nn.Flatten(), records, signal="confidence")
    assert confidence == pytest.approx([0.5, 0.75, 1.0])


def test_online_known_answer():
    """By hand: Pr(x) = mean of both reference models = 0.4 and 0.4, so Pr(x|θ)/Pr(x) = 2 and 1; the population's
    Pr(z) = 0.5, 0.5, 0.4, 0.3, its ratios 1, 1, 0.5, 3. At γ = 2: x0 beats z with ratio ≤ 1 (3 of 4), x1 those
    with ratio ≤ 0.5 (1 of 4); at γ = 1 both reach 3 of 4 (a tie counts: LR = γ)."""
    assert scores(variant="online", gamma=2.0) == pytest.approx([0.75, 0.25])
    assert scores(variant="online", gamma=1.0) == pytest.approx([0.75, 0.75])


def test_offline_known_answer():
    """By hand, a = 0.5: x0's out model gives 0.2, so Pr(x0) = ½(1.5·0.2 + 0.5) = 0.4 (ratio 2); x1's gives 0.5, so
    Pr(x1) = ½(1.5·0.5 + 0.5) = 0.625 (ratio 0.64). The population's corrected Pr(z) = 0.625, 0.625, 0.55, 0.475, its
    ratios 0.8, 0.8, 0.364, 1.895: at γ = 1, x0 beats all 4, x1 only 0.364."""
    assert scores(variant="offline", a=0.5) == pytest.approx([1.0, 0.25])


def test_rmia_separates_a_planted_membership_signal_and_not_a_null():
    rng = np.random.default_rng(0)
    records, shadows, population = 600, 8, 500
    hardness = rng.normal(0, 1, records)
    split = make_halves_split(dataset="digits", train_size=1200, target_size=records // 2, num_shadows=shadows, seed=3)
    keep = split.keep

    def probability(logit):
        return 1 / (1 + np.exp(-logit))

    def model(in_mask, strength):
        return probability(hardness + strength * in_mask + rng.normal(0, 0.3, in_mask.shape))

    population_hardness = rng.normal(0, 1, population)
    for strength, low, high in ((1.5, 0.8, 1.0), (0.0, 0.44, 0.56)):
        target, reference = model(keep[0], strength), model(keep[1:], strength)
        population_p = probability(population_hardness + rng.normal(0, 0.3, (shadows + 1, population)))
        for variant in ("online", "offline"):
            values = rmia_scores(
                target,
                reference,
                keep[1:],
                population_target=population_p[0],
                population_shadows=population_p[1:],
                variant=variant,
            )
            assert low < auc(values[keep[0]], values[~keep[0]]) < high, (strength, variant)


def test_rmia_bad_inputs_are_one_line_errors():
    with pytest.raises(DPAuditError, match="probabilities in"):
        rmia_scores(
            np.array([0.0, 0.5]),
            SHADOWS,
            SHADOW_IN,
            population_target=POPULATION_TARGET,
            population_shadows=POPULATION_SHADOWS,
        )
    with pytest.raises(DPAuditError, match="no reference model that did not train"):
        rmia_scores(
            TARGET,
            SHADOWS,
            np.ones((2, 2), dtype=bool),
            population_target=POPULATION_TARGET,
            population_shadows=POPULATION_SHADOWS,
        )
    with pytest.raises(DPAuditError, match=r"population_shadows \[S, M\]"):
        rmia_scores(
            TARGET, SHADOWS, SHADOW_IN, population_target=POPULATION_TARGET, population_shadows=POPULATION_SHADOWS[:1]
        )
    with pytest.raises(DPAuditError, match="a must be in"):
        scores(a=1.5)


def test_rmia_end_to_end_on_a_halves_run(tmp_path, tiny_config, trained_run):
    from dpaudit.train import train_configuration

    config = tiny_config.replaced(split_design="halves", num_shadows=2, target_size=100, epochs=2, eval_epochs=(2,))
    train_configuration(config, out_dir=tmp_path, progress=False)
    for variant in ("online", "offline"):
        members, nonmembers = run_rmia_scores(tmp_path, epoch=2, variant=variant)
        assert members.shape == (100,) and nonmembers.shape == (100,)
        assert ((members >= 0) & (members <= 1)).all() and ((nonmembers >= 0) & (nonmembers <= 1)).all()
        scored = get_attack(f"rmia-{variant}").scorer(tmp_path, epoch=2, delta=1e-5)
        assert np.array_equal(scored.members, members)
    with pytest.raises(DPAuditError, match="split_design 'halves'"):
        run_rmia_scores(trained_run, epoch=2)


def test_rmia_separates_members_of_a_non_private_run(tmp_path, tiny_config):
    """Non-private SGD fitted hard to 100 digits (4 reference models of a halves split): RMIA tells its members from
    non-members clearly, and reports AUC and TPR at FPR 10⁻³ beside its bound."""
    from dpaudit.audit import audit_scores
    from dpaudit.train import train_configuration

    config = tiny_config.replaced(
        optimizer="sgd",
        clip_norm=None,
        sigma_dp=None,
        split_design="halves",
        num_shadows=4,
        target_size=100,
        batch_size=20,
        epochs=30,
        lr=0.2,
        eval_epochs=(30,),
        sampling="shuffle",
    )
    train_configuration(config, out_dir=tmp_path, progress=False)
    members, nonmembers = run_rmia_scores(tmp_path, epoch=30, variant="online")
    report = audit_scores(members, nonmembers, delta=1e-5)
    assert report.auc > 0.65, report.auc  # no signal: 0.5 ± 0.04 at 100 + 100 records
    assert set(report.tpr_at_fpr) == {0.001, 0.01}
