"""Per-sample gradients of one model: by its layers in closed form, torch.func's vmap, Opacus hooks or the ghost
method's factors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from dpaudit import models as model_registry
from dpaudit.layerwise import dense


class PerSampleGradients:
    """Per-sample gradients and losses of cross-entropy of one model, by its layers in closed form
    (``dpaudit.layerwise``), torch.func, Opacus hooks or the ghost method's factors, built (``dpaudit.ghost``;
    ``backend``: a ``grad_sample`` value)."""

    def __init__(self, model: nn.Module, backend: str) -> None:
        self.model = model
        self.params = model_registry.trainable_parameters(model)
        if backend in ("auto", "layers", "ghost"):
            from dpaudit.ensemble import resolve_method

            backend = resolve_method(model, backend)
        self.backend = backend
        if backend == "opacus":
            from dpaudit.ensemble import OpacusGradients

            self._opacus = OpacusGradients([model])
        elif backend == "ghost":
            from dpaudit.ghost import GhostGradients

            self._ghost = GhostGradients([model])
        elif backend == "layers":
            from dpaudit.layerwise import LayerwiseGradients

            self._layerwise = LayerwiseGradients(model)
        else:
            from torch.func import grad_and_value, vmap

            losses = model_registry.functional_losses(model)

            def loss_of_one(
                param_values: Sequence[torch.Tensor], image: torch.Tensor, label: torch.Tensor
            ) -> torch.Tensor:
                return losses(param_values, image[None], label[None])[0]

            self._vmapped = vmap(grad_and_value(loss_of_one), in_dims=(None, 0, 0))

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        if self.backend == "opacus":  # one model: a model axis of length 1
            grads, losses = self._opacus([0], images[None], labels[None])
            return [cast(torch.Tensor, g)[0] for g in grads], losses[0]
        if self.backend == "ghost":  # one model: a model axis of length 1
            grads, losses = self._ghost([0], images[None], labels[None])
            return [dense(g)[0] for g in grads], losses[0]
        if self.backend == "layers":  # one model: a model axis of length 1
            grads, losses = self._layerwise([p[None] for p in self.params], images[None], labels[None])
            # not factored: every gradient is a tensor
            return [cast(torch.Tensor, g)[0] for g in grads], losses[0]
        grads, losses = self._vmapped([p.detach() for p in self.params], images, labels)
        return list(grads), losses
