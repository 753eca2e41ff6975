"""How close whole-run Dirac-canary audits of DP-SGD get to the accountant's ε, on exact simulations; prints JSON.

Setting of the digits preset: q = 0.1 (n = 360, b = 36), T = 200 steps (20 epochs), δ = 1e-5, z calibrated
so that the PLD ε is 1, 2, 4 and 8, M canaries per side simulated exactly (dpaudit.whole_run.simulate_scores).
Per (ε, M): the family bound on Λ (dpaudit.whole_run.family_lower_bound), the assumption-free
Clopper–Pearson bound on Λ and on Σ x_t (dpaudit.estimate.epsilon_lower_bound, "split"), the last-iterate
heuristic ε (the ceiling of Σ x_t), the RDP ε, and the wall seconds of each part.

python benchmarks/whole_run_ceiling.py [--quick] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

DELTA = 1e-5
SAMPLE_RATE = 0.1
STEPS = 200
STATISTICS = "all iterates: Lambda = sum_t log(1 - q + q exp((x_t - 1/2) / z^2)); final model: sum_t x_t"
#: the issue's targets, as fractions of the PLD ε (for orientation only; nothing is tuned to them)
TARGETS = {
    "family_ratio_at_eps_1_with_1e5_per_side": 0.85,
    "family_ratio_at_eps_2_4_8_with_1e5_per_side": 0.90,
    "assumption_free_ratio": 0.45,
}


def calibrate(target: float) -> float:
    """z with PLD ε(z) = target at q = 0.1, T = 200, δ = 1e-5 (Brent's method)."""
    from scipy import optimize

    from dpaudit.theory.tradeoff import sgm_epsilon

    rates = np.full(STEPS, SAMPLE_RATE)

    def gap(z: float) -> float:
        return sgm_epsilon(noise_multipliers=np.full(STEPS, z), sample_rates=rates, delta=DELTA) - target

    return optimize.brentq(gap, 0.3, 100.0, xtol=1e-5)


def one_setting(target: float, sizes: list[int], seed: int) -> list[dict]:
    from dpaudit.estimate import epsilon_lower_bound
    from dpaudit.theory import epsilon as accountant_epsilon
    from dpaudit.theory.tradeoff import last_iterate_epsilon, sgm_epsilon
    from dpaudit.whole_run import family_lower_bound, simulate_scores

    start = time.perf_counter()
    z = calibrate(target)
    noise, rates = np.full(STEPS, z), np.full(STEPS, SAMPLE_RATE)
    eps_pld = sgm_epsilon(noise_multipliers=noise, sample_rates=rates, delta=DELTA)
    eps_rdp = accountant_epsilon(
        noise_multiplier=z, sample_rate=SAMPLE_RATE, steps=STEPS, delta=DELTA, accountant="rdp"
    )
    eps_last = last_iterate_epsilon(noise_multiplier=z, sample_rate=SAMPLE_RATE, steps=STEPS, delta=DELTA)
    theory_s = time.perf_counter() - start
    rows = []
    for size in sizes:
        t0 = time.perf_counter()
        scores = simulate_scores(members=size, nonmembers=size, noise_multipliers=noise, sample_rates=rates, seed=seed)
        t1 = time.perf_counter()
        family = family_lower_bound(
            scores.member_lr, scores.nonmember_lr, noise_multipliers=noise, sample_rates=rates, delta=DELTA, seed=seed
        )
        t2 = time.perf_counter()
        free_lr = epsilon_lower_bound(scores.member_lr, scores.nonmember_lr, delta=DELTA, selection="split", seed=seed)
        free_sum = epsilon_lower_bound(
            scores.member_sum, scores.nonmember_sum, delta=DELTA, selection="split", seed=seed
        )
        t3 = time.perf_counter()
        rows.append(
            {
                "target_epsilon": target,
                "canaries_per_side": size,
                "noise_multiplier": z,
                "epsilon_pld": eps_pld,
                "epsilon_rdp": eps_rdp,
                "pld_over_rdp": eps_pld / eps_rdp,
                "family_bound": family.epsilon,
                "family_ratio": family.epsilon / eps_pld,
                "family_capped": family.capped,
                "family_noise_scale": family.noise_scale,
                "family_fpr_upper": family.fpr_upper,
                "family_fnr_upper": family.fnr_upper,
                "family_hypotheses": family.hypotheses,
                "assumption_free_lr_bound": free_lr.epsilon,
                "assumption_free_lr_ratio": free_lr.epsilon / eps_pld,
                "final_model_sum_bound": free_sum.epsilon,
                "final_model_sum_ratio": free_sum.epsilon / eps_pld,
                "last_iterate_heuristic_epsilon": eps_last,
                "last_iterate_ratio": eps_last / eps_pld,
                "seconds": {
                    "theory": theory_s,
                    "simulate": t1 - t0,
                    "family_bound_incl_first_grid_build": t2 - t1,
                    "assumption_free_both": t3 - t2,
                },
            }
        )
        theory_s = 0.0  # count the calibration once per ε
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ε = 2 and 10,000 canaries per side only")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation and of the splits (default: 0)")
    args = parser.parse_args()
    targets = [2.0] if args.quick else [1.0, 2.0, 4.0, 8.0]
    sizes = [10_000] if args.quick else [10_000, 100_000]
    start = time.perf_counter()
    rows = [row for target in targets for row in one_setting(target, sizes, args.seed)]
    print(
        json.dumps(
            {
                "setting": {
                    "sample_rate": SAMPLE_RATE,
                    "steps": STEPS,
                    "delta": DELTA,
                    "confidence": 0.95,
                    "seed": args.seed,
                    "statistics": STATISTICS,
                },
                "targets": TARGETS,
                "results": rows,
                "wall_seconds": time.perf_counter() - start,
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "numpy": np.__version__,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
