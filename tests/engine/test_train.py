"""The training engine: outputs, ledger, reproducibility, per-sample gradients, validation."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpaudit._validation import DPAuditError
from dpaudit.data import load_dataset
from dpaudit.models import build_model
from dpaudit.train import (
    PerSampleGradients,
    TrainingDivergedError,
    batch_indices,
    load_checkpoint,
    train_model,
)


def test_run_layout_metrics_and_ledger(trained_run, tiny_config):
    summary = json.loads((trained_run / "config.json").read_text())
    assert summary["models"] == ["target", "shadow_00", "shadow_01"]
    assert summary["derived"]["noise_multiplier_z"] == pytest.approx(0.002 * 50 / 20)
    for name in summary["models"]:
        folder = trained_run / name
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["epoch"] == [1, 2, 3, 4]
        assert all(math.isfinite(v) for v in metrics["train_loss"])
        ledger = json.loads((folder / "ledger.json").read_text())
        steps_per_epoch = math.ceil(200 / 50)
        assert ledger["steps"] == 4 * steps_per_epoch
        assert ledger["epoch_ends"] == [4, 8, 12, 16]
        assert ledger["runs"] == [
            {
                "steps": 16,
                "noise_multiplier": pytest.approx(0.005),
                "sample_rate": pytest.approx(0.25),
                "phase": "train",
            }
        ]
        for epoch in (2, 4):
            assert (folder / f"epoch_{epoch:04d}.pt").is_file()
            meta = json.loads((folder / f"epoch_{epoch:04d}.json").read_text())
            assert meta["epoch"] == epoch and meta["steps"] == epoch * steps_per_epoch
        assert not (folder / "epoch_0001.pt").exists()


def test_checkpoints_load_with_weights_only_and_training_learns(trained_run):
    model = build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10)
    load_checkpoint(trained_run / "target" / "epoch_0004.pt", model)
    metrics = json.loads((trained_run / "target" / "metrics.json").read_text())
    assert metrics["train_loss"][-1] < metrics["train_loss"][0]
    assert metrics["test_accuracy"][-1] > 0.3  # 10 classes: chance is 0.1


def test_same_seed_gives_identical_models(tiny_config, tmp_path):
    data = load_dataset("digits").subset(np.arange(100))
    config = tiny_config.replaced(epochs=2, eval_epochs=(2,)).validated()
    first = train_model(config=config, train_data=data, test_data=None, model_index=0, progress=False)
    second = train_model(config=config, train_data=data, test_data=None, model_index=0, progress=False)
    other = train_model(config=config, train_data=data, test_data=None, model_index=1, progress=False)
    for a, b, c in zip(first.model.parameters(), second.model.parameters(), other.model.parameters()):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, c) for a, c in zip(first.model.parameters(), other.model.parameters()))


@pytest.mark.parametrize("model_name", ["cnn-digits", "mlp"])
def test_per_sample_gradients_match_single_backward_and_opacus(model_name):
    data = load_dataset("digits").subset(np.arange(6))
    images, labels = torch.from_numpy(data.images), torch.from_numpy(data.labels)
    model = build_model(model_name, input_shape=(1, 8, 8), num_classes=10, seed=0)
    func_grads, losses = PerSampleGradients(model, "functorch")(images, labels)
    layer_grads, layer_losses = PerSampleGradients(model, "layers")(images, labels)
    hook_grads, hook_losses = PerSampleGradients(
        build_model(model_name, input_shape=(1, 8, 8), num_classes=10, seed=0), "opacus"
    )(images, labels)
    params = [p for p in model.parameters()]
    for i in range(len(images)):
        loss = F.cross_entropy(model(images[i : i + 1]), labels[i : i + 1])
        single = torch.autograd.grad(loss, params)
        assert float(losses[i]) == pytest.approx(loss.item(), rel=1e-5)
        assert float(layer_losses[i]) == pytest.approx(loss.item(), rel=1e-5)
        for got, got_layers, want in zip(func_grads, layer_grads, single):
            torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(got_layers[i], want, rtol=1e-4, atol=1e-6)
    for a, b in zip(func_grads, hook_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(losses, hook_losses)


def test_poisson_and_shuffle_sampling():
    rng = np.random.default_rng(0)
    shuffle = list(batch_indices(dataset_size=103, batch_size=25, sampling="shuffle", rng=rng))
    assert [len(b) for b in shuffle] == [25, 25, 25, 25, 3]
    assert sorted(np.concatenate(shuffle).tolist()) == list(range(103))
    sizes = [
        len(b) for _ in range(200) for b in batch_indices(dataset_size=100, batch_size=20, sampling="poisson", rng=rng)
    ]
    assert len(set(sizes)) > 3
    assert np.mean(sizes) == pytest.approx(20, abs=1.0)


def test_dc_training_stays_in_the_domain(tiny_config):
    data = load_dataset("digits").subset(np.arange(100))
    config = tiny_config.replaced(
        optimizer="dpsgd-dc", domain_radius=1.5, epochs=2, eval_epochs=(2,), sampling="poisson"
    ).validated()
    trained = train_model(config=config, train_data=data, test_data=None, model_index=0, progress=False)
    norm = math.sqrt(sum(float(p.detach().pow(2).sum()) for p in trained.model.parameters()))
    assert norm <= 1.5 + 1e-5
    assert trained.ledger.sampling == "poisson" and trained.ledger.steps == 2 * 2


def test_divergence_stops_with_clear_message_and_keeps_metrics(tiny_config, tmp_path):
    data = load_dataset("digits").subset(np.arange(100))
    config = tiny_config.replaced(
        optimizer="sgd", clip_norm=None, sigma_dp=None, lr=1e12, epochs=3, eval_epochs=(1, 2, 3)
    ).validated()
    with pytest.raises(TrainingDivergedError, match="diverged") as info:
        train_model(config=config, train_data=data, test_data=None, model_index=0, out_dir=tmp_path, progress=False)
    assert "\n" not in str(info.value)
    assert (tmp_path / "metrics.json").is_file()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"optimizer": "adam"}, "unknown optimizer"),
        ({"dataset": "imagenet"}, "unknown dataset"),
        ({"sigma_dp": -1.0}, "sigma_dp"),
        ({"clip_norm": -2.0}, "clip_norm"),
        ({"batch_size": 500}, "larger than the training data"),
        ({"optimizer": "dpsgd-dc", "domain_radius": 0.0}, "domain_radius"),
        ({"optimizer": "dpsgd-dc"}, "domain_radius"),
        ({"model": "cnn"}, "takes 28×28, 32×32 images"),
        ({"eval_epochs": (9,)}, "exceeds epochs"),
        ({"noise_multiplier": 1.0}, "give one of"),
        ({"target_size": 1000}, "target_size"),
        ({"optimizer": "sgd"}, "^clip_norm is not a setting of sgd"),
        ({"active_ratio": 0.2}, "^active_ratio is not a setting of dpsgd-gc"),
    ],
)
def test_bad_configuration_is_a_one_line_error(tiny_config, overrides, message):
    with pytest.raises(DPAuditError, match=message) as info:
        tiny_config.replaced(**overrides).validated()
    assert "\n" not in str(info.value)


def test_noise_multiplier_converts_to_sigma_dp(tiny_config):
    config = tiny_config.replaced(sigma_dp=None, noise_multiplier=0.005).validated()
    assert config.privacy.sigma_dp == pytest.approx(0.002)


def test_corrupted_checkpoint_is_a_one_line_error(trained_run, tmp_path):
    broken = tmp_path / "epoch_0004.pt"
    broken.write_bytes((trained_run / "target" / "epoch_0004.pt").read_bytes()[:200])
    model = build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10)
    with pytest.raises(DPAuditError, match="cannot load checkpoint") as info:
        load_checkpoint(broken, model)
    assert "\n" not in str(info.value)


def test_every_gradient_method_trains_the_same_model(tiny_config):
    data = load_dataset("digits").subset(np.arange(100))
    results = []
    for backend in ("functorch", "opacus", "layers", "ghost"):
        config = tiny_config.replaced(
            epochs=2, eval_epochs=(2,), grad_sample=backend, engine="sequential", microbatch_size=16
        ).validated()
        results.append(train_model(config=config, train_data=data, test_data=None, model_index=0, progress=False))
    for other in results[1:]:
        for a, b in zip(results[0].model.parameters(), other.model.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
