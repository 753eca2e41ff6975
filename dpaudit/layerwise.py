"""Per-sample gradients of M stacked copies of an ``nn.Sequential``, layer by layer (``grad_sample: layers``).

The M models run as one network: their channels side by side (``[W, M·C, H, W']`` in channels-last memory;
convolutions as grouped convolutions with M groups) and their features as ``[W, M, F]`` (linear layers as
one batched matrix product), where W is the number of samples each model sees. One backward pass of the
summed losses gives every layer's output gradient per sample; each layer's per-sample parameter gradients
follow in closed form (as Opacus's grad samplers do):

- Linear: ∂ℓ_i/∂W = g_i a_iᵀ, ∂ℓ_i/∂b = g_i (with ``factored=True`` the weight's are kept as
  :class:`OuterProducts`, never built: their norms are ‖g_i‖·‖a_i‖ and a weighted sum over samples is one
  batched matrix product, the "ghost clipping" of Goodfellow 2015 and Li et al. 2022);
- Conv2d: ∂ℓ_i/∂W = the weight gradient of the sample's own convolution (one convolution backward with
  M·W groups, one per model and sample; on a CPU, where C_in·k_h·k_w ≤ C_out, g_i times the sample's unfolded
  input instead), ∂ℓ_i/∂b = Σ_positions g_i;
- GroupNorm: ∂ℓ_i/∂γ = Σ_positions g_i x̂_i, ∂ℓ_i/∂β = Σ_positions g_i, as (Σ g_i x_i − μ_i Σ g_i)/std_i from the
  sums Σ g_i x_i and Σ g_i that the layer's own backward pass takes (:class:`_StackedGroupNorm`), so x̂ is never
  stored; a GroupNorm directly followed by a MaxPool2d (after ReLU and max pool swap places) runs with the pool as one
  layer, which normalises only the positions the pool keeps.

This is the same gradient ``vmap(vmap(grad))`` computes (``tests/engine/test_layerwise.py`` compares them), in
less time on a CPU (``speedup_vs_ensemble_functorch`` in ``benchmarks/ensemble.py``): the forward and
backward passes run on the stacked layout once instead of per sample. Models of other kinds (ResNet) take
the vmap path, Opacus's hooks or the ghost method (``dpaudit.ghost``, whose convolution factors are
:class:`ConvFactors`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from dpaudit.models import leaf_outputs

ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Identity)
PER_CHANNEL_POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveMaxPool2d, nn.AdaptiveAvgPool2d)
#: torch's float32 ``vector_norm`` on a CPU sums a long vector with a rounding error that grows with its length (on
#: the millions of values of one sample's gradient of a ResNet-18 layer, far more than float32 rounding, so a gradient
#: clipped to C would exceed C by as much): :func:`row_norms` takes a longer vector's norm in blocks of this many
#: values, then the blocks' norms together, within about 10⁻⁶ at any length
NORM_BLOCK = 2**16


def unsupported_reason(model: nn.Module, *, image_input: bool = True) -> str | None:
    """Why ``model`` cannot take the layer-wise path, or None if it can.

    Supported: an ``nn.Sequential`` of Conv2d (groups 1, zero padding given as numbers), GroupNorm and
    per-channel pools on images; Flatten (from dimension 1); Linear on flat features; elementwise
    activations anywhere; every parameter trainable.
    """
    if not isinstance(model, nn.Sequential):
        return f"{type(model).__name__} is not an nn.Sequential"
    if not all(p.requires_grad for p in model.parameters()):
        return "it has frozen parameters"
    images = image_input
    for index, layer in enumerate(model):
        kind = type(layer).__name__
        if isinstance(layer, ELEMENTWISE):
            continue
        if isinstance(layer, nn.Flatten):
            if layer.start_dim != 1 or layer.end_dim != -1:
                return f"layer {index} flattens dimensions {layer.start_dim}..{layer.end_dim}, not 1..-1"
            images = False
        elif isinstance(layer, nn.Linear):
            if images:
                return f"layer {index} (Linear) acts on images, not on flattened features"
        elif isinstance(layer, (nn.Conv2d, nn.GroupNorm, *PER_CHANNEL_POOLS)):
            if not images:
                return f"layer {index} ({kind}) acts on flattened features"
            if isinstance(layer, nn.Conv2d) and (
                layer.groups != 1 or layer.padding_mode != "zeros" or isinstance(layer.padding, str)
            ):
                return f"layer {index} (Conv2d) has groups, non-zero padding mode or string padding"
        else:
            return f"layer {index} ({kind}) has no layer-wise rule"
    return None


def largest_unfolded_input(model: nn.Module, example: torch.Tensor) -> int:
    """Values in the largest unfolded convolution input of one sample (room for the patches a convolution
    backend may build for the per-sample weight gradient), 0 without convolutions."""
    return max(
        (
            conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1] * output.shape[-2] * output.shape[-1]
            for conv, output in leaf_outputs(model, example)
            if isinstance(conv, nn.Conv2d)
        ),
        default=0,
    )


#: An index of the leading (model, sample) dimensions of factored per-sample gradients (None: a new dimension).
Index = int | slice | torch.Tensor | None | tuple[int | slice | torch.Tensor | None, ...]


@dataclass(frozen=True)
class OuterProducts:
    """Per-sample gradients g_i a_iᵀ of a Linear weight as their factors: ``outer`` [..., O] (output
    gradients) and ``inner`` [..., F] (inputs); the [..., O, F] tensor is built only by :meth:`dense`.
    Indexing and ``index_select`` act on the leading (model, sample) dimensions."""

    outer: torch.Tensor
    inner: torch.Tensor

    def __getitem__(self, key: Index) -> OuterProducts:
        return OuterProducts(self.outer[key], self.inner[key])

    def index_select(self, dim: int, index: torch.Tensor) -> OuterProducts:
        return OuterProducts(self.outer.index_select(dim, index), self.inner.index_select(dim, index))

    def dense(self) -> torch.Tensor:
        """The [..., O, F] per-sample gradients."""
        return self.outer[..., :, None] * self.inner[..., None, :]


def unfold(
    inputs: torch.Tensor,
    kernel_size: tuple[int, int],
    *,
    dilation: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int],
) -> torch.Tensor:
    """``F.unfold`` of ``inputs`` [N, C, H, W'] (zero padding): each position's patch, [N, C·k_h·k_w, positions].

    On a CPU, the same values (only copied) as one strided copy of the padded input, which takes from as long as
    ``F.unfold`` (many channels on few positions) to a fifth of its time (few channels, as a first layer's, and
    channels-last inputs); on other devices ``F.unfold`` itself.
    """
    if inputs.device.type != "cpu":
        return F.unfold(inputs, kernel_size, dilation=dilation, padding=padding, stride=stride)
    (k_h, k_w), (d_h, d_w), (p_h, p_w), (s_h, s_w) = kernel_size, dilation, padding, stride
    samples, channels, height, width = inputs.shape
    padded = F.pad(inputs.contiguous(), (p_w, p_w, p_h, p_h)) if p_h or p_w else inputs.contiguous()
    rows, columns = (
        (height + 2 * p_h - d_h * (k_h - 1) - 1) // s_h + 1,
        (width + 2 * p_w - d_w * (k_w - 1) - 1) // s_w + 1,
    )
    per_sample, per_channel, per_row, per_column = padded.stride()
    windows = padded.as_strided(
        (samples, channels, k_h, k_w, rows, columns),
        (per_sample, per_channel, d_h * per_row, d_w * per_column, s_h * per_row, s_w * per_column),
    )
    return windows.reshape(samples, channels * k_h * k_w, rows * columns)


def _geometry(layer: nn.Conv2d) -> tuple[tuple[int, int], ...]:
    """(kernel size, stride, padding, dilation) of ``layer``, two numbers each (padding given as numbers:
    ``unsupported_reason``)."""
    return cast(tuple[tuple[int, int], ...], (layer.kernel_size, layer.stride, layer.padding, layer.dilation))


def _unfolding_is_faster(device: torch.device, *, inner: int, outer: int, positions: int) -> bool:
    """Whether a convolution's per-sample weight gradients are built faster as each sample's output gradient times its
    unfolded input than by a grouped convolution: on a CPU, where the unfolded input [``inner`` = C_in·k_h·k_w,
    ``positions`` P] is no larger than one of the two tensors the step handles anyway, the output gradient
    [``outer`` = C_out, P] (C_in·k_h·k_w ≤ C_out: a first layer on few channels) or the gradient it builds [C_out,
    C_in·k_h·k_w] (P ≤ C_out: a layer on a small image, such as D2P2-SGD's CNN's last, on 3×3, where the grouped
    convolution's one group per sample has little to do)."""
    return device.type == "cpu" and min(inner, positions) <= outer


@dataclass(frozen=True)
class ConvFactors:
    """Per-sample gradients of a Conv2d weight (groups 1, zero padding) as their factors: each sample's ``inputs``
    [..., C_in, H, W'] and ``output_grads`` [..., C_out, H_out, W_out]; the [..., *weight shape] tensor is built only by
    :meth:`dense`. Indexing and ``index_select`` act on the leading (model, sample) dimensions.

    With U_i a sample's unfolded input [D = C_in·k_h·k_w, P positions] and G_i its output gradient [C_out, P], the
    gradient is G_i U_iᵀ, whose squared norm is Σ (U_iᵀU_i) ∘ (G_iᵀG_i) (the "ghost norm" of Li et al. 2022, P²·(D +
    C_out) multiply-adds) or, built and discarded layer by layer, P·D·C_out; :meth:`norms` takes the cheaper (the
    mixed ghost norm of Bu et al. 2023). A weighted sum over samples is the weight gradient of one convolution whose
    output gradient is each sample's times its weight.
    """

    inputs: torch.Tensor
    output_grads: torch.Tensor
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]

    @classmethod
    def of(cls, layer: nn.Conv2d, inputs: torch.Tensor, output_grads: torch.Tensor) -> ConvFactors:
        """The factors of ``layer`` (groups 1, zero padding given as numbers) from its inputs and output gradients."""
        return cls(inputs, output_grads, *_geometry(layer))

    def __getitem__(self, key: Index) -> ConvFactors:
        return dataclasses.replace(self, inputs=self.inputs[key], output_grads=self.output_grads[key])

    def index_select(self, dim: int, index: torch.Tensor) -> ConvFactors:
        return dataclasses.replace(
            self, inputs=self.inputs.index_select(dim, index), output_grads=self.output_grads.index_select(dim, index)
        )

    def _unfolded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(U [N, D, P], G [N, C_out, P]) over the N leading (model, sample) pairs."""
        patches = unfold(
            self.inputs.reshape(-1, *self.inputs.shape[-3:]),
            self.kernel_size,
            dilation=self.dilation,
            padding=self.padding,
            stride=self.stride,
        )
        return patches, self.output_grads.reshape(-1, self.output_grads.shape[-3], patches.shape[-1])

    def _built(self) -> torch.Tensor:
        """Each sample's gradient [N, C_out, C_in, k_h, k_w] over the N leading (model, sample) pairs: on a CPU where
        the unfolded input is no larger than the output gradient or the gradient built (:func:`_unfolding_is_faster`),
        the output gradient times the unfolded input; else the weight gradient of one convolution with N groups, one
        per sample (on a CPU faster than unfolding ResNet-18's 64- and 128-channel inputs at 32×32 and 16×16; on a GPU
        one kernel)."""
        inputs = self.inputs.reshape(-1, *self.inputs.shape[-3:])
        grads = self.output_grads.reshape(-1, *self.output_grads.shape[-3:])
        (samples, channels), outer = inputs.shape[:2], grads.shape[1]
        shape = (samples, outer, channels, *self.kernel_size)
        inner, positions = channels * self.kernel_size[0] * self.kernel_size[1], grads.shape[-2] * grads.shape[-1]
        if _unfolding_is_faster(inputs.device, inner=inner, outer=outer, positions=positions):
            patches, flat = self._unfolded()
            return torch.bmm(flat, patches.transpose(1, 2)).view(shape)
        return self._weight_gradient(
            inputs.reshape(1, -1, *inputs.shape[-2:]), grads.reshape(1, -1, *grads.shape[-2:]), groups=samples
        ).view(shape)

    def _weight_gradient(self, inputs: torch.Tensor, output_grads: torch.Tensor, *, groups: int) -> torch.Tensor:
        """The weight gradient [C_out, C_in / groups, k_h, k_w] of one convolution of this geometry with ``groups``
        groups, from its ``inputs`` [B, C_in, H, W'] and ``output_grads`` [B, C_out, H_out, W_out]."""
        weight = inputs.new_empty(output_grads.shape[1], inputs.shape[1] // groups, *self.kernel_size)
        _, grad, _ = torch.ops.aten.convolution_backward(
            output_grads,
            inputs,
            weight,
            None,
            self.stride,
            self.padding,
            self.dilation,
            False,
            [0, 0],
            groups,
            [False, True, False],
        )
        return grad

    def dense(self) -> torch.Tensor:
        """The [..., C_out, C_in, k_h, k_w] per-sample gradients."""
        built = self._built()
        return built.view(*self.inputs.shape[:-3], *built.shape[1:])

    def norms(self) -> torch.Tensor:
        """ℓ2 norm of each sample's gradient, [...] (the leading dimensions), by whichever way costs fewer
        multiply-adds."""
        (inner, *_), outer = self.inputs.shape[-3:], self.output_grads.shape[-3]
        inner *= self.kernel_size[0] * self.kernel_size[1]
        positions = self.output_grads.shape[-2] * self.output_grads.shape[-1]
        if positions * (inner + outer) < inner * outer:  # the ghost norm
            patches, grads = self._unfolded()
            gram = torch.bmm(patches.transpose(1, 2), patches)
            squares = (gram * torch.bmm(grads.transpose(1, 2), grads)).sum((1, 2)).clamp_min(0.0)
        else:
            squares = self._built().flatten(1).square().sum(1)
        return squares.sqrt().view(self.inputs.shape[:-3])

    def weighted_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Σ_i weights[m, i]·grad[m, i] per model, [M, *weight shape], from [M, W] weights (leading dimensions
        [M, W])."""
        return torch.stack(
            [
                self._weight_gradient(inputs, grads * row.view(-1, 1, 1, 1), groups=1)
                for inputs, grads, row in zip(self.inputs, self.output_grads, weights)
            ]
        )


#: Per-sample gradients of each parameter: a tensor, or a Linear weight's factors (``factored``), or a convolution
#: weight's (``grad_sample: ghost``, ``dpaudit.ghost``).
Gradient = torch.Tensor | OuterProducts | ConvFactors


def dense(grad: Gradient) -> torch.Tensor:
    """Per-sample gradients as a tensor, whichever form they come in."""
    return grad.dense() if isinstance(grad, (OuterProducts, ConvFactors)) else grad


def sample_norms(grad: Gradient, mask: torch.Tensor | None = None) -> torch.Tensor:
    """ℓ2 norm of each (model, sample)'s gradient: [M, W] from [M, W, *shape], OuterProducts or ConvFactors; with
    ``mask`` ([M, *shape], 0/1 per model), of the gradient times the mask. A Linear weight's masked norm is taken from
    its factors, Σ_o g_o² Σ_f a_f² mask_of, without building the [M, W, O, F] products; a convolution's masked
    gradients are built."""
    if isinstance(grad, ConvFactors):
        if mask is None:
            return grad.norms()
        grad = grad.dense()
    if isinstance(grad, OuterProducts):
        if mask is None:
            return torch.linalg.vector_norm(grad.outer, dim=-1) * torch.linalg.vector_norm(grad.inner, dim=-1)
        squares = torch.matmul(grad.inner.square(), mask.transpose(-1, -2))  # [M, W, O]: Σ_f a_f² mask_of
        return (squares * grad.outer.square()).sum(-1).sqrt()
    if mask is not None:
        grad = grad * mask.unsqueeze(1)
    return row_norms(grad.flatten(2))


def row_norms(values: torch.Tensor) -> torch.Tensor:
    """ℓ2 norm over the last dimension of ``values``: ``torch.linalg.vector_norm(values, dim=-1)`` up to
    :data:`NORM_BLOCK` values, in blocks of that many beyond (the same norm, without the float32 error that grows with
    the length)."""
    length = values.shape[-1]
    if length <= NORM_BLOCK:
        return torch.linalg.vector_norm(values, dim=-1)
    whole = length - length % NORM_BLOCK
    blocks = [torch.linalg.vector_norm(values[..., :whole].unflatten(-1, (-1, NORM_BLOCK)), dim=-1)]
    if whole < length:
        blocks.append(torch.linalg.vector_norm(values[..., whole:], dim=-1, keepdim=True))
    return torch.linalg.vector_norm(torch.cat(blocks, -1), dim=-1)


def weighted_sample_sums(grads: Sequence[Gradient], weights: torch.Tensor) -> list[torch.Tensor]:
    """Σ_i weights[m, i]·grad[m, i] per model and gradient: [M, *shape] each, from weights [M, W]."""
    # bmm directly: einsum's planning costs about ten dispatched operations per call on the host
    models, width = weights.shape
    row, column = weights.unsqueeze(1), weights.unsqueeze(2)
    return [
        torch.bmm((grad.outer * column).transpose(1, 2), grad.inner)
        if isinstance(grad, OuterProducts)
        else grad.weighted_sums(weights)
        if isinstance(grad, ConvFactors)
        else torch.bmm(row, grad.reshape(models, width, -1)).view(models, *grad.shape[2:])
        for grad in grads
    ]


class GradientFunction(Protocol):
    """``f(params, images, labels[, weights]) -> (grads, losses)``: the call of :class:`LayerwiseGradients` (and of
    ``dpaudit.ensemble``'s torch.func path), every argument with the model axis first."""

    def __call__(
        self,
        params: Sequence[torch.Tensor],
        images: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor | None = None,
    ) -> tuple[list[Gradient], torch.Tensor]: ...


class LayerwiseGradients:
    """Cross-entropy gradients of M stacked copies of ``model`` (an ``nn.Sequential`` that ``unsupported_reason``
    accepts), per sample or of a weighted batch sum.

    Call with ``params`` (per trainable parameter, in ``model.named_parameters()`` order, [M, *shape]; leaves
    that require grad are used as they are, anything else is detached first),
    ``images`` [M, W, *sample shape] and ``labels`` [M, W]; with ``weights`` [M, W] it returns the gradient
    of Σ_i weights·loss_i per model ([M, *shape]), without it the per-sample gradients ([M, W, *shape]).
    Either way also the losses [M, W]. Rows of padding just get gradients the caller ignores. With
    ``factored``, per-sample Linear weight gradients come as :class:`OuterProducts`.
    """

    def __init__(self, model: nn.Module, *, factored: bool = False) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"no layer-wise gradients for this model: {reason}")
        assert isinstance(model, nn.Sequential)  # unsupported_reason refuses anything else
        names = [name for name, _ in model.named_parameters()]
        self.factored = factored
        slots = [
            {
                attr: names.index(f"{index}.{attr}")
                for attr in ("weight", "bias")
                if isinstance(getattr(layer, attr, None), nn.Parameter)
            }
            for index, layer in enumerate(model)
        ]
        layers, layer_slots = zip(*_norm_then_pool(_pool_before_relu(zip(model, slots))))
        self.layers: list[nn.Module] = list(layers)
        self.slots: list[dict[str, int]] = list(layer_slots)

    @torch.enable_grad()
    def __call__(
        self,
        params: Sequence[torch.Tensor],
        images: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor | None = None,
    ) -> tuple[list[Gradient], torch.Tensor]:
        models, width = labels.shape
        params = [p if p.is_leaf and p.requires_grad else p.detach().requires_grad_() for p in params]
        if images.dim() == 5:
            h = images.transpose(0, 1).reshape(width, models * images.shape[2], *images.shape[3:])
            h = h.contiguous(memory_format=torch.channels_last)
        else:
            h = images.transpose(0, 1)
        # (layer, its parameter slots, what its gradient needs from the forward pass, its output)
        recorded: list[tuple[nn.Module, dict[str, int], torch.Tensor | _GroupNormSums, torch.Tensor]] = []
        for layer, slots in zip(self.layers, self.slots):
            weight, bias = (params[slots[attr]] if attr in slots else None for attr in ("weight", "bias"))
            h, needed = _forward(layer, h, weight, bias, models)
            if slots:
                assert needed is not None  # a layer with parameters keeps its input (or a GroupNorm's statistics)
                recorded.append((layer, slots, needed, h))
        losses = (
            F.cross_entropy(h.reshape(width * models, -1), labels.transpose(0, 1).reshape(-1), reduction="none")
            .reshape(width, models)
            .transpose(0, 1)
        )
        if weights is not None:
            return list(torch.autograd.grad((losses * weights).sum(), params)), losses.detach()
        output_grads = torch.autograd.grad(losses.sum(), [output for *_, output in recorded])
        grads: list[Gradient | None] = [None] * len(params)
        with torch.no_grad():
            for (layer, slots, needed, _), g in zip(recorded, output_grads):
                # detached: a returned view of a recorded activation would keep this step's graph alive
                values = _per_sample(layer, needed.detach(), g, models, factored=self.factored)
                for attr, slot in slots.items():
                    grads[slot] = values[attr]
        # every parameter is in a layer with a rule (unsupported_reason refuses frozen ones): no slot is left None
        return cast(list[Gradient], grads), losses.detach()


def _pool_before_relu(layers: Iterable[tuple[nn.Module, dict[str, int]]]) -> list[tuple[nn.Module, dict[str, int]]]:
    """(layer, parameter slots) pairs, every ReLU directly followed by a MaxPool2d swapped with it:
    relu(maxpool(x)) equals maxpool(relu(x)) and routes the same gradient (to the window's maximum if it is
    positive, else nowhere), with the ReLU and its backward on the pooled, smaller tensor."""
    layers = list(layers)
    for index in range(len(layers) - 1):
        if type(layers[index][0]) is nn.ReLU and type(layers[index + 1][0]) is nn.MaxPool2d:
            layers[index], layers[index + 1] = layers[index + 1], layers[index]
    return layers


class _GroupNormPool(nn.Module):
    """An affine GroupNorm directly followed by a MaxPool2d, run as one layer (:class:`_StackedGroupNorm` with
    ``pool``): the normalised activation is built only at the positions the pool keeps."""

    def __init__(self, norm: nn.GroupNorm, pool: nn.MaxPool2d) -> None:
        super().__init__()
        self.norm, self.pool = norm, pool


def _norm_then_pool(layers: Iterable[tuple[nn.Module, dict[str, int]]]) -> list[tuple[nn.Module, dict[str, int]]]:
    """(layer, parameter slots) pairs, every affine GroupNorm directly followed by a MaxPool2d merged with it into one
    :class:`_GroupNormPool` (with the GroupNorm's slots)."""
    merged: list[tuple[nn.Module, dict[str, int]]] = []
    for layer, slots in layers:
        if isinstance(layer, nn.MaxPool2d) and merged:
            norm, norm_slots = merged[-1]
            if isinstance(norm, nn.GroupNorm) and norm.affine:
                merged[-1] = _GroupNormPool(norm, layer), norm_slots
                continue
        merged.append((layer, slots))
    return merged


def _forward(
    layer: nn.Module, h: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, models: int
) -> tuple[torch.Tensor, torch.Tensor | _GroupNormSums | None]:
    """Layer output on the stacked layout, and what its per-sample gradient needs (None without parameters)."""
    if isinstance(layer, nn.Conv2d):
        assert weight is not None  # a Conv2d always has a weight
        out = F.conv2d(
            h,
            weight.reshape(-1, *weight.shape[2:]).contiguous(memory_format=torch.channels_last),
            None if bias is None else bias.reshape(-1),
            layer.stride,
            layer.padding,
            layer.dilation,
            groups=models,
        )
        return out, h
    if isinstance(layer, nn.Linear):
        assert weight is not None  # a Linear always has a weight
        out = torch.bmm(h.transpose(0, 1), weight.transpose(1, 2)).transpose(0, 1)  # [W, M, O]
        return (out if bias is None else out + bias), h
    if isinstance(layer, (nn.GroupNorm, _GroupNormPool)):
        norm, pool = (layer.norm, layer.pool) if isinstance(layer, _GroupNormPool) else (layer, None)
        if weight is None:  # not affine: no parameters, and never merged with a pool (_norm_then_pool)
            return F.group_norm(h, models * norm.num_groups, eps=norm.eps), None
        assert bias is not None  # an affine GroupNorm has both
        kept = _GroupNormSums()
        return _StackedGroupNorm.apply(
            h, weight.reshape(-1), bias.reshape(-1), models * norm.num_groups, norm.eps, kept, pool
        ), kept
    if isinstance(layer, nn.Flatten):
        return (_FlattenChannelsLast.apply(h, models) if h.dim() == 4 else h), None
    return layer(h), None


class _GroupNormSums:
    """What an affine GroupNorm's per-sample gradients need, kept by :class:`_StackedGroupNorm`: its ``input``
    [W, M·C, H, W'] (with a pool: at the positions the pool keeps) and each (sample, group)'s ``mean`` and ``rstd``
    (1/std) [W, M·G] from the forward pass, and, once the backward pass has run, each (sample, channel)'s
    Σ_positions g·x and Σ_positions g [W, M·C] (``sums``)."""

    def __init__(self) -> None:
        self.input = self.mean = self.rstd = torch.empty(0)
        self.sums: tuple[torch.Tensor, torch.Tensor] | None = None

    def detach(self) -> _GroupNormSums:
        return self  # holds no graph: its tensors come from inside the autograd function

    def per_channel(self, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Σ g x̂, Σ g) per (sample, channel), from the backward pass's sums (or from the layer's output gradient
        ``g`` where it did not run): Σ g x̂ = (Σ g x − μ Σ g)/std."""
        gx, summed = self.sums if self.sums is not None else ((g * self.input).sum((-2, -1)), g.sum((-2, -1)))
        per_group = self.input.shape[1] // self.mean.shape[1]
        return (gx - _by_channel(self.mean, per_group) * summed) * _by_channel(self.rstd, per_group), summed


def _by_channel(per_group: torch.Tensor, channels_per_group: int) -> torch.Tensor:
    """[W, M·G] values of each (sample, group) → [W, M·C], each group's value on each of its channels."""
    return per_group.repeat_interleave(channels_per_group, dim=1)


def _pool_arguments(pool: nn.MaxPool2d) -> tuple[list[int], ...]:
    """(kernel size, stride, padding, dilation) of ``pool``, each as two numbers."""
    return tuple(
        [value, value] if isinstance(value, int) else list(value)
        for value in (pool.kernel_size, pool.stride, pool.padding, pool.dilation)
    )


def _group_statistics(h: torch.Tensor, groups: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd = 1/√(var + eps)) of each (sample, group) of ``h`` [W, C, H, W'] (C = groups·D channels), [W,
    groups] each: each channel's mean, then the sum of its squared deviations from it (two passes, not Σx² − (Σx)²/P,
    as torch's channels-last GroupNorm kernel on a CPU computes it, whose rounding error grows as (μ/σ)²), the channels
    of a group combined exactly (Chan et al.'s pairwise update)."""
    samples, channels = h.shape[:2]
    positions, per_group = h[0, 0].numel(), channels // groups
    values = h.permute(0, 2, 3, 1).reshape(samples, positions, channels)  # a view of a channels-last h
    means = values.sum(1, keepdim=True) / positions
    deviations = values - means
    squares = deviations.square_().sum(1).view(samples, groups, per_group)
    means = means.view(samples, groups, per_group)
    mean = means.mean(-1)
    if per_group > 1:
        squares = squares.sum(-1) + positions * (means - mean.unsqueeze(-1)).square().sum(-1)
    else:
        squares = squares.squeeze(-1)
    return mean, torch.rsqrt(squares / (positions * per_group) + eps)


class _StackedGroupNorm(torch.autograd.Function):
    """GroupNorm with its affine transform, on the stacked layout: the statistics in two passes
    (:func:`_group_statistics`), the affine map in one, the backward pass from each (sample, channel)'s Σ g·x and Σ g,
    which it keeps for the per-sample gradients (:class:`_GroupNormSums`): two reductions and one elementwise pass,
    where PyTorch's CPU kernel takes several times as long on a channels-last activation.

    With x̂ = (x − μ)·rstd per (sample, group) of D channels and P positions, s = 1/(D·P), and per group
    a = Σ_c γ_c Σ g·x, b = Σ_c γ_c Σ g: ∂ℓ/∂x = γ·rstd·g + B·x + (−B·μ − b·rstd·s), B = (b·μ − a)·rstd³·s (the
    derivative of the normalisation, as ``native_group_norm_backward`` computes it).

    With a ``pool`` (a MaxPool2d after the GroupNorm), the output is the pooled normalised activation, built only at
    the positions the pool keeps: per (sample, channel) the affine map γ·x̂ + β = γ·rstd·x + (β − γ·rstd·μ) is
    increasing in x where γ > 0 (decreasing where γ < 0, constant where γ = 0), so the pool takes the maximum of x
    (of −x; the window's first position), and g is non-zero only there: Σ g·x and Σ g are sums over the pooled
    positions, and the pool's backward pass spreads γ·rstd·g. The full normalised activation is never written, nor its
    gradient read back in three passes.
    """

    @staticmethod
    def forward(
        ctx: Any,
        h: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        groups: int,
        eps: float,
        kept: _GroupNormSums,
        pool: nn.MaxPool2d | None = None,
    ) -> torch.Tensor:
        samples, channels = h.shape[:2]
        mean, rstd = _group_statistics(h, groups, eps)
        per_group, shape = channels // groups, (samples, channels, 1, 1)
        scale = _by_channel(rstd, per_group) * weight
        shift = (bias - _by_channel(mean, per_group) * scale).view(shape)
        if pool is None:
            out = torch.addcmul(shift, h, scale.view(shape))
            ctx.save_for_backward(h, weight, mean, rstd)
            kept.input = h.detach()
        else:
            # read on a CPU only (on a GPU it would wait for the device): elsewhere the pool takes sign(γ)·x
            increasing = h.device.type == "cpu" and bool((weight > 0).all())
            ordered = h if increasing else h * weight.sign().view(1, -1, 1, 1)
            pooled, indices = torch.ops.aten.max_pool2d_with_indices(ordered, *_pool_arguments(pool), pool.ceil_mode)
            if not increasing:  # the input's own values at the kept positions
                pooled = h.flatten(2).gather(2, indices.flatten(2)).view_as(indices)
            out = torch.addcmul(shift, pooled, scale.view(shape))
            ctx.save_for_backward(h, weight, mean, rstd, indices)
            kept.input = pooled.detach()
        ctx.kept, ctx.pool = kept, pool
        kept.mean, kept.rstd = mean, rstd
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        h, weight, mean, rstd, *indices = ctx.saved_tensors
        samples, channels = h.shape[:2]
        groups = mean.shape[1]
        per_group = channels // groups
        gx, summed = (grad * ctx.kept.input).sum((-2, -1)), grad.sum((-2, -1))  # [W, M·C]
        ctx.kept.sums = gx, summed
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            a, b = ((values * weight).view(samples, groups, per_group).sum(-1) for values in (gx, summed))
            s = 1.0 / (per_group * h[0, 0].numel())
            scale_x = (b * mean - a) * rstd.pow(3) * s
            shift = _by_channel(-scale_x * mean - b * rstd * s, per_group).view(samples, channels, 1, 1)
            scale_g = (weight.view(1, groups, per_group) * rstd.unsqueeze(-1)).reshape(samples, channels, 1, 1)
            scale_x = _by_channel(scale_x, per_group).view(samples, channels, 1, 1)
            if ctx.pool is None:
                grad_input = torch.addcmul(shift, h, scale_x)
                grad_input.addcmul_(grad, scale_g)
            else:
                grad_input = torch.ops.aten.max_pool2d_with_indices_backward(
                    grad * scale_g, h, *_pool_arguments(ctx.pool), ctx.pool.ceil_mode, indices[0]
                )
                grad_input.addcmul_(h, scale_x).add_(shift)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            normalised, _ = ctx.kept.per_channel(grad)
            grad_weight, grad_bias = normalised.sum(0), summed.sum(0)
        return grad_input, grad_weight, grad_bias, None, None, None, None


class _FlattenChannelsLast(torch.autograd.Function):
    """[W, M·C, H, W'] (channels last) → [W, M, C·H·W'] in the model's (C, H, W') order, whose backward
    hands on a channels-last gradient: pooling backward runs ~4× slower on a channels-first one."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, models: int) -> torch.Tensor:
        ctx.shape = h.shape
        return h.reshape(h.shape[0], models, -1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.reshape(ctx.shape).contiguous(memory_format=torch.channels_last), None


def _per_sample(
    layer: nn.Module, needed: torch.Tensor | _GroupNormSums, g: torch.Tensor, models: int, *, factored: bool
) -> dict[str, Gradient]:
    """Per-sample gradients [M, W, *shape] of ``layer``'s parameters from its output gradient ``g``."""
    if isinstance(needed, _GroupNormSums):  # an affine GroupNorm
        scale, shift = needed.per_channel(g)
        return {"weight": _model_first(scale, models), "bias": _model_first(shift, models)}
    if isinstance(layer, nn.Linear):
        weight = OuterProducts(g.transpose(0, 1), needed.transpose(0, 1))
        return {"weight": weight if factored else weight.dense(), "bias": weight.outer}
    conv = cast(nn.Conv2d, layer)  # the only other layer with parameters (unsupported_reason)
    bias = _model_first(g.sum((-2, -1)), models)
    inner, positions = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1], g.shape[-2] * g.shape[-1]
    if _unfolding_is_faster(g.device, inner=inner, outer=conv.out_channels, positions=positions):
        return {"weight": _conv_weight_unfolded(conv, needed, g, models), "bias": bias}
    return {"weight": ConvFactors.of(conv, _model_major(needed, models), _model_major(g, models)).dense(), "bias": bias}


def _model_first(per_channel: torch.Tensor, models: int) -> torch.Tensor:
    """[W, M·C] → [M, W, C] (a view)."""
    return per_channel.unflatten(1, (models, -1)).transpose(0, 1)


def _model_major(h: torch.Tensor, models: int) -> torch.Tensor:
    """[W, M·C, H, W'] → [M, W, C, H, W'], contiguous (one copy)."""
    return h.unflatten(1, (models, -1)).transpose(0, 1).contiguous()


def _conv_weight_unfolded(
    layer: nn.Conv2d, inputs: torch.Tensor, output_grads: torch.Tensor, models: int
) -> torch.Tensor:
    """∂ℓ_i/∂W [M, W, *weight shape] from the stacked ``inputs`` [W, M·C_in, H, W'] and ``output_grads``
    [W, M·C_out, H_out, W_out] as they are: each (model, sample)'s output gradient [C_out, positions] times its
    unfolded input [positions, C_in·k_h·k_w], one batched product per model. On a CPU, for a layer whose unfolded input
    is no larger than its output gradient (C_in·k_h·k_w ≤ C_out: a first layer on few channels) or than the gradient
    (positions ≤ C_out: a layer on a small image), this takes half the time of the grouped convolution of
    :meth:`ConvFactors.dense` or less, which needs both in a model-major copy and runs slowly on few input channels or
    few positions (on a GPU the grouped convolution is one kernel where this launches one per model)."""
    width, (kernel_size, stride, padding, dilation) = inputs.shape[0], _geometry(layer)
    patches = unfold(inputs, kernel_size, dilation=dilation, padding=padding, stride=stride)
    patches = patches.unflatten(1, (models, -1))  # [W, M, C_in·k_h·k_w, positions]
    grads = output_grads.flatten(2).unflatten(1, (models, -1))  # [W, M, C_out, positions], a view
    out = inputs.new_empty(models, width, layer.out_channels, patches.shape[2])
    for m in range(models):
        torch.bmm(grads[:, m], patches[:, m].transpose(1, 2), out=out[m])
    return out.view(models, width, *layer.weight.shape)
