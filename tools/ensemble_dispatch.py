"""How many torch operations the ensemble engine dispatches per training step; prints JSON.

    python tools/ensemble_dispatch.py [--architecture cnn] [--optimizer dpsgd-gc] [--device cpu] [--cpu-plan]

On a GPU a small ensemble is bound by the host: each step's time is the time the host takes to issue its
operations (``tools/ensemble_syncs.py``), so the number of operations per step is what sets that time,
and, unlike a timing, it is the same on every machine. This counts, under ``TorchDispatchMode``, the aten
operations of 11 models (n = 360, b = 36, Poisson) over 3 epochs minus those over 1 epoch (which leaves
out the set-up) and divides by the 20 steps between. ``kernel_ops`` are the operations that may launch a
device kernel; ``view_ops`` only make views (no kernel, but still the dispatcher's time on the host).
``python_calls_per_step`` counts, the same way under ``cProfile``, the Python-level calls (functions and
built-ins, the torch operations' bindings among them) that issue them.

On CPU the engine splits a layer-wise step into more, cache-sized calls (``ensemble.CPU_CALL_ACTIVATION_BYTES``;
three for the 32×32 CNN); a GPU makes one call of all samples. Since the counts are meant for the GPU, the
cap is lifted on CPU so that both count the same plan; ``--cpu-plan`` counts the CPU's own.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import json
import pstats
import sys
from pathlib import Path
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dpaudit import ensemble as ensemble_engine
from dpaudit.config import TrainConfig
from dpaudit.train import Member, train_models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the workloads of benchmarks/ensemble.py
from ensemble import DATASETS, training_set

MODELS, RECORDS, BATCH = 11, 360, 36


class OperationCounter(TorchDispatchMode):
    """Counts every aten operation dispatched while the mode is active, by name."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter[torch._ops.OpOverload] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func] += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architecture", default="cnn", choices=sorted(DATASETS))
    parser.add_argument("--optimizer", default="dpsgd-gc")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--cpu-plan",
        action="store_true",
        help="keep the CPU's cache-sized calls instead of counting the GPU's one call per step",
    )
    args = parser.parse_args()
    with (
        contextlib.nullcontext()
        if args.cpu_plan
        else mock.patch.object(ensemble_engine, "CPU_CALL_ACTIVATION_BYTES", sys.maxsize)
    ):
        count(args)


def count(args: argparse.Namespace) -> None:
    dataset = DATASETS[args.architecture]
    data = training_set(dataset, RECORDS)
    members = [Member(train_data=data, model_index=k, label=f"model_{k}") for k in range(MODELS)]

    def config(epochs: int) -> TrainConfig:
        return TrainConfig.from_dict(
            dict(
                dataset=dataset,
                model=args.architecture,
                optimizer=args.optimizer,
                epochs=epochs,
                batch_size=BATCH,
                lr=0.1,
                clip_norm=1.0,
                noise_multiplier=1.0,
                sampling="poisson",
                target_size=RECORDS,
                num_shadows=0,
                diagnostics=False,
                device=args.device,
            )
        ).validated()

    train_models(config=config(1), members=members, test_data=None, progress=False)  # warm-up
    counted, python_calls = {}, {}
    for epochs in (1, 3):
        with OperationCounter() as counter:
            train_models(config=config(epochs), members=members, test_data=None, progress=False)
        counted[epochs] = counter.counts
        profile = cProfile.Profile()
        profile.runcall(train_models, config=config(epochs), members=members, test_data=None, progress=False)
        python_calls[epochs] = pstats.Stats(profile).total_calls
    per_step = counted[3].copy()
    per_step.subtract(counted[1])
    steps = 2 * (RECORDS // BATCH)
    views = sum(count for op, count in per_step.items() if op.is_view)
    total = sum(per_step.values())
    print(
        json.dumps(
            {
                "architecture": args.architecture,
                "optimizer": args.optimizer,
                "device": args.device,
                "models_K": MODELS,
                "cpu_cache_cap": args.cpu_plan and args.device == "cpu",
                "batch_size": BATCH,
                "torch": torch.__version__,
                "python": sys.version.split()[0],
                "ops_per_step": total / steps,
                "kernel_ops_per_step": (total - views) / steps,
                "view_ops_per_step": views / steps,
                "python_calls_per_step": (python_calls[3] - python_calls[1]) / steps,
                "most_frequent": {str(op): count / steps for op, count in per_step.most_common(15)},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
