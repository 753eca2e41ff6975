"""Job-seconds of the same pipeline jobs run by the warm worker and each in its own interpreter, in alternating rounds;
prints JSON.

    python benchmarks/pipeline_worker.py [--rounds 2] [--cores 2] [TARGET ...]

By default the targets are seven jobs of the default preset, one of each rule that holds most of its job-seconds (a
black-box rung, a cross-optimizer audit, a whole-run audit, a DPSGD-DC configuration, an optimizer run, an audit
run, a whole-run bug). Each round runs them from an empty ``results/`` once with the worker (``reproduce.worker``)
and once without (``DPAUDIT_NO_WORKER=1``), the first variant alternating from round to round: a shared host's speed
drifts over half an hour (compare the pipeline records in ``benchmarks/results/pipeline_time*.json``), and
alternating compares the variants under the same drift. ``ratio`` is the worker's job-seconds over the others', per
round and over all rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline_jobs import job_seconds

ROOT = Path(__file__).resolve().parent.parent
TARGETS = [
    "results/audit_blackbox/on-topk_eps2/blackbox.json",
    "results/audit_cross/tp-topk_eps1/trial_0/config.json",
    "results/audit_run/auto-s_eps1/trial_0/config.json",
    "results/dpsgd_dc/dc_b20_D2/trial_0/config.json",
    "results/optimizers/dpsgd-gc_eps4/trial_0/config.json",
    "results/audit/dpsgd-gc_eps2/trial_0/config.json",
    "results/audit_run_validation/reused-noise_eps8/trial_0/config.json",
]


def run(targets: list[str], *, cores: int, worker: bool, log: Path) -> float:
    """Job-seconds of ``targets`` from an empty ``results/``, with the worker or without."""
    shutil.rmtree(ROOT / "results", ignore_errors=True)
    environment = {name: value for name, value in os.environ.items() if name != "DPAUDIT_NO_WORKER"}
    if not worker:
        environment["DPAUDIT_NO_WORKER"] = "1"
    with log.open("w") as stream:
        subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", str(cores), "--", *targets],
            cwd=ROOT,
            env=environment,
            stdout=stream,
            stderr=subprocess.STDOUT,
            check=True,
        )
    with log.open() as stream:
        return sum(seconds for _, seconds in job_seconds(stream).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=TARGETS, help="pipeline outputs (default: seven heavy jobs)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both variants (default: 2)")
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default: 2)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    rounds = []
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        seconds = {}
        for worker in order:
            name = "worker" if worker else "own_interpreter"
            seconds[name] = run(args.targets, cores=args.cores, worker=worker, log=ROOT / f"results_{name}.log")
            print(f"round {index + 1}: {name} {seconds[name]:.0f} job-s", file=sys.stderr, flush=True)
        rounds.append(seconds)
    total = {name: sum(r[name] for r in rounds) for name in ("worker", "own_interpreter")}
    print(
        json.dumps(
            {
                "targets": args.targets,
                "cores": args.cores,
                "job_seconds_per_round": rounds,
                "ratio_per_round": [r["worker"] / r["own_interpreter"] for r in rounds],
                "ratio": total["worker"] / total["own_interpreter"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
