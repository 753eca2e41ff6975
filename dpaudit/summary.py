"""One run's summary: its theoretical ε per epoch, the loss attack's ε̂ at every evaluated checkpoint and the canary
audit at the end, with accuracies and time (``summary.json`` in the run folder).

``dpaudit train --summarize`` writes it after training; the paper figures of the reproduction draw from it.
Summarising loads torch (the attacks read the run's checkpoints).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._validation import DPAuditError
from dpaudit.attacks import ATTACKS
from dpaudit.rundir import SUMMARY, RunDir

__all__ = ["SUMMARY_ATTACKS", "SUMMARY_FILE", "summarize_run"]

#: The file :func:`summarize_run` writes into the run folder.
SUMMARY_FILE = SUMMARY  # the file name, declared with the run folder's layout

#: The attacks a run summary can hold (what the paper figures draw), in the order it holds them.
SUMMARY_ATTACKS = ("loss", "canary", "canary-run")


def summarize_run(
    run_dir: str | Path,
    *,
    delta: float = 1e-5,
    accountant: str = "rdp",
    confidence: float = 0.95,
    attacks: tuple[str, ...] = ("loss", "canary"),
) -> dict[str, Any]:
    """What the paper figures draw from one trained run (target only); written to ``run_dir/summary.json``.

    Args:
        run_dir: a ``dpaudit train`` output folder.
        delta: δ of every ε and ε̂.
        accountant: accountant replaying the ledger for the theoretical ε per epoch.
        confidence: confidence of the ε̂ lower bounds.
        attacks: some of :data:`SUMMARY_ATTACKS`: "loss" (black-box, at every eval epoch), "canary" (white-box
            per-step canaries; needs ``canaries`` at training) and/or "canary-run" (whole-run canaries, all iterates;
            needs ``canary_design="whole-run"``), scored through :data:`dpaudit.attacks.ATTACKS`.

    Returns:
        ``{"config", "epochs", "steps", "train_loss", "test_accuracy", "train_accuracy",
        "elapsed_seconds", "epsilon" (per epoch), "sampling", "noise_multiplier", "loss": {epoch: report}, "canary":
        report with "epsilon_mechanism", "canary-run": report with the family bound ("family_epsilon",
        "family_capped", "family_label") and the ε the ledger claims ("epsilon_pld", "epsilon_rdp")}``; ε̂ reports
        hold point, lower, ceiling, AUC, TPR at low FPR, and "epsilon_point_null", the point estimate's 95 % null
        level (labels permuted; from the :class:`~dpaudit.audit.AuditReport`, see
        :func:`dpaudit.estimate.epsilon_point_null`), with its method. A shuffled run also has
        "epsilon_shuffled_upper" (per epoch, a valid upper bound; "epsilon" is then the Poisson figure, not a
        guarantee) with both labels.
    """
    from dpaudit._io import read_json, write_json
    from dpaudit.audit import audit_scores, audit_whole_run
    from dpaudit.run import load_ledger, load_run_config
    from dpaudit.theory import epsilon_labels, ledger_epsilons, ledger_shuffled_epsilons
    from dpaudit.whole_run import FAMILY_LABEL

    run = Path(run_dir)
    config = load_run_config(run)
    metrics = read_json(RunDir(run).target.metrics)
    ledger = load_ledger(run)
    derived = read_json(RunDir(run).config)["derived"]
    summary: dict[str, Any] = {
        "config": config.to_dict(),
        "noise_multiplier": derived.get("noise_multiplier_z"),
        "dp_claim": derived.get("dp_claim"),
        "target_epsilon": derived.get("target_epsilon"),
        "planned_epsilon": derived.get("planned_epsilon"),
        "delta": delta,
        "accountant": accountant,
        **{
            key: metrics.get(key)
            for key in ("epoch", "steps", "train_loss", "test_accuracy", "train_accuracy", "elapsed_seconds")
        },
        "epsilon": [
            value if math.isfinite(value) else None  # None: no DP claim
            for value in ledger_epsilons(ledger, delta=delta, accountant=accountant)
        ],
        "sampling": ledger["sampling"],
    }
    labels = epsilon_labels(dp_claim=bool(ledger["dp_claim"]), sampling=ledger["sampling"])
    summary["epsilon_label"] = labels["epsilon"]
    if ledger["sampling"] == "shuffle":  # the Poisson ε above is not a guarantee here; a valid upper bound beside it
        summary["epsilon_shuffled_upper"] = [
            value if math.isfinite(value) else None for value in ledger_shuffled_epsilons(ledger, delta=delta)
        ]
        summary["epsilon_shuffled_upper_label"] = labels["shuffled_upper"]

    def report(found, full=None):
        full = (
            full
            or audit_scores(
                found.members,
                found.nonmembers,
                delta=delta,
                confidence=confidence,
                selection=found.selection or "split",
            )
        ).to_dict()
        out = {
            key: full[key]
            for key in (
                "epsilon_point",
                "epsilon_point_null",
                "epsilon_lower",
                "epsilon_ceiling",
                "auc",
                "tpr_at_fpr",
                "n_members",
                "n_nonmembers",
            )
        }
        out["epsilon_point_null_method"] = full["methods"]["epsilon_point_null"]
        return out

    for name in (name for name in SUMMARY_ATTACKS if name in attacks):  # this order, whatever the order given
        attack = ATTACKS[name]
        if attack.whole_run:
            if name == "canary" and not RunDir(run).target.canaries.is_file():
                raise DPAuditError(f"{run} has no canaries (train with --canaries M for the canary audit)")
            found = attack.scores(run, epoch=None, delta=delta)
            if found.ledger is None:  # per-step canaries: one step's mechanism
                summary[name] = {
                    **report(found),
                    "epsilon_mechanism": found.epsilon_mechanism,
                    "audited_steps": found.audited_steps,
                }
            else:  # whole-run canaries: the family bound beside the assumption-free one, against the run's claim
                whole_run = audit_whole_run(  # all iterates (canary-run); family threshold on a held-out share
                    statistics={"all_iterates": np.concatenate([found.members, found.nonmembers])},
                    members=np.arange(found.members.size + found.nonmembers.size) < found.members.size,
                    noise_multipliers=found.ledger["noise_multipliers"],
                    sample_rates=found.ledger["sample_rates"],
                    noise_std=found.ledger["noise_std"],
                    delta=delta,
                    confidence=confidence,
                    selection=found.selection or "split",
                )
                summary[name] = {
                    **report(found, whole_run.all_iterates),
                    "audited_steps": found.audited_steps,
                    "family_epsilon": whole_run.all_iterates_family.epsilon,
                    "family_capped": whole_run.all_iterates_family.capped,
                    "family_label": FAMILY_LABEL,
                    "epsilon_pld": whole_run.epsilon_pld,
                    "epsilon_rdp": whole_run.epsilon_rdp,
                }
        else:
            summary[name] = {
                str(epoch): report(attack.scores(run, epoch=epoch, delta=delta)) for epoch in config.audit.eval_epochs
            }
    write_json(RunDir(run).summary, summary)
    return summary
