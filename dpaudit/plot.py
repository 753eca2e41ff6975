"""Plots of audits: log–log ROC curves of membership attacks, with TPR at 0.1 % and 1 % FPR and the audit numbers,
in one shared look (:func:`figure_style`, :func:`series_style`, :func:`save_figure`; PDF + PNG, the same bytes for
the same data).

Importing this module loads matplotlib (Agg backend) but not torch. ``dpaudit audit`` draws its ROC plots with
:func:`plot_roc`; the paper figures of the reproduction use the same look.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dpaudit._io import atomic_write_bytes  # noqa: E402

RC_PARAMS = {
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.6,
    "pdf.fonttype": 42,  # embed TrueType: editable text in the PDF
    "svg.fonttype": "none",
}

# tab20 is a ListedColormap of 20 RGB tuples (the checker knows only a Colormap)
_TAB20: tuple[tuple[float, float, float], ...] = plt.get_cmap("tab20").colors  # type: ignore[attr-defined]
_FALLBACK = _TAB20[0::2] + _TAB20[1::2]  # 10 strong, then 10 pale


def series_style(key: str, index: int = 0, styles: Mapping[str, dict] | None = None) -> dict:
    """Line properties of a series: ``styles[key]`` (a copy), else a stable colour from tab20 by ``index``; the label
    defaults to the part of ``key`` after its first ":" ("<kind>:<value>" keys)."""
    style = dict((styles or {}).get(key, {"color": _FALLBACK[index % len(_FALLBACK)]}))
    style.setdefault("label", key.split(":", 1)[-1])
    return style


@contextlib.contextmanager
def figure_style():
    """Context manager applying the shared rcParams."""
    with plt.rc_context(RC_PARAMS):
        yield


def save_figure(fig, stem: str | Path) -> list[Path]:
    """Write ``stem.pdf`` and ``stem.png`` atomically; close the figure; return both paths."""
    stem = Path(stem)
    paths = []
    for suffix in (".pdf", ".png"):
        buffer = io.BytesIO()
        # fixed metadata so that the same data give the same bytes
        metadata = {"CreationDate": None} if suffix == ".pdf" else {"Software": None}
        fig.savefig(buffer, format=suffix[1:], bbox_inches="tight", metadata=metadata)
        paths.append(atomic_write_bytes(stem.with_suffix(suffix), buffer.getvalue()))
    plt.close(fig)
    return paths


def resolved(fpr: float, *, n_nonmembers: int) -> bool:
    """Whether a sample of ``n_nonmembers`` non-members can measure a false-positive rate ``fpr``: its smallest
    non-zero FPR, 1/n, must not exceed it."""
    return n_nonmembers > 0 and 1.0 / n_nonmembers <= fpr


def tpr_text(fpr: float, tpr: float, *, n_nonmembers: int) -> str:
    """TPR at a false-positive rate ``fpr`` as a legend shows it: "12 %", or "below resolution (1/n = 0.28 %)"
    where the non-member sample is too small to measure that FPR (a reported value there is an artefact)."""
    if not resolved(fpr, n_nonmembers=n_nonmembers):
        floor = 100.0 / n_nonmembers if n_nonmembers > 0 else float("inf")
        return f"below resolution (1/n = {floor:.2g} %)"
    return f"{100 * tpr:.2g} %"


def plot_roc(curves: dict[str, dict], *, stem: str | Path, title: str) -> list[Path]:
    """Draw one log–log ROC panel.

    Args:
        curves: label → an ``AuditReport.to_dict()`` (its "roc", "auc", "tpr_at_fpr", ε̂ entries).
        stem: output path without suffix (PDF and PNG are written).
        title: panel title (state dataset and preset in it).

    Returns:
        The written paths.
    """
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
            tprs = "; ".join(
                f"{100 * float(target):g} %: "
                + tpr_text(float(target), float(value), n_nonmembers=report["n_nonmembers"])
                for target, value in report["tpr_at_fpr"].items()
            )
            text = (
                f"{style.pop('label')}: AUC {report['auc']:.3f}, ε̂ lower {float(report['epsilon_lower']):.2f}, "
                f"TPR at FPR {tprs}"
            )
            ax.plot(fpr[keep], tpr[keep], label=text, **style)
            for target, tpr_value in report["tpr_at_fpr"].items():
                if not resolved(float(target), n_nonmembers=report["n_nonmembers"]):
                    continue  # no dot where the sample cannot measure that FPR
                ax.plot(  # on top of every curve, edged so that it shows on its own curve's colour
                    [float(target)],
                    [max(float(tpr_value), 1e-12)],
                    marker="o",
                    color=style["color"],
                    markersize=6,
                    markeredgecolor="black",
                    markeredgewidth=0.8,
                    zorder=5,
                )
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
        ax.legend(  # off the curves: beside the panel (many curves) or below it
            loc="center left" if many else "upper center",
            bbox_to_anchor=(1.02, 0.5) if many else (0.5, -0.14),
            frameon=False,
            title=f"TPR at FPR {fprs} (dots; none below the FPR resolution 1/n)" if fprs else None,
            title_fontsize=7,
            fontsize=6.5 if many else 7,
        )
        return save_figure(fig, stem)
