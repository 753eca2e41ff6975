"""The ghost method: per-sample gradients kept as each layer's input and output gradient (``dpaudit.ghost``)."""

import dataclasses
import re
import warnings
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from support import digit_members, engine_config
from torch import nn

from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.ensemble import OpacusGradients, _vmapped_gradients, bytes_per_model_sample, resolve_method
from dpaudit.ghost import GhostGradients, unsupported_reason
from dpaudit.layerwise import ConvFactors, OuterProducts, dense, sample_norms, weighted_sample_sums
from dpaudit.models import build_model
from dpaudit.per_sample import PerSampleGradients
from dpaudit.train import train_models


def _conv_case(in_channels, out_channels, kernel, size, *, seed, **geometry):
    """A convolution's per-sample factors for M=2 models × W=3 samples and autograd's gradient of each (model, sample)
    pair's own convolution: (factors, [2, 3, *weight shape])."""
    generator = torch.Generator().manual_seed(seed)
    conv = nn.Conv2d(in_channels, out_channels, kernel, bias=False, **geometry)
    inputs = torch.randn(2, 3, in_channels, *size, generator=generator)
    out_shape = conv(inputs[0]).shape[1:]
    grads = torch.randn(2, 3, *out_shape, generator=generator)
    expected = torch.empty(2, 3, *conv.weight.shape)
    for m in range(2):
        for i in range(3):
            weight = conv.weight.detach().clone().requires_grad_()
            out = F.conv2d(inputs[m, i : i + 1], weight, None, conv.stride, conv.padding, conv.dilation)
            (expected[m, i],) = torch.autograd.grad(out, weight, grads[m, i : i + 1])
    factors = ConvFactors(inputs, grads, conv.kernel_size, conv.stride, conv.padding, conv.dilation)
    return factors, expected


# (C_in, C_out, kernel, input size, geometry): positions P, unfolded size D = C_in·k_h·k_w
CONV_CASES = {
    # P = 4·4 = 16, D = 48, C_out = 64: P·(D + C_out) = 1792 < D·C_out = 3072, the ghost norm
    "ghost norm": (12, 64, 2, (8, 8), dict(stride=2)),
    # P = 9·8 = 72, D = 6, C_out = 5: P·(D + C_out) > D·C_out, each gradient built
    "built": (3, 5, (1, 2), (9, 9), dict(stride=1, padding=(0, 1), dilation=(1, 2))),
    "padding, dilation, stride": (4, 40, 3, (11, 10), dict(stride=(2, 1), padding=(2, 1), dilation=2)),
    # P = 2·4 = 8, D = 18, C_out = 8: P·(D + C_out) > D·C_out, each gradient built, on a CPU from the unfolded input
    # though C_in·k_h·k_w > C_out, for P ≤ C_out
    "few positions": (2, 8, 3, (4, 6), {}),
}


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_convolution_factors_give_autograds_per_sample_gradients_their_norms_and_weighted_sums(case, device):
    in_channels, out_channels, kernel, size, geometry = CONV_CASES[case]
    factors, expected = _conv_case(in_channels, out_channels, kernel, size, seed=len(case), **geometry)
    # on a GPU each gradient is built by the grouped convolution, on a CPU by the unfolded input where that is smaller
    factors = dataclasses.replace(
        factors, inputs=factors.inputs.to(device), output_grads=factors.output_grads.to(device)
    )
    expected = expected.to(device)
    positions = factors.output_grads[0, 0, 0].numel()
    inner = in_channels * factors.kernel_size[0] * factors.kernel_size[1]
    assert (positions * (inner + out_channels) < inner * out_channels) == (case == "ghost norm")
    torch.testing.assert_close(factors.dense(), expected, rtol=1e-5, atol=1e-5)
    with mock.patch("torch.bmm", wraps=torch.bmm) as products:
        torch.testing.assert_close(sample_norms(factors), expected.flatten(2).norm(dim=2), rtol=1e-5, atol=1e-5)
    grams = [call for call in products.call_args_list if call.args[0].shape[1:] == (positions, inner)]
    assert len(grams) == (case == "ghost norm")  # UᵀU [N, P, P] only in the ghost norm
    weights = torch.tensor([[0.5, 0.0, 2.0], [1.0, -1.0, 0.25]], device=device)
    (sums,) = weighted_sample_sums([factors], weights)
    torch.testing.assert_close(sums, torch.einsum("mw,mw...->m...", weights, expected), rtol=1e-5, atol=1e-5)
    # indexing and index_select act on the (model, sample) dimensions
    torch.testing.assert_close(dense(factors[1, :2]), expected[1, :2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dense(factors[None]), expected[None], rtol=1e-5, atol=1e-5)
    picked = factors.index_select(1, torch.tensor([2, 0], device=device))
    torch.testing.assert_close(picked.dense(), expected[:, [2, 0]], rtol=1e-5, atol=1e-5)
    mask = (torch.rand(2, *expected.shape[2:], generator=torch.Generator().manual_seed(1)) > 0.5).float().to(device)
    masked = (expected * mask[:, None]).flatten(2).norm(dim=2)
    torch.testing.assert_close(sample_norms(factors, mask), masked, rtol=1e-5, atol=1e-5)


def test_both_norms_of_known_gradients():
    """1×1 convolutions on 1×P images, whose gradient is Σ_p g_p x_pᵀ."""
    # one position, 4 channels in and out (P·(D + C_out) = 8 < D·C_out = 16: the ghost norm): the outer product g xᵀ,
    # norm ‖g‖·‖x‖ = 3·√30
    ghost = ConvFactors(
        torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 4, 1, 1),
        torch.tensor([1.0, 0.0, 2.0, 2.0]).view(1, 1, 4, 1, 1),
        (1, 1),
        (1, 1),
        (0, 0),
        (1, 1),
    )
    assert ghost.norms().item() == pytest.approx(3 * 30**0.5, rel=1e-6)
    # one channel in, two out, two positions (6 > 2: built): x = (3, 4), g = (1, 2) and (0, −1), so the gradient is
    # (1·3 + 2·4, 0·3 − 1·4) = (11, −4), norm √137
    built = ConvFactors(
        torch.tensor([3.0, 4.0]).view(1, 1, 1, 1, 2),
        torch.tensor([[1.0, 2.0], [0.0, -1.0]]).view(1, 1, 2, 1, 2),
        (1, 1),
        (1, 1),
        (0, 0),
        (1, 1),
    )
    assert built.norms().item() == pytest.approx(137**0.5, rel=1e-6)


class _Residual(nn.Module):
    """Not an nn.Sequential: a convolution, GroupNorm, a residual block, average pooling and two Linear layers (and a
    third that never runs)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.inner = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.inner_norm = nn.GroupNorm(2, 8)
        self.hidden = nn.Linear(8 * 4 * 4, 16)
        self.head = nn.Linear(16, 10)

        self.unused = nn.Linear(2, 2)  # runs in no forward pass: zero gradients

    def forward(self, images):
        h = F.relu(self.norm(self.stem(images)))
        h = F.relu(h + self.inner_norm(self.inner(h)))
        return self.head(F.relu(self.hidden(F.avg_pool2d(h, 2).flatten(1))))


@pytest.mark.parametrize("name", ["residual", "resnet18-gn-cifar"])
def test_ghost_gradients_are_torch_funcs_per_sample_gradients(name, device):
    """In float64: in float32 the ghost method's batched forward pass and vmap's per-sample one round differently, and
    a ReLU input within about 10⁻⁵ of 0 (one in about 10⁵ of ResNet-18's) may fall on either side of it, a whole
    position's gradient apart (seen on an AMD host). Float64 moves that edge to about 10⁻¹⁴."""
    torch.manual_seed(0)
    model = _Residual() if name == "residual" else build_model(name, input_shape=(3, 32, 32), num_classes=10, seed=0)
    model = model.double().to(device)
    shape = (1, 8, 8) if name == "residual" else (3, 32, 32)
    images = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(device)
    labels = torch.tensor([[1, 7, 2]], device=device)
    assert unsupported_reason(model, images[0, 0]) is None
    expected, expected_losses = _vmapped_gradients(model)(
        [p.detach()[None] for p in model.parameters()], images, labels
    )
    grads, losses = GhostGradients([model])([0], images, labels)
    assert [type(g) for g in grads[:2]] == [ConvFactors, torch.Tensor]
    assert any(isinstance(g, OuterProducts) for g in grads)
    torch.testing.assert_close(losses, expected_losses, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(dense(got), want, rtol=1e-9, atol=1e-9 * want.abs().max().item())
        torch.testing.assert_close(sample_norms(got), want.flatten(2).norm(dim=2), rtol=1e-9, atol=1e-12)
    assert all(p.grad is None for p in model.parameters())  # no batch gradient is computed


def _twice():
    conv = nn.Conv2d(1, 1, 3, padding=1)
    return nn.Sequential(conv, conv, nn.Flatten(), nn.Linear(64, 2))


def _tied():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.Linear(64, 64))
    model[2].weight = model[1].weight
    return model


def _frozen():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
    model[1].bias.requires_grad_(False)
    return model


class _InPlace(nn.Module):
    """torchvision's habit: a ReLU in place on a GroupNorm's output."""

    def __init__(self):
        super().__init__()
        self.norm, self.head = nn.GroupNorm(1, 1), nn.Linear(64, 2)

    def forward(self, images):
        return self.head(F.relu(self.norm(images), inplace=True).flatten(1))


class _Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 2)

    def forward(self, images):
        return self.head(images[:, 0]).mean(1)  # a Linear over 8 rows of 8 features


UNSUPPORTED = {
    "batch norm": (lambda: nn.Sequential(nn.BatchNorm2d(1), nn.Flatten(), nn.Linear(64, 2)), "no ghost rule"),
    "grouped convolution": (lambda: nn.Sequential(nn.Conv2d(2, 2, 3, groups=2), nn.Flatten()), "groups"),
    "frozen": (_frozen, "frozen parameters"),
    "tied weights": (_tied, "shared between layers"),
    "a layer run twice": (_twice, "layer 0 runs more than once"),
    "in place": (_InPlace, "changes the input or output of layer norm in place"),
    "sequence features": (_Sequence, "layer head (Linear) acts on 2-d features"),
}


@pytest.mark.parametrize("case", UNSUPPORTED, ids=str)
def test_models_the_ghost_method_cannot_take_are_named_before_any_step(case):
    build, message = UNSUPPORTED[case]
    model = build()
    channels = 2 if case == "grouped convolution" else 1
    reason = unsupported_reason(model, torch.zeros(channels, 8, 8))
    assert reason is not None and message in reason and "\n" not in reason
    assert all(not hooks for m in model.modules() for hooks in (m._forward_hooks,))  # the probe's hooks are gone
    if case in ("a layer run twice", "in place", "sequence features"):  # only a forward pass shows these
        assert unsupported_reason(model) is None
        with pytest.raises(DPAuditError, match=re.escape(message)):
            GhostGradients([model])([0], torch.zeros(1, 2, channels, 8, 8), torch.zeros(1, 2, dtype=torch.long))
    else:
        with pytest.raises(DPAuditError, match=f"grad_sample 'ghost' cannot take this model: .*{re.escape(message)}"):
            resolve_method(model, "ghost")


def test_opacus_hooks_stay_off_outside_their_own_calls():
    """auto's trial runs several methods on the same models: Opacus's hooks must not compute (or pile up) per-sample
    gradients in the ghost method's passes."""
    model = _Residual()
    images = torch.randn(1, 4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[0, 1, 2, 3]])
    opacus = OpacusGradients([model])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, _ = opacus([0], images, labels)
        expected = [g.clone() for g in expected]
    assert [g.abs().max().item() for g in expected[-2:]] == [0, 0]  # the layer that never runs
    grads, _ = GhostGradients([model])([0], images, labels)
    assert all(getattr(p, "grad_sample", None) is None for p in model.parameters())
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(dense(got), want, rtol=1e-4, atol=1e-6)
    again, _ = opacus([0], images, labels)  # and still work in their own calls
    for got, want in zip(again, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_sequential_engine_takes_the_ghost_method_and_gives_dense_gradients():
    model = _Residual()
    images = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([4, 5, 6])
    grads, losses = PerSampleGradients(model, "ghost")(images, labels)
    expected, expected_losses = PerSampleGradients(model, "functorch")(images, labels)
    torch.testing.assert_close(losses, expected_losses)
    for got, want in zip(grads, expected, strict=True):
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["dpsgd-gc", "tp-topk"])  # a norm-only factor; per-sample tensors masked
def test_ensemble_by_ghost_factors_trains_the_same_models_as_one_at_a_time(optimizer, device):
    members = digit_members(3)
    together = train_models(
        config=engine_config(optimizer, grad_sample="ghost", canaries=20, device=device),
        members=members,
        test_data=None,
        progress=False,
    )
    assert together[0].gradient_method == "ghost"
    for member, trained in zip(members, together):
        (alone,) = train_models(
            config=engine_config(optimizer, engine="sequential", canaries=20, device=device),
            members=[member],
            test_data=None,
            progress=False,
        )
        assert trained.ledger.to_dict() == alone.ledger.to_dict()
        for a, b in zip(trained.model.parameters(), alone.model.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_config_takes_ghost_and_its_memory_estimate_is_opacuss():
    config = TrainConfig.from_dict(
        dict(dataset="digits", model="cnn-digits", grad_sample="ghost", clip_norm=1.0, noise_multiplier=1.0)
    ).validated()
    assert config.engine.grad_sample == "ghost"
    model, example = build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10), torch.zeros(1, 8, 8)
    assert bytes_per_model_sample(model, example=example, method="ghost") == bytes_per_model_sample(
        model, example=example, method="opacus"
    )
    model.train()
    assert unsupported_reason(model, example) is None
    assert model.training  # the probe runs in eval mode and leaves the model's mode as it was
