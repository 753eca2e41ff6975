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
