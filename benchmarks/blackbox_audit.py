"""How much of ε a black-box audit certifies from the final model alone (``dpaudit.blackbox``); prints JSON.

DP-SGD (dpsgd-gc, C = 1, lr 0.1) on digits (``mlp``, n = 100 records including the canary's slot), its noise
calibrated with the PRV accountant to each ε at δ = 1e-5. Each case trains K models of one configuration, the canary
present in each with probability ½, and audits the K final models' losses on it:

* ``poisson``: Poisson subsampling at q = 0.5 (b = 50, T = 20), ε ∈ {2, 4, 8}, worst-case initialisation (every model
  starts from θ₀ trained on the 99 records), the bright canary (every pixel at the data's maximum, its label the
  least likely at θ₀); at ε = 8 with the most models, the rung's headline;
* ``poisson-q0.1``: q = 0.1 (b = 10, T = 100) at ε = 8, the ladder's regime, where the last-iterate heuristic (what
  a final model reveals under a linear loss) sits lower and the tail events are rarer;
* ``full-batch``: q = 1 (T = 10), ε ∈ {2, 4, 8}, worst-case initialisation: the run is μ-GDP, so the Gaussian-DP
  reading is a family bound there (Annamalai & De Cristofaro's setting);
* ``natural``: q = 0.5 at ε = 8 from random initialisations (the natural threat model);
* ``canaries``: q = 0.5 at ε = 8, each canary kind;
* ``one-run``: one model with 200 mislabelled canaries (n = 500), q = 0.5, ε = 8, the one-run bound.

For each: the assumption-free 95 % lower bound (Clopper–Pearson, threshold on a held-out fifth) and its ceiling for
the K used, the Gaussian-DP reading (a family bound at q = 1, an estimate otherwise), AUC and TPR at FPR 10⁻³, each
as a ratio to the run's ε (PLD) and to the last-iterate heuristic; and the training seconds.

Usage: python benchmarks/blackbox_audit.py [--scale 1.0] [--cases poisson full-batch ...]
(``--scale`` multiplies every K; 0.01 is a smoke run.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time

DELTA = 1e-5
N = 100
COMMON = dict(
    optimizer="dpsgd-gc",
    dataset="digits",
    model="mlp",
    lr=0.1,
    clip_norm=1.0,
    sampling="poisson",
    accountant="prv",
    num_shadows=0,
    canaries=0,
    diagnostics=False,
    device="cpu",
)
# case → [(ε, models, settings)]
CASES = {
    "poisson": [
        (2.0, 20_000, {}),
        (4.0, 20_000, {}),
        (8.0, 200_000, {}),
    ],
    "poisson-q0.1": [(8.0, 20_000, {"batch_size": 10, "epochs": 10})],
    "full-batch": [(eps, 20_000, {"batch_size": N, "epochs": 10}) for eps in (2.0, 4.0, 8.0)],
    "natural": [(8.0, 4_000, {"initialisation": "natural"})],
    "canaries": [(8.0, 4_000, {"canary": kind}) for kind in ("bright", "blank", "mislabelled", "gradient-aligned")],
    "one-run": [(8.0, 200, {"design": "one run", "target_size": 500, "batch_size": 250})],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every K (0.01: a smoke run)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from dpaudit.blackbox import audit_many_models, audit_one_run
    from dpaudit.config import TrainConfig

    rows = []
    for case in args.cases:
        for epsilon, count, settings in CASES[case]:
            settings = dict(settings)
            design = settings.pop("design", "many models")
            audit = {key: settings.pop(key) for key in ("canary", "initialisation") if key in settings}
            train = {"target_size": N, "batch_size": 50, "epochs": 10, **settings}
            config = TrainConfig.from_dict(
                {**COMMON, **train, "target_epsilon": epsilon, "eval_epochs": [train["epochs"]]}
            )
            started = time.perf_counter()
            if design == "one run":
                report = audit_one_run(config=config, canaries=count, seed=args.seed, progress=False)
            else:
                models = max(40, round(count * args.scale))
                report = audit_many_models(config=config, models=models, seed=args.seed, progress=False, **audit)
            seconds = time.perf_counter() - started
            row = {"case": case, **report.to_dict(), "seconds": round(seconds, 1)}
            for key in [k for k in ("epsilon_lower", "epsilon_gdp", "epsilon_ceiling") if row[k] is not None]:
                row[f"{key}_share"] = round(row[key] / report.epsilon, 3)
                if report.epsilon_last_iterate:
                    row[f"{key}_share_of_last_iterate"] = round(row[key] / report.epsilon_last_iterate, 3)
            rows.append(row)
            print(
                f"{case} ε={epsilon:g} K={report.trials}: AF {report.epsilon_lower:.2f} "
                f"(ceiling {report.epsilon_ceiling:.2f}), GDP {report.epsilon_gdp}, last-iterate "
                f"{report.epsilon_last_iterate}, {seconds:.0f} s",
                flush=True,
                file=sys.stderr,
            )
    print(json.dumps({"delta": DELTA, "records": N, "rows": rows}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
