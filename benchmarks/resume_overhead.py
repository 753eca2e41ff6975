"""What saving the training state for resuming costs: one digits run (target + 10 shadows, canaries) trained
with a state save at every epoch end and with none; prints JSON.

Usage: python benchmarks/resume_overhead.py [--epochs 30] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch

    from dpaudit.config import TrainConfig
    from dpaudit.train import _ModelRun, train_configuration

    config = TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="cnn-digits",
            optimizer="dpsgd-gc",
            sigma_dp=0.01,
            clip_norm=1.0,
            batch_size=50,
            lr=0.1,
            epochs=args.epochs,
            target_size=300,
            num_shadows=10,
            canaries=50,
            device="cpu",
        )
    )
    sizes: list[int] = []
    save = _ModelRun.save_state

    def save_and_measure(run, epoch):
        save(run, epoch)
        sizes.append(run.out.state(epoch).stat().st_size)

    _ModelRun.save_state = save_and_measure
    seconds = {"every_epoch": [], "never": []}
    with tempfile.TemporaryDirectory() as work:
        train_configuration(config, out_dir=Path(work) / "warm-up", progress=False, state_every=1e9)
        for repeat in range(args.repeats):
            for name, every in (("every_epoch", 0.0), ("never", 1e9)):
                started = time.perf_counter()
                train_configuration(config, out_dir=Path(work) / f"{name}_{repeat}", progress=False, state_every=every)
                seconds[name].append(time.perf_counter() - started)
    best = {name: min(values) for name, values in seconds.items()}
    print(
        json.dumps(
            {
                "models": 1 + config.audit.num_shadows,
                "epochs": config.optimizer.epochs,
                "saves": len(sizes),
                "seconds": seconds,
                "best_seconds": best,
                "overhead_every_epoch": best["every_epoch"] / best["never"] - 1,
                "seconds_per_save": (best["every_epoch"] - best["never"]) / max(1, len(sizes) // args.repeats),
                "state_file_bytes_max": max(sizes, default=0),
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
