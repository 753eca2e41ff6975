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


def _tpr_dots(ax, tpr_at_fpr: dict, *, n_nonmembers: int, colour, markersize: float) -> None:
    """The TPR at each FPR target, as edged dots on top of every curve (none below the FPR resolution 1/n)."""
    for target, value in tpr_at_fpr.items():
        if resolved(float(target), n_nonmembers=n_nonmembers):
            ax.plot(
                [float(target)],
                [max(float(value), 1e-12)],
                marker="o",
                color=colour,
                markersize=markersize,
                markeredgecolor="black",
                markeredgewidth=0.8,
                zorder=5,
            )


def _roc_axes(ax, *, smallest: float) -> None:
    """The chance line and the log–log axes of a ROC panel down to the smallest resolved FPR."""
    ax.plot([smallest, 1], [smallest, 1], color="grey", linestyle=":", linewidth=1, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(smallest, 1)
    ax.set_ylim(smallest, 1.05)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")


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
            _tpr_dots(
                ax, report["tpr_at_fpr"], n_nonmembers=report["n_nonmembers"], colour=style["color"], markersize=6
            )
        _roc_axes(ax, smallest=smallest)
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


def plot_whole_run(
    report,
    *,
    stem: str | Path,
    title: str,
    claimed_epsilon: float | None = None,
    claim_label: str | None = None,
) -> list[Path]:
    """Draw a whole-run canary audit in two panels: the ROC curves of its statistics and every ε beside the claims.

    Left, the log–log ROC curves of the all-iterates statistic Λ and the final-model statistic Σ_t x_t (those the
    report audited), with TPR at its FPR targets. Right, one bar per ε (nats, at the report's δ), each legend entry
    saying what it is: the ledger's ε (PLD; a guarantee if the run is the mechanism its ledger describes), the
    optional claimed ε (e.g. the run's own accountant's), and the lower bounds at the report's confidence: for each
    statistic the family bound (a test of the ledger's σ, q and T: a lower bound only if the run is a composed
    Poisson-subsampled Gaussian with its q_t and T) and the assumption-free Clopper–Pearson bounds (threshold fixed by
    the ledger, the report's privacy profile at δ; threshold on held-out canaries). A lower bound above a guarantee
    refutes it (at that confidence, under that bound's assumption).

    Args:
        report: a :class:`dpaudit.audit.WholeRunReport` (e.g. ``OpacusAuditReport.whole_run``).
        stem: output path without suffix (PDF and PNG are written).
        title: the figure's title (state the run: dataset, model, the ε it was calibrated to).
        claimed_epsilon: the ε (nats, at the report's δ) the run claims besides its ledger's, e.g. its accountant's;
            None: no such bar.
        claim_label: what ``claimed_epsilon`` is, e.g. "PRV accountant" (None: "claimed"); unused without it.

    Returns:
        The written paths (PDF, PNG).

    Raises:
        DPAuditError: a report that is not a ``WholeRunReport`` or audits neither the all-iterates nor the
            final-model statistic, a claimed ε that is not a finite number ≥ 0, a claim label that is not a string.
    """
    import math

    import matplotlib.pyplot as plt  # lazily: ``import dpaudit`` does not load matplotlib

    from dpaudit._validation import DPAuditError
    from dpaudit.audit import WholeRunReport

    if not isinstance(report, WholeRunReport):
        raise DPAuditError(f"plot_whole_run takes a dpaudit.audit.WholeRunReport, got {type(report).__name__}")
    statistics = [
        (name, getattr(report, key), getattr(report, f"{key}_family"))
        for name, key in (("all iterates (Λ)", "all_iterates"), ("final model (Σ x_t)", "final_model"))
        if getattr(report, key) is not None
    ]
    if not statistics:
        raise DPAuditError("the report audits neither the all-iterates nor the final-model statistic: nothing to plot")
    if claimed_epsilon is not None and (
        isinstance(claimed_epsilon, bool)
        or not isinstance(claimed_epsilon, (int, float))
        or not math.isfinite(claimed_epsilon)
        or claimed_epsilon < 0
    ):
        raise DPAuditError(f"claimed_epsilon must be a finite number ≥ 0 (nats) or None, got {claimed_epsilon!r}")
    if claim_label is not None and not isinstance(claim_label, str):
        raise DPAuditError(f"claim_label must be a string or None, got {type(claim_label).__name__}")

    level = f"{100 * report.confidence:g} %"
    # (tick, legend entry, ε, colour, hatch): the guarantees first, then each statistic's family and assumption-free
    # bound; the legend entry says what the ε is (guarantee or lower bound, its confidence, its assumption)
    bars: list[tuple[str, str, float, tuple[float, float, float], str]] = [
        (
            "ledger (PLD)",
            f"ledger ε (PLD) = {report.epsilon_pld:.2f}: a guarantee if the run is the mechanism its ledger describes",
            float(report.epsilon_pld),
            _TAB20[14],
            "",
        )
    ]
    if claimed_epsilon is not None:
        name = claim_label or "claimed"
        bars.append(
            (
                name,
                f"{name} ε = {claimed_epsilon:.2f}: the run's claimed guarantee",
                float(claimed_epsilon),
                _TAB20[15],
                "",
            )
        )
    for index, (name, audit, family) in enumerate(statistics):
        colour = _FALLBACK[index]
        short = name.split(" (")[0]
        if family is not None:
            capped = " (capped: the grid's strongest hypothesis)" if family.capped else ""
            bars.append(
                (
                    f"{short}: ledger test",
                    f"{name}: ε ≥ {family.epsilon:.2f}{capped} at {100 * family.confidence:g} % (family bound, a test "
                    "of the ledger's σ, q and T: a lower bound only if the run is a composed subsampled Gaussian)",
                    float(family.epsilon),
                    colour,
                    "//",
                )
            )
        profile = getattr(report, f"{'all_iterates' if name.startswith('all') else 'final_model'}_profile")
        if profile is not None:
            bars.append(
                (
                    f"{short}: assumption-free",
                    f"{name}: ε ≥ {profile.headline.epsilon_lower:.2f}, lower bound at {100 * profile.confidence:g} % "
                    "(assumption-free, Clopper–Pearson; threshold fixed by the ledger)",
                    float(profile.headline.epsilon_lower),
                    colour,
                    "",
                )
            )
        bars.append(
            (
                f"{short}: AF, held out",
                f"{name}: ε ≥ {audit.epsilon_lower:.2f}, lower bound at {100 * audit.confidence:g} % "
                "(assumption-free, Clopper–Pearson; threshold on held-out canaries)",
                float(audit.epsilon_lower),
                colour,
                "..",
            )
        )

    with figure_style():
        fig, (roc_ax, eps_ax) = plt.subplots(
            1, 2, figsize=(10.0, 4.2), gridspec_kw={"width_ratios": [1.0, 1.25], "wspace": 0.45}
        )
        smallest = 1.0
        for index, (name, audit, _) in enumerate(statistics):
            fpr = np.asarray(audit.roc["fpr"], dtype=float)
            tpr = np.asarray(audit.roc["tpr"], dtype=float)
            keep = (fpr > 0) & (tpr > 0)
            smallest = min(smallest, 1.0 / max(audit.n_nonmembers, 1))
            tprs = "; ".join(
                f"{100 * float(target):g} %: " + tpr_text(float(target), float(value), n_nonmembers=audit.n_nonmembers)
                for target, value in audit.tpr_at_fpr.items()
            )
            colour = _FALLBACK[index]
            roc_ax.plot(fpr[keep], tpr[keep], color=colour, label=f"{name}: AUC {audit.auc:.3f},\nTPR at FPR {tprs}")
            _tpr_dots(roc_ax, audit.tpr_at_fpr, n_nonmembers=audit.n_nonmembers, colour=colour, markersize=5)
        _roc_axes(roc_ax, smallest=smallest)
        roc_ax.set_title(
            f"ROC of the canaries ({statistics[0][1].n_members} members, {statistics[0][1].n_nonmembers} non-members)"
        )
        roc_ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            fontsize=6.5,
            title_fontsize=7,
            title="TPR at FPR (dots; none below the FPR resolution 1/n)",
        )

        rows = np.arange(len(bars))[::-1]  # the first bar on top
        for row, (_, label, value, colour, hatch) in zip(rows, bars):
            eps_ax.barh(
                row, value, height=0.7, color=colour, hatch=hatch, edgecolor="black", linewidth=0.6, label=label
            )
            eps_ax.annotate(
                f"{value:.2f}", (value, row), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7
            )
        eps_ax.axvline(report.epsilon_pld, color="black", linestyle="--", linewidth=0.8)
        eps_ax.set_yticks(rows, [tick for tick, *_ in bars], fontsize=7)
        eps_ax.grid(axis="y", visible=False)
        eps_ax.set_xlim(0, 1.15 * max(value for _, _, value, _, _ in bars) + 1e-9)
        eps_ax.set_xlabel(f"ε (nats) at δ = {report.delta:g}")
        eps_ax.set_title(f"ε: guarantees (claims) and lower bounds at {level}")
        eps_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=6.5)
        fig.suptitle(title)
        return save_figure(fig, stem)
