"""torchvision's ResNet-18 with out-of-place activations and residual additions.

torchvision's blocks apply ``ReLU(inplace=True)`` and ``out += identity`` to the outputs of convolution and
normalisation layers. Backward hooks on those layers (Opacus's ``GradSampleModule``) forbid changing their
outputs in place, so the same network is built here from a block that computes out of place: the same
modules, parameters, initialisation order and values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet


class OutOfPlaceBasicBlock(BasicBlock):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def resnet18(*, num_classes: int, norm_layer: Callable[[int], nn.Module]) -> ResNet:
    """ResNet-18 (2, 2, 2, 2 basic blocks) as ``torchvision.models.resnet18(weights=None, ...)`` builds it."""
    model = ResNet(OutOfPlaceBasicBlock, [2, 2, 2, 2], num_classes=num_classes, norm_layer=norm_layer)
    model.relu = nn.ReLU()
    return model
