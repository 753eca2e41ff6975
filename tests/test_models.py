"""Model registry: shapes, Opacus module validation, per-sample gradients through every model."""

import pytest
import torch
from opacus.validators import ModuleValidator

from dpaudit import models
from dpaudit._validation import DPAuditError
from dpaudit.train import PerSampleGradients

SHAPES = {
    "mlp": [(1, 8, 8), (3, 32, 32)],
    "cnn-digits": [(1, 8, 8)],
    "cnn": [(1, 28, 28), (3, 32, 32)],
    "resnet18-gn": [(3, 32, 32), (1, 28, 28)],
    "resnet18-gn-cifar": [(3, 32, 32)],
}


def test_registry_is_complete():
    assert set(models.available()) == set(SHAPES)


@pytest.mark.parametrize("name, shape", [(n, s) for n, shapes in SHAPES.items() for s in shapes])
def test_model_passes_opacus_validation_and_has_per_sample_gradients(name, shape):
    model = models.build_model(name, input_shape=shape, num_classes=10, seed=0)
    assert ModuleValidator.validate(model, strict=False) == []
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    images, labels = torch.randn(2, *shape), torch.tensor([1, 7])
    grads, losses = PerSampleGradients(model, "functorch")(images, labels)
    assert losses.shape == (2,)
    params = [p for p in model.parameters() if p.requires_grad]
    assert [tuple(g.shape) for g in grads] == [(2, *p.shape) for p in params]
    assert model(images).shape == (2, 10)


def test_resnet18_gn_matches_seed004():
    model = models.build_model("resnet18-gn", input_shape=(3, 32, 32), num_classes=10, seed=0)
    # torchvision ResNet-18 with a 512→10 head: d ≈ 11.18M (seed 004 §4), GroupNorm(min(32, c), c)
    assert models.parameter_count(model) == 11_181_642
    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and all(m.num_groups == min(32, m.num_channels) for m in norms)


def test_seeded_initialisation_is_reproducible():
    a = models.build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=5)
    b = models.build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize(
    "name, shape, classes, message",
    [
        ("vgg", (3, 32, 32), 10, "unknown model"),
        ("cnn-digits", (1, 28, 28), 10, "8×8"),
        ("cnn", (1, 8, 8), 10, "28×28"),
        ("mlp", (1, 8), 10, "input_shape"),
        ("mlp", (1, 8, 8), 1, "num_classes"),
    ],
)
def test_bad_model_requests(name, shape, classes, message):
    with pytest.raises(DPAuditError, match=message):
        models.build_model(name, input_shape=shape, num_classes=classes)
