"""How the family bound's threshold selection affects it, on exact simulations of DP-SGD's mechanism; prints JSON.

Setting of the digits preset (as ``whole_run_ceiling.py``): q = 0.1, T = 200, δ = 1e-5, z calibrated so that the
PLD ε is 1, 2, 4 and 8; 10⁵ canaries per side simulated exactly (``dpaudit.whole_run.simulate_scores``, seeds
100 + k: never an audited run's scores). Per ε and selection rule, the family bound on Λ over ``--seeds``
simulations, as a fraction of the PLD ε: each value, the mean and the smallest. Rules: the threshold chosen on a
share of each class, judging candidates by Clopper–Pearson at a level (``family_lower_bound``'s
``selection_share`` and ``selection_alpha``); the certificate is always at α/2 per side, so every rule is valid
and only their power differs.

python benchmarks/family_selection.py [--seeds 10] [--per-side 100000]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from whole_run_ceiling import DELTA, SAMPLE_RATE, STEPS, calibrate

RULES = {  # name → (selection_share, selection_alpha)
    "half, alpha/2 (previous)": (0.5, 0.025),
    "half, 1e-3": (0.5, 1e-3),
    "30 %, 1e-3 (default)": (0.3, 1e-3),
    "30 %, 1e-4": (0.3, 1e-4),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--per-side", type=int, default=100_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    args = parser.parse_args()

    from dpaudit.theory.tradeoff import sgm_epsilon
    from dpaudit.whole_run import family_lower_bound, simulate_scores

    results = []
    for target in args.epsilons:
        noise, rates = np.full(STEPS, calibrate(target)), np.full(STEPS, SAMPLE_RATE)
        eps_pld = sgm_epsilon(noise_multipliers=noise, sample_rates=rates, delta=DELTA)
        ratios: dict[str, list[float]] = {name: [] for name in RULES}
        for k in range(args.seeds):
            sizes = {"members": args.per_side, "nonmembers": args.per_side}
            scores = simulate_scores(**sizes, noise_multipliers=noise, sample_rates=rates, seed=100 + k)
            for name, (share, level) in RULES.items():
                bound = family_lower_bound(
                    scores.member_lr,
                    scores.nonmember_lr,
                    noise_multipliers=noise,
                    sample_rates=rates,
                    delta=DELTA,
                    seed=k,
                    selection_share=share,
                    selection_alpha=level,
                )
                ratios[name].append(round(bound.epsilon / eps_pld, 4))
        for name, values in ratios.items():
            results.append(
                {
                    "target_epsilon": target,
                    "rule": name,
                    "selection_share": RULES[name][0],
                    "selection_alpha": RULES[name][1],
                    "family_over_pld": values,
                    "mean": round(float(np.mean(values)), 4),
                    "smallest": float(np.min(values)),
                }
            )
    setting = {"sample_rate": SAMPLE_RATE, "steps": STEPS, "delta": DELTA, "canaries_per_side": args.per_side}
    print(json.dumps({"setting": setting, "seeds": args.seeds, "results": results}, indent=1))


if __name__ == "__main__":
    main()
