"""The cross-optimizer audit figures: ε̂ lower bounds against theoretical ε, and ROC curves per optimizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import read_json, write_json
from dpaudit.attacks import get_attack
from dpaudit.plot import plot_roc
from reproduce.figures._paper import LOWER_BOUND_TEST, claim, lower_bound_verdict
from reproduce.figures.style import figure_style, save_figure, series_style

_THEORY_LABEL = {
    "mechanism": "theoretical ε of one step (the canary's mechanism)",
    "run": "theoretical ε of the run",
}  # by Attack.claim


def _run_parts(run: str) -> tuple[str, float]:
    name, _, epsilon = run.rpartition("_eps")
    return name, float(epsilon)


def makes_dp_claim(optimizer: str) -> bool:
    """Whether the registered optimizer ``optimizer`` makes a DP claim (``dpaudit.optim.get_spec(...).dp_claim``);
    a name outside the registry counts as claiming. Loads the optimizer registry (and torch) when first called."""
    from dpaudit._validation import DPAuditError
    from dpaudit.optim import get_spec

    try:
        return bool(get_spec(optimizer).dp_claim)
    except DPAuditError:
        return True


def plot_lower_bounds(
    metrics: dict[str, dict[str, Any]], *, stem: str | Path, title: str, confidence: float = 0.95
) -> list[Path]:
    """One panel per attack: ε̂ lower bound (markers) against theoretical ε, the y = x line and the ceiling.

    Args:
        metrics: ``reproduce.results.audit_table`` metrics, keyed "<optimizer>_eps<ε>/<attack>".
        stem: output path without suffix (PDF and PNG).
        title: figure title (dataset and preset).
        confidence: the bounds' confidence, for the axis label.
    """
    import matplotlib.pyplot as plt

    attacks = sorted({key.split("/")[1] for key in metrics}, key=lambda a: (a != "canary", a))
    optimizers = sorted({_run_parts(key.split("/")[0])[0] for key in metrics})  # colour order shared with the ROCs
    markers = "osD^v<>ph*"
    with figure_style():
        fig, axes = plt.subplots(1, len(attacks), figsize=(4.3 * len(attacks) + 1.8, 4.0), squeeze=False)
        for ax, attack in zip(axes[0], attacks):
            rows = {key: row for key, row in metrics.items() if key.endswith(f"/{attack}")}
            top = 0.0
            for index, optimizer in enumerate(optimizers):
                points = sorted(
                    (row["epsilon_theory"], row["epsilon_lower"])
                    for key, row in rows.items()
                    if _run_parts(key.split("/")[0])[0] == optimizer
                )
                if not points:
                    continue
                x, y = np.array(points).T
                top = max(top, x.max(), y.max())
                claimed = makes_dp_claim(optimizer)
                ax.plot(  # an optimizer with no DP claim: hollow markers, dotted line, "(no DP claim)"
                    x,
                    y,
                    marker=markers[index % len(markers)],
                    color=series_style(optimizer, index)["color"],
                    linewidth=0.8,
                    linestyle="-" if claimed else ":",
                    markerfacecolor=None if claimed else "none",
                    markersize=5,
                    label=optimizer if claimed else f"{optimizer} (no DP claim: its ε is claimed, not guaranteed)",
                )
            ceiling = float(np.mean([row["epsilon_ceiling"] for row in rows.values()]))
            limit = 1.08 * max(top, 1e-3)
            ax.plot([0, limit], [0, limit], color="grey", linestyle="--", linewidth=1, label="ε̂ = ε")
            if ceiling < 2 * limit:
                ax.axhline(ceiling, color="black", linestyle=":", linewidth=1, label="ceiling (sample size)")
                ax.annotate(
                    f"ceiling {ceiling:.2f}",
                    (0.02, ceiling),
                    xycoords=("axes fraction", "data"),
                    textcoords="offset points",
                    xytext=(0, 3),
                    fontsize=7,
                )
            ax.set_xlim(0, limit)
            ax.set_ylim(0, max(limit, 1.05 * ceiling) if ceiling < 2 * limit else limit)
            ax.set_xlabel(_THEORY_LABEL[get_attack(attack).claim])
            ax.set_ylabel(f"ε̂ lower bound ({100 * confidence:g} %)")
            ax.set_title(f"{attack} attack")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.suptitle(title)
        fig.tight_layout(rect=(0, 0, 1 - 1.7 / fig.get_figwidth(), 1))
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1 - 1.65 / fig.get_figwidth(), 0.5), fontsize=7)
        return save_figure(fig, stem)


def plot_audit_figures(
    files: list[str | Path],
    metrics: dict[str, dict[str, Any]],
    *,
    out_dir: str | Path,
    title: str,
    roc_epsilon: float | None = None,
) -> list[Path]:
    """``lower_bounds.{pdf,png}`` and, per attack, ``roc_<attack>.{pdf,png}`` (every optimizer at the
    theoretical ε closest to ``roc_epsilon``, default the median; each curve labelled with the theoretical ε
    its attack faces and its ε̂ lower bound) under ``out_dir``."""
    out = Path(out_dir)
    written = plot_lower_bounds(metrics, stem=out / "lower_bounds", title=title)
    payloads = [(Path(path).parent.name, read_json(path)) for path in files]
    epsilons = sorted({_run_parts(run)[1] for run, _ in payloads})
    wanted = epsilons[len(epsilons) // 2] if roc_epsilon is None else min(epsilons, key=lambda e: abs(e - roc_epsilon))
    for attack in sorted({payload["attack"] for _, payload in payloads}):
        theory = get_attack(attack).claim_key
        which = "ε of one step" if get_attack(attack).claim == "mechanism" else "run ε"  # title's ε: the target
        curves = dict(
            sorted(
                (f"{_run_parts(run)[0]} ({which} {float(payload.get(theory) or 'nan'):.2f})", payload["report"])
                for run, payload in payloads
                if payload["attack"] == attack and _run_parts(run)[1] == wanted
            )
        )
        written += plot_roc(curves, stem=out / f"roc_{attack}", title=f"{attack} attack, ε = {wanted:g}: {title}")
    write_json(out / "audit.manifest.json", _manifest_entry(metrics, written, title=title))
    return written


def _manifest_entry(metrics: dict[str, dict[str, Any]], files: list[Path], *, title: str) -> dict[str, Any]:
    """The manifest entry of the cross-optimizer figures: does any ε̂ lower bound exceed its theoretical ε?

    Only optimizers that make a DP claim enter that claim; the others are listed apart (``no_dp_claim``)."""
    unclaimed = sorted(key for key in metrics if not makes_dp_claim(_run_parts(key.split("/")[0])[0]))
    excluded = {key: row for key, row in metrics.items() if key in unclaimed}
    metrics = {key: row for key, row in metrics.items() if key not in unclaimed}
    ratios = {
        key: row["epsilon_lower"] / row["epsilon_theory"] for key, row in metrics.items() if row["epsilon_theory"] > 0
    }
    above = sorted(key for key, row in metrics.items() if row["epsilon_lower"] > row["epsilon_theory"])
    worst = max(ratios, key=ratios.get) if ratios else None
    return {
        "name": "audit/lower_bounds",
        "paper": "all seeds: every optimizer audited at matched theoretical ε",
        "figure": "cross-optimizer audit",
        "title": title,
        "files": [str(path) for path in files],
        "dataset": title,
        "claims": [
            claim(
                "No DP-claiming optimizer's ε̂ lower bound (95 %) exceeds its theoretical ε (ε̂ ≤ ε for every variant, "
                "as the guarantee of Theorem 4.1 of the TP-TopK paper implies; a violation would contradict the DP "
                "claim)",
                lower_bound_verdict(
                    [row["epsilon_lower"] for row in metrics.values()],
                    [row["epsilon_theory"] for row in metrics.values()],
                ),
                test=LOWER_BOUND_TEST
                + f" ({len(metrics)} optimizer × ε × attack points of optimizers with a DP claim; "
                f"{len(excluded)} points of optimizers with none left out)",
                kind="check",
                points=len(metrics),
                no_dp_claim={key: [row["epsilon_lower"], row["epsilon_theory"]] for key, row in excluded.items()},
                above_theory=above,
                largest_lower_to_theory={worst: ratios[worst]} if worst else {},
            )
        ],
    }
