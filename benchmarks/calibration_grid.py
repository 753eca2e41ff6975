"""Noise calibration across a grid of settings: seconds, peak memory and round trip of each call.

Each call runs in a fresh process, so its peak resident memory (which includes importing torch, about
0.6 GB, for the PRV accountant) is its own. Prints JSON, one record per setting.

Usage: python benchmarks/calibration_grid.py [--accountant prv] [--rates 0.001,0.01,0.1]
       [--steps 100,1000,10000] [--epsilons 0.5,1,4,8] [--delta 1e-5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
from dpaudit.theory import calibrate_noise, epsilon
q, steps, target = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
delta, accountant = float(sys.argv[4]), sys.argv[5]
start = time.perf_counter()
z = calibrate_noise(target_epsilon=target, delta=delta, sample_rate=q, steps=steps, accountant=accountant)
seconds = time.perf_counter() - start
achieved = epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, accountant=accountant)
print(json.dumps({"sample_rate": q, "steps": steps, "target_epsilon": target, "noise_multiplier": z,
                  "epsilon": achieved, "seconds": seconds,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _numbers(kind):
    return lambda text: [kind(value) for value in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accountant", default="prv", choices=("rdp", "prv"))
    parser.add_argument("--rates", type=_numbers(float), default=[0.001, 0.01, 0.1])
    parser.add_argument("--steps", type=_numbers(int), default=[100, 1000, 10000])
    parser.add_argument("--epsilons", type=_numbers(float), default=[0.5, 1.0, 4.0, 8.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args()
    records = []
    for q in args.rates:
        for steps in args.steps:
            for target in args.epsilons:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, str(q), str(steps), str(target), str(args.delta), args.accountant],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                record = json.loads(done.stdout.strip().splitlines()[-1])
                print(json.dumps(record), file=sys.stderr)
                records.append(record)
    print(
        json.dumps(
            {
                "accountant": args.accountant,
                "delta": args.delta,
                "max_seconds": max(r["seconds"] for r in records),
                "max_peak_mb": max(r["peak_mb"] for r in records),
                "max_overshoot": max(r["epsilon"] - r["target_epsilon"] for r in records),
                "max_undershoot": max(r["target_epsilon"] - r["epsilon"] for r in records),
                "records": records,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
