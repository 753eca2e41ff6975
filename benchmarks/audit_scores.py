"""Wall time of dpaudit.audit_scores on N(1,1) member vs N(0,1) non-member scores; prints JSON.

python benchmarks/audit_scores.py [--n 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from dpaudit import audit_scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="scores per class (default: 10000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per selection (default: 5)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    members, nonmembers = rng.normal(1, 1, args.n), rng.normal(0, 1, args.n)
    results = {}
    for selection in ("split", "gaussian"):
        audit_scores(members, nonmembers, selection=selection)  # warm-up (scipy imports)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            audit_scores(members, nonmembers, selection=selection)
            times.append(time.perf_counter() - start)
        results[selection] = {"median_s": float(np.median(times)), "max_s": float(max(times))}
    print(
        json.dumps(
            {
                "scores_per_class": args.n,
                "repeats": args.repeats,
                "seconds": results,
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "numpy": np.__version__,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
