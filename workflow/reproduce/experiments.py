"""Paper experiments: named groups of training runs, planned once, summarised once per run.

An experiment (``params.yaml`` → ``papers.experiments.<name>``) is ``settings`` shared by its runs, a
``grid`` (key → values, every combination is one run) and/or explicit ``runs``. A run's settings are
``papers.common`` ⊕ the optimizer's tuned settings (``optimizers.runs``) ⊕ the experiment's ⊕ the run's.
A run is identified by its settings alone (:func:`run_id`), so runs that several figures need are trained
once. The library's :func:`dpaudit.summary.summarize_run` turns one trained run into what the figures draw
(``summary.json``): per eval epoch the theoretical ε and the loss attack's ε̂, the canary audit at the end,
accuracies and time; :func:`load_summaries` reads them back.

Planning is torch-free.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from dpaudit._validation import DPAuditError
from dpaudit.summary import SUMMARY_ATTACKS, SUMMARY_FILE

__all__ = [
    "SUMMARY_ATTACKS",
    "SUMMARY_FILE",
    "experiment_runs",
    "experiment_trials",
    "load_summaries",
    "plan_experiments",
    "run_id",
    "run_trials",
]


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


def run_trials(
    papers: Mapping[str, Any], experiments: Mapping[str, list[str]], *, drawn: Collection[str]
) -> dict[str, int]:
    """Run id → trials to train, over the experiments in ``drawn`` only (those a figure the preset draws needs: a
    preset that opts out of a figure still inherits its experiment from params.yaml, as a --configfile merges over
    it); a run several experiments share gets the most trials any of them asks.

    Args:
        papers: The preset's ``papers`` section.
        experiments: Experiment name → its run ids (:func:`plan_experiments`).
        drawn: The names of the experiments to train.
    """
    trials: dict[str, int] = {}
    for name in experiments:
        if name in drawn:
            for run in experiments[name]:
                trials[run] = max(trials.get(run, 1), experiment_trials(papers, name))
    return trials


def load_summaries(paths) -> list[dict[str, Any]]:
    """Summaries from run folders or ``summary.json`` paths (each gains ``"path"``: its run folder)."""
    from dpaudit._io import read_json

    out = []
    for path in paths:
        path = Path(path)
        file = path if path.name == SUMMARY_FILE else path / SUMMARY_FILE
        if not file.is_file():
            raise DPAuditError(
                f"no {SUMMARY_FILE} in {file.parent}: run `python -m reproduce summarize-run --run {file.parent}`"
            )
        out.append({**read_json(file), "path": str(file.parent)})
    return out
