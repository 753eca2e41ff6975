import os

import pytest

if "PYTEST_XDIST_WORKER" in os.environ:  # one torch thread per worker (and its subprocesses): workers share the cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from dpaudit.config import TrainConfig


@pytest.fixture
def quiet_torch():
    """One torch thread (small models: more threads only contend on a shared machine); Opacus's and Lightning's
    warnings and notes off."""
    import logging
    import warnings

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    lightning = logging.getLogger("lightning.pytorch")
    level = lightning.level
    lightning.setLevel(logging.WARNING)  # "GPU available: False", "Trainer.fit stopped"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    lightning.setLevel(level)
    torch.set_num_threads(threads)


@pytest.fixture
def cuda_without_tf32():
    """CUDA with float32 matrix and convolution arithmetic (PyTorch lets cuDNN use TF32, 10-bit mantissas, by
    default), so that ensemble and one-at-a-time runs differ only by summation order, as on the CPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> str:
    """Where a test's tensors live: the CPU, and CUDA without TF32 (``cuda_without_tf32``) as a ``gpu`` test, which
    the default run deselects and ``pytest -m gpu`` runs where a CUDA device is."""
    if request.param == "cuda":
        request.getfixturevalue("cuda_without_tf32")
    return request.param


@pytest.fixture(scope="session")
def tiny_config():
    """A digits configuration small enough to train 1 target + 2 shadows in seconds."""
    return TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="cnn-digits",
            optimizer="dpsgd-gc",
            epochs=4,
            batch_size=50,
            lr=0.1,
            clip_norm=20.0,
            sigma_dp=0.002,
            sampling="shuffle",
            eval_epochs=(2, 4),
            target_size=200,
            num_shadows=2,
            seed=3,
            device="cpu",
        )
    )


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, tiny_config):
    from dpaudit.train import train_configuration

    out = tmp_path_factory.mktemp("run")
    train_configuration(tiny_config, out_dir=out, progress=False)
    return out
