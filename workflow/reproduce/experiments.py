"""Paper experiments: named groups of training runs, planned once, summarised once per run.

An experiment (``params.yaml`` → ``papers.experiments.<name>``) is ``settings`` shared by its runs, a
``grid`` (key → values, every combination is one run) and/or explicit ``runs``. A run's settings are
``papers.common`` ⊕ the optimizer's tuned settings (``optimizers.runs``) ⊕ the experiment's ⊕ the run's.
A run is identified by its settings alone (:func:`run_id`), so runs that several figures need are trained
once. :func:`summarize_run` turns one trained run into what the figures draw (``summary.json``): per eval
epoch the theoretical ε and the loss attack's ε̂, the canary audit at the end, accuracies and time.

Planning is torch-free; summarising loads torch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpaudit._validation import DPAuditError
from dpaudit.attacks import ATTACKS
from dpaudit.rundir import RunDir

SUMMARY_FILE = "summary.json"

#: The attacks a run summary can hold (what the paper figures draw), in the order it holds them.
SUMMARY_ATTACKS = ("loss", "canary", "canary-run")


def run_id(settings: Mapping[str, Any]) -> str:
    """``<optimizer>-<8 hex>``: the same settings always give the same folder name."""
    text = json.dumps(dict(settings), sort_keys=True, default=str)
    return f"{settings['optimizer']}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def experiment_runs(
    experiment: Mapping[str, Any], *, common: Mapping[str, Any], tuned: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The settings of every run of one experiment, in grid order then ``runs`` order.

    Args:
        experiment: ``{"settings": {...}, "grid": {key: [values]} or a list of such grids, "runs": [{...}]}``
            (at least one of grid and runs).
        common: settings of every paper run (dataset, model, epochs, …).
        tuned: optimizer name → its tuned settings (lr, r, …), applied before the experiment's own.
    """
    tuned = tuned or {}
    shared = dict(experiment.get("settings") or {})
    points: list[dict[str, Any]] = []
    grids = experiment.get("grid") or []
    for grid in [grids] if isinstance(grids, Mapping) else grids:
        keys = list(grid)
        points += [dict(zip(keys, values)) for values in itertools.product(*(grid[key] for key in keys))]
    points += [dict(run) for run in experiment.get("runs") or []]
    if not points:
        raise DPAuditError("an experiment needs a grid or runs")
    runs = []
    for point in points:
        optimizer = point.get("optimizer", shared.get("optimizer"))
        if optimizer is None:
            raise DPAuditError(f"experiment run {point} names no optimizer")
        runs.append({**common, **tuned.get(optimizer, {}), **shared, **point, "optimizer": optimizer})
    return runs


def plan_experiments(
    papers: Mapping[str, Any], *, tuned: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """(experiment name → its run ids, run id → settings) of ``papers`` (the params.yaml section).

    ``trials`` in an experiment's settings gives that many trials of each of its runs; it is not a
    training setting, so it is kept out of the run's identity.
    """
    common = {k: v for k, v in papers["common"].items() if k != "trials"}
    by_experiment: dict[str, list[str]] = {}
    settings: dict[str, dict[str, Any]] = {}
    for name, experiment in papers["experiments"].items():
        ids = []
        for run in experiment_runs(experiment, common=common, tuned=tuned):
            run.pop("trials", None)
            key = run_id(run)
            settings[key] = run
            ids.append(key)
        by_experiment[name] = ids
    return by_experiment, settings


def experiment_trials(papers: Mapping[str, Any], name: str) -> int:
    """Trials of each run of experiment ``name`` (its settings' ``trials``, else ``papers.common.trials``)."""
    return int((papers["experiments"][name].get("settings") or {}).get("trials", papers["common"].get("trials", 1)))


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
    from dpaudit.audit import audit_scores
    from dpaudit.run import load_ledger, load_run_config
    from dpaudit.theory import epsilon_labels, ledger_epsilons, ledger_shuffled_epsilons

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

    def report(found):
        full = audit_scores(
            found.members, found.nonmembers, delta=delta, confidence=confidence, selection=found.selection or "split"
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
                summary[name] = {
                    **report(found),
                    "audited_steps": found.audited_steps,
                    **_whole_run_summary(found, delta=delta, confidence=confidence),
                }
        else:
            summary[name] = {
                str(epoch): report(attack.scores(run, epoch=epoch, delta=delta)) for epoch in config.eval_epochs
            }
    write_json(run / SUMMARY_FILE, summary)
    return summary


def load_summaries(paths) -> list[dict[str, Any]]:
    """Summaries from run folders or ``summary.json`` paths (each gains ``"path"``: its run folder)."""
    from dpaudit._io import read_json

    out = []
    for path in paths:
        path = Path(path)
        file = path if path.name == SUMMARY_FILE else path / SUMMARY_FILE
        if not file.is_file():
            raise DPAuditError(f"no {SUMMARY_FILE} in {file.parent}: run `dpaudit summarize-run --run {file.parent}`")
        out.append({**read_json(file), "path": str(file.parent)})
    return out


def _whole_run_summary(found, *, delta: float, confidence: float) -> dict[str, Any]:
    """The family bound on a run's whole-run canary scores (all iterates; threshold on a held-out share, as the
    pipeline's whole-run audits) and the ε the run's ledger claims (PLD and RDP), each labelled."""
    from dpaudit.audit import ledger_claims
    from dpaudit.whole_run import FAMILY_LABEL, family_lower_bound

    sigma, z, q = (found.ledger[key] for key in ("noise_std", "noise_multipliers", "sample_rates"))
    family = family_lower_bound(
        found.members, found.nonmembers, noise_multipliers=sigma, sample_rates=q, delta=delta, confidence=confidence
    )
    claims = ledger_claims(noise_multipliers=z, sample_rates=q, delta=delta, last_iterate=False)
    return {
        "family_epsilon": family.epsilon,
        "family_capped": family.capped,
        "family_label": FAMILY_LABEL,
        "epsilon_pld": claims["epsilon_pld"],
        "epsilon_rdp": claims["epsilon_rdp"],
    }
