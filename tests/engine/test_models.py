"""Model registry: shapes, Opacus module validation, per-sample gradients through every model."""

import warnings

import pytest
import torch
from opacus.validators import ModuleValidator

from dpaudit import models
from dpaudit._validation import DPAuditError
from dpaudit.per_sample import PerSampleGradients

SHAPES = {
    "linear": [(1, 8, 8), (3, 32, 32)],
    "mlp": [(1, 8, 8), (3, 32, 32)],
    "cnn-digits": [(1, 8, 8)],
    "cnn": [(1, 28, 28), (3, 32, 32)],
    "cnn-small": [(1, 28, 28), (3, 32, 32)],
    "cnn-d2p2": [(1, 28, 28), (3, 32, 32)],
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


@pytest.mark.parametrize("name, shape", [(n, s) for n, shapes in SHAPES.items() for s in shapes])
def test_opacus_hooks_give_the_per_sample_gradients_of_torch_func(name, shape):
    # Opacus's backward hooks forbid in-place changes to a hooked layer's output (torchvision's ResNet blocks).
    model = models.build_model(name, input_shape=shape, num_classes=10, seed=0)
    # Fixed images: max-pooling's gradient jumps where two inputs nearly tie, and a batched forward pass
    # (Opacus) and a per-sample one (torch.func) round differently, so a rare draw routes them apart.
    images = torch.randn(3, *shape, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1, 7, 2])
    expected, expected_losses = PerSampleGradients(model, "functorch")(images, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the full backward hook fires though the images need no gradient
        grads, losses = PerSampleGradients(model, "opacus")(images, labels)
    torch.testing.assert_close(losses, expected_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=max(1e-6, 1e-4 * want.abs().max().item()))


@pytest.mark.parametrize("name, cifar_stem", [("resnet18-gn", False), ("resnet18-gn-cifar", True)])
def test_resnet18_is_torchvisions_network(name, cifar_stem):
    from torchvision.models import resnet18

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        reference = resnet18(weights=None, num_classes=10, norm_layer=models._group_norm)
        if cifar_stem:
            reference.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
            reference.maxpool = torch.nn.Identity()
    model = models.build_model(name, input_shape=(3, 32, 32), num_classes=10, seed=3)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in reference.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(images), reference(images), rtol=0, atol=0)


def test_resnet18_gn_matches_the_dpsgd_dc_model():
    model = models.build_model("resnet18-gn", input_shape=(3, 32, 32), num_classes=10, seed=0)
    # torchvision ResNet-18 with a 512→10 head: d ≈ 11.18M (Liang et al.'s CIFAR-10 model), GroupNorm(min(32, c), c)
    assert models.parameter_count(model) == 11_181_642
    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and all(m.num_groups == min(32, m.num_channels) for m in norms)


def test_seeded_initialisation_is_reproducible():
    a = models.build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=5)
    b = models.build_model("cnn", input_shape=(1, 28, 28), num_classes=10, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("accelerator", [False, True])
def test_seeded_initialisation_is_torch_manual_seeds(monkeypatch, accelerator):
    """The seeded weights are the builder's under ``torch.manual_seed(seed)`` (the CPU-only fast path and the
    accelerator path alike), and the global generator is left as it was."""
    from dpaudit import _device

    monkeypatch.setattr(_device, "_accelerator_present", lambda: accelerator)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    built = models.build_model("mlp", input_shape=(1, 8, 8), num_classes=10, seed=7)
    assert torch.equal(torch.rand(3), expected_next)
    torch.manual_seed(7)
    reference = [torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)]  # the mlp's layers, in their order
    reference_parameters = [p for layer in reference for p in layer.parameters()]
    assert all(torch.equal(x, y) for x, y in zip(built.parameters(), reference_parameters, strict=True))


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


@pytest.mark.parametrize("shape", SHAPES["cnn-small"])
def test_cnn_small_keeps_every_tensor_small_enough_to_project(shape):
    """D2P2-SGD draws a d × p Gaussian matrix per tensor (p ≤ 0.7·d at a 30 % reduction, either convention): at most
    5,120 entries keep it under 75 MB; `cnn`'s 401,408-entry layer would need 180–420 GiB."""
    model = models.build_model("cnn-small", input_shape=shape, num_classes=10, seed=0)
    assert max(p.numel() for p in model.parameters()) <= 5120


@pytest.mark.parametrize(
    "shape, total, first",
    [((1, 28, 28), 33_194, 144), ((3, 32, 32), 33_482, 432)],
)
def test_cnn_d2p2_is_the_papers_table_5_network(shape, total, first):
    """D2P2-SGD's Table 5 and its code's convnet(): 33,194 weights on one channel, 33,482 on three; per tensor
    (3 channels) 432, 16, 4608, 32, 9216, 32, 18432, 64, 640, 10 (conv 3×3 16/32/32/64, linear 64 → 10)."""
    model = models.build_model("cnn-d2p2", input_shape=shape, num_classes=10, seed=0)
    assert models.parameter_count(model) == total
    assert [p.numel() for p in model.parameters()] == [first, 16, 4608, 32, 9216, 32, 18432, 64, 640, 10]
    kinds = [type(m).__name__ for m in model]
    assert kinds.count("AvgPool2d") == 3 and "AdaptiveAvgPool2d" in kinds and "MaxPool2d" not in kinds
