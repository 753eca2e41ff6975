"""Shadow-model attack (Liang et al., App. D.2 and D.4) and their eq. 20."""

import json
import math
import warnings

import numpy as np
import pytest

from dpaudit import empirical_epsilon
from dpaudit._validation import DPAuditError
from dpaudit.attacks import ShadowAttackConfig, attack_run, shadow_attack
from dpaudit.estimate import error_rates

FAST = ShadowAttackConfig(epochs=20)


def test_eq20_known_answers():
    delta = 1e-5
    # symmetric rates p: ε̂ = log((1 − δ − p)/p); Liang et al.'s ε̂ scale: 1.12 ↔ p ≈ 0.246 (75 % accuracy)
    assert empirical_epsilon(0.246, 0.246, delta=delta) == pytest.approx(math.log((1 - delta - 0.246) / 0.246))
    assert empirical_epsilon(0.246, 0.246) == pytest.approx(1.12, abs=0.005)
    assert empirical_epsilon(0.423, 0.423) == pytest.approx(0.31, abs=0.005)
    # asymmetric: the larger of the two log-ratios
    assert empirical_epsilon(0.1, 0.3, delta=0.0) == pytest.approx(max(math.log(0.9 / 0.3), math.log(0.7 / 0.1)))
    assert empirical_epsilon(0.5, 0.5, delta=0.0) == pytest.approx(0.0)
    assert empirical_epsilon(0.6, 0.6, delta=0.0) < 0  # worse than random: kept, not clipped
    np.testing.assert_allclose(
        empirical_epsilon(np.array([0.1, 0.2]), np.array([0.2, 0.1]), delta=0.0), [math.log(8), math.log(8)]
    )


def test_eq20_zero_rate_is_reported_inf_not_a_crash():
    with pytest.warns(UserWarning, match="inf"):
        assert empirical_epsilon(0.0, 0.2) == math.inf


@pytest.mark.parametrize(
    "fpr, fnr, delta", [(-0.1, 0.2, 1e-5), (0.2, 1.5, 1e-5), (0.2, 0.2, 1.0), (math.nan, 0.1, 1e-5)]
)
def test_eq20_bad_input(fpr, fnr, delta):
    with pytest.raises(DPAuditError):
        empirical_epsilon(fpr, fnr, delta=delta)


def test_error_rates():
    assert error_rates([1, 1, 0, 0, 1], [1, 0, 0, 1, 1]) == (0.5, pytest.approx(1 / 3))
    with pytest.raises(DPAuditError, match="both members and non-members"):
        error_rates([1, 0], [1, 1])


def _synthetic(rng, n, shift):
    classes = rng.integers(0, 10, size=2 * n)
    membership = np.arange(2 * n) < n
    logits = rng.normal(size=(2 * n, 10))
    logits[np.arange(2 * n), classes] += np.where(membership, shift, 0.0)
    return logits, membership, classes


def test_attack_separates_leaky_features_and_not_random_ones():
    rng = np.random.default_rng(0)
    leaky = {}
    for name, shift in (("leaky", 3.0), ("none", 0.0)):
        shadow = _synthetic(rng, 1500, shift)
        target = _synthetic(rng, 500, shift)
        result = shadow_attack(
            shadow_features=shadow[0],
            shadow_membership=shadow[1],
            shadow_classes=shadow[2],
            target_features=target[0],
            target_membership=target[1],
            target_classes=target[2],
            config=FAST,
        )
        leaky[name] = result
        assert result.scores.shape == (1000,) and np.all((result.scores >= 0) & (result.scores <= 1))
    assert leaky["leaky"].accuracy > 0.85 and leaky["leaky"].epsilon_hat > 1.5
    assert abs(leaky["none"].epsilon_hat) < 0.35 and abs(leaky["none"].accuracy - 0.5) < 0.08
    expected = empirical_epsilon(leaky["leaky"].fpr, leaky["leaky"].fnr)
    assert leaky["leaky"].epsilon_hat == pytest.approx(expected)


def test_class_without_both_labels_falls_back_to_pooled_model():
    rng = np.random.default_rng(1)
    features, membership, classes = _synthetic(rng, 200, 2.0)
    membership[classes == 3] = True  # shadows never show a non-member of class 3
    result = shadow_attack(
        shadow_features=features,
        shadow_membership=membership,
        shadow_classes=classes,
        target_features=features,
        target_membership=np.arange(400) < 200,
        target_classes=classes,
        config=FAST,
    )
    assert result.fallback_classes == [3]


def test_attack_run_on_trained_models(trained_run, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiny samples may give ε̂ = inf
        results = attack_run(trained_run, config=FAST, out_dir=tmp_path, progress=False)
    assert [r.epoch for r in results] == [2, 4]
    summary = json.loads((tmp_path / "attack.json").read_text())
    assert [r["epoch"] for r in summary["results"]] == [2, 4]
    for result in results:
        assert result.is_member.sum() == 200 and (~result.is_member).sum() == 200
        assert 0 <= result.fpr <= 1 and 0 <= result.fnr <= 1
    rows = (tmp_path / "scores_epoch_0004.csv").read_text().strip().splitlines()
    assert rows[0] == "record,is_member,class,score" and len(rows) == 401


def test_attack_run_rejects_missing_epoch(trained_run):
    with pytest.raises(DPAuditError, match="no checkpoint"):
        attack_run(trained_run, epochs=[3], progress=False)


def test_batched_attack_models_follow_each_lone_fit():
    """Known answer: each model of the batched fit ends where ``torch.optim.SGD`` (momentum, weight decay) takes the
    same network trained alone on its data, even with different numbers of batches per epoch (37, 150 and 260
    records at batch size 100: 1, 2 and 3 steps per epoch)."""
    import torch
    from torch import nn

    from dpaudit.attacks.shadow import ShadowAttackConfig, _fit_mlps

    config = ShadowAttackConfig(epochs=4)
    rng = np.random.default_rng(3)
    datasets = [(rng.normal(size=(n, 10)), rng.random(n) < 0.5, seed) for n, seed in ((37, 5), (150, 6), (260, 7))]

    def lone(features, targets, seed):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(10, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 2))
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.SGD(
            model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
        inputs, labels = torch.tensor(features, dtype=torch.float32), torch.tensor(targets, dtype=torch.int64)
        for _ in range(config.epochs):
            for batch in torch.randperm(len(inputs), generator=generator).split(config.batch_size):
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(inputs[batch]), labels[batch]).backward()
                optimizer.step()
        return model

    for batched, data in zip(_fit_mlps(datasets, config), datasets):
        reference = lone(*data)
        for got, want in zip(batched.parameters(), reference.parameters()):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
