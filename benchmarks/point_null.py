"""Null level of the eq. 20 point estimate: its wall time per call and what it is with no leakage; prints JSON.

python benchmarks/point_null.py [--sizes 360 10000 30000] [--repeats 5] [--draws 200]

Wall time: ``epsilon_point_null`` (200 permutations) on N(0,1) scores for both classes at each size (scores per
class; 360 is the pipeline's loss attack, 30000 the paper preset's largest target set), interleaved with
``audit_scores`` on the same scores for scale, median of ``--repeats`` calls: the first call on untied scores of
a size (cache cleared) and a repeated one (cached: the null level of untied scores depends on P, N and δ only).
No leakage: over ``--draws`` independent data sets of 360 + 360 N(0,1) scores, the point estimate's mean and
5/50/95 % quantiles, the null level's mean (one value: untied scores), and how often the point exceeds its null
level (about 5 % by exchangeability, up to the Monte Carlo error of 200 permutations).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from dpaudit import audit_scores
from dpaudit.estimate import epsilon_point, epsilon_point_null, roc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[360, 10_000, 30_000], help="scores per class")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per size and function (default: 5)")
    parser.add_argument("--draws", type=int, default=200, help="no-leakage data sets at 360 per class (default: 200)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = {n: (rng.normal(size=n), rng.normal(size=n)) for n in args.sizes}
    times = {n: {"epsilon_point_null": [], "epsilon_point_null_cached": [], "audit_scores": []} for n in args.sizes}
    audit_scores(*data[args.sizes[0]])  # warm-up (scipy imports)
    for _ in range(args.repeats):  # interleaved: other processes share the machine
        for n, (members, nonmembers) in data.items():
            roc._untied_null.cache_clear()  # the first call on untied scores of these sizes
            start = time.perf_counter()
            epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
            times[n]["epsilon_point_null"].append(time.perf_counter() - start)
            start = time.perf_counter()  # again: later checkpoints of a run (same P, N, no ties) hit the cache
            epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
            times[n]["epsilon_point_null_cached"].append(time.perf_counter() - start)
            start = time.perf_counter()
            audit_scores(members, nonmembers)
            times[n]["audit_scores"].append(time.perf_counter() - start)
    seconds = {
        str(n): {name: {"median_s": float(np.median(t)), "max_s": float(max(t))} for name, t in by_name.items()}
        for n, by_name in times.items()
    }
    points, nulls = [], []
    for _ in range(args.draws):
        members, nonmembers = rng.normal(size=360), rng.normal(size=360)
        points.append(epsilon_point(members, nonmembers, delta=1e-5))
        nulls.append(epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5))
    points, nulls = np.array(points), np.array(nulls)
    print(
        json.dumps(
            {
                "scores_per_class": args.sizes,
                "repeats": args.repeats,
                "seconds": seconds,
                "no_leakage_360_per_class": {
                    "draws": args.draws,
                    "point_mean": float(points.mean()),
                    "point_quantiles_5_50_95": [float(q) for q in np.quantile(points, [0.05, 0.5, 0.95])],
                    "null_level_mean": float(nulls.mean()),
                    "share_point_above_null": float(np.mean(points > nulls)),
                },
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "numpy": np.__version__,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
