"""Whether record-level canaries flag each misconfigured Opacus run, and never its correct twin; prints JSON.

The runs are ``dpaudit.opacus.planted.run_digits``: a 64-16-10 MLP on digits, Opacus in a plain loop with one of
``MISCONFIGURATIONS`` planted (another loader than the accounted one, shuffled batches accounted as Poisson, batches
accumulated by hand, a mean divided by ⌊q·n⌋ at a small n, the model's noise divided by the batch), the noise
calibrated by the PRV accountant to each claimed ε at δ = 1e-5, M record-level canaries. Each is audited against the
run's own accountant (``RecordCanaries.report``: five checks at 0.05/5 each, and the divisor finding). The twins are
the same runs without the misconfiguration (``loss_reduction="sum"``), over several seeds; the small-n twin is the
small-n run with a summed loss.

Usage: python benchmarks/opacus_record_bugs.py [--canaries 20000] [--epsilons 1 4] [--twin-seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings

SMALL = {"records": 30, "batch": 15, "epochs": 20}  # the small-n runs: q = 1/2


def _row(report, *, name: str, epsilon: float, seed: int, seconds: float) -> dict:
    return {
        "run": name,
        "epsilon_target": epsilon,
        "seed": seed,
        "epsilon_accountant": report.epsilon_accountant,
        "flagged": report.flagged,
        "flagged_by": list(report.flag.flagged_by) + (["divisor"] if any("#819" in f for f in report.findings) else []),
        "presence_p_value": report.flag.presence_p_value,
        "noise_p_value": report.flag.checks.get("noise"),
        "all_iterates_family": report.whole_run.all_iterates_family.epsilon,
        "all_iterates_assumption_free": report.whole_run.all_iterates.epsilon_lower,
        "observed": report.observed,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=20_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--twin-seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    from dpaudit.opacus.planted import MISCONFIGURATIONS, run_digits

    torch.set_num_threads(1)
    rows = []

    def run(name: str, misconfiguration: str | None, *, epsilon: float, seed: int, **options) -> None:
        started = time.perf_counter()
        report = run_digits(misconfiguration, canaries=args.canaries, epsilon=epsilon, seed=seed, **options)
        rows.append(_row(report, name=name, epsilon=epsilon, seed=seed, seconds=time.perf_counter() - started))
        print(json.dumps(rows[-1]), flush=True)

    for epsilon in args.epsilons:
        for misconfiguration in MISCONFIGURATIONS:
            small = SMALL if misconfiguration == "expected-batch-small-n" else {}
            run(misconfiguration, misconfiguration, epsilon=epsilon, seed=0, **small)
        for seed in args.twin_seeds:
            run("twin", None, epsilon=epsilon, seed=seed)
            run("twin (small n, summed loss)", None, epsilon=epsilon, seed=seed, **SMALL)
    bugs = [row for row in rows if row["run"] in MISCONFIGURATIONS]
    twins = [row for row in rows if row["run"].startswith("twin")]
    result = {
        "machine": platform.machine(),
        "canaries": args.canaries,
        "rule": "RecordCanaries.report: five checks (family, assumption-free, spread, presence, noise) at 0.05/5 "
        "each, and the divisor finding",
        "bugs_flagged": f"{sum(row['flagged'] for row in bugs)}/{len(bugs)}",
        "twins_flagged": f"{sum(row['flagged'] for row in twins)}/{len(twins)}",
        "runs": rows,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
