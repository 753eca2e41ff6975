"""Helpers shared by test modules in several folders (importable as ``support``: pytest's ``pythonpath`` adds
``tests``). A helper used by one test module stays in that module."""

from __future__ import annotations

import json
import os
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpaudit.config import TrainConfig
from dpaudit.data import load_dataset
from dpaudit.settings import SETTINGS

if TYPE_CHECKING:  # dpaudit.optim and dpaudit.train import torch: each helper that needs them imports them itself,
    from dpaudit import optim  # so that the modules importing only ROOT or TRAIN_ARGS stay light
    from dpaudit.optim import Hyperparameters

ROOT = Path(__file__).resolve().parents[1]  # the repository

# A small CLI training: 1 target + 1 shadow on 100 digits, 2 epochs (``dpaudit train`` arguments less ``--out``).
TRAIN_ARGS = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "cnn-digits",
    "--optimizer",
    "dpsgd-gc",
    "--sigma-dp",
    "0.002",
    "--clip-norm",
    "20",
    "--batch-size",
    "50",
    "--lr",
    "0.1",
    "--epochs",
    "2",
    "--sampling",
    "shuffle",
    "--num-shadows",
    "1",
    "--target-size",
    "100",
    "--quiet",
]


def with_workflow_path(environment: dict) -> dict:
    """``environment`` with ``workflow/`` first on PYTHONPATH, as the Snakefile gives its jobs: ``python -m reproduce``
    runs in a subprocess."""
    paths = (str(ROOT / "workflow"), environment.get("PYTHONPATH"))
    return {**environment, "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def load_file_module(path: Path, name: str):
    """The module of the Python file ``path`` (one outside the package, e.g. under benchmarks/ or docs/), as
    ``name``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def merged_config(base: dict, override: dict) -> dict:
    """``override`` over ``base``, mappings merged key by key, as Snakemake merges a --configfile over params.yaml."""
    merged = dict(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = merged_config(base[key], value) if nested else value
    return merged


def hyperparameters_for(cls: type[optim.Optimizer], **values) -> Hyperparameters:
    """``Hyperparameters`` of optimizer class ``cls`` from flat values: its family's settings (``cls.settings_type``)
    go into ``settings``; settings of other families among ``values`` are left out."""
    from dpaudit.optim import Hyperparameters

    own = {item.name for item in fields(Hyperparameters)}
    family = {item.name for item in fields(cls.settings_type)}
    assert set(values) <= own | set(SETTINGS), sorted(set(values) - own - set(SETTINGS))
    settings = cls.settings_type(**{key: value for key, value in values.items() if key in family})
    return Hyperparameters(**{key: value for key, value in values.items() if key in own}, settings=settings)


# settings each optimizer needs beyond the common ones of ``engine_config`` (T = 3 epochs × 4 steps = 12 steps)
OPTIMIZER_EXTRA = {
    "dpsgd-dc": {"domain_radius": 3.0},
    "tp-topk": {"warmup_fraction": 0.34},
    "tp-rand": {"warmup_fraction": 0.34},
    "adadpigu": {"pretrain_fraction": 0.34},
    "adadpigu-code": {"pretrain_fraction": 0.34},
    "dp2-sgd": {"lr": 0.01},
    "d2p2-sgd": {"lr": 0.01},
    "dp2-sgd-as-published": {"lr": 0.01},
    "d2p2-sgd-as-published": {"lr": 0.01},
}


def engine_config(optimizer: str, **changes) -> TrainConfig:
    """A validated CPU configuration of ``optimizer`` for the models of ``digit_members``: 3 epochs of batches of 15."""
    from dpaudit import optim

    values = dict(
        dataset="digits",
        model="cnn-digits",
        optimizer=optimizer,
        epochs=3,
        batch_size=15,
        lr=0.2,
        clip_norm=1.0,
        sigma_dp=0.02,
        sampling="poisson",
        target_size=60,
        num_shadows=0,
        diagnostics=False,
        seed=5,
        device="cpu",
        microbatch_size=8,
    )
    if not issubclass(optim.get_spec(optimizer).cls, optim.PrivateOptimizer):  # not its settings: left out
        del values["sigma_dp"]
        if not changes.get("canaries"):  # C scales the white-box canaries only
            del values["clip_norm"]
    values.update(OPTIMIZER_EXTRA.get(optimizer, {}))
    values.update(changes)
    return TrainConfig.from_dict(values).validated()


def digit_members(count: int):
    """``count`` members of 60 digits each (member k: records 60k to 60k + 59), labelled m0, m1, ….

    Digits with a little continuous jitter: integer pixels make exact max-pool ties, where two equally
    valid sub-gradients are picked by floating-point noise (a different kernel may pick the other one)."""
    from dpaudit.train import Member

    digits = load_dataset("digits")
    jitter = np.random.default_rng(0).normal(0, 1e-2, digits.images.shape).astype(np.float32)
    data = replace(digits, images=digits.images + jitter)
    return [
        Member(train_data=data.subset(np.arange(60 * k, 60 * (k + 1))), model_index=k, label=f"m{k}")
        for k in range(count)
    ]


def train_into(folder, config, **kwargs):
    """Train the two ``digit_members`` under ``config`` into ``folder``/m0 and ``folder``/m1 (no periodic state)."""
    from dpaudit.train import train_models

    members = [replace(member, out_dir=folder / member.label) for member in digit_members(2)]
    return train_models(config=config, members=members, test_data=None, progress=False, state_every=0, **kwargs)


def interrupt_at_save(monkeypatch, *, epoch, model_index):
    """Make the engine stop (as a kill would) when model ``model_index`` is about to save epoch ``epoch``."""
    from dpaudit.train import _ModelRun

    save = _ModelRun.save_state

    def save_or_stop(run, at):
        if (at, run.model_index) == (epoch, model_index):
            raise KeyboardInterrupt
        save(run, at)

    monkeypatch.setattr(_ModelRun, "save_state", save_or_stop)


def run_files(folder):
    """Every file under ``folder``, relative to it, sorted."""
    return sorted(path.relative_to(folder) for path in folder.rglob("*") if path.is_file())


TIMED = ("metrics.json", "summary.json")  # per-epoch wall-clock seconds (a summary copies them)


def comparable(path, data: bytes):
    """A run file's contents less what differs between identical runs: the wall-clock seconds of metrics.json and
    summary.json, and the manifest's hashes of those files (the files it lists stay compared)."""
    if path.name in TIMED:
        return {k: v for k, v in json.loads(data).items() if k != "elapsed_seconds"}
    if path.name == "dpaudit-run.json":
        manifest = json.loads(data)
        manifest["files"] = {k: (None if k.endswith(TIMED) else v) for k, v in manifest["files"].items()}
        return manifest
    return data


def assert_same_results(first, second):
    """Every file under the two folders is the same (metrics.json and dpaudit-run.json: but for wall-clock seconds)."""
    assert run_files(first) == run_files(second)
    for path in run_files(first):
        assert comparable(path, (first / path).read_bytes()) == comparable(path, (second / path).read_bytes()), path


def saved_epoch(folder):
    """The latest epoch whose training state is saved in a model's folder (0: none); each save replaces the last."""
    return max((int(path.stem.split("_")[1]) for path in folder.glob("state_*.pt")), default=0)


def wait_for_saved_epoch(process, folder, epoch, *, timeout=300):
    """Wait until ``folder`` holds a training state of ``epoch`` or later, or ``process`` ends."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline and saved_epoch(folder) < epoch:
        time.sleep(0.01)


def run_canaries(members, nonmembers, *, z, q):
    """A RunCanaryObservations of the given [M, T] and [N, T] observations, as a run would record them."""
    from dpaudit.attacks.canary_run import RunCanaryObservations

    observations = np.concatenate([members, nonmembers]).T  # [T, M + N]
    all_iterates, final_model = RunCanaryObservations.statistics_of(observations, noise_std=z, sample_rates=q)
    total, squares = RunCanaryObservations.spread_sums_of(observations, noise_std=z)
    return RunCanaryObservations(
        members=np.r_[np.ones(len(members), bool), np.zeros(len(nonmembers), bool)],
        noise_multipliers=z,
        sample_rates=q,
        noise_std=z,
        clip_norm=1.0,
        magnitude=1e3,
        contribution=1.0,
        batch_size=10,
        sampling="poisson",
        all_iterates_scores=all_iterates,
        final_model_scores=final_model,
        standardised_sum=total,
        standardised_sum_of_squares=squares,
    )
