"""Tidy access to the outputs of ``dpaudit train`` + ``dpaudit attack`` (torch-free)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import read_json
from dpaudit._validation import DPAuditError


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
    """

    path: Path
    config: dict[str, Any]
    attack_epochs: np.ndarray
    epsilon_hat: np.ndarray
    train_loss: np.ndarray
    steps_at_epoch: np.ndarray


def load_run(path: str | Path) -> RunRecord:
    """Read one run folder; a missing file is a one-line error naming it."""
    run = Path(path)
    try:
        config = read_json(run / "config.json")["config"]
        attack = read_json(run / "attack.json")["results"]
        metrics = read_json(run / "target" / "metrics.json")
        ledger = read_json(run / "target" / "ledger.json")
    except FileNotFoundError as error:
        raise DPAuditError(f"incomplete run {run}: missing {Path(error.filename).name}") from None
    except (KeyError, ValueError) as error:
        raise DPAuditError(f"malformed run {run}: {error}") from None
    return RunRecord(
        path=run,
        config=config,
        attack_epochs=np.array([r["epoch"] for r in attack], dtype=int),
        epsilon_hat=np.array([r["epsilon_hat"] for r in attack], dtype=float),
        train_loss=np.array(metrics["train_loss"], dtype=float),
        steps_at_epoch=np.array(ledger["epoch_ends"], dtype=int),
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
    """Mean over trials and the empirical percentile band covering ``coverage`` % (seed 004 §3.6).

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
    """Metrics and plot rows for DVC: ε̂ and loss per configuration, averaged over trials.

    Returns:
        (metrics, rows): ``metrics[config]`` holds the mean ε̂ and training loss at the last epoch;
        ``rows`` is one dict per (config, epoch) with the mean ε̂ over trials (for ``dvc plots``).
    """
    records = [load_run(path) for path in run_paths]
    groups = group_runs(records, lambda run: run.path.parent.name)
    metrics: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, group in groups.items():
        epsilon, _, _, dropped = mean_and_band(stack_trials(group, "epsilon_hat"))
        loss, _, _, _ = mean_and_band(stack_trials(group, "train_loss"))
        metrics[name] = {"epsilon_hat_last": float(epsilon[-1]), "train_loss_last": float(loss[-1]),
                         "trials": len(group), "infinite_epsilon_hat": dropped}
        rows += [{"config": name, "epoch": int(e), "epsilon_hat": float(v)} for e, v in zip(group[0].attack_epochs, epsilon)]
    return metrics, rows
