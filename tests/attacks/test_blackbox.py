"""The black-box rung: input-space canaries scored by the final model alone (dpaudit.blackbox), and the engine's two
hooks it rests on (a record drawn but absent; a chosen initialisation)."""

import numpy as np
import pytest
import torch

from dpaudit import blackbox
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.data import ArrayDataset, load_dataset
from dpaudit.train import Member, train_models


def config(**changes):
    settings = dict(
        optimizer="dpsgd-gc",
        dataset="digits",
        model="mlp",
        target_size=40,
        batch_size=40,
        epochs=3,
        lr=0.1,
        clip_norm=1.0,
        noise_multiplier=1.0,
        sampling="poisson",
        eval_epochs=(3,),
        num_shadows=0,
        canaries=0,
        diagnostics=False,
        device="cpu",
    )
    return TrainConfig.from_dict({**settings, **changes}).validated()


def records(n, *, last_label):
    train = load_dataset("digits", split="train")
    images = train.images[:n].copy()
    labels = train.labels[:n].copy()
    images[-1] = float(last_label)  # the last record differs between the datasets of a test
    labels[-1] = last_label
    return ArrayDataset(name="digits", images=images, labels=labels, num_classes=10)


def final_parameters(members, cfg):
    trained = train_models(config=cfg, members=members, test_data=None, progress=False)
    return [torch.cat([p.detach().flatten() for p in t.model.parameters()]) for t in trained]


def test_an_absent_record_is_drawn_but_never_trained_on():
    """Two datasets that differ in their last record train bit-identical models when that record is absent, at the
    same q; present, it changes the model (the test can fail)."""
    cfg = config(batch_size=20)
    a, b = records(40, last_label=1), records(40, last_label=7)
    absent_a, absent_b, present_b = final_parameters(
        [
            Member(train_data=a, model_index=1, absent=(39,)),
            Member(train_data=b, model_index=1, absent=(39,)),
            Member(train_data=b, model_index=1),
        ],
        cfg,
    )
    assert torch.equal(absent_a, absent_b)
    assert not torch.equal(absent_b, present_b)


def test_a_chosen_initialisation_is_where_training_starts():
    cfg = config(lr=1e-9)
    start = blackbox.pretrain(model_name="mlp", data=records(40, last_label=1), steps=2, seed=5)
    state = {key: value.detach().clone() for key, value in start.state_dict().items()}
    chosen, natural = final_parameters(
        [
            Member(train_data=records(40, last_label=1), model_index=1, initial_state=state),
            Member(train_data=records(40, last_label=1), model_index=1),
        ],
        cfg,
    )
    want = torch.cat([value.flatten() for value in state.values()])
    torch.testing.assert_close(chosen, want, rtol=0, atol=1e-6)
    assert (natural - want).abs().max() > 1e-2


def test_pretraining_is_torch_sgds_full_batch_descent_bit_for_bit():
    """The worst-case θ₀ is full-batch gradient descent; reference: torch.optim.SGD (lr 0.1, no momentum) on the
    same model from the same seed, whose parameters it must equal exactly."""
    import torch.nn.functional as F

    from dpaudit import models
    from dpaudit.data import dataset_info

    known = records(30, last_label=0)
    model = blackbox.pretrain(model_name="mlp", data=known, steps=25, lr=0.1, seed=4)
    info = dataset_info(known.name)
    reference = models.build_model("mlp", input_shape=info.input_shape, num_classes=info.num_classes, seed=4)
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(25):
        sgd.zero_grad()
        F.cross_entropy(reference(torch.from_numpy(known.images)), torch.from_numpy(known.labels)).backward()
        sgd.step()
    initial = models.build_model("mlp", input_shape=info.input_shape, num_classes=info.num_classes, seed=4)
    trained, expected = model.state_dict(), reference.state_dict()
    assert not all(torch.equal(initial.state_dict()[name], expected[name]) for name in expected)  # it moved
    assert all(torch.equal(trained[name], expected[name]) for name in expected)
    assert not model.training


def test_canaries_are_crafted_as_named():
    data = records(60, last_label=1)
    reference = blackbox.pretrain(model_name="mlp", data=data, steps=50)
    high = float(data.images.max())
    bright = blackbox.craft_canary(kind="bright", reference=reference, data=data, candidates=data)
    assert np.all(bright.image == high) and bright.image.dtype == np.float32
    with torch.no_grad():
        assert bright.label == int(reference(torch.from_numpy(bright.image[None])).argmin())
    assert not blackbox.craft_canary(kind="blank", reference=reference, data=data, candidates=data).image.any()
    mislabelled = blackbox.craft_canary(kind="mislabelled", reference=reference, data=data, candidates=data, seed=3)
    assert any(np.array_equal(mislabelled.image, image) for image in data.images)
    aligned = blackbox.craft_canary(kind="gradient-aligned", reference=reference, data=data, candidates=data, steps=60)
    assert data.images.min() <= aligned.image.min() and aligned.image.max() <= high

    def cosine(canary):
        params = list(reference.parameters())
        loss = torch.nn.functional.cross_entropy(
            reference(torch.from_numpy(data.images)), torch.from_numpy(data.labels)
        )
        mean = torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])
        own = torch.nn.functional.cross_entropy(
            reference(torch.from_numpy(canary.image[None])), torch.tensor([canary.label])
        )
        grad = torch.cat([g.flatten() for g in torch.autograd.grad(own, params)])
        return abs(float(torch.dot(grad, mean) / (grad.norm() * mean.norm())))

    assert cosine(aligned) < cosine(bright)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"models": 3}, "models must be at least 4"),
        ({"canary": "loud"}, "canary kind"),
        ({"initialisation": "adversarial"}, "initialisation"),
        ({"config": config(optimizer="sgd", clip_norm=None, noise_multiplier=None)}, "needs an optimizer with a DP"),
        ({"config": config(sampling="shuffle")}, "needs sampling: poisson"),
    ],
)
def test_bad_requests_are_one_line_errors_before_training(changes, message):
    arguments = {"config": config(), "models": 8, **changes}
    with pytest.raises(DPAuditError, match=message) as error:
        blackbox.audit_many_models(progress=False, **arguments)
    assert "\n" not in str(error.value)


def test_one_run_needs_records_beside_its_canaries():
    with pytest.raises(DPAuditError, match="target_size 40 leaves no records beside the 40 canary slot"):
        blackbox.audit_one_run(config=config(), canaries=40, progress=False)


def test_every_reading_is_labelled_and_within_its_ceiling():
    report = blackbox.audit_many_models(
        config=config(target_epsilon=4, noise_multiplier=None, accountant="prv"), models=40, progress=False
    )
    assert report.design == "many models" and report.trials == 40 and report.sample_rate == 1.0
    assert 0 <= report.epsilon_lower <= report.epsilon_ceiling
    assert report.epsilon == pytest.approx(4, rel=0.01)
    # q = 1: the summed noise is the whole transcript's sufficient statistic, so the heuristic is the PLD's ε
    assert report.epsilon_last_iterate == pytest.approx(report.epsilon, rel=0.01)
    labels = report.to_dict()["labels"]
    assert labels["epsilon_gdp"] == blackbox.GDP_FAMILY_LABEL  # full batch: the run is μ-GDP
    assert "assumption-free" in labels["epsilon_lower"] and "heuristic" in labels["epsilon_last_iterate"]
    subsampled = blackbox.audit_many_models(
        config=config(batch_size=20, target_epsilon=4, noise_multiplier=None), models=8, progress=False
    )
    assert subsampled.gdp_label == blackbox.GDP_ESTIMATE_LABEL and subsampled.sample_rate == 0.5
    one = blackbox.audit_one_run(config=config(target_size=200, batch_size=200), canaries=60, progress=False)
    assert one.design == "one run" and one.trials == 60 and 0 <= one.epsilon_lower <= one.epsilon_ceiling


def test_on_a_correct_run_no_reading_exceeds_the_runs_epsilon_in_more_than_5_percent_of_repetitions():
    """Coverage: 40 repetitions of a full-batch DP-SGD run at ε = 4 (where the Gaussian-DP reading is a family
    bound), worst-case initialisation, the bright canary; each lower bound above ε at most twice."""
    above = {"epsilon_lower": 0, "epsilon_gdp": 0}
    separation = []
    for seed in range(40):
        report = blackbox.audit_many_models(
            config=config(target_size=20, batch_size=20, target_epsilon=4, noise_multiplier=None, accountant="prv"),
            models=60,
            seed=seed,
            progress=False,
        )
        separation.append(report.auc)
        for key in above:
            above[key] += getattr(report, key) > report.epsilon
    assert above["epsilon_lower"] <= 2 and above["epsilon_gdp"] <= 2, above
    assert np.mean(separation) > 0.65  # the audit sees the canary (μ ≈ 0.9): the test can fail both ways


def test_the_command_line_writes_the_report(tmp_path, capsys):
    from dpaudit.cli import main

    out = tmp_path / "blackbox.json"
    flags = ["--dataset", "digits", "--model", "mlp", "--optimizer", "dpsgd-gc", "--clip-norm", "1", "--lr", "0.1"]
    flags += ["--target-size", "40", "--batch-size", "40", "--epochs", "3", "--noise-multiplier", "1"]
    assert main(["blackbox", *flags, "--models", "20", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "dpsgd-gc on mlp, digits: many models, 20 trials, canary bright" in printed and "assumption-free" in printed
    import json

    report = json.loads(out.read_text())
    assert report["trials"] == 20 and report["labels"]["epsilon_gdp"] == blackbox.GDP_FAMILY_LABEL
    assert (report["optimizer"], report["model"], report["dataset"]) == ("dpsgd-gc", "mlp", "digits")
    assert report["initialisation"] == "worst-case"  # each design's default, as in the API
    assert main(["blackbox", *flags, "--design", "one-run", "--input-canaries", "10", "--quiet", "--json"]) == 0
    one_run = json.loads(capsys.readouterr().out)
    assert (one_run["design"], one_run["initialisation"]) == ("one run", "natural")
    assert main(["blackbox", *flags, "--models", "2"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "dpaudit: error: models must be at least 4 (two per world at least), got 2"


@pytest.mark.parametrize(
    "optimizer, model, entries",
    [
        # ⌊0.3·d_l⌋ columns per tensor: linear 640·192 + 10·3; mlp 8192·2457 + 128·38 + 1280·384 + 10·3
        ("dp2-sgd", "linear", None),
        ("d2p2-sgd", "mlp", "20,624,158"),
        ("dpsgd-gc", "mlp", None),
        ("adadpigu", "mlp", None),
    ],
)
def test_the_many_models_design_refuses_a_projection_too_large_for_thousands_of_models(optimizer, model, entries):
    settings = {"reduction_rate": 0.3} if "p2" in optimizer else {}
    config = TrainConfig.from_dict({"optimizer": optimizer, "model": model, **settings})
    reason = blackbox.many_models_unfit(config=config)
    if entries is None:
        assert reason is None
        return
    assert reason.startswith(f"its d × p projections hold {entries} entries per model on {model}")
    with pytest.raises(DPAuditError, match=f"does not suit {optimizer} here: its d × p projections hold {entries}"):
        blackbox.audit_many_models(config=config.replaced(target_epsilon=8.0, clip_norm=1.0), models=4, progress=False)
