"""Whether whole-run canaries see bugs in the model's own sampling and noise, and never their correct twin; prints JSON.

The bugs are ``dpaudit.planted_bugs.PLANTED_BUGS``: the model's noise generator re-seeded before every step, the
noise divided by b once more, Poisson sampling at half the ledger's rate. Each touches only the model's stream, and
each run claims what its correct twin claims. The runs are those of ``benchmarks/validation_bugs.py`` (DP-SGD on
digits, n = 360, b = 36, C = 1, lr 0.2, target only, noise calibrated by PRV to each claimed ε at δ = 1e-5, M whole-run
canaries per side), audited against their own ledger by ``dpaudit.audit.validation_flag`` (four checks, each at
level 0.05/4). ``canary_randomness`` chooses whether the canaries draw from generators derived from the model's
("derived", the model trained bit for bit as without canaries) or share its draws ("joint"); both must see every bug.

Usage: python benchmarks/model_stream_bugs.py [--per-side 100000] [--epsilons 1 2 4 8] [--epochs 20]
           [--randomness derived joint] [--seeds 0]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

from validation_bugs import DELTA, FALSE_ALARM, FLAG_RULE, audit_run, base_config


def main() -> None:
    from dpaudit.planted_bugs import PLANTED_BUGS, planted

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-side", type=int, default=100_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--randomness", nargs="+", choices=("joint", "derived"), default=["derived", "joint"])
    parser.add_argument("--bugs", nargs="+", choices=PLANTED_BUGS, default=list(PLANTED_BUGS))
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for randomness in args.randomness:
            for seed in args.seeds:
                for epsilon in args.epsilons:
                    config = base_config(epsilon=epsilon, per_side=args.per_side, epochs=args.epochs, seed=seed)
                    config = config.replaced(canary_randomness=randomness)
                    name = f"{randomness}_{seed}_{epsilon}"
                    twin = audit_run(config, Path(work) / f"twin_{name}", seed=seed)
                    for bug in args.bugs:
                        with planted(bug):
                            run = audit_run(config, Path(work) / f"{bug}_{name}", seed=seed)
                        rows.append(
                            {
                                "bug": bug,
                                "canary_randomness": randomness,
                                "epsilon_target": epsilon,
                                "seed": seed,
                                "bug_run": run,
                                "twin": twin,
                            }
                        )
                        print(json.dumps(rows[-1]), flush=True)
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "delta": DELTA,
                "flag_rule": FLAG_RULE,
                "false_alarm": FALSE_ALARM,
                "canaries_per_side": args.per_side,
                "epochs": args.epochs,
                "summary": {
                    bug: {
                        "flagged": sum(row["bug_run"]["flagged"] for row in rows if row["bug"] == bug),
                        "twin_flagged": sum(row["twin"]["flagged"] for row in rows if row["bug"] == bug),
                        "runs": sum(row["bug"] == bug for row in rows),
                    }
                    for bug in args.bugs
                },
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
