"""Why AdaDPIGU's black-box rung reads about 0 on digits: its rung run beside one-change variants; prints JSON.

The default preset's black-box rung trains K models of each optimizer's own run on digits (params.yaml: the run's
``optimizers.runs`` settings, then ``audit.black_box.settings`` and ``run_settings``; AdaDPIGU on ``linear``, n = 100,
q = 0.5, T = 20, PRV accountant) and audits the final models' losses on a crafted canary. Each case here trains K such
models at ε (default 8), the canary present in each with probability ½ (``dpaudit.blackbox.audit_many_models``):

* ``rung``: the rung's AdaDPIGU run as the pipeline trains it (its retention ratio 0.6, its lr), the rung's canary and
  initialisation (``audit.black_box``);
* ``retention-0.99``: the same, keeping 99 % of the coordinates after pre-training;
* ``dpsgd-gc``: DP-SGD with the same settings (no pruning, no standardisation);
* ``natural``: the rung's run from random initialisations instead of the adversary's θ₀;
* ``mislabelled``, ``blank``: the rung's run with the other input-space canaries.

For each: the assumption-free 95 % lower bound, the Gaussian-DP reading (an estimate with subsampling), AUC, and the
ratio of the bound to the run's ε. What it shows on this machine (``benchmarks/results/blackbox_pruning.json``): the
pruning mask, chosen at the end of pre-training from noisy importances, undoes the adversary's θ₀, and the canary's
loss then varies with the mask more than with its membership.

Usage: python benchmarks/blackbox_pruning.py [--models 500] [--epsilon 8] [--cases rung dpsgd-gc ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rung_settings(name: str) -> tuple[dict, dict]:
    """(the flat settings of the default preset's black-box rung run of ``name``, ``audit.black_box``)."""
    import yaml

    sys.path.insert(0, str(ROOT / "workflow"))
    from reproduce.pipeline_config import black_box_settings

    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    runs = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in params["optimizers"]["runs"]}
    audit = params["audit"]
    return black_box_settings(name, runs=runs, audit=audit), audit["black_box"]


CASES = ("rung", "retention-0.99", "dpsgd-gc", "natural", "mislabelled", "blank")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=500, help="K, models per case")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from dpaudit.blackbox import audit_many_models
    from dpaudit.config import TrainConfig

    settings, black_box = rung_settings("adadpigu")
    settings = {**settings, "target_epsilon": args.epsilon, "seed": args.seed}
    canary, initialisation = black_box["canary"], black_box["initialisation"]
    variants = {
        "rung": ({}, canary, initialisation),
        "retention-0.99": ({"retention_ratio": 0.99}, canary, initialisation),
        "dpsgd-gc": (
            {"optimizer": "dpsgd-gc", "retention_ratio": None, "pretrain_fraction": None},
            canary,
            initialisation,
        ),
        "natural": ({}, canary, "natural"),
        "mislabelled": ({}, "mislabelled", initialisation),
        "blank": ({}, "blank", initialisation),
    }
    rows = {}
    for case in args.cases:
        changes, kind, start = variants[case]
        values = {key: value for key, value in {**settings, **changes}.items() if value is not None}
        config = TrainConfig.from_dict(values)
        started = time.perf_counter()
        report = audit_many_models(config=config, models=args.models, canary=kind, initialisation=start, progress=False)
        found = report.to_dict()
        rows[case] = {
            "optimizer": values["optimizer"],
            "retention_ratio": values.get("retention_ratio"),
            "canary": kind,
            "initialisation": start,
            "epsilon": found["epsilon"],
            "assumption_free_lower_bound": found["epsilon_lower"],
            "assumption_free_share_of_epsilon": found["epsilon_lower"] / found["epsilon"],
            "gdp_reading": found["epsilon_gdp"],
            "gdp_reading_label": found["gdp_label"],
            "auc": found["auc"],
            "seconds": time.perf_counter() - started,
        }
        print(json.dumps({"case": case, **rows[case]}), flush=True)
    print(json.dumps({"models": args.models, "settings": settings, "cases": rows}, indent=1))


if __name__ == "__main__":
    main()
