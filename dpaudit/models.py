"""Model registry: small CNN/MLP models for digits and 28×28 / 32×32 images, and ResNet-18 (GroupNorm).

Every model avoids BatchNorm (incompatible with per-sample gradients) so that it passes Opacus's
module validation. Build one with ``build_model(name, input_shape=..., num_classes=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from dpaudit._device import seed_global_rng
from dpaudit._registry import Registry
from dpaudit._validation import DPAuditError, check_positive_int


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its builder and the input sizes it is meant for."""

    name: str
    builder: Callable[..., nn.Module]
    description: str
    image_sizes: tuple[int, ...] | None = None  # None: any size


_REGISTRY: Registry[ModelSpec] = Registry("model")
_Builder = TypeVar("_Builder", bound=Callable[..., nn.Module])


def register_model(
    name: str, *, description: str, image_sizes: tuple[int, ...] | None = None
) -> Callable[[_Builder], _Builder]:
    """Decorator adding a builder ``f(*, input_shape, num_classes) -> nn.Module`` to the registry."""

    def decorator(builder: _Builder) -> _Builder:
        _REGISTRY.add(name, ModelSpec(name, builder, description, image_sizes))
        return builder

    return decorator


def available() -> list[str]:
    """Names of the registered models."""
    return _REGISTRY.names()


def get_spec(name: str) -> ModelSpec:
    """The registered model ``name`` (a one-line error naming the choices if there is none)."""
    return _REGISTRY.get(name)


def check_model_input(name: str, *, input_shape: Sequence[int], num_classes: int) -> None:
    """Raise a one-line ``DPAuditError`` if ``name`` cannot take ``input_shape`` images."""
    spec = get_spec(name)
    if len(input_shape) != 3:
        raise DPAuditError(f"input_shape must be (channels, height, width), got {input_shape}")
    for dim in input_shape:
        check_positive_int("input_shape entries", dim)
    check_positive_int("num_classes", num_classes)
    if num_classes < 2:
        raise DPAuditError(f"num_classes must be ≥ 2, got {num_classes}")
    _, height, width = input_shape
    if spec.image_sizes is not None and (height != width or height not in spec.image_sizes):
        sizes = ", ".join(f"{s}×{s}" for s in spec.image_sizes)
        raise DPAuditError(f"model {name!r} takes {sizes} images, got {height}×{width}")


def build_model(
    name: str, *, input_shape: tuple[int, int, int], num_classes: int, seed: int | None = None
) -> nn.Module:
    """Build a registered model.

    Args:
        name: a name from ``available()``.
        input_shape: (channels, height, width) of the input images.
        num_classes: number of output logits.
        seed: if given, the parameter initialisation is drawn from this seed (data-independent).

    Returns:
        The model, in train mode, with float32 parameters.
    """
    check_model_input(name, input_shape=tuple(input_shape), num_classes=num_classes)
    if seed is None:
        return get_spec(name).builder(input_shape=tuple(input_shape), num_classes=num_classes)
    with torch.random.fork_rng(devices=[]):
        seed_global_rng(seed)
        return get_spec(name).builder(input_shape=tuple(input_shape), num_classes=num_classes)


def _group_norm(channels: int) -> nn.GroupNorm:
    # What opacus.validators.ModuleValidator.fix puts in place of BatchNorm2d.
    return nn.GroupNorm(min(32, channels), channels, affine=True)


def _conv_blocks(channels: int, widths: Sequence[int]) -> list[nn.Module]:
    """3×3 convolution (padding 1), GroupNorm, ReLU and 2×2 max-pool per width: the papers' CNN blocks."""
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), _group_norm(width), nn.ReLU(), nn.MaxPool2d(2)]
        channels = width
    return layers


@register_model("linear", description="softmax regression (flattened input → classes): one layer")
def _linear(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Sequential:
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, num_classes))


@register_model("mlp", description="two-layer perceptron (flattened input → 128 → classes)")
def _mlp(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Sequential:
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(channels * height * width, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


@register_model("cnn-digits", description="small CNN for 8×8 digits: 2 conv layers + linear", image_sizes=(8,))
def _cnn_digits(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Sequential:
    channels = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, num_classes),
    )


@register_model(
    "cnn",
    description="CNN for 28×28 and 32×32 images: 2 conv+pool blocks (GroupNorm), linear 128, linear",
    image_sizes=(28, 32),
)
def _cnn(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Sequential:
    channels, height, _ = input_shape
    spatial = height // 4
    return nn.Sequential(
        *_conv_blocks(channels, (32, 64)),
        nn.Flatten(),
        nn.Linear(64 * spatial * spatial, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


@register_model(
    "cnn-small",
    description="small CNN for 28×28 and 32×32 images: 2 conv+pool blocks (16, 32 channels; GroupNorm), max-pool, "
    "linear; no tensor above 5,120 entries, so that D2P2-SGD's d × p Gaussian projections fit in memory",
    image_sizes=(28, 32),
)
def _cnn_small(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Sequential:
    channels, height, _ = input_shape
    spatial = height // 8
    return nn.Sequential(
        *_conv_blocks(channels, (16, 32)),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * spatial * spatial, num_classes),
    )


@register_model(
    "cnn-d2p2",
    description="D2P2-SGD's 4-layer CNN (its Table 5): 3×3 convolutions of 16, 32, 32, 64 channels with ReLU, 2×2 "
    "average pools and a global average pool, linear 64 → classes (33,194 weights on one channel)",
    image_sizes=(28, 32),
)
def _cnn_d2p2(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    channels = input_shape[0]
    for width in (16, 32, 32):
        layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.ReLU(), nn.AvgPool2d(2)]
        channels = width
    return nn.Sequential(
        *layers,
        nn.Conv2d(channels, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


@register_model(
    "resnet18-gn",
    description="torchvision ResNet-18 (ImageNet stem, as the DPSGD-GC/DC authors' code) with GroupNorm(min(32, c), c)",
)
def _resnet18_gn(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return _resnet18(input_shape=input_shape, num_classes=num_classes, cifar_stem=False)


@register_model(
    "resnet18-gn-cifar",
    description="ResNet-18 with GroupNorm and the CIFAR stem (3×3 conv, no max-pool)",
)
def _resnet18_gn_cifar(*, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return _resnet18(input_shape=input_shape, num_classes=num_classes, cifar_stem=True)


def _resnet18(*, input_shape: tuple[int, int, int], num_classes: int, cifar_stem: bool) -> nn.Module:
    from dpaudit._resnet import resnet18

    model = resnet18(num_classes=num_classes, norm_layer=_group_norm)
    channels = input_shape[0]
    if cifar_stem:
        model.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif channels != 3:
        model.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters training updates (``requires_grad``), in ``model.parameters()`` order."""
    return [p for p in model.parameters() if p.requires_grad]


def functional_losses(model: nn.Module) -> Callable[[Sequence[torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]:
    """``losses(param_values, images, labels)``: per-record cross-entropy of ``model`` evaluated at
    ``param_values`` (its trainable parameters, in ``trainable_parameters`` order) with its own buffers —
    the pure function ``torch.func`` differentiates and vmaps over samples and models."""
    import torch.nn.functional as F
    from torch.func import functional_call

    names = [name for name, p in model.named_parameters() if p.requires_grad]
    buffers = dict(model.named_buffers())

    def losses(param_values: Sequence[torch.Tensor], images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, ({**dict(zip(names, param_values)), **buffers},), (images,))
        return F.cross_entropy(logits, labels, reduction="none")

    return losses


def leaf_outputs(model: nn.Module, example: torch.Tensor) -> list[tuple[nn.Module, torch.Tensor]]:
    """(module, output) of every leaf module in a no-grad forward pass of one sample ``example``."""
    outputs: list[tuple[nn.Module, torch.Tensor]] = []
    leaves = [m for m in model.modules() if not list(m.children())]
    hooks = [m.register_forward_hook(lambda module, _inputs, output: outputs.append((module, output))) for m in leaves]
    try:
        with torch.no_grad():
            model(example[None])
    finally:
        for hook in hooks:
            hook.remove()
    return outputs


def parameter_count(model: nn.Module) -> int:
    """Number of trainable parameters d."""
    return sum(p.numel() for p in trainable_parameters(model))
