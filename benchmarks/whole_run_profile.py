"""Assumption-free whole-run audits of DP-SGD at 10⁵ to 10⁷ canaries per side, with their privacy profiles; prints JSON.

The run of ``whole_run_audit.py`` (DP-SGD, dpsgd-gc, lr 0.2, on digits: cnn-digits, n = 360, b = 36 Poisson, 20 epochs
= 200 steps, q = 0.1, C = 1; noise calibrated with the PRV accountant to each ε at δ = 1e-5), trained once per
(ε, canary count) with M canaries per side (2M whole-run canaries, each a member with probability ½), each run in a
child process of its own (its peak memory, ``peak_rss_gb``: training and audit). Per run, from the statistics the run
summed online:

* the assumption-free privacy profile of Λ (every iterate) and of Σ_t x_t (final model),
  ``dpaudit.privacy_profile.assumption_free_profile``: ε̂(δ') for δ' = δ … 10⁻², each threshold fixed by the ledger
  before the scores are read, every canary certifying; beside each, the ledger's ε(δ') (PLD) and the bound the
  threshold predicts for a run that is its claim (``expected``: the ceiling these counts allow);
* the family bound (``family_lower_bound``, threshold chosen on the ledger): a test of the ledger's σ, q and T, a lower
  bound only if the run is a composed Poisson-subsampled Gaussian.

``--small-q``: the same with b = 4 (q = 1/90 ≈ 0.011, T = 1800), where the ceiling at each canary count is also
computed for 10⁷ per side (``expected_at``), whether or not that count was run.

Usage: python benchmarks/whole_run_profile.py [--per-side 100000 1000000 10000000] [--epsilons 1 2 4 8]
       [--batch-size 36] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DELTA = 1e-5


def one_run(*, epsilon: float, per_side: int, batch_size: int, seed: int) -> dict:
    """Train and audit one configuration in this process; the row of the JSON."""
    from validation_bugs import base_config  # the digits DP-SGD run with whole-run canaries

    from dpaudit.attacks.canary_run import load_run_canaries
    from dpaudit.privacy_profile import assumption_free_profile, ledger_threshold
    from dpaudit.train import train_configuration
    from dpaudit.whole_run import FAMILY_LABEL, family_lower_bound

    config = base_config(epsilon=epsilon, per_side=per_side, epochs=20, seed=seed, batch_size=batch_size)
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        train_configuration(config, out_dir=Path(work) / "run", progress=False)
        training = time.perf_counter() - started
        loop = json.loads((Path(work) / "run" / "target" / "metrics.json").read_text())["elapsed_seconds"][-1]
        observed = load_run_canaries(Path(work) / "run")
    started = time.perf_counter()
    ledger = {"noise_multipliers": observed.noise_std, "sample_rates": observed.sample_rates}
    row: dict = {
        "epsilon_target": epsilon,
        "canaries_per_side": per_side,
        "members": int(observed.members.sum()),
        "nonmembers": int((~observed.members).sum()),
        "batch_size": batch_size,
        "sample_rate": float(observed.sample_rates[0]),
        "steps": observed.steps,
        "noise_multiplier": float(observed.noise_multipliers[0]),
        "presence_p_value": observed.presence_p_value(),
    }
    for name, statistic in (("all_iterates", "all"), ("final_model", "final")):
        members, nonmembers = observed.scores(statistic)
        profile = assumption_free_profile(
            members,
            nonmembers,
            statistic=name.replace("_", "-"),
            claimed_noise_multipliers=observed.noise_multipliers,
            delta=DELTA,
            **ledger,
        )
        family = family_lower_bound(
            members, nonmembers, **ledger, delta=DELTA, selection="ledger", statistic=name.replace("_", "-")
        )
        row[name] = {
            "profile": profile.to_dict(),
            "ratio_at_delta": profile.headline.epsilon_lower / profile.headline.epsilon_pld,
            "expected_ratio_at_delta": profile.headline.epsilon_expected / profile.headline.epsilon_pld,
            "ratio_at_1e-2": profile.points[-1].epsilon_lower / profile.points[-1].epsilon_pld,
            "expected_ratio_at_1e-2": profile.points[-1].epsilon_expected / profile.points[-1].epsilon_pld,
            "family": {"epsilon": family.epsilon, "ratio": family.epsilon / profile.headline.epsilon_pld},
            "family_kind": FAMILY_LABEL,
            "expected_ratio_at": {  # the ceiling at other counts per side, by calculation (nothing trained)
                str(size): ledger_threshold(
                    statistic=name.replace("_", "-"), n_members=size, n_nonmembers=size, delta=DELTA, **ledger
                )[1]
                / profile.headline.epsilon_pld
                for size in (10**5, 10**6, 10**7)
            },
        }
    row["seconds"] = {"training": training, "loop": loop, "audit": time.perf_counter() - started}
    row["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-side", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--batch-size", type=int, default=36, help="b of n = 360 (4: q ≈ 0.011, T = 1800)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one configuration
    args = parser.parse_args()
    if args.one:
        row = one_run(epsilon=args.epsilons[0], per_side=args.per_side[0], batch_size=args.batch_size, seed=args.seed)
        print(json.dumps(row))
        return
    rows = []
    for epsilon in args.epsilons:
        for per_side in args.per_side:
            command = [sys.executable, __file__, "--one", "--epsilons", str(epsilon), "--per-side", str(per_side)]
            command += ["--batch-size", str(args.batch_size), "--seed", str(args.seed)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            brief = {key: rows[-1][key] for key in ("epsilon_target", "canaries_per_side", "peak_rss_gb")}
            brief.update({name: rows[-1][name]["ratio_at_delta"] for name in ("all_iterates", "final_model")})
            print(json.dumps(brief), file=sys.stderr, flush=True)
    print(json.dumps({"machine": platform.machine(), "delta": DELTA, "seed": args.seed, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
