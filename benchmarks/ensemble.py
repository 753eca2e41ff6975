"""Wall time of K models of one configuration: the ensemble engine vs one model at a time; prints JSON.

    python benchmarks/ensemble.py [--models 11] [--steps 100] [--batch-size 36] [--device cpu]
                                  [--architectures cnn-digits cnn] [--repeats 3]

For each architecture (``cnn-digits`` on digits; ``cnn`` and ``resnet18-gn-cifar`` on random 32×32×3
images, which time the same as CIFAR-10; the papers' ``cnn-small`` and ``cnn-d2p2`` on random 28×28 images as MNIST's
and Fashion-MNIST's) it trains K models for the same number of steps with
(a) the ensemble engine and DP-SGD (per-sample clipping, Poisson sampling, noise; per-sample gradients
by ``grad_sample: auto``: layer by layer for sequential models, else the fastest of torch.func's vmap,
Opacus's hooks and the ghost method on shares of the first step, the trial counted in its time; then again by each
other method),
(b) DP-SGD with Opacus (its PrivacyEngine, DPOptimizer and Poisson DataLoader, as users run it), one
model after the other, (c) non-private SGD, one model after the other (ceil(n/b)·epochs steps each).
``speedup_vs_opacus_sequential`` = b/a and
``ratio_to_nonprivate_sequential`` = a/c.

Every variant runs ``--repeats`` times, in rounds (each round runs all variants once, in the same order);
``seconds`` is each variant's fastest round (on a shared machine the least disturbed one, as ``timeit``
reports) and ``seconds_per_round`` lists them all. On CUDA, ``peak_gpu_memory_mb`` is each variant's
largest ``torch.cuda.max_memory_allocated`` over the rounds (the ensemble's is bounded by
``--memory-budget-mb`` plus the models, batches and optimizer state). ``--memory-budget-mb`` defaults to the
engine's 2048 MiB on a CPU and to a quarter of the free memory on a GPU (what ``docs/engine.md`` advises there);
``memory_budget_mb`` gives the one used. With several ``--architectures`` each is measured by this script in an
interpreter of its own (``process_per_architecture``), so that what one left behind (its allocator's pools, torch's
thread and kernel caches, Opacus's warm state) does not time the next.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch

from dpaudit.config import TrainConfig
from dpaudit.data import ArrayDataset, dataset_info, load_dataset
from dpaudit.ensemble import candidate_methods
from dpaudit.models import build_model, parameter_count
from dpaudit.train import Member, train_models

#: each architecture's dataset: where the papers train it (the MNIST preset's `cnn-small`, D2P2-SGD's CNN on
#: Fashion-MNIST in configs/paper.yaml)
DATASETS = {
    "cnn-digits": "digits",
    "cnn": "cifar10",
    "cnn-small": "mnist",
    "cnn-d2p2": "fashion-mnist",
    "resnet18-gn-cifar": "cifar10",
    "resnet18-gn": "cifar10",
}


def training_set(dataset: str, size: int) -> ArrayDataset:
    """The first ``size`` digits, or for any other dataset ``size`` random images of its shape and classes (which time
    the same as its own)."""
    if dataset == "digits":
        return load_dataset("digits").subset(np.arange(size))
    info = dataset_info(dataset)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(size, *info.input_shape)).astype(np.float32)
    return ArrayDataset(dataset, images, rng.integers(0, info.num_classes, size).astype(np.int64), info.num_classes)


def timed(config: TrainConfig, members: list[Member], *, together: bool, methods: list[str] | None = None) -> float:
    """Seconds to train ``members`` (together or one at a time); appends the gradient method used to ``methods``."""
    groups = [members] if together else [[member] for member in members]
    start = time.perf_counter()
    for group in groups:
        trained = train_models(config=config, members=group, test_data=None, progress=False)
        if methods is not None:
            methods.append(str(trained[0].gradient_method))
    if config.engine.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def opacus_privacy_engine(config: TrainConfig, members: list[Member]) -> float:
    """Seconds to train each member with Opacus's PrivacyEngine, one after the other (same steps, q, z, C)."""
    import warnings

    import torch.nn.functional as F
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    info = dataset_info(config.data.dataset)
    start = time.perf_counter()
    for member in members:
        model = build_model(
            config.model.name, input_shape=info.input_shape, num_classes=info.num_classes, seed=member.model_index
        ).to(config.engine.device)
        data = TensorDataset(torch.from_numpy(member.train_data.images), torch.from_numpy(member.train_data.labels))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
                module=model,
                optimizer=torch.optim.SGD(model.parameters(), lr=config.optimizer.lr),
                data_loader=DataLoader(data, batch_size=config.optimizer.batch_size),
                noise_multiplier=1.0,
                max_grad_norm=config.privacy.clip_norm,
                poisson_sampling=True,
            )
            for _ in range(config.optimizer.epochs):
                for images, labels in loader:
                    optimizer.zero_grad()
                    F.cross_entropy(model(images.to(config.engine.device)), labels.to(config.engine.device)).backward()
                    optimizer.step()
    if config.engine.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """--models, --steps, --batch-size, --dataset-size: the workload this benchmark and its breakdown time."""
    parser.add_argument("--models", type=int, default=11, help="K, models trained (default: 11 = target + 10 shadows)")
    parser.add_argument("--steps", type=int, default=100, help="training steps per model (default: 100)")
    parser.add_argument("--batch-size", type=int, default=36, help="expected batch size b (default: 36)")
    parser.add_argument("--dataset-size", type=int, default=360, help="records per model n (default: 360)")


def workload_epochs(args: argparse.Namespace) -> tuple[int, int]:
    """(steps per epoch, epochs): the whole epochs nearest to --steps (at least one)."""
    steps_per_epoch = math.ceil(args.dataset_size / args.batch_size)
    return steps_per_epoch, max(1, round(args.steps / steps_per_epoch))


def workload(architecture: str, args: argparse.Namespace, **engine: object) -> tuple[TrainConfig, list[Member]]:
    """The timed workload of ``architecture`` (this benchmark's and ``tools/ensemble_breakdown.py``'s): DP-SGD with
    Poisson sampling, C = 1, z = 1 and lr 0.1 for the whole epochs nearest --steps, and K = --models members on the
    --dataset-size records of ``training_set``; ``engine``: engine settings (device, memory_budget_mb).

    Returns:
        The validated configuration and the members.
    """
    dataset = DATASETS[architecture]
    data = training_set(dataset, args.dataset_size)
    members = [Member(train_data=data, model_index=k, label=f"model_{k}") for k in range(args.models)]
    config = TrainConfig.from_dict(
        dict(
            dataset=dataset,
            model=architecture,
            optimizer="dpsgd-gc",
            epochs=workload_epochs(args)[1],
            batch_size=args.batch_size,
            lr=0.1,
            clip_norm=1.0,
            noise_multiplier=1.0,
            sampling="poisson",
            target_size=args.dataset_size,
            num_shadows=0,
            diagnostics=False,
            **engine,
        )
    ).validated()
    return config, members


def measure(architecture: str, args: argparse.Namespace) -> dict:
    """The timings of one architecture, in this process (``main``'s ``results`` entry)."""
    private, members = workload(architecture, args, device=args.device, memory_budget_mb=args.memory_budget_mb)
    data = members[0].train_data
    model = build_model(architecture, input_shape=data.images.shape[1:], num_classes=data.num_classes)
    candidates = candidate_methods(
        model, private.engine.grad_sample, per_sample=True, example=torch.from_numpy(data.images[0])
    )
    timed(private, members[:2], together=True)  # warm-up: imports, kernels, allocator
    opacus_privacy_engine(private.replaced(epochs=1), members[:1])
    kept: list[str] = []  # the method the ensemble's "auto" kept, each round
    # the three the speedups compare first, so that a run cut short has them in its progress lines
    runs = {
        "ensemble_dpsgd": functools.partial(timed, private, members, together=True, methods=kept),
        "opacus_sequential_dpsgd": functools.partial(opacus_privacy_engine, private, members),
        "nonprivate_sequential_sgd": functools.partial(
            timed,
            private.replaced(optimizer="sgd", engine="sequential", clip_norm=None, sigma_dp=None),
            members,
            together=False,
        ),
        "engine_opacus_hooks_sequential_dpsgd": functools.partial(
            timed, private.replaced(engine="sequential", grad_sample="opacus"), members, together=False
        ),
    }
    # every other method of the ensemble by itself (for a model the layer-wise method takes: functorch; for one
    # it cannot: the ones "auto" chose between)
    for other in ("functorch",) if candidates == ("layers",) else candidates:
        runs[f"ensemble_{other}_dpsgd"] = functools.partial(
            timed, private.replaced(grad_sample=other), members, together=True
        )
    rounds, peak_mb = [], {}
    for round_index in range(args.repeats):
        seconds = {}
        for name, run in runs.items():
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            seconds[name] = run()
            if args.device == "cuda":
                peak_mb[name] = max(peak_mb.get(name, 0.0), torch.cuda.max_memory_allocated() / 2**20)
            print(f"{architecture} round {round_index + 1}: {name} {seconds[name]:.2f} s", file=sys.stderr, flush=True)
        rounds.append(seconds)
    seconds = {name: min(round_[name] for round_ in rounds) for name in rounds[0]}
    return {
        "seconds": seconds,
        "seconds_per_round": {name: [round_[name] for round_ in rounds] for name in rounds[0]},
        "speedup_vs_opacus_sequential": seconds["opacus_sequential_dpsgd"] / seconds["ensemble_dpsgd"],
        "ratio_to_nonprivate_sequential": seconds["ensemble_dpsgd"] / seconds["nonprivate_sequential_sgd"],
        "speedup_vs_engine_opacus_hooks_sequential": seconds["engine_opacus_hooks_sequential_dpsgd"]
        / seconds["ensemble_dpsgd"],
        "speedup_vs_ensemble_functorch": seconds["ensemble_functorch_dpsgd"] / seconds["ensemble_dpsgd"],
        "ensemble_gradient_method": kept[-1],
        "ensemble_gradient_method_per_round": kept,
        "ensemble_gradient_candidates": list(candidates),
        "peak_gpu_memory_mb": peak_mb or None,
        "parameters": parameter_count(model),
    }


def in_own_process(architecture: str, args: argparse.Namespace) -> dict:
    """``measure`` of one architecture by this script in a fresh interpreter (same workload, budget and rounds);
    its progress lines pass through."""
    command = [
        sys.executable,
        __file__,
        *("--models", str(args.models), "--steps", str(args.steps), "--batch-size", str(args.batch_size)),
        *("--dataset-size", str(args.dataset_size), "--device", args.device, "--repeats", str(args.repeats)),
        *("--memory-budget-mb", repr(args.memory_budget_mb), "--architectures", architecture),
    ]
    finished = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(finished.stdout)["results"][architecture]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--architectures", nargs="+", default=["cnn-digits", "cnn"], choices=sorted(DATASETS))
    parser.add_argument(
        "--memory-budget-mb",
        type=float,
        default=None,
        help="MiB per gradient call (default: 2048 on a CPU, a quarter of the free memory on a GPU)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of all variants; each keeps its fastest (default: 3)"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    steps_per_epoch, epochs = workload_epochs(args)
    if args.memory_budget_mb is None:
        args.memory_budget_mb = torch.cuda.mem_get_info()[0] / 4 / 2**20 if args.device == "cuda" else 2048.0
    if len(args.architectures) == 1:
        results = {args.architectures[0]: measure(args.architectures[0], args)}
    else:  # each in an interpreter of its own: one's allocator, threads and caches do not time the next
        results = {architecture: in_own_process(architecture, args) for architecture in args.architectures}
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    print(
        json.dumps(
            {
                "models_K": args.models,
                "steps_per_model": epochs * steps_per_epoch,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "dataset_size": args.dataset_size,
                "device": args.device,
                "device_name": device_name,
                "threads": torch.get_num_threads(),
                "memory_budget_mb": args.memory_budget_mb,
                "cpu_count": os.cpu_count(),
                "process_per_architecture": len(args.architectures) > 1,
                "results": results,
                "versions": {
                    "python": platform.python_version(),
                    "torch": torch.__version__,
                    "opacus": __import__("opacus").__version__,
                    "numpy": np.__version__,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
