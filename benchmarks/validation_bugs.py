"""Whether a whole-run audit flags the bugs only it can see, and never their correct twin; prints JSON.

Each bug is a DP-SGD run whose claimed ε (its ledger's, replayed by the PLD accountant) is false, against the
correct run of the same configuration: DP-SGD (``dpsgd-gc``, lr 0.2) on digits (cnn-digits, n = 360, b = 36,
C = 1, 20 epochs by default), target only, with M whole-run Dirac canaries per side (``canary_design:
whole-run``), its noise calibrated by PRV to each claimed ε at δ = 1e-5:

* ``shuffle-as-poisson``: shuffled fixed-size batches (``sampling: shuffle``) accounted as Poisson sampling at
  q = b/n, which is what dpaudit's accountants do for every shuffled run (Chua et al., ICML 2024; Annamalai et
  al. 2024);
* ``understated-q``: ``dpsgd-gc-understated-q``, whose ledger records q/4, its noise calibrated with q/4;
* ``reused-noise``: ``dpsgd-gc-reused-noise``, one noise vector drawn at the first step and added at every step;
* ``skipped-noise``: ``dpsgd-gc-skipped-noise``, no noise at every 20th step (5 % of the steps: the true ε is
  infinite);
* ``clip-then-project`` and ``clip-then-project-dp2``: ``d2p2-sgd-as-published`` and ``dp2-sgd-as-published``,
  the random projections in the authors' order (each record clipped, then the sum projected: sensitivity above C),
  whose canaries are records on tensors of their own (``dpaudit.optim.ProjectedNoise``);
* ``clean-support`` and ``clean-mask``: ``tp-topk-clean-support`` and ``adadpigu-code``, a support ranked on the
  dense phase's un-noised gradients, audited with the canaries ranked by the optimizer's own score
  (``canary_support: ranked``), twins included.

The correct twin of each is ``dpsgd-gc`` (of the others: ``d2p2-sgd``, ``dp2-sgd``, ``tp-topk`` and ``adadpigu``,
with the default preset's settings) with Poisson sampling calibrated to the same ε (one run per ε and seed, shared by
the pairs). Each run is audited against its own ledger (what it claims) by the validation rule,
``dpaudit.audit.validation_flag``: it is flagged when one of three lower bounds exceeds the claimed ε (the PLD ε of
that ledger): the family bound and the assumption-free bound on the log likelihood ratio Λ of all iterates, and the
assumption-free bound on each canary's spread over the steps (``dpaudit.whole_run.spread_scores``, a test of the
noise's independence across steps), and a test of the canaries' presence (how many the run's sampler drew at each
step) against the ledger's sample rates, and the two direct checks of the ledger's parameters (σ_t at every step
from the non-members' noise, q_t·c from the members' shift), each at level 0.05/6 (Bonferroni: a correct run is
flagged with probability at most 5 %). ``flagged_by`` names the checks that flag it. For the two bugs whose run is
not the mechanism its ledger describes (shuffling, the understated q), a family bound above the claim rejects "the
run is at least as private as the Poisson-subsampled Gaussian its ledger describes" (which is what the claim rests
on); it is not a lower bound on that run's own ε. The assumption-free bounds are.

Usage: python benchmarks/validation_bugs.py [--per-side 10000] [--epsilons 1 2 4 8 32] [--epochs 20] [--seeds 0]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

DELTA = 1e-5
# the most probability with which a correct run is flagged (the k checks each at level FALSE_ALARM/k)
FALSE_ALARM = 0.05
# bug → its correct twin
TWINS = {
    "shuffle-as-poisson": "dpsgd-gc",
    "understated-q": "dpsgd-gc",
    "reused-noise": "dpsgd-gc",
    "skipped-noise": "dpsgd-gc",
    "clip-then-project": "d2p2-sgd",
    "clip-then-project-dp2": "dp2-sgd",
    "clean-support": "tp-topk",
    "clean-mask": "adadpigu",
}
BUGS = tuple(TWINS)
# the twins whose learned support ranks the canaries (``canary_support: ranked``), and their bugs with them
RANKED = ("tp-topk", "adadpigu")
FLAG_RULE = (
    "validation_flag: any of the family and assumption-free bounds on Λ and the assumption-free bound on the spread "
    "over the steps above the claimed ε, the canaries' presence refuting the ledger's q, or the direct checks finding "
    "less noise than σ_t at some step or more than q_t·C; each at false_alarm/k"
)


def base_config(
    *, epsilon: float, per_side: int, epochs: int, seed: int, batch_size: int = 36, optimizer: str = "dpsgd-gc"
):
    """A correct twin (dpsgd-gc by default), Poisson batches, calibrated by PRV to ``epsilon``, with whole-run
    canaries."""
    from preset import run_settings

    from dpaudit.config import TrainConfig

    return TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="cnn-digits",
            optimizer=optimizer,
            **run_settings(optimizer),  # the default preset's run (params.yaml)
            sampling="poisson",
            batch_size=batch_size,
            epochs=epochs,
            clip_norm=1.0,
            target_epsilon=epsilon,
            accountant="prv",
            delta=DELTA,
            target_size=360,
            num_shadows=0,
            diagnostics=False,
            canaries=2 * per_side,
            canary_design="whole-run",
            canary_support="ranked" if optimizer in RANKED else "kept",
            seed=seed,
            device="cpu",
        )
    )


def bug_config(bug: str, twin):
    """The run with ``bug`` of the twin ``twin`` (same data, seed, canaries and claimed ε)."""
    import math

    from dpaudit import optim
    from dpaudit.theory import calibrate_noise

    if bug == "shuffle-as-poisson":
        return twin.replaced(sampling="shuffle")
    if bug == "reused-noise":
        return twin.replaced(optimizer="dpsgd-gc-reused-noise")
    if bug == "skipped-noise":
        return twin.replaced(optimizer="dpsgd-gc-skipped-noise")
    if bug.startswith("clip-then-project"):
        return twin.replaced(optimizer=f"{twin.optimizer.name}-as-published")
    if bug == "clean-support":
        return twin.replaced(optimizer="tp-topk-clean-support")
    if bug == "clean-mask":
        return twin.replaced(optimizer="adadpigu-code")
    if bug == "understated-q":
        # calibrated as the buggy code would: to the claimed ε with the q its ledger records
        q = twin.optimizer.batch_size / twin.data.target_size / optim.UNDERSTATED_SAMPLE_RATE_FACTOR
        steps = math.ceil(twin.data.target_size / twin.optimizer.batch_size) * twin.optimizer.epochs
        z = calibrate_noise(
            target_epsilon=twin.privacy.target_epsilon, delta=DELTA, sample_rate=q, steps=steps, accountant="prv"
        )
        return twin.replaced(optimizer="dpsgd-gc-understated-q", target_epsilon=None, noise_multiplier=z)
    raise ValueError(f"unknown bug {bug!r}")


def audit_run(config, out: Path, *, seed: int = 0) -> dict:
    """Train ``config`` into ``out``, flag its whole-run canaries against its own ledger; the numbers."""
    from dpaudit.attacks.canary_run import load_run_canaries
    from dpaudit.audit import validation_flag
    from dpaudit.train import train_configuration

    started = time.perf_counter()
    train_configuration(config, out_dir=out, progress=False)
    seconds = time.perf_counter() - started
    observed = load_run_canaries(out)
    started = time.perf_counter()
    flag = validation_flag(canaries=observed, epsilon=None, delta=DELTA, false_alarm=FALSE_ALARM, seed=seed)
    return {
        "optimizer": config.optimizer.name,
        "sampling": config.optimizer.sampling,
        "noise_multiplier": float(observed.noise_multipliers[0]),
        "claimed_sample_rate": float(observed.sample_rates[0]),
        "epsilon_claimed": flag.epsilon_claimed,
        "confidence": flag.confidence,
        "family_bound": flag.bounds["all_iterates_family"],
        "family_capped": bool(flag.all_iterates_family.capped),
        "assumption_free_bound": flag.bounds["all_iterates"],
        "spread_assumption_free_bound": flag.bounds["spread"],
        "spread_ceiling": flag.spread.epsilon_ceiling,
        "auc_all_iterates": flag.all_iterates.auc,
        "auc_spread": flag.spread.auc,
        "presence_p_value": flag.presence_p_value,
        "flagged": flag.flagged,
        "flagged_by": list(flag.flagged_by),
        "seconds_training": seconds,
        "seconds_audit": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-side", type=int, default=10_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0, 32.0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=36)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--bugs", nargs="+", choices=BUGS, default=list(BUGS))
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:
            for epsilon in args.epsilons:
                twins: dict[str, tuple] = {}  # twin name → (config, row), trained once per ε and seed
                for bug in args.bugs:
                    name = TWINS[bug]
                    if name not in twins:
                        twin = base_config(
                            epsilon=epsilon,
                            per_side=args.per_side,
                            epochs=args.epochs,
                            seed=seed,
                            batch_size=args.batch_size,
                            optimizer=name,
                        )
                        twins[name] = (twin, audit_run(twin, Path(work) / f"{name}_{seed}_{epsilon}", seed=seed))
                    twin, twin_row = twins[name]
                    bug_row = audit_run(bug_config(bug, twin), Path(work) / f"{bug}_{seed}_{epsilon}", seed=seed)
                    rows.append(
                        {"bug": bug, "epsilon_target": epsilon, "seed": seed, "bug_run": bug_row, "twin": twin_row}
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
                "batch_size": args.batch_size,
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
