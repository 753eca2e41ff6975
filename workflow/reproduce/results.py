"""Tidy access to the outputs of ``dpaudit train`` + ``dpaudit attack`` (torch-free)."""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import read_json
from dpaudit._validation import DPAuditError
from dpaudit.attacks import get_attack
from dpaudit.integrity import check_complete
from dpaudit.rundir import RunDir


@dataclass(frozen=True)
class RunRecord:
    """One trained-and-attacked run (one configuration, one trial), as the figures need it.

    Attributes:
        path: the run folder.
        config: the validated training configuration (``config.json``'s "config").
        attack_epochs: epochs with an attack result.
        epsilon_hat: ε̂ (eq. 20) of the target at each attack epoch.
        train_loss: the target's training loss at epochs 1..E.
        steps_at_epoch: steps completed at the end of epochs 1..E, from the target's privacy ledger.
        test_accuracy: the target's held-out accuracy at epochs 1..E.
        epsilon_theory: theoretical ε of the target at ``attack_epochs`` per accountant, from
            ``target/epsilon.json`` (written by ``dpaudit epsilon --run``); empty if absent.
    """

    path: Path
    config: dict[str, Any]
    attack_epochs: np.ndarray
    epsilon_hat: np.ndarray
    train_loss: np.ndarray
    steps_at_epoch: np.ndarray
    test_accuracy: np.ndarray
    epsilon_theory: dict[str, np.ndarray]


def load_run(path: str | Path) -> RunRecord:
    """Read one run folder; a missing file is a one-line error naming it."""
    run = Path(path)
    files = RunDir(run)
    check_complete(run)
    try:
        config = read_json(files.config)["config"]
        attack = read_json(files.attack)["results"]
        metrics = read_json(files.target.metrics)
        ledger = read_json(files.target.ledger)
        theory = read_json(files.target.epsilon) if files.target.epsilon.is_file() else None
    except FileNotFoundError as error:
        raise DPAuditError(f"incomplete run {run}: missing {Path(error.filename).name}") from None
    except KeyError as error:
        raise DPAuditError(f"malformed run {run}: {error}") from None
    attack_epochs = np.array([r["epoch"] for r in attack], dtype=int)
    epsilon_theory = {}
    if theory is not None:
        at = {epoch: row for row, epoch in enumerate(theory["epochs"])}
        if not all(int(epoch) in at for epoch in attack_epochs):
            raise DPAuditError(f"{run}/target/epsilon.json lacks some attacked epochs {attack_epochs.tolist()}")
        epsilon_theory = {
            name: np.array([values[at[int(e)]] for e in attack_epochs], dtype=float)
            for name, values in theory["epsilon"].items()
        }
    return RunRecord(
        path=run,
        config=config,
        attack_epochs=attack_epochs,
        epsilon_hat=np.array([r["epsilon_hat"] for r in attack], dtype=float),
        train_loss=np.array(metrics["train_loss"], dtype=float),
        steps_at_epoch=np.array(ledger["epoch_ends"], dtype=int),
        test_accuracy=np.array(
            [np.nan if a is None else a for a in metrics.get("test_accuracy") or [None] * len(metrics["train_loss"])],
            dtype=float,
        ),
        epsilon_theory=epsilon_theory,
    )


def group_runs(runs: Iterable[RunRecord], key: Callable[[RunRecord], Hashable]) -> dict[Hashable, list[RunRecord]]:
    """Runs grouped by ``key`` (e.g. batch size), groups sorted by key."""
    groups: dict[Hashable, list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    return dict(sorted(groups.items()))


def stack_trials(runs: list[RunRecord], field: str) -> np.ndarray:
    """[trials, points] array of one per-run series; the runs must share their epoch grid."""
    rows = [getattr(run, field) for run in runs]
    if len({row.shape for row in rows}) != 1:
        raise DPAuditError(f"runs of one configuration differ in their {field} grid: {[r.path for r in runs]}")
    return np.stack(rows)


def mean_and_band(values: np.ndarray, *, coverage: float = 95.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Mean over trials and the empirical percentile band covering ``coverage`` % (Liang et al., captions of
    Figures 2 and 4).

    Non-finite values (ε̂ = ±inf from a zero error rate) are left out and counted.

    Returns:
        (mean, low, high, number of non-finite values left out), each over axis 0.
    """
    finite = np.where(np.isfinite(values), values, np.nan)
    tail = (100.0 - coverage) / 2
    with warnings.catch_warnings():  # an all-NaN column is reported as NaN, not warned about
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(finite, axis=0)
        low, high = np.nanpercentile(finite, [tail, 100.0 - tail], axis=0)
    return mean, low, high, int(np.sum(~np.isfinite(values)))


def summarize(run_paths: Iterable[str | Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics and plot rows for DVC: ε̂, loss and accuracy per configuration, averaged over trials.

    Returns:
        (metrics, rows): ``metrics[config]`` holds the mean ε̂, training loss and test accuracy at the
        last epoch, and the theoretical ε there per accountant where the runs have ``epsilon.json``;
        ``rows`` is one dict per (config, epoch) with the mean ε̂ over trials (for ``dvc plots``).
    """
    records = [load_run(path) for path in run_paths]
    groups = group_runs(records, lambda run: run.path.parent.name)
    metrics: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, group in groups.items():
        epsilon, _, _, dropped = mean_and_band(stack_trials(group, "epsilon_hat"))
        loss, _, _, _ = mean_and_band(stack_trials(group, "train_loss"))
        accuracy, _, _, _ = mean_and_band(stack_trials(group, "test_accuracy"))
        metrics[name] = {
            "epsilon_hat_last": float(epsilon[-1]),
            "train_loss_last": float(loss[-1]),
            "test_accuracy_last": float(accuracy[-1]),
            "trials": len(group),
            "infinite_epsilon_hat": dropped,
        }
        if all(run.epsilon_theory for run in group):
            metrics[name]["epsilon_theory_last"] = {
                accountant: float(np.mean([run.epsilon_theory[accountant][-1] for run in group]))
                for accountant in group[0].epsilon_theory
            }
        diagnostics = [diagnostics_summary(run.path) for run in group]
        if all(diagnostics):
            metrics[name]["diagnostics"] = {
                key: float(np.mean([d[key] for d in diagnostics]))
                for key in diagnostics[0]
                if all(d.get(key) is not None for d in diagnostics)
            }
        rows += [
            {"config": name, "epoch": int(e), "epsilon_hat": float(v)} for e, v in zip(group[0].attack_epochs, epsilon)
        ]
    return metrics, rows


def diagnostics_summary(run: str | Path) -> dict[str, float | None]:
    """Headline numbers of ``target/diagnostics.json`` (empty if the run has none): the share of
    clipped mean-gradient values within ±0.01 at the histogram epoch and, for the first support, the
    share of the oracle's squared gradient it captures against a random support's k/d."""
    path = RunDir(run).target.diagnostics
    if not path.is_file():
        return {}
    record = read_json(path)
    summary = {"gradient_fraction_within_0.01": record["gradient_histogram"]["fraction_within_0.01"]}
    if record["supports"]:
        first = record["supports"][0]
        summary.update(
            support_oracle_capture=first["oracle_capture"],
            support_random_baseline=first["random_baseline"],
            support_oracle_topk_overlap=first["oracle_topk_overlap"],
        )
    return summary


#: The low false-positive rate of the audit tables' TPR column (0.1 %).
LOW_FPR = 0.001
#: What the TPR column shows where the non-member sample cannot measure :data:`LOW_FPR`.
UNRESOLVED_TPR = f"n/a (needs ≥ {math.ceil(1 / LOW_FPR)} non-members)"


def low_fpr_resolved(*, n_nonmembers: int, fpr: float = LOW_FPR) -> bool:
    """Whether ``n_nonmembers`` non-members can measure a false-positive rate ``fpr``: their smallest non-zero FPR,
    1/n, must not exceed it (0.1 % needs n ≥ 1000)."""
    return n_nonmembers > 0 and 1.0 / n_nonmembers <= fpr * (1 + 1e-12)


def audit_table(files: Iterable[str | Path]) -> tuple[dict[str, Any], str]:
    """``dpaudit audit --run`` results (one file per run folder and attack; several files of one pair are
    averaged), with the Gaussian-DP estimate beside the bounds.

    The theoretical ε of the canary attack is that of the mechanism each canary trial faces (one Gaussian
    step at the run's smallest noise multiplier); of the others, the run's composed ε.

    TPR at 0.1 % FPR is given only where every averaged file has at least 1000 non-members (:data:`LOW_FPR`,
    :func:`low_fpr_resolved`): with fewer, the smallest non-zero FPR, 1/n, is above 0.1 %, so the number would be an
    artefact of the sample size; the metric is then None and the table says "n/a (needs ≥ 1000 non-members)", with a
    note below it.

    Returns:
        (metrics keyed "<run>/<attack>", a Markdown table).
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for path in files:
        path = Path(path)
        try:
            payload = read_json(path)
        except FileNotFoundError as error:
            raise DPAuditError(f"cannot read audit result {path}: {error}") from None
        groups[(path.parent.name, payload["attack"])].append(payload)
    metrics: dict[str, Any] = {}
    lines = [
        "| run | attack | trials (members + non-members) | ε̂ GDP (estimate, no confidence) | ε̂ lower bound (95 % "
        "confidence) | ceiling | theoretical ε | lower / theory | AUC | TPR @ 0.1 % FPR |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (run, attack), results in sorted(groups.items()):
        reports = [r["report"] for r in results]
        per_step = get_attack(attack).claim == "mechanism"
        theory_key = get_attack(attack).claim_key
        theory = float(np.mean([r.get(theory_key) or np.nan for r in results]))

        def mean(key):
            return float(np.mean([float(rep[key]) for rep in reports]))

        nulls = [rep.get("epsilon_point_null") for rep in reports]  # None: too many scores, or an older file
        fewest_nonmembers = min(int(rep["n_nonmembers"]) for rep in reports)
        resolved = low_fpr_resolved(n_nonmembers=fewest_nonmembers)
        row = {
            "epsilon_point": mean("epsilon_point"),
            "epsilon_point_null": None if any(v is None for v in nulls) else float(np.mean(nulls)),
            "epsilon_lower": mean("epsilon_lower"),
            "epsilon_gdp": mean("epsilon_gdp"),
            "samples": int(np.mean([rep["n_members"] + rep["n_nonmembers"] for rep in reports])),
            "epsilon_ceiling": mean("epsilon_ceiling"),
            "epsilon_theory": theory,
            "theory": "one Gaussian step (canary's mechanism)" if per_step else "whole run",
            "ratio_lower_to_theory": mean("epsilon_lower") / theory if theory > 0 else float("nan"),
            "auc": mean("auc"),
            "tpr_at_0.1%_fpr": (  # None: below the sample's FPR resolution (fewer than 1000 non-members)
                float(np.mean([float(rep["tpr_at_fpr"][repr(LOW_FPR)]) for rep in reports])) if resolved else None
            ),
            "n_nonmembers": fewest_nonmembers,
            "files": len(results),
        }
        metrics[f"{run}/{attack}"] = row
        label = f"{theory:.2f} ({'per step' if per_step else 'run'})"
        lines.append(  # no eq. 20 point estimate: it exceeds the theoretical ε under allowed leakage (metrics only)
            f"| {run} | {attack} | {row['samples']} | {row['epsilon_gdp']:.2f} | {row['epsilon_lower']:.2f} | "
            f"{row['epsilon_ceiling']:.2f} | {label} | {row['ratio_lower_to_theory']:.2f} | {row['auc']:.3f} | "
            f"{UNRESOLVED_TPR if row['tpr_at_0.1%_fpr'] is None else format(row['tpr_at_0.1%_fpr'], '.4f')} |"
        )
    text = "\n".join(lines) + "\n"
    if any(row["tpr_at_0.1%_fpr"] is None for row in metrics.values()):
        text += (
            f'\nTPR @ 0.1 % FPR is "{UNRESOLVED_TPR}" where the attack had fewer than {math.ceil(1 / LOW_FPR)} '
            "non-members: its smallest non-zero false-positive rate, 1/n, is then above 0.1 %, so any value there "
            "would be an artefact of the sample size, not a measurement.\n"
        )
    return metrics, text


def gallery_markdown(entries: Iterable[dict[str, Any]], *, root: str | Path = ".", width: int = 260) -> str:
    """Markdown gallery of manifest entries: per paper, a thumbnail (or a table link) per figure.

    Args:
        entries: figure manifest entries (``name``, ``paper``, ``figure``, ``title``, ``files``, ``claims``).
        root: folder the Markdown file will live in; image paths are written relative to it.
        width: thumbnail width in pixels.
    """
    import os

    by_paper: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_paper.setdefault(entry.get("paper", "other"), []).append(entry)
    lines = []
    for paper, items in by_paper.items():
        lines += [f"**{paper}**", ""]
        cells = []
        for entry in items:
            paper = [claim for claim in entry["claims"] if claim["kind"] == "paper"]
            held = sum(claim["verdict"] == "holds" for claim in paper)
            against = sum(claim["verdict"] == "contradicted" for claim in paper)
            checks = len(entry["claims"]) - len(paper)
            caption = (
                f"{entry['figure']}: {held}/{len(paper)} paper claims hold, {against} contradicted"
                + (f"; {checks} checks of the toolkit" if checks else "")
                if entry["claims"]
                else f"{entry['figure']}: no claims"
            )
            files = [Path(path) for path in entry["files"]]
            images = [path for path in files if path.suffix == ".png"]  # every one (the audit has several)
            title = entry.get("title", entry["name"]).replace('"', "'")
            for index, image in enumerate(images):
                link = Path(os.path.relpath(image, root)).as_posix()
                text = caption if index == 0 else f"{entry['figure']}: {image.stem}"
                cells.append(f'<a href="{link}"><img src="{link}" width="{width}" title="{title}"></a><br>{text}')
            if not images:
                target = next((path for path in files if path.suffix == ".md"), files[0])
                link = Path(os.path.relpath(target, root)).as_posix()
                cells.append(f'<a href="{link}">{entry["figure"]} (table)</a><br>{caption}')
        for start in range(0, len(cells), 3):
            row = cells[start : start + 3]
            if start == 0:
                lines += ["| " + " | ".join([" "] * len(row)) + " |", "|" + "---|" * len(row)]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)
