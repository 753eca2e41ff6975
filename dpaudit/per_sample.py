"""Per-sample gradients of one model: by its layers in closed form, torch.func's vmap, or Opacus hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from dpaudit import models as model_registry


class PerSampleGradients:
    """Per-sample gradients and losses of cross-entropy of one model, by its layers in closed form
    (``dpaudit.layerwise``), torch.func or Opacus hooks (``backend``: a ``grad_sample`` value)."""

    def __init__(self, model: nn.Module, backend: str) -> None:
        self.model = model
        self.params = model_registry.trainable_parameters(model)
        if backend in ("auto", "layers"):
            from dpaudit.ensemble import resolve_method

            backend = resolve_method(model, backend)
        self.backend = backend
        if backend == "opacus":
            from opacus import GradSampleModule

            self.wrapped = GradSampleModule(model, loss_reduction="sum")
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
        if self.backend == "opacus":
            losses = F.cross_entropy(self.wrapped(images), labels, reduction="none")
            losses.sum().backward()
            # Opacus's hooks set grad_sample on each parameter at run time (torch's stubs do not declare it)
            grads = [p.grad_sample for p in self.params]  # type: ignore[attr-defined]
            for p in self.params:
                p.grad_sample = None  # type: ignore[attr-defined]
                p.grad = None
            return grads, losses.detach()
        if self.backend == "layers":  # one model: a model axis of length 1
            grads, losses = self._layerwise([p[None] for p in self.params], images[None], labels[None])
            # not factored: every gradient is a tensor
            return [cast(torch.Tensor, g)[0] for g in grads], losses[0]
        grads, losses = self._vmapped([p.detach() for p in self.params], images, labels)
        return list(grads), losses
