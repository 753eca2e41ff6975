"""White-box gradient canaries and the loss-threshold attack: the observation model from first
principles, perfect separation without noise, and the audit entry points."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from dpaudit._validation import DPAuditError
from dpaudit.attacks.canary import CanaryObservations
from dpaudit.config import TrainConfig
from dpaudit.settings import ProjectionSettings


def _train(tmp_path, **overrides):
    from dpaudit.train import train_configuration

    values = dict(
        dataset="digits",
        model="mlp",
        optimizer="dpsgd-gc",
        clip_norm=1.0,
        sigma_dp=0.02,
        batch_size=30,
        epochs=2,
        target_size=120,
        num_shadows=0,
        lr=0.2,
        canaries=400,
    )
    values.update(overrides)
    train_configuration(TrainConfig.from_dict(values), out_dir=tmp_path, progress=False)
    return CanaryObservations.load(tmp_path / "target" / "canaries.npz")


def test_dpsgd_canary_observations_are_the_gaussian_mechanism(tmp_path):
    observed = _train(tmp_path)
    assert observed.bits.shape == observed.observations.shape == (8, 400)
    assert observed.independent_canaries  # one coordinate and one noise per canary: all 400 per step count
    members, nonmembers = observed.scores()
    b, sigma = 30, 0.02  # each included canary adds C/b to its coordinate; noise N(0, σ_DP²)
    se = sigma * np.sqrt(1 / len(members) + 1 / len(nonmembers))
    assert abs(members.mean() - nonmembers.mean() - 1.0 / b) < 5 * se
    assert abs(nonmembers.mean()) < 5 * sigma / np.sqrt(len(nonmembers))
    pooled = np.concatenate([members - members.mean(), nonmembers - nonmembers.mean()])
    assert pooled.std() == pytest.approx(sigma, rel=0.05)
    z = sigma * b / 1.0
    assert np.allclose(observed.noise_multipliers, z)
    from dpaudit.estimate import gdp_epsilon

    assert observed.mechanism_epsilon(delta=1e-5) == pytest.approx(gdp_epsilon(mu=1 / z, delta=1e-5))


def test_canary_audit_scores_only_the_steps_at_the_smallest_noise():
    bits = np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]], dtype=bool)
    observations = np.arange(10.0).reshape(5, 2)
    decaying = CanaryObservations(bits, observations, np.array([2.0, 1.5, 1.0, 1.0, 1.0 + 1e-6]), 1.0)
    assert decaying.audited_steps().tolist() == [False, False, True, True, False]
    members, nonmembers = decaying.scores()
    assert sorted(members) == [4.0, 5.0] and sorted(nonmembers) == [6.0, 7.0]
    constant = CanaryObservations(bits, observations, np.full(5, 1.0), 1.0)
    members, nonmembers = constant.scores()
    assert len(members) == bits.sum() and len(nonmembers) == (~bits).sum()


def test_canaries_without_noise_are_perfectly_separated(tmp_path):
    from dpaudit.audit import audit_scores

    observed = _train(tmp_path, optimizer="sgd", sigma_dp=None, clip_norm=None)
    members, nonmembers = observed.scores()
    assert members.min() > nonmembers.max()
    report = audit_scores(members, nonmembers, delta=1e-5, confidence=0.95)
    assert report.epsilon_lower == pytest.approx(report.epsilon_ceiling)
    assert observed.mechanism_epsilon(delta=1e-5) == float("inf")


def test_frozen_canary_coordinates_reveal_nothing(tmp_path):
    observed = _train(tmp_path, optimizer="on-rand", active_ratio=0.2, epochs=3)
    last_epoch = observed.observations[-4:]
    frozen = np.all(last_epoch == 0, axis=0)
    assert frozen.any() and not frozen.all()  # a random 20 % support of all coordinates, canaries included


@pytest.mark.parametrize("optimizer", ["dp2-sgd", "dp2-sgd-as-published"])
def test_projection_aligned_canaries_see_the_sensitivity_of_the_projection(tmp_path, optimizer):
    """With almost no noise, a member score is the canary's shift of the release along its direction:
    C/b when each record's projected gradient is clipped (dp2-sgd), C·s_j/(√p·b) when the sum is projected
    after clipping. s_j/√p, the top third of the singular values of a d × p N(0, 1) matrix over √p, lies
    between √(d/p) and the Marchenko–Pastur edge √(d/p) + 1 (d = 200, p = 60: 1.83 … 2.83)."""
    from dpaudit.attacks.canary import canary_dimension

    count, b = 20, 30
    assert canary_dimension(count=count, design="projection-aligned", reduction_rate=0.3) == 200  # p = ⌊0.3·200⌋ = 3·20
    observed = _train(
        tmp_path,
        optimizer=optimizer,
        canaries=count,
        canary_design="projection-aligned",
        sigma_dp=1e-7,
        reduction_rate=0.3,
        projection_refresh="run",
        gamma=0.01,
    )
    assert observed.independent_canaries  # orthonormal directions in R^p: every canary of a step counts
    members, nonmembers = observed.scores()
    assert members.size + nonmembers.size == observed.bits.size
    assert np.abs(nonmembers).max() < 1e-4
    ratios = members * b  # in units of C/b (C = 1)
    if optimizer == "dp2-sgd":
        np.testing.assert_allclose(ratios, 1.0, rtol=1e-3)
    else:
        edge = np.sqrt(200 / 60)
        assert edge < ratios.min() and ratios.max() < edge + 1
        for j in range(count):  # one matrix for the run: each canary keeps its singular value
            own = observed.observations[observed.bits[:, j].astype(bool), j] * b
            np.testing.assert_allclose(own, own[0], rtol=1e-3)


@pytest.mark.parametrize("optimizer", ["adadpigu-code", "adadpigu"])
def test_support_canaries_see_a_mask_ranked_on_unnoised_gradients(tmp_path, optimizer):
    """Canaries in (or out of) all T_pre = 4 pre-training steps. Un-noised ranking: a member's coordinate has
    importance ≈ C/b > 0 and stays, a non-member's is exactly 0 and is pruned — perfect separation. The
    claim is the composition of the dense steps, (√T_pre / z)-GDP, whatever the support."""
    from dpaudit.estimate import gdp_epsilon

    observed = _train(
        tmp_path,
        optimizer=optimizer,
        canaries=40,
        canary_design="support",
        epochs=4,
        pretrain_fraction=0.25,
        retention_ratio=0.6,
        sigma_dp=0.1,
    )
    assert observed.bits.shape == observed.observations.shape == (1, 40)
    assert 5 < observed.bits.sum() < 35 and set(np.unique(observed.observations)) <= {0.0, 1.0}
    z = 0.1 * 30 / 1.0
    np.testing.assert_allclose(observed.noise_multipliers, [z] * 4)
    assert observed.mechanism_epsilon(delta=1e-5) == pytest.approx(gdp_epsilon(mu=2 / z, delta=1e-5))
    assert observed.selection == "split"
    members, nonmembers = observed.scores()
    if optimizer == "adadpigu-code":
        assert members.min() == 1.0 and nonmembers.max() == 0.0
    else:  # noised importance: z = 3 over 4 steps leaves the ranking of a canary coordinate mostly to chance
        assert members.mean() < 1.0 and nonmembers.mean() > 0.0


@pytest.mark.parametrize("optimizer", ["dp-psac-batch-noise", "dp-psac"])
def test_noise_scale_canary_sees_noise_that_depends_on_the_batch(tmp_path, optimizer):
    """One canary per step, every other record's gradient zeroed; score: the RMS of the model's coordinates
    of the release, the noise alone. DP-PSAC's noise is σ_DP whatever the batch; scaled to the batch's
    largest clipped norm it is exactly 0 without the canary and > 0 with it — perfect separation."""
    from dpaudit.audit import audit_scores
    from dpaudit.estimate import gdp_epsilon

    sigma = 0.05
    observed = _train(
        tmp_path, optimizer=optimizer, r=0.1, canaries=1, canary_design="noise-scale", sigma_dp=sigma, epochs=6
    )
    assert observed.bits.shape == observed.observations.shape == (24, 1)
    assert observed.selection == "split"
    z = sigma * 30 / 1.0
    assert observed.mechanism_epsilon(delta=1e-5) == pytest.approx(gdp_epsilon(mu=1 / z, delta=1e-5))
    members, nonmembers = observed.scores()
    if optimizer == "dp-psac-batch-noise":
        assert members.min() > 0 and nonmembers.max() == 0.0
        report = audit_scores(members, nonmembers, delta=1e-5, selection=observed.selection)
        assert report.epsilon_lower == pytest.approx(report.epsilon_ceiling)
    else:  # thousands of N(0, σ²) coordinates: each step's RMS is σ within a few per cent, canary or not
        np.testing.assert_allclose(np.concatenate([members, nonmembers]), sigma, rtol=0.05)


@pytest.mark.parametrize(
    "design, optimizer, canaries",
    [
        ("projection-aligned", "dpsgd-gc", 10),
        ("support", "dpsgd-gc", 10),
        ("support", "on-topk", 10),
        ("noise-scale", "dp-psac", 10),
    ],
)
def test_canary_designs_need_their_optimizers(design, optimizer, canaries):
    values = dict(
        dataset="digits",
        model="mlp",
        clip_norm=1.0,
        sigma_dp=0.1,
        target_size=60,
        batch_size=20,
        num_shadows=0,
        canaries=canaries,
    )
    with pytest.raises(DPAuditError, match="has none|learns none|set canaries to 1") as caught:
        TrainConfig.from_dict(dict(**values, optimizer=optimizer, canary_design=design)).validated()
    assert "\n" not in str(caught.value)
    with pytest.raises(DPAuditError, match="canary_design"):
        TrainConfig.from_dict(dict(**values, optimizer=optimizer, canary_design="aligned")).validated()


def test_loss_scores_are_negative_cross_entropy():
    from dpaudit.attacks.loss import loss_scores
    from dpaudit.data import load_dataset
    from dpaudit.models import build_model

    data = load_dataset("digits", split="test").subset(np.arange(20))
    model = build_model("mlp", input_shape=data.images.shape[1:], num_classes=10, seed=1)
    with torch.no_grad():
        logits = model(torch.from_numpy(data.images)).double()
    expected = -torch.nn.functional.cross_entropy(logits, torch.from_numpy(data.labels), reduction="none").numpy()
    np.testing.assert_allclose(loss_scores(model, data), expected, rtol=1e-5)
    np.testing.assert_allclose(loss_scores(model, data, signal="confidence"), np.exp(expected), rtol=1e-5)
    with pytest.raises(DPAuditError, match="signal"):
        loss_scores(model, data, signal="entropy")


def test_bad_canary_count_is_a_one_line_error():
    with pytest.raises(DPAuditError, match="canaries") as caught:
        TrainConfig.from_dict(
            dict(
                dataset="digits",
                model="mlp",
                clip_norm=1.0,
                sigma_dp=0.1,
                target_size=60,
                batch_size=20,
                num_shadows=0,
                canaries=-1,
            )
        ).validated()
    assert "\n" not in str(caught.value)


def test_missing_canaries_file_is_a_clear_error(tmp_path):
    with pytest.raises(DPAuditError, match="--canaries"):
        CanaryObservations.load(tmp_path / "target" / "canaries.npz")


@pytest.mark.integration
def test_audit_command_from_a_run_and_from_a_score_file(tmp_path, capsys):
    from dpaudit.cli import main

    _train(tmp_path / "run", canaries=100)
    assert main(["audit", "--run", str(tmp_path / "run"), "--attack", "canary"]) == 0
    payload = json.loads((tmp_path / "run" / "audit_canary.json").read_text())
    assert (
        payload["epsilon_mechanism"] > 0 and payload["report"]["n_members"] + payload["report"]["n_nonmembers"] == 800
    )
    assert (tmp_path / "run" / "audit_canary.png").is_file()
    assert main(["audit", "--run", str(tmp_path / "run"), "--attack", "loss"]) == 0
    loss_report = json.loads((tmp_path / "run" / "audit_loss.json").read_text())["report"]
    assert loss_report["n_members"] == 120
    assert 0 <= loss_report["epsilon_point_null"] <= math.log(120)  # the point estimate's null level beside it
    both = tmp_path / "both"
    assert (
        main(
            ["audit", "--run", str(tmp_path / "run"), "--attack", "canary", "loss", "--out-dir", str(both), "--no-plot"]
        )
        == 0
    )
    for attack in ("canary", "loss"):  # one process, the same reports as one attack at a time
        alone = json.loads((tmp_path / "run" / f"audit_{attack}.json").read_text())
        assert json.loads((both / f"audit_{attack}.json").read_text())["report"] == alone["report"]
    assert (
        main(["audit", "--run", str(tmp_path / "run"), "--attack", "canary", "loss", "--out", str(tmp_path / "x.json")])
        == 2
    )
    assert "--out-dir" in capsys.readouterr().err
    scores = tmp_path / "scores.csv"
    scores.write_text(
        "record,is_member,score\n" + "".join(f"{i},{i % 2},{(i % 2) * 10 + i / 100}\n" for i in range(40))
    )
    assert main(["audit", "--scores", str(scores)]) == 0
    report = json.loads((tmp_path / "scores_audit.json").read_text())["report"]
    assert report["auc"] == 1.0 and report["epsilon_lower"] == pytest.approx(report["epsilon_ceiling"])
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["audit"], "exactly one of --scores"),
        (["audit", "--scores", "missing.csv"], "score file not found"),
        (["audit", "--scores", "bad.csv"], "lacks the column"),
        (["audit", "--scores", "nan.csv"], "NaN|finite"),
        (["audit", "--scores", "good.csv", "--delta", "1.5"], "delta"),
        (["audit", "--scores", "good.csv", "--confidence", "1"], "confidence"),
        (["audit", "--run", "norun"], "no training run"),
    ],
)
def test_bad_audit_input_is_a_one_line_error(tmp_path, monkeypatch, capsys, argv, message):
    from dpaudit.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.csv").write_text("x,y\n1,2\n")
    (tmp_path / "nan.csv").write_text("score,is_member\nnan,1\n0.5,0\n")
    (tmp_path / "good.csv").write_text("score,is_member\n1,1\n0,0\n")
    assert main(argv) != 0
    error = capsys.readouterr().err.strip()
    assert re.search(message, error) and "\n" not in error and "Traceback" not in error


def test_audit_model_on_a_trained_model(tmp_path):
    import dpaudit
    from dpaudit.data import load_dataset
    from dpaudit.train import train_model

    data = load_dataset("digits", split="train")
    members, nonmembers = data.subset(np.arange(100)), data.subset(np.arange(100, 200))
    config = TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="mlp",
            optimizer="sgd",
            epochs=30,
            batch_size=20,
            lr=0.5,
            target_size=100,
            num_shadows=0,
        )
    ).validated()
    trained = train_model(config=config, train_data=members, test_data=None, model_index=0, progress=False)
    report = dpaudit.audit_model(trained.model, members, nonmembers, attack="loss")
    assert report.auc > 0.5 and report.n_members == report.n_nonmembers == 100
    with pytest.raises(DPAuditError, match="attack"):
        dpaudit.audit_model(trained.model, members, nonmembers, attack="lira")
    with pytest.raises(DPAuditError, match="delta"):
        dpaudit.audit_model(trained.model, members, nonmembers, delta=0)


def _projected_dirac_release(*, matrix: np.ndarray, steps: int, sigma: float, rng: np.random.Generator):
    """Bits and Dirac scores of dp2-sgd's canary tensor from first principles (C = b = 1, γ → 0): canary k adds
    the unit vector a_k = r_k/‖r_k‖ (r_k the k-th row of A) to the release w ∈ R^p, w = Σ_k b_k·a_k + σ·ξ,
    and the update is u = A·w, whose k-th coordinate is canary k's score."""
    count, kept = matrix.shape
    directions = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    bits = rng.random((steps, count)) < 0.5
    release = bits @ directions + sigma * rng.standard_normal((steps, kept))
    return bits, release @ matrix.T


def test_pooling_dirac_canaries_of_a_projection_overstates_the_evidence():
    """The m Dirac scores of a projected step are m linear functions of p Gaussians (and of every canary's bit):
    pooled as m independent trials, the Clopper–Pearson bound on the false-positive rate misses the truth far
    more often than α. The bound must hold for the projection the run drew; this A (|N(0, 1)| entries, a
    possible draw kept for the whole run) makes the scores of a step positively dependent. One trial per step
    (canary 0's, i.i.d. given A) keeps the miss rate at most α."""
    from dpaudit.estimate import clopper_pearson_upper

    rng = np.random.default_rng(0)
    count, kept, block, blocks, alpha = 20, 6, 40, 300, 0.05
    matrix = np.abs(rng.standard_normal((count, kept)))
    bits, scores = _projected_dirac_release(matrix=matrix, steps=(blocks + 1) * block, sigma=1.0, rng=rng)
    z = np.ones(bits.shape[0])
    miss_rate = {}
    for independent in (True, False):  # True: the old pooling of every canary; False: the new count

        def nonmembers(steps, independent=independent):
            observed = CanaryObservations(bits[steps], scores[steps], z[steps], 1.0, independent_canaries=independent)
            return observed.scores()[1]

        cut = np.median(nonmembers(slice(0, block)))  # fixed on a pilot block before the audits
        truth = np.mean(nonmembers(slice(block, None)) > cut)  # the rate the bound must cover
        missed = 0
        for audit in range(1, blocks + 1):
            found = nonmembers(slice(audit * block, (audit + 1) * block))
            missed += clopper_pearson_upper(int(np.sum(found > cut)), found.size, alpha=alpha) < truth
        miss_rate[independent] = missed / blocks
    assert miss_rate[True] > 2 * alpha  # 0.18 for this draw: the pooled count claims evidence it does not have
    assert miss_rate[False] <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / blocks)


@pytest.mark.parametrize("optimizer", ["dp2-sgd", "d2p2-sgd-as-published"])
def test_dirac_canaries_on_a_projection_count_one_trial_per_step(tmp_path, optimizer):
    """The real optimizer's release is the model of the test above: every step's m = 10 Dirac scores lie in the
    p = ⌊0.3·10⌋ = 3 dimensional column space of the canary tensor's projection (rank 3 over the run's steps
    with ``projection_refresh: run``), so the audit keeps one trial per step."""
    observed = _train(tmp_path, optimizer=optimizer, canaries=10, reduction_rate=0.3, projection_refresh="run")
    assert not observed.independent_canaries
    singular = np.linalg.svd(observed.observations, compute_uv=False)
    assert singular[3] < 1e-5 * singular[0] and singular[2] > 1e-3 * singular[0]
    members, nonmembers = observed.scores()
    audited = observed.audited_steps()  # d2p2-sgd: the last epoch's 4 steps, at the smallest z
    assert members.size + nonmembers.size == audited.sum() == (8 if optimizer == "dp2-sgd" else 4)
    first = observed.bits[:, 0].astype(bool)
    np.testing.assert_array_equal(members, observed.observations[audited & first, 0])
    np.testing.assert_array_equal(nonmembers, observed.observations[audited & ~first, 0])


def test_projection_aligned_scores_are_orthonormal_projections_of_the_release():
    """Aligned canary j's score is r_jᵀw with r_j = Aᵀv_j/s_j = V_j: the r_j are orthonormal in R^p, so the
    scores of a step carry independent N(0, σ²) noises and no other canary's bit. Dirac canaries' r_j = Aᵀe_j
    (the rows of A) are not orthogonal: their noises are correlated (cosines ≈ N(0, 1/p))."""
    from dpaudit import optim
    from dpaudit.attacks.canary import GradientCanaries, canary_dimension
    from dpaudit.optim import Hyperparameters

    count = 20
    dimension = canary_dimension(count=count, design="projection-aligned", reduction_rate=0.3)
    canaries = GradientCanaries(
        count=count,
        clip_norm=1.0,
        seed=0,
        device="cpu",
        dtype=torch.float32,
        design="projection-aligned",
        dimension=dimension,
    )
    hyper = Hyperparameters(
        lr=0.1, expected_batch_size=2, dataset_size=10, clip_norm=1.0, sigma_dp=0.3, settings=ProjectionSettings()
    )
    opt = optim.DP2SGD([torch.zeros(5), canaries.parameter], hyper, generator=torch.Generator().manual_seed(0))
    matrix = opt.matrices()[-1].double()
    directions, scales = canaries.directions(opt)
    rows = directions.double() @ matrix / scales.double()[:, None]
    np.testing.assert_allclose((rows @ rows.T).numpy(), np.eye(count), atol=1e-5)
    dirac = matrix[:count] / matrix[:count].norm(dim=1, keepdim=True)
    off_diagonal = (dirac @ dirac.T - torch.eye(count, dtype=torch.float64)).abs()
    assert off_diagonal.max() > 0.1
