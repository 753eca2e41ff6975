"""Figures: one shared matplotlib style, one colour per series everywhere, PDF + PNG output.

``FIGURE_SPECS`` declares each figure once, by name ("<paper folder>/<stem>"): the function drawing it and the
pipeline outputs it draws, which the Snakemake rules read to build its job. ``FIGURES`` maps the same names to the
drawing functions; each writes its files into a folder and returns a manifest entry with the paper's claims
evaluated on the data. Importing this package loads matplotlib (Agg backend) but not torch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit._validation import DPAuditError
from reproduce.figures import adadpigu, d2p2_sgd, dp_psac, dpsgd_dc, tp_topk
from reproduce.figures.style import SERIES_STYLES, figure_style, save_figure, series_style


@dataclass(frozen=True)
class FigureSpec:
    """One figure or table of a paper: the function drawing it and what it draws from in the pipeline.

    A figure with no inputs is drawn from theory (or published numbers) alone; any other takes ``runs``.

    Attributes:
        draw: Draws it into ``out_dir`` (keyword arguments only) and returns its manifest entry.
        experiments: Names under ``papers.experiments`` whose runs' summaries it draws, every trial.
        cross: Runs of ``optimizers.runs`` whose cross-optimizer audit runs it draws, every target ε and trial.
        diagnostics: Runs of ``optimizers.runs`` whose training diagnostics it draws: their run at the first
            target ε, trial 0.
        grids: Grids of the DPSGD-GC/DC section (``gc``, ``dc``) whose runs it draws, every trial.
        whole_run: Whether it also draws the twin of each ``cross`` run in the whole-run ladder
            (``audit.whole_run``): the same optimizer at the same target ε, trained with whole-run canaries, where
            they fit the optimizer.
        select: Picks from the summaries of its ``experiments`` runs those it draws in particular (a tuned run, a
            grid cell) and raises ``DPAuditError`` where one is missing; the drawing calls it too, and a test calls
            it on every preset's plan, without training.
    """

    draw: Callable[..., dict[str, Any]]
    experiments: tuple[str, ...] = ()
    cross: tuple[str, ...] = ()
    diagnostics: tuple[str, ...] = ()
    grids: tuple[str, ...] = ()
    whole_run: bool = False
    select: Callable[[list[dict[str, Any]]], Any] | None = None

    @property
    def draws_runs(self) -> bool:
        """Whether it draws pipeline runs (and so takes ``runs``)."""
        return bool(self.experiments or self.cross or self.diagnostics or self.grids)


FIGURE_SPECS: dict[str, FigureSpec] = {
    # DPSGD-GC/DC (Liang et al.)
    "dpsgd_dc/figure1": FigureSpec(dpsgd_dc.figure1),
    "dpsgd_dc/figure2": FigureSpec(dpsgd_dc.figure2, grids=("gc",)),
    "dpsgd_dc/figure3": FigureSpec(dpsgd_dc.figure3, grids=("dc", "gc")),  # GC: the control of "DC stabilises"
    "dpsgd_dc/figure4": FigureSpec(dpsgd_dc.figure4, grids=("gc",)),
    "dpsgd_dc/figure5": FigureSpec(dpsgd_dc.figure5),
    "dpsgd_dc/table1": FigureSpec(dpsgd_dc.table1),
    # AdaDPIGU
    "adadpigu/figure2": FigureSpec(adadpigu.figure2, diagnostics=("dpsgd-gc",)),  # DP-SGD's gradients
    "adadpigu/figure5": FigureSpec(adadpigu.figure5, experiments=("adadpigu_pruning",)),
    "adadpigu/figure6": FigureSpec(
        adadpigu.figure6, experiments=("adadpigu_pruning",), select=adadpigu.tuned_pruning_runs
    ),
    "adadpigu/figure7": FigureSpec(adadpigu.figure7, experiments=("adadpigu_pruning",)),
    "adadpigu/figure8": FigureSpec(adadpigu.figure8, experiments=("adadpigu_tradeoff",)),
    "adadpigu/table3": FigureSpec(adadpigu.table3, cross=("adadpigu",)),
    "adadpigu/table4": FigureSpec(
        adadpigu.table4, cross=("adadpigu", "dpsgd-gc"), experiments=("nonprivate",), whole_run=True
    ),
    # TP-TopK
    "tp_topk/figure1": FigureSpec(tp_topk.figure1, diagnostics=("tp-topk",)),
    "tp_topk/figure2": FigureSpec(tp_topk.figure2, cross=("tp-topk", "dpsgd-gc"), whole_run=True),
    "tp_topk/table2": FigureSpec(
        tp_topk.table2, cross=("dpsgd-gc", "tp-rand", "tp-topk", "on-rand", "on-topk"), whole_run=True
    ),
    "tp_topk/table3": FigureSpec(tp_topk.table3, experiments=("tp_active_ratio",), select=tp_topk.ratio_pairs),
    "tp_topk/table4": FigureSpec(tp_topk.table4, experiments=("tp_split",)),
    # DP-PSAC
    "dp_psac/figure1": FigureSpec(dp_psac.figure1, experiments=("psac_grid",), select=dp_psac.figure1_run),
    "dp_psac/figure2": FigureSpec(dp_psac.figure2),
    "dp_psac/figure3": FigureSpec(dp_psac.figure3, experiments=("psac_grid",), select=dp_psac.figure3_runs),
    "dp_psac/figure4": FigureSpec(dp_psac.figure4, experiments=("psac_grid",)),
    "dp_psac/figure5": FigureSpec(dp_psac.figure5),
    "dp_psac/table2": FigureSpec(dp_psac.table2, cross=("dpsgd-gc", "auto-s", "dp-psac"), whole_run=True),
    # D2P2-SGD
    "d2p2_sgd/figure2": FigureSpec(d2p2_sgd.figure2, experiments=("d2p2_methods", "nonprivate")),
    "d2p2_sgd/figure4": FigureSpec(d2p2_sgd.figure4, experiments=("d2p2_sigma",)),
    "d2p2_sgd/figure5": FigureSpec(d2p2_sgd.figure5, experiments=("d2p2_sigma",)),
    "d2p2_sgd/figure6": FigureSpec(
        d2p2_sgd.figure6, experiments=("d2p2_sigma", "d2p2_batch", "d2p2_reduction"), select=d2p2_sgd.figure6_runs
    ),
    "d2p2_sgd/table2": FigureSpec(
        d2p2_sgd.table2, cross=("dpsgd-auto", "d2p-sgd", "dp2-sgd", "d2p2-sgd"), whole_run=True
    ),
}


def preset_figures(
    *, experiments: Collection[str], optimizer_runs: Collection[str], skip: Collection[str]
) -> tuple[dict[str, FigureSpec], dict[str, str]]:
    """The paper figures a preset draws (the DPSGD-GC/DC figures have rules of their own), and those it opts out of
    by name (``papers.skip_figures``: ``paper.stem`` names, e.g. ``tp_topk.table2``) with the reason.

    Args:
        experiments: The preset's ``papers.experiments``.
        optimizer_runs: The names of its ``optimizers.runs``.
        skip: The figures it does not draw, as ``paper.stem``.

    Returns:
        (figure name → spec of each figure drawn, figure name → why each opted-out figure is not: what it lacks).

    Raises:
        DPAuditError: a figure needs an experiment or an optimizer run that the preset lacks and does not opt out
            of, or an opt-out names no figure.
    """
    names = {name.replace(".", "/", 1) for name in skip}
    unknown = sorted(names - set(FIGURE_SPECS))
    if unknown:
        raise DPAuditError(
            f"params papers.skip_figures: {unknown[0].replace('/', '.')!r} is not a figure (python -m reproduce list)"
        )
    chosen, skipped = {}, {}
    for name, figure in FIGURE_SPECS.items():
        if name.startswith("dpsgd_dc/"):
            continue
        missing = [f"experiment {e}" for e in figure.experiments if e not in experiments] + [
            f"optimizers run {run}"
            for run in dict.fromkeys(figure.cross + figure.diagnostics)
            if run not in optimizer_runs
        ]
        if name in names:
            skipped[name] = f"this preset lacks {', '.join(missing)}" if missing else "this preset opts out of it"
        elif missing:
            raise DPAuditError(
                f"params: {name} needs {', '.join(missing)}, which this preset lacks; add it, or opt out with "
                f"papers.skip_figures: [{name.replace('/', '.')}]"
            )
        else:
            chosen[name] = figure
    return chosen, skipped


def check_figure_models(
    figures: Mapping[str, FigureSpec],
    *,
    experiments: Mapping[str, Collection[str]],
    paper_runs: Mapping[str, Mapping[str, Any]],
    cross_runs: Mapping[str, Mapping[str, Any]],
) -> None:
    """Each figure compares one model per dataset: the runs it draws from experiments and from the cross-optimizer
    audit (a non-private reference beside DP runs, a table of optimizers) train the same network on the same data.

    Args:
        figures: The figures a preset draws (:func:`preset_figures`).
        experiments: Experiment name → its run ids.
        paper_runs: Run id → its full settings (``dataset``, ``model``, …).
        cross_runs: Name of each ``optimizers.runs`` entry → its full settings in the cross-optimizer audit.

    Raises:
        DPAuditError: a figure would draw two models on one dataset.
    """
    for name, figure in figures.items():
        runs = [paper_runs[run] for experiment in figure.experiments for run in experiments[experiment]]
        runs += [cross_runs[run] for run in figure.cross]
        models: dict[str, set[str]] = {}
        for settings in runs:
            models.setdefault(str(settings.get("dataset")), set()).add(str(settings.get("model")))
        for dataset, found in models.items():
            if len(found) > 1:
                raise DPAuditError(
                    f"params: {name} would compare models {', '.join(sorted(found))} on {dataset}; give the runs it "
                    "draws one model (papers.experiments.*.settings.model, optimizers.common.model, audit.common.model)"
                )


# name → drawing function, for the `figure` and `list` commands of `python -m reproduce`
FIGURES: dict[str, Callable[..., dict[str, Any]]] = {name: spec.draw for name, spec in FIGURE_SPECS.items()}

__all__ = [
    "FIGURES",
    "FIGURE_SPECS",
    "SERIES_STYLES",
    "FigureSpec",
    "check_figure_models",
    "figure_style",
    "preset_figures",
    "save_figure",
    "series_style",
]
