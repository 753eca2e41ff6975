"""predict_logits: bit for bit the model's own forward pass, with its 2×2 max pools as strided maxima."""

import numpy as np
import pytest
import torch
from torch import nn

from dpaudit import models
from dpaudit.data import ArrayDataset
from dpaudit.inference import _window_maximum, evaluate, predict_logits

SHAPES = {  # every sequential registered model with a max pool, on each image size it takes; and one that is not
    "cnn-digits": [(1, 8, 8)],
    "cnn": [(1, 28, 28), (3, 32, 32)],
    "cnn-small": [(1, 28, 28), (3, 32, 32)],
    "cnn-d2p2": [(1, 28, 28), (3, 32, 32)],
    "resnet18-gn": [(1, 28, 28)],
}


def test_window_maximum_known_answer():
    # 1 sample, 1 channel, 3×5: the windows are rows 0–1 × columns (0–1, 2–3); row 2 and column 4 are dropped
    x = torch.tensor([[[[1.0, 5.0, -2.0, -3.0, 9.0], [4.0, 0.0, -1.0, -7.0, 9.0], [9.0, 9.0, 9.0, 9.0, 9.0]]]])
    assert _window_maximum(x).tolist() == [[[[5.0, -1.0]]]]
    x[0, 0, 1, 2] = float("nan")
    assert torch.isnan(_window_maximum(x)[0, 0, 0, 1])


@pytest.mark.parametrize("name, shape", [(n, s) for n, shapes in SHAPES.items() for s in shapes])
@pytest.mark.parametrize("values", ["normal", "sparse"])
def test_predict_logits_is_the_models_forward_bit_for_bit(name, shape, values):
    model = models.build_model(name, input_shape=shape, num_classes=10, seed=0)
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(5, *shape, generator=generator)
    if values == "sparse":  # mostly zeros (digit backgrounds): windows of equal values
        images = torch.where(torch.rand(images.shape, generator=generator) < 0.8, 0.0, images.abs())
    model.train()
    with torch.no_grad():  # in the same batches (a convolution's rounding may depend on the batch size)
        expected = torch.cat([model.eval()(images[:3]), model(images[3:])])
    model.train()
    assert torch.equal(torch.from_numpy(predict_logits(model, images.numpy(), batch_size=3)), expected)
    assert model.training  # left in the mode it had


@pytest.mark.parametrize(
    "pool",
    [nn.MaxPool2d(2), nn.MaxPool2d(2, ceil_mode=True), nn.MaxPool2d(3, stride=2), nn.MaxPool2d(2, padding=1)],
    ids=["2x2", "ceil", "3x3", "padded"],
)
def test_pools_the_strided_maximum_does_not_cover_keep_their_own_forward(pool):
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), pool, nn.Flatten())
    images = torch.randn(4, 1, 9, 9)
    with torch.no_grad():
        expected = model.eval()(images)
    assert torch.equal(torch.from_numpy(predict_logits(model, images)), expected)


def test_a_hooked_model_runs_through_its_modules():
    model = models.build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10, seed=0)
    calls = []
    model[-1].register_forward_hook(lambda *_: calls.append(1))
    predict_logits(model, np.zeros((2, 1, 8, 8), dtype=np.float32))
    assert calls == [1]


def test_evaluate_known_answer():
    # a linear model whose logits are the inputs: loss = mean of −log softmax at the label, accuracy by argmax
    model = nn.Sequential(nn.Flatten())
    images = np.array([[[[2.0, 0.0]]], [[[0.0, 0.0]]]], dtype=np.float32)
    data = ArrayDataset("toy", images, np.array([0, 1]), 2)
    loss, accuracy = evaluate(model, data)
    expected = (np.log1p(np.exp(-2.0)) + np.log(2.0)) / 2
    assert loss == pytest.approx(expected, rel=1e-6)
    assert accuracy == 0.5  # the tie of the second record goes to class 0
