"""Per-sample gradients of any model built on Conv2d, Linear and GroupNorm layers, kept as factors
(``grad_sample: ghost``).

Forward hooks on the layers that hold the trainable parameters keep each layer's input and output; one backward
pass of the summed losses, to those outputs only (no parameter's batch gradient is computed), gives each layer's
output gradient per sample. The per-sample parameter gradients are then kept as their factors, in closed form as
``dpaudit.layerwise`` has them for sequential models, whatever the model's graph (residual blocks included):

- Conv2d weight: :class:`~dpaudit.layerwise.ConvFactors` (input and output gradient): its norms by the ghost norm
  or by building each layer's per-sample gradients and dropping them, whichever costs fewer multiply-adds, and the
  clipped sum as one weight gradient of the batch (Book-Keeping, Bu et al. 2023); bias: Σ_positions g;
- Linear weight on flat features: :class:`~dpaudit.layerwise.OuterProducts`; bias: g;
- affine GroupNorm: Σ_positions g·x̂ and Σ_positions g.

So no per-sample gradient of the whole model is ever stored (unless a consumer asks for it, ``layerwise.dense``),
where Opacus's hooks store them all and read them twice: on ResNet-18 less time per record on a CPU
(``benchmarks/ensemble.py``; ``grad_sample: auto`` times it against the other methods on the first step).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from dpaudit import layerwise
from dpaudit._validation import DPAuditError

LAYERS = (nn.Conv2d, nn.Linear, nn.GroupNorm)


def unsupported_reason(model: nn.Module, example: torch.Tensor | None = None) -> str | None:
    """Why ``model`` cannot take the ghost method, or None if it can.

    Supported: every trainable parameter is the weight or bias of a Conv2d (groups 1, zero padding given as
    numbers), of a Linear on flat features or of an affine GroupNorm, each of these layers runs once per forward pass
    and no operation changes its input or output in place (the last three checked on one sample ``example`` in eval
    mode where it is given, else at the first call).
    """
    owners = _owners(model)
    if isinstance(owners, str) or example is None:
        return owners if isinstance(owners, str) else None
    recorder = _Recorder(model, [module for module, _ in owners.values()])
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            recorder.run(example[None].detach())
    except DPAuditError as error:
        return str(error)
    finally:
        recorder.close()
        model.train(training)
    return None


def _owners(model: nn.Module) -> dict[int, tuple[nn.Module, str]] | str:
    """Each trainable parameter's (layer, attribute) by ``id``, or why a parameter has none that this method takes."""
    owners: dict[int, tuple[nn.Module, str]] = {}
    for name, module in model.named_modules():
        for attr, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                return "it has frozen parameters"
            if id(p) in owners:
                return f"parameter {name}.{attr} is shared between layers"
            if not isinstance(module, LAYERS) or attr not in ("weight", "bias"):
                return f"{name or 'the model'} ({type(module).__name__}) has parameter {attr!r} and no ghost rule"
            if isinstance(module, nn.Conv2d) and (
                module.groups != 1 or module.padding_mode != "zeros" or isinstance(module.padding, str)
            ):
                return f"{name} (Conv2d) has groups, non-zero padding mode or string padding"
            owners[id(p)] = module, attr
    return owners


class _Recorder:
    """Forward hooks on ``layers`` that keep each one's (input, output) of one forward pass, with their versions."""

    def __init__(self, model: nn.Module, layers: Sequence[nn.Module]) -> None:
        self.model = model
        self.names = {module: name for name, module in model.named_modules()}
        self.kept: dict[nn.Module, tuple[torch.Tensor, torch.Tensor, int, int]] = {}
        self.recording = False
        self.handles = [layer.register_forward_hook(self._keep) for layer in dict.fromkeys(layers)]

    def _keep(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if not self.recording:
            return
        if module in self.kept:
            raise DPAuditError(f"layer {self.names[module]} runs more than once in a forward pass")
        (value,) = inputs
        if isinstance(module, nn.Linear) and value.dim() != 2:
            raise DPAuditError(f"layer {self.names[module]} (Linear) acts on {value.dim() - 1}-d features, not flat")
        self.kept[module] = value, output, value._version, output._version

    def run(self, images: torch.Tensor) -> torch.Tensor:
        """The model's output on ``images``, each hooked layer's input and output kept in ``self.kept``."""
        self.kept.clear()
        self.recording = True
        try:
            out = self.model(images)
        finally:
            self.recording = False
        for module, (value, output, value_version, output_version) in self.kept.items():
            if value._version != value_version or output._version != output_version:
                raise DPAuditError(f"an operation changes the input or output of layer {self.names[module]} in place")
        return out

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


class GhostGradients:
    """Per-sample gradients of each model as factors (:mod:`dpaudit.ghost`), one model per call.

    Args:
        models: the models (one architecture that :func:`unsupported_reason` accepts); each gets forward hooks on
            its layers with parameters until :meth:`close`, active only inside a call.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        self.owners: list[list[tuple[nn.Module, str]]] = []
        self.recorders: list[_Recorder] = []
        for model in models:
            owners = _owners(model)
            if isinstance(owners, str):
                raise DPAuditError(f"grad_sample 'ghost' cannot take this model: {owners}")
            slots = [owners[id(p)] for p in model.parameters() if p.requires_grad]
            self.owners.append(slots)
            self.recorders.append(_Recorder(model, [module for module, _ in slots]))

    def __call__(
        self, active: list[int], images: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
    ) -> tuple[list[layerwise.Gradient], torch.Tensor]:
        """(grads [1, W, *shape] per trainable parameter, losses [1, W]) of the one ``active`` model on ``images``
        [1, W, ...]."""
        if weights is not None:
            raise DPAuditError("the ghost method gives per-sample gradients only")
        (k,) = active
        recorder = self.recorders[k]
        # during auto's trial the models may also carry Opacus's (disabled) backward hooks, which warn when the
        # backward pass stops at the layers' outputs
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
            losses = F.cross_entropy(recorder.run(images[0]), labels[0], reduction="none")
            layers = list(recorder.kept)
            output_grads = torch.autograd.grad(
                losses.sum(), [recorder.kept[layer][1] for layer in layers], allow_unused=True
            )
        per_layer = {
            layer: _layer_gradients(layer, recorder.kept[layer][0].detach(), recorder.kept[layer][1], g)
            for layer, g in zip(layers, output_grads)
        }
        recorder.kept.clear()
        grads = [  # a layer that did not run: zero gradients
            per_layer[layer][attr] if layer in per_layer else losses.new_zeros(len(losses), *getattr(layer, attr).shape)
            for layer, attr in self.owners[k]
        ]
        return [g[None] for g in grads], losses.detach()[None]

    def close(self) -> None:
        """Remove the hooks."""
        for recorder in self.recorders:
            recorder.close()


def _layer_gradients(
    layer: nn.Module, inputs: torch.Tensor, output: torch.Tensor, g: torch.Tensor | None
) -> dict[str, layerwise.Gradient]:
    """Per-sample gradients [W, *shape] of ``layer``'s parameters from its input, output and output gradient ``g``
    (None: the loss does not depend on it)."""
    if g is None:
        g = torch.zeros_like(output)
    if isinstance(layer, nn.Linear):
        return {"weight": layerwise.OuterProducts(g, inputs), "bias": g}
    if isinstance(layer, nn.Conv2d):
        return {"weight": layerwise.ConvFactors.of(layer, inputs, g), "bias": g.sum((-2, -1))}
    norm = cast(nn.GroupNorm, layer)
    spatial = tuple(range(2, g.dim()))
    normalised = F.group_norm(inputs, norm.num_groups, eps=norm.eps)
    return {"weight": (g * normalised).sum(spatial), "bias": g.sum(spatial)}
