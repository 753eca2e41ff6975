"""Check the core install (`pip install .`): no torch, Snakemake or DVC, and its three entry points work.

Run by `.ci/run` with the interpreter of a fresh virtual environment that has only `pip install .`. Prints the
installed distributions and their size on disk as JSON; exits 1 (with the reason) if a heavy dependency came in
or an entry point fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

HEAVY = ("torch", "torchvision", "opacus", "snakemake", "dvc", "matplotlib")


def _size_mib(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 2**20


def main() -> int:
    installed = sorted({dist.metadata["Name"].lower() for dist in metadata.distributions()})
    heavy = [name for name in HEAVY if name in installed]
    if heavy:
        print(f"core install pulled {', '.join(heavy)}", file=sys.stderr)
        return 1

    import numpy as np

    import dpaudit
    from dpaudit.whole_run import simulate_observations

    rng = np.random.default_rng(0)
    report = dpaudit.audit_scores(rng.normal(1, 1, 2000), rng.normal(0, 1, 2000), delta=1e-5)
    epsilon = dpaudit.theory.epsilon(noise_multiplier=1.1, sample_rate=0.01, steps=1000, delta=1e-5)
    # the whole-run canary game of T = 50 steps at z = 1, q = 0.2, drawn by the library's own simulation
    ledger = {"noise_multipliers": np.ones(50), "sample_rates": np.full(50, 0.2)}
    member_obs, nonmember_obs = simulate_observations(members=200, nonmembers=200, seed=0, **ledger)
    observations = np.concatenate([member_obs, nonmember_obs])
    members = np.arange(len(observations)) < len(member_obs)
    whole = dpaudit.audit_whole_run(observations, members, delta=1e-5, **ledger)
    loaded = [name for name in ("torch", "snakemake", "dvc", "matplotlib") if name in sys.modules]
    if loaded:
        print(f"the core entry points imported {', '.join(loaded)}", file=sys.stderr)
        return 1
    site = Path(sysconfig.get_paths()["purelib"])
    print(
        json.dumps(
            {
                "distributions": installed,
                "site_packages_mib": round(_size_mib(site), 1),
                "audit_scores_epsilon_lower": report.epsilon_lower,
                "theory_epsilon": epsilon,
                "whole_run_summary": whole.summary().splitlines()[0],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    sys.exit(main())
