"""Time the accountants on the D2P2 FMNIST schedule and on 2,000-step schedules, and one optimizer step per
private optimizer.

Prints JSON. Usage: python benchmarks/accounting.py
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import fields

import numpy as np
import torch


def _seconds(function, repeats: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats


def accounting() -> dict:
    import dp_accounting  # noqa: F401 - imported before the clock starts: its import (about 0.8 s) is not accounting

    from dpaudit.theory import epsilon

    dynamic = np.repeat(3.0 * np.arange(1, 41) ** -0.25, 59)  # 40 noise levels × 59 steps, q = 1/59
    common = {"sample_rate": 1 / 59, "delta": 1e-5}
    return {
        **{
            f"{name}_{accountant}_seconds": _seconds(
                lambda z=z, a=accountant: epsilon(noise_multiplier=z, accountant=a, **common)
            )
            for name, z in (("static", np.full(2360, 3.0)), ("dynamic", dynamic))
            for accountant in ("rdp", "prv")
        },
        **prv_calibration(),
    }


def prv_calibration() -> dict:
    """One PRV noise calibration of the black-box rung (ε = 2, δ = 1e-5, q = 0.5, T = 20), its grid's truncation from
    the series summed as arrays (as dpaudit does) and from Opacus's loop (``_series_step_rdp`` answering None): the
    same z, and the seconds of each."""
    from dpaudit.theory import accounting, calibrate_noise, epsilon

    epsilon(noise_multiplier=3.0, sample_rate=0.3, steps=5, delta=1e-5, accountant="prv")  # imports, off the clock

    def calibrate() -> float:
        series.cache_clear()
        accounting._opacus_step_rdp.cache_clear()
        return calibrate_noise(target_epsilon=2.0, delta=1e-5, sample_rate=0.5, steps=20, accountant="prv")

    result, series = {}, accounting._series_step_rdp
    for name, step_rdp in (("series", series), ("opacus_loop", lambda q, z: None)):
        accounting._series_step_rdp = step_rdp
        try:
            start = time.perf_counter()
            result[f"prv_calibration_{name}_noise_multiplier"] = calibrate()
            result[f"prv_calibration_{name}_seconds"] = time.perf_counter() - start
        finally:
            accounting._series_step_rdp = series
    return result


def schedules_2000() -> dict:
    """Seconds of ``epsilon`` and ``calibrate_noise`` (target ε = 2) on 2,000 steps at q = 0.01, δ = 1e-5: one noise
    level, 20 levels (e^(−1/4) decay per 100-step epoch) and, for the RDP ``epsilon`` only, 2,000 (decay per step:
    the PLD accountant composes 2,000 distinct distributions, tens of minutes); every cache of RDP values cleared
    before each call."""
    from dpaudit.theory import _dpaccounting_adapter, calibrate_noise, epsilon

    schedules = {
        "static": np.ones(2000),
        "per_epoch": np.repeat(np.arange(1, 21) ** -0.25, 100),
        "per_step": np.arange(1, 2001) ** -0.25,
    }
    common = {"sample_rate": 0.01, "delta": 1e-5}
    timings = {}
    for name, factors in schedules.items():
        for accountant in ("rdp",) if name == "per_step" else ("rdp", "pld"):
            _dpaccounting_adapter.clear_caches()
            timings[f"epsilon_{name}_{accountant}_seconds"] = _seconds(
                lambda f=factors, a=accountant: epsilon(noise_multiplier=f, accountant=a, **common)
            )
            if name != "per_step":
                _dpaccounting_adapter.clear_caches()
                timings[f"calibrate_{name}_{accountant}_seconds"] = _seconds(
                    lambda f=factors, a=accountant: calibrate_noise(
                        target_epsilon=2.0, noise_schedule=f, accountant=a, **common
                    )
                )
    return timings


def optimizer_steps(batch: int = 36, repeats: int = 20) -> dict:
    from dpaudit import models, optim
    from dpaudit.per_sample import PerSampleGradients

    images, labels = torch.randn(batch, 1, 8, 8), torch.randint(0, 10, (batch,))
    timings = {}
    for name in optim.available():
        spec = optim.get_spec(name)
        if not issubclass(spec.cls, optim.PrivateOptimizer):
            continue
        model = models.build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10, seed=0)
        family = {item.name for item in fields(spec.cls.settings_type)}
        settings = {
            key: value for key, value in {"warmup_sigma_dp": 0.05, "domain_radius": 5.0}.items() if key in family
        }
        hyper = optim.Hyperparameters(
            lr=0.01,
            expected_batch_size=batch,
            dataset_size=360,
            clip_norm=1.0,
            sigma_dp=0.05,
            epochs=10,
            settings=spec.cls.settings_type(**settings),
        )
        opt = spec.cls(list(model.parameters()), hyper, generator=torch.Generator().manual_seed(0))
        per_sample = PerSampleGradients(model, "functorch")

        def step():
            grads, _ = per_sample(images, labels)
            opt.accumulate(grads)
            opt.step(realized_batch_size=batch)

        step()  # warm-up
        timings[name] = _seconds(step, repeats) * 1000
    return timings


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(
        json.dumps(
            {
                "accounting": accounting(),
                "accounting_2000_steps": schedules_2000(),
                "step_ms_cnn_digits_b36": optimizer_steps(),
                "threads": torch.get_num_threads(),
                "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
            },
            indent=1,
        )
    )
