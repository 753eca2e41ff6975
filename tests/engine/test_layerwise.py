"""Layer-wise per-sample gradients of stacked models equal torch.func's vmap(vmap(grad)), an independent route."""

from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpaudit import layerwise
from dpaudit import models as model_registry
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.ensemble import EnsembleGradients, _vmapped_gradients, bytes_per_model_sample, resolve_method
from dpaudit.layerwise import (
    LayerwiseGradients,
    OuterProducts,
    _GroupNormSums,
    _StackedGroupNorm,
    dense,
    largest_unfolded_input,
    sample_norms,
    unfold,
    unsupported_reason,
    weighted_sample_sums,
)

MODELS, WIDTH = 3, 5
PRIVATE = {"clip_norm": 1.0, "noise_multiplier": 1.0}


def _odd_cnn() -> nn.Sequential:
    """Every supported layer kind and option: stride, dilation, unequal padding, no bias, GroupNorm, pools."""
    return nn.Sequential(
        nn.Conv2d(3, 6, (3, 5), stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
        nn.GroupNorm(2, 6),
        nn.Tanh(),
        nn.AvgPool2d(2),
        nn.Conv2d(6, 4, 3, bias=False),
        nn.LeakyReLU(),
        nn.MaxPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 7, bias=False),
        nn.ELU(),
        nn.Linear(7, 5),
    )


CASES = {
    "cnn-digits": (
        lambda: model_registry.build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10),
        (1, 8, 8),
        10,
    ),
    "mlp": (lambda: model_registry.build_model("mlp", input_shape=(1, 8, 8), num_classes=10), (1, 8, 8), 10),
    "cnn (GroupNorm, 32×32)": (
        lambda: model_registry.build_model("cnn", input_shape=(3, 32, 32), num_classes=10),
        (3, 32, 32),
        10,
    ),
    "cnn-d2p2 (average pools, global average pool)": (
        lambda: model_registry.build_model("cnn-d2p2", input_shape=(1, 28, 28), num_classes=10),
        (1, 28, 28),
        10,
    ),
    "odd options": (_odd_cnn, (3, 16, 13), 5),
    "odd options, a first convolution's unfolded input no larger than its output (C_in·k_h·k_w ≤ C_out)": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 12, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(12 * 6 * 7, 5),
        ),
        (1, 11, 9),
        5,
    ),
}


def _stack(build, device: str = "cpu"):
    models = [build().to(device) for _ in range(MODELS)]  # different random initialisations
    names = [name for name, _ in models[0].named_parameters()]
    return models[0], [torch.stack([dict(m.named_parameters())[name].detach() for m in models]) for name in names]


@pytest.mark.parametrize("case", sorted(CASES))
def test_per_sample_gradients_equal_vmap(case, device):
    build, shape, classes = CASES[case]
    torch.manual_seed(0)
    model, params = _stack(build, device)
    images = torch.randn(MODELS, WIDTH, *shape, device=device)
    labels = torch.randint(0, classes, (MODELS, WIDTH), device=device)
    want, want_losses = _vmapped_gradients(model)(params, images, labels)
    got, losses = LayerwiseGradients(model)(params, images, labels)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for (name, _), g, w in zip(model.named_parameters(), got, want):
        assert g.shape == w.shape == (MODELS, WIDTH, *dict(model.named_parameters())[name].shape)
        # atol: a conv bias right before a one-channel-per-group GroupNorm has a true gradient of 0
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6, msg=name)
        assert not g.requires_grad


@pytest.mark.parametrize("offset", [0.0, 30.0])
def test_a_first_layer_group_norm_and_one_after_a_convolution_give_vmaps_gradients_far_from_zero_mean_too(
    offset, device
):
    # the first GroupNorm's backward pass never runs (nothing before it needs a gradient): its per-sample sums come
    # from its output gradient; the second's from its backward pass. An input far from zero mean (|μ|/std = 30, the
    # first GroupNorm's) takes Σ g x̂ = (Σ g x − μ Σ g)/std through the difference of two large sums
    torch.manual_seed(4)
    model, params = _stack(
        lambda: nn.Sequential(
            nn.GroupNorm(1, 3), nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(36, 5)
        ),
        device,
    )
    params[2] += offset  # the convolution's weights: the second GroupNorm's input on a 30× larger scale
    images = offset + torch.randn(MODELS, WIDTH, 3, 5, 5, device=device)
    labels = torch.randint(0, 5, (MODELS, WIDTH), device=device)
    want, _ = _vmapped_gradients(model)(params, images, labels)
    got, _ = LayerwiseGradients(model)(params, images, labels)
    for (name, _), g, w in zip(model.named_parameters(), got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=name)


def test_the_stacked_group_norms_backward_pass_and_kept_sums_are_autograds_of_group_norm_far_from_zero_mean(device):
    # in float64, so that the formula alone is checked: a channels-last input with |μ|/std = 100, two channels per
    # group; the input gradient and the per-sample γ and β gradients (from the sums the backward pass keeps) against
    # autograd through F.group_norm, sample by sample
    torch.manual_seed(5)
    samples, channels, groups = 3, 6, 3
    x = (100.0 + torch.randn(samples, channels, 4, 5, dtype=torch.float64, device=device)).contiguous(
        memory_format=torch.channels_last
    )
    weight, bias = (torch.randn(channels, dtype=torch.float64, device=device) for _ in range(2))
    g = torch.randn(samples, channels, 4, 5, dtype=torch.float64, device=device)
    kept = _GroupNormSums()
    leaf = x.clone().requires_grad_()
    (grad_input,) = torch.autograd.grad(_StackedGroupNorm.apply(leaf, weight, bias, groups, 1e-5, kept), leaf, g)
    per_sample_weight, per_sample_bias = kept.per_channel(g)
    for i in range(samples):
        xi, wi, bi = (values.clone().requires_grad_() for values in (x[i : i + 1], weight, bias))
        want = torch.autograd.grad(F.group_norm(xi, groups, wi, bi, eps=1e-5), (xi, wi, bi), g[i : i + 1])
        torch.testing.assert_close(grad_input[i : i + 1], want[0], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(per_sample_weight[i], want[1], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(per_sample_bias[i], want[2], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("groups", [8, 4])
def test_group_statistics_are_float64s_to_float32_precision_far_from_zero_mean(groups):
    # |μ|/σ = 100 in float32, channels last, one and two channels per group: Σx² − (Σx)²/P (torch's channels-last
    # GroupNorm kernel on a CPU) loses about 4 of float32's 7 digits of the variance here
    torch.manual_seed(6)
    x = (100.0 + torch.randn(4, 8, 16, 16, dtype=torch.float64)).float().contiguous(memory_format=torch.channels_last)
    mean, rstd = layerwise._group_statistics(x, groups, 1e-5)
    grouped = x.double().contiguous().view(4, groups, -1)
    want_var, want_mean = torch.var_mean(grouped, dim=-1, correction=0)
    torch.testing.assert_close(mean.double(), want_mean, rtol=1e-6, atol=0.0)
    torch.testing.assert_close(rstd.double(), (want_var + 1e-5).rsqrt(), rtol=1e-5, atol=0.0)


def _norm_then_pool_cnn(first: bool, pool: nn.MaxPool2d) -> nn.Sequential:
    """A GroupNorm → ReLU → MaxPool2d block after a convolution (``first``: also one on the input, before anything that
    needs a gradient)."""
    head = [nn.GroupNorm(1, 2), nn.MaxPool2d(2)] if first else []
    return nn.Sequential(
        *head,
        nn.Conv2d(2, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.ReLU(),
        pool,
        nn.Flatten(),
        nn.Linear(4 * 3 * 3 if first else 4 * 4 * 4, 5),
    )


@pytest.mark.parametrize("scales", ["positive", "negative and zero"])
@pytest.mark.parametrize(
    "first, pool", [(False, nn.MaxPool2d(2)), (True, nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True))]
)
def test_a_group_norm_before_a_max_pool_runs_as_one_layer_with_vmaps_gradients(scales, first, pool, device):
    # the GroupNorm and the pool run as one layer that builds the normalised activation only where the pool keeps it;
    # with γ < 0 the pool keeps the input's smallest values and with γ = 0 its window's first (as torch's max pool on a
    # constant output); overlapping windows (3, stride 2) and a first GroupNorm whose backward pass never runs too
    torch.manual_seed(7)
    model, params = _stack(lambda: _norm_then_pool_cnn(first, pool), device)
    kinds = [type(layer).__name__ for layer in LayerwiseGradients(model).layers]
    assert kinds.count("_GroupNormPool") == 1 + first and "GroupNorm" not in kinds and "MaxPool2d" not in kinds
    names = [name for name, _ in model.named_parameters()]
    if scales != "positive":
        for name in names:
            if name.endswith(".weight") and params[names.index(name)].dim() == 2:  # the GroupNorms' γ
                params[names.index(name)][:, ::2] *= -1.0
                params[names.index(name)][0, -1] = 0.0
    images = torch.randn(MODELS, WIDTH, 2, 8, 8, device=device) * 2.0 + 1.0
    labels = torch.randint(0, 5, (MODELS, WIDTH), device=device)
    want, want_losses = _vmapped_gradients(model)(params, images, labels)
    got, losses = LayerwiseGradients(model)(params, images, labels)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6, msg=name)
    weights = torch.rand(MODELS, WIDTH, device=device)
    want, _ = _vmapped_gradients(model)(params, images, labels, weights)
    got, _ = LayerwiseGradients(model)(params, images, labels, weights)
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6, msg=name)


def test_pooling_before_relu_routes_the_same_gradients_through_ties_and_negative_windows():
    # ReLU → MaxPool2d runs as MaxPool2d → ReLU; average pooling does not commute with ReLU and keeps its place
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2, 2, 1),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(8, 3),
    )
    kinds = [type(layer).__name__ for layer in LayerwiseGradients(model).layers]
    assert kinds == ["Conv2d", "MaxPool2d", "ReLU", "Conv2d", "ReLU", "AvgPool2d", "Flatten", "Linear"]
    params = [p.detach()[None].repeat(MODELS, *[1] * p.dim()) for p in model.parameters()]
    params[0][:, :, 0, 0, 0], params[0][:, 1] = 1.0, -1.0  # channel 0 passes the image, channel 1 its negative
    params[1].zero_()
    # 2×2 blocks of equal values (ties in every pooling window), half of them negative (windows ReLU zeroes)
    blocks = torch.randn(MODELS, WIDTH, 1, 4, 4).repeat_interleave(2, dim=3).repeat_interleave(2, dim=4)
    labels = torch.randint(0, 3, (MODELS, WIDTH))
    want, _ = _vmapped_gradients(model)(params, blocks, labels)
    got, _ = LayerwiseGradients(model)(params, blocks, labels)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-7)


def test_weighted_batch_gradients_equal_vmap(device):
    torch.manual_seed(1)
    model, params = _stack(CASES["cnn (GroupNorm, 32×32)"][0], device)
    images = torch.randn(MODELS, WIDTH, 3, 32, 32, device=device)
    labels, weights = torch.randint(0, 10, (MODELS, WIDTH), device=device), torch.rand(MODELS, WIDTH, device=device)
    want, want_losses = _vmapped_gradients(model)(params, images, labels, weights)
    got, losses = LayerwiseGradients(model)(params, images, labels, weights)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_gradients_do_not_depend_on_the_other_models_or_on_padding_rows():
    torch.manual_seed(2)
    model, params = _stack(CASES["cnn-digits"][0])
    images, labels = torch.randn(MODELS, WIDTH, 1, 8, 8), torch.randint(0, 10, (MODELS, WIDTH))
    together, _ = LayerwiseGradients(model)(params, images, labels)
    alone, _ = LayerwiseGradients(model)([p[1:2] for p in params], images[1:2, :2], labels[1:2, :2])
    for g, a in zip(together, alone):
        torch.testing.assert_close(g[1, :2], a[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "conv, unfolded",
    [
        (nn.Conv2d(3, 32, 3, padding=1), True),  # the 32×32 CNN's first layer: 27 ≤ 32
        (nn.Conv2d(1, 12, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), bias=False), True),
        (nn.Conv2d(16, 64, 3, stride=3), True),  # 144 > 64, but 3·3 = 9 positions ≤ 64 (a layer on a small image)
        (nn.Conv2d(32, 64, 3, padding=1), False),  # 288 > 64 and 9·10 = 90 positions > 64: the grouped convolution
    ],
)
def test_a_convolution_whose_unfolded_input_is_the_smaller_takes_its_per_sample_weight_gradient_from_it(
    conv, unfolded, monkeypatch
):
    torch.manual_seed(3)
    models, width = 4, 3
    inputs = torch.randn(width, models * conv.in_channels, 9, 10).contiguous(memory_format=torch.channels_last)
    shape = F.conv2d(inputs[:, : conv.in_channels], conv.weight, None, conv.stride, conv.padding, conv.dilation).shape
    grads = torch.randn(width, models * conv.out_channels, *shape[2:]).contiguous(memory_format=torch.channels_last)
    # the definition: each (model, sample)'s own convolution, differentiated by autograd
    want = torch.stack(
        [
            torch.stack(
                [
                    torch.autograd.grad(
                        F.conv2d(
                            inputs[w : w + 1, m * conv.in_channels : (m + 1) * conv.in_channels],
                            weight := conv.weight.detach().requires_grad_(),
                            None,
                            conv.stride,
                            conv.padding,
                            conv.dilation,
                        ),
                        weight,
                        grads[w : w + 1, m * conv.out_channels : (m + 1) * conv.out_channels],
                    )[0]
                    for w in range(width)
                ]
            )
            for m in range(models)
        ]
    )
    spy = mock.Mock(wraps=layerwise._conv_weight_unfolded)
    monkeypatch.setattr(layerwise, "_conv_weight_unfolded", spy)
    got = layerwise._per_sample(conv, inputs, grads, models, factored=False)["weight"]
    assert spy.call_count == unfolded
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layerwise._conv_weight_unfolded(conv, inputs, grads, models), want, rtol=1e-5, atol=1e-5)


def test_the_unfolded_input_is_taken_on_a_cpu_where_it_is_no_larger_than_the_output_gradient_or_the_gradient():
    faster = layerwise._unfolding_is_faster
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    # (C_in·k_h·k_w, C_out, positions): the 32×32 CNN's first layer, D2P2-SGD's CNN's last (3×3) and third (7×7),
    # a 256-channel layer at 8×8, the 32×32 CNN's second layer
    assert faster(cpu, inner=27, outer=32, positions=1024)
    assert faster(cpu, inner=288, outer=64, positions=9)
    assert not faster(cpu, inner=288, outer=32, positions=49)
    assert faster(cpu, inner=2304, outer=256, positions=64)
    assert not faster(cpu, inner=288, outer=64, positions=256)
    assert not faster(cuda, inner=27, outer=32, positions=1024) and not faster(cuda, inner=288, outer=64, positions=9)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    "kernel_size, dilation, padding, stride",
    [((3, 3), (1, 1), (1, 1), (1, 1)), ((3, 5), (2, 1), (1, 2), (2, 1)), ((1, 1), (1, 1), (0, 0), (2, 2))],
)
def test_unfold_copies_exactly_the_patches_of_torchs_unfold(kernel_size, dilation, padding, stride, channels_last):
    torch.manual_seed(0)
    inputs = torch.randn(4, 5, 9, 11, dtype=torch.float64)
    if channels_last:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    got = unfold(inputs, kernel_size, dilation=dilation, padding=padding, stride=stride)
    assert torch.equal(got, F.unfold(inputs, kernel_size, dilation=dilation, padding=padding, stride=stride))
    # from the definition: entry (n, c·k_h·k_w + i·k_w + j, r·columns + q) is the zero-padded input at
    # (r·s_h + i·d_h − p_h, q·s_w + j·d_w − p_w)
    (k_h, k_w), (d_h, d_w), (p_h, p_w), (s_h, s_w) = kernel_size, dilation, padding, stride
    columns = (11 + 2 * p_w - d_w * (k_w - 1) - 1) // s_w + 1
    for n, c, i, j, r, q in [(0, 0, 0, 0, 0, 0), (3, 4, k_h - 1, k_w - 1, 1, columns - 1), (2, 1, k_h // 2, 0, 2, 1)]:
        y, x = r * s_h + i * d_h - p_h, q * s_w + j * d_w - p_w
        want = inputs[n, c, y, x] if 0 <= y < 9 and 0 <= x < 11 else 0.0
        assert got[n, c * k_h * k_w + i * k_w + j, r * columns + q] == want


def test_unsupported_models_are_named_and_fall_back_to_functorch():
    resnet = model_registry.build_model("resnet18-gn-cifar", input_shape=(3, 32, 32), num_classes=10)
    assert unsupported_reason(resnet) == "ResNet is not an nn.Sequential"
    assert "acts on images" in unsupported_reason(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(6, 2)))
    assert "groups" in unsupported_reason(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2), nn.Flatten()))
    assert "no layer-wise rule" in unsupported_reason(nn.Sequential(nn.Flatten(), nn.Dropout(), nn.Linear(4, 2)))
    frozen = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    frozen[1].bias.requires_grad_(False)
    assert unsupported_reason(frozen) == "it has frozen parameters"
    assert resolve_method(resnet, "auto") == "functorch"
    assert resolve_method(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), "auto") == "layers"
    with pytest.raises(DPAuditError, match="grad_sample 'layers' cannot take this model: ResNet"):
        resolve_method(resnet, "layers")
    ensemble = EnsembleGradients(
        [resnet], per_sample=True, example=torch.zeros(3, 32, 32), max_samples=4, memory_budget_mb=64
    )
    assert ensemble.method == "functorch"


def test_config_rejects_layers_for_a_model_it_cannot_take():
    with pytest.raises(DPAuditError, match="grad_sample 'layers' cannot take model 'resnet18-gn-cifar'") as info:
        TrainConfig.from_dict(
            dict(dataset="cifar10", model="resnet18-gn-cifar", grad_sample="layers", **PRIVATE)
        ).validated()
    assert "\n" not in str(info.value)
    assert TrainConfig.from_dict(dict(grad_sample="layers", **PRIVATE)).validated().engine.grad_sample == "layers"


def test_memory_estimate_counts_the_unfolded_patches():
    model = model_registry.build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10)
    example = torch.zeros(1, 8, 8)
    assert largest_unfolded_input(model, example) == 16 * 3 * 3 * 8 * 8  # second conv: C_in·k_h·k_w per position
    extra = bytes_per_model_sample(model, example=example, method="layers") - bytes_per_model_sample(
        model, example=example
    )
    assert extra == 4 * 16 * 3 * 3 * 8 * 8


@pytest.mark.parametrize("case", ["cnn-digits", "odd options"])
def test_factored_linear_gradients_give_the_norms_and_weighted_sums_of_vmap(case):
    build, shape, classes = CASES[case]
    torch.manual_seed(3)
    model, params = _stack(build)
    images, labels = torch.randn(MODELS, WIDTH, *shape), torch.randint(0, classes, (MODELS, WIDTH))
    want, _ = _vmapped_gradients(model)(params, images, labels)
    got, _ = LayerwiseGradients(model, factored=True)(params, images, labels)
    linear_weights = [
        i
        for i, (name, p) in enumerate(model.named_parameters())
        if isinstance(model.get_submodule(name.rsplit(".", 1)[0]), nn.Linear) and name.endswith("weight")
    ]
    assert linear_weights and all(isinstance(got[i], OuterProducts) for i in linear_weights)
    factors = [t for g in got for t in ((g.outer, g.inner) if isinstance(g, OuterProducts) else (g,))]
    assert not any(t.requires_grad for t in factors)  # a factor tied to the forward graph kept every step's graph alive
    weights = torch.rand(MODELS, WIDTH)
    for g, w, got_sum in zip(got, want, weighted_sample_sums(got, weights)):
        torch.testing.assert_close(dense(g), w, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(dense(g[1, :3]), w[1, :3], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(sample_norms(g), w.flatten(2).norm(dim=2), rtol=1e-4, atol=1e-6)
        weighted = (weights.reshape(MODELS, WIDTH, *[1] * (w.dim() - 2)) * w).sum(1)
        torch.testing.assert_close(got_sum, weighted, rtol=1e-4, atol=1e-6)


def test_memory_estimate_counts_factored_linear_weights_as_their_factors():
    model = model_registry.build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10)
    example = torch.zeros(1, 8, 8)
    saved = bytes_per_model_sample(model, example=example, method="layers") - bytes_per_model_sample(
        model, example=example, method="layers", factored=True
    )
    assert saved == 4 * 2 * (10 * 512 - (10 + 512))  # 2 copies of the gradient, 4 bytes per value


def test_masked_sample_norms_from_factors_known_answer():
    """g = (1, 2), a = (3, 4), mask = identity: the masked product is [[3, 0], [0, 8]], of norm √73; a dense
    tensor masked the same way gives the same norm; the second model's mask of ones gives ‖g‖·‖a‖ = √5·5."""
    from dpaudit.layerwise import OuterProducts, sample_norms

    outer = torch.tensor([[[1.0, 2.0]], [[1.0, 2.0]]])  # [M = 2, W = 1, O = 2]
    inner = torch.tensor([[[3.0, 4.0]], [[3.0, 4.0]]])  # [M, W, F = 2]
    mask = torch.stack([torch.eye(2), torch.ones(2, 2)])
    expected = torch.tensor([[73.0**0.5], [5.0**0.5 * 5.0]])
    torch.testing.assert_close(sample_norms(OuterProducts(outer, inner), mask), expected)
    torch.testing.assert_close(sample_norms(OuterProducts(outer, inner).dense(), mask), expected)


@pytest.mark.parametrize("length", [layerwise.NORM_BLOCK, 2_400_001])
def test_sample_norms_of_long_gradients_are_the_float64_norms_to_float32_precision(length):
    """One sample's gradient of a ResNet-18 layer holds 2.4·10⁶ values: clipped to C by torch's float32 vector_norm
    (10⁻⁵ to 10⁻⁴ off there), it would be C·(1 ± 10⁻⁴). Up to NORM_BLOCK values the norm is torch's vector_norm, bit
    for bit (the pipeline's models train as before)."""
    grads = torch.randn(1, 3, length, generator=torch.Generator().manual_seed(0)) * 1e-3
    norms = sample_norms(grads)
    exact = torch.linalg.vector_norm(grads.double(), dim=-1)
    assert ((norms.double() - exact) / exact).abs().max() < 1e-6
    if length <= layerwise.NORM_BLOCK:
        assert torch.equal(norms, torch.linalg.vector_norm(grads, dim=-1))
