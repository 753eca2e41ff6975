"""Power of the DPSGD-GC/DC paper's shadow attack against its null, per training regime; prints JSON.

python benchmarks/dpsgd_dc_regime.py [--regimes NAME ...] [--trials 3] [--out DIR]

Each regime is one DPSGD-GC (or DPSGD-DC) configuration as ``workflow/rules/dpsgd_dc.smk`` runs it: ``dpaudit
train`` with the section's σ_DP = 0.002, C = 20, η = 0.1 and shuffled batches, then ``dpaudit attack``, each
single-threaded (OMP_NUM_THREADS=1), at the model, members n, epochs E, batch size b, shadows and domain radius D
the regime names. At every checkpoint, with the trials' scores pooled: the eq. 20 point estimate at the attack's
own 0.5 threshold, its null level (95 % quantile over 200 permutations of the membership labels), the 95 % lower
bound on ε (split selection) and its ceiling (a perfect attack at this sample size). Wall seconds of training and
of the attack per run (medians over trials, which run interleaved across regimes) give the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from dpaudit.attacks import read_scores_csv
from dpaudit.estimate import empirical_epsilon, epsilon_ceiling, epsilon_lower_bound, error_rates

DELTA = 1e-5
PAPER_FLAGS = ["--dataset", "digits", "--optimizer", "dpsgd-gc", "--sigma-dp", "0.002", "--clip-norm", "20"]
PAPER_FLAGS += ["--lr", "0.1", "--sampling", "shuffle", "--seed", "0"]

# name: (model, members n, epochs, batch size, shadows, DPSGD-DC domain radius or None for DPSGD-GC); checkpoints
# at six evenly spaced epochs
REGIMES = {
    "before: cnn-digits, n=360, E=60, b=20": ("cnn-digits", 360, 60, 20, 3, None),
    "before: cnn-digits, n=360, E=60, b=120": ("cnn-digits", 360, 60, 120, 3, None),
    "before: cnn-digits, n=360, E=60, b=20, DC D=2": ("cnn-digits", 360, 60, 20, 3, 2.0),
    "cnn-digits, n=120, E=180, b=20": ("cnn-digits", 120, 180, 20, 3, None),
    "mlp, n=180, E=120, b=20": ("mlp", 180, 120, 20, 3, None),
    "mlp, n=180, E=120, b=120": ("mlp", 180, 120, 120, 3, None),
    "mlp, n=180, E=120, b=20, DC D=2": ("mlp", 180, 120, 20, 3, 2.0),
    "mlp, n=360, E=60, b=20": ("mlp", 360, 60, 20, 3, None),
    "mlp, n=360, E=150, b=20": ("mlp", 360, 150, 20, 3, None),
    "mlp, n=360, E=150, b=120": ("mlp", 360, 150, 120, 3, None),
    "mlp, n=360, E=150, b=20, DC D=2": ("mlp", 360, 150, 20, 3, 2.0),
}


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def _checkpoint(runs: list[Path], epoch: int, rng: np.random.Generator) -> dict:
    parts = [read_scores_csv(run / f"scores_epoch_{epoch:04d}.csv") for run in runs]
    members = np.concatenate([m for m, _ in parts])
    nonmembers = np.concatenate([n for _, n in parts])
    predicted = np.concatenate([members, nonmembers]) > 0.5
    labels = np.arange(len(predicted)) < len(members)
    point = empirical_epsilon(*error_rates(predicted, labels), delta=DELTA)
    null = [empirical_epsilon(*error_rates(predicted, rng.permutation(labels)), delta=DELTA) for _ in range(200)]
    return {
        "epoch": epoch,
        "point": point,
        "null_95": float(np.quantile(null, 0.95)),
        "lower_bound_95": epsilon_lower_bound(members, nonmembers, delta=DELTA).epsilon,
        "ceiling": epsilon_ceiling(n_members=len(members), n_nonmembers=len(nonmembers), delta=DELTA),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES), metavar="NAME")
    parser.add_argument("--trials", type=int, default=3, help="trials per regime, scores pooled (default: 3)")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="dpsgd_dc_regime_"))
    runs = {name: [] for name in args.regimes}
    seconds = {name: {"train": [], "attack": []} for name in args.regimes}
    for trial in range(args.trials):  # trials outside, regimes inside: timings interleaved
        for name in args.regimes:
            model, n, epochs, batch, shadows, radius = REGIMES[name]
            evals = ",".join(str(epochs * k // 6) for k in range(1, 7))
            run = root / f"{model}_n{n}_E{epochs}_b{batch}_s{shadows}_D{radius}" / f"trial_{trial}"
            flags = ["--model", model, "--target-size", str(n), "--epochs", str(epochs), "--eval-epochs", evals]
            flags += ["--batch-size", str(batch), "--num-shadows", str(shadows), "--trial", str(trial)]
            if radius is not None:
                flags += ["--optimizer", "dpsgd-dc", "--domain-radius", str(radius)]
            command = ["dpaudit", "train", "--out", str(run), "--quiet", "--restart", *PAPER_FLAGS, *flags]
            seconds[name]["train"].append(_timed(command))
            seconds[name]["attack"].append(_timed(["dpaudit", "attack", "--quiet", "--run", str(run)]))
            runs[name].append(run)
    results = []
    for name in args.regimes:
        epochs = REGIMES[name][2]
        rng = np.random.default_rng(0)
        checkpoints = [_checkpoint(runs[name], epochs * k // 6, rng) for k in range(1, 7)]
        results.append(
            {
                "regime": name,
                "trials_pooled": args.trials,
                "train_seconds": float(np.median(seconds[name]["train"])),
                "attack_seconds": float(np.median(seconds[name]["attack"])),
                "lower_bounds_positive": sum(c["lower_bound_95"] > 0 for c in checkpoints),
                "points_above_null": sum(c["point"] > c["null_95"] for c in checkpoints),
                "checkpoints": checkpoints,
            }
        )
    print(json.dumps({"delta": DELTA, "confidence": 0.95, "selection": "split", "regimes": results}, indent=1))


if __name__ == "__main__":
    main()
