"""Where the ensemble engine's time goes on one configuration; prints JSON.

    python tools/ensemble_breakdown.py [--models 11] [--steps 100] [--batch-size 36] [--architecture cnn-digits]

Trains K models with DP-SGD as ``benchmarks/ensemble.py`` does (ensemble engine) and splits the wall time into
the per-sample gradient calls (``EnsembleGradients._gradients``), the clipping and summing of their output (the
sink), the K optimizer steps with their noise (``step_together``), and everything else (sampling, the record
pool's reads, loss bookkeeping). The gradient share bounds what removing the rest could gain: at most
total / gradient. Where the model takes the layer-wise method (``grad_sample: layers``), ``layerwise_seconds`` splits
its calls further: each layer's forward step and per-sample gradient step (by position in the stacked network, whose
GroupNorm and max pool run as one layer) and the backward pass between them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from dpaudit import layerwise
from dpaudit.ensemble import EnsembleGradients
from dpaudit.optim import DPSGD
from dpaudit.train import train_models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the workloads of benchmarks/ensemble.py
from ensemble import DATASETS, add_workload_arguments, workload, workload_epochs


@contextmanager
def timing(owner, name: str, seconds: dict[str, float], key: str | Callable[..., str]):
    """Add the wall time of every call of ``owner.name`` to ``seconds[key]`` while the context is open (with a callable
    ``key``, to ``seconds[key(*args)]``, the call's own arguments naming its entry)."""
    original, own = getattr(owner, name), vars(owner).get(name)  # own: None where inherited

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            entry = key(*args) if callable(key) else key
            seconds[entry] = seconds.get(entry, 0.0) + time.perf_counter() - start

    setattr(owner, name, timed)
    try:
        yield
    finally:
        if own is None:
            delattr(owner, name)
        else:
            setattr(owner, name, own)


def by_layer(part: str, positions: dict[int, int]) -> Callable[..., str]:
    """``part i: Layer``, the entry of a layer-wise step on the layer at position i of the stacked network (its first
    argument); ``positions`` numbers the layers in the order any step first sees them (the forward pass's)."""
    return lambda layer, *_: f"{part} {positions.setdefault(id(layer), len(positions))}: {type(layer).__name__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--architecture", default="cnn-digits", choices=sorted(DATASETS))
    args = parser.parse_args()
    config, members = workload(args.architecture, args, device="cpu")
    steps_per_epoch, epochs = workload_epochs(args)
    train_models(config=config, members=members[:2], test_data=None, progress=False)  # warm-up
    seconds = dict.fromkeys(("gradient_chunks", "accumulate", "optimizer_steps"), 0.0)
    layer_seconds: dict[str, float] = {}
    positions: dict[int, int] = {}
    with (
        timing(layerwise, "_forward", layer_seconds, by_layer("forward", positions)),
        timing(layerwise, "_per_sample", layer_seconds, by_layer("per-sample", positions)),
        # the layer-wise method's backward pass is its one torch.autograd.grad call
        timing(torch.autograd, "grad", layer_seconds, "backward"),
        timing(EnsembleGradients, "_gradients", seconds, "gradient_chunks"),
        timing(EnsembleGradients, "accumulate", seconds, "accumulate"),
        timing(DPSGD, "step_together", seconds, "optimizer_steps"),
    ):
        start = time.perf_counter()
        train_models(config=config, members=members, test_data=None, progress=False)
        total = time.perf_counter() - start
    gradients = seconds["gradient_chunks"]
    sink = seconds["accumulate"] - gradients  # accumulate = gradient chunks + sink calls (+ a little slicing)
    shares = {
        "gradient_calls": gradients,
        "clip_and_sum": sink,
        "optimizer_steps_and_noise": seconds["optimizer_steps"],
    }
    shares["everything_else"] = total - sum(shares.values())
    print(
        json.dumps(
            {
                "architecture": args.architecture,
                "models_K": args.models,
                "steps_per_model": epochs * steps_per_epoch,
                "batch_size": args.batch_size,
                "threads": torch.get_num_threads(),
                "total_seconds": total,
                "seconds": shares,
                "fractions": {key: value / total for key, value in shares.items()},
                "most_speedup_from_removing_all_but_gradients": total / gradients,
                **(
                    {"layerwise_seconds": dict(sorted(layer_seconds.items(), key=lambda item: -item[1]))}
                    if set(layer_seconds) - {"backward"}  # a layer's step was timed: the layer-wise method ran
                    else {}
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
