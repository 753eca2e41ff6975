"""Log–log ROC curves of membership attacks, with TPR at 0.1 % and 1 % FPR and the audit numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit.figures.style import figure_style, save_figure, series_style


def plot_roc(curves: dict[str, dict], *, stem: str | Path, title: str) -> list[Path]:
    """Draw one log–log ROC panel.

    Args:
        curves: label → an ``AuditReport.to_dict()`` (its "roc", "auc", "tpr_at_fpr", ε̂ entries).
        stem: output path without suffix (PDF and PNG are written).
        title: panel title (state dataset and preset in it).

    Returns:
        The written paths.
    """
    import matplotlib.pyplot as plt

    with figure_style():
        many = len(curves) > 4  # then the legend goes beside the panel, not over the curves
        fig, ax = plt.subplots(figsize=(4.2, 4.0))
        smallest = 1.0
        for index, (label, report) in enumerate(curves.items()):
            fpr = np.asarray(report["roc"]["fpr"], dtype=float)
            tpr = np.asarray(report["roc"]["tpr"], dtype=float)
            keep = (fpr > 0) & (tpr > 0)
            smallest = min(smallest, 1.0 / max(report["n_nonmembers"], 1))
            style = series_style(f"attack:{label}", index)
            tprs = ", ".join(f"{100 * float(value):.2g} %" for value in report["tpr_at_fpr"].values())
            text = (
                f"{style.pop('label')}: AUC {report['auc']:.3f}, ε̂ lower {float(report['epsilon_lower']):.2f}, "
                f"TPR {tprs}"
            )
            ax.plot(fpr[keep], tpr[keep], label=text, **style)
            for target, tpr_value in report["tpr_at_fpr"].items():
                ax.plot([float(target)], [max(float(tpr_value), 1e-12)], marker="o", color=style["color"], markersize=3)
        ax.plot([smallest, 1], [smallest, 1], color="grey", linestyle=":", linewidth=1, label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(smallest, 1)
        ax.set_ylim(smallest, 1.05)
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.set_title(title)
        fprs = (
            " and ".join(f"{100 * float(target):g} %" for target in next(iter(curves.values()))["tpr_at_fpr"])
            if curves
            else ""
        )
        ax.legend(
            loc="center left" if many else "lower right",
            bbox_to_anchor=(1.02, 0.5) if many else None,
            title=f"TPR at FPR {fprs} (dots)" if fprs else None,
            title_fontsize=7,
            fontsize=6.5 if many else 7,
        )
        return save_figure(fig, stem)
