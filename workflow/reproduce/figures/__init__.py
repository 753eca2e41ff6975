"""Figures: one shared matplotlib style, one colour per series everywhere, PDF + PNG output.

``FIGURE_SPECS`` declares each figure once, by name ("<paper folder>/<stem>"): the function drawing it and the
pipeline outputs it draws, which the Snakemake rules read to build its job. ``FIGURES`` maps the same names to the
drawing functions; each writes its files into a folder and returns a manifest entry with the paper's claims
evaluated on the data. Importing this package loads matplotlib (Agg backend) but not torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    """

    draw: Callable[..., dict[str, Any]]
    experiments: tuple[str, ...] = ()
    cross: tuple[str, ...] = ()
    diagnostics: tuple[str, ...] = ()
    grids: tuple[str, ...] = ()
    whole_run: bool = False

    @property
    def draws_runs(self) -> bool:
        """Whether it draws pipeline runs (and so takes ``runs``)."""
        return bool(self.experiments or self.cross or self.diagnostics or self.grids)


FIGURE_SPECS: dict[str, FigureSpec] = {
    # DPSGD-GC/DC (Liang et al.)
    "dpsgd_dc/figure1": FigureSpec(dpsgd_dc.figure1),
    "dpsgd_dc/figure2": FigureSpec(dpsgd_dc.figure2, grids=("gc",)),
    "dpsgd_dc/figure3": FigureSpec(dpsgd_dc.figure3, grids=("dc",)),
    "dpsgd_dc/figure4": FigureSpec(dpsgd_dc.figure4, grids=("gc",)),
    "dpsgd_dc/figure5": FigureSpec(dpsgd_dc.figure5),
    "dpsgd_dc/table1": FigureSpec(dpsgd_dc.table1),
    # AdaDPIGU
    "adadpigu/figure2": FigureSpec(adadpigu.figure2, diagnostics=("dpsgd-gc",)),  # DP-SGD's gradients
    "adadpigu/figure5": FigureSpec(adadpigu.figure5, experiments=("adadpigu_pruning",)),
    "adadpigu/figure6": FigureSpec(adadpigu.figure6, experiments=("adadpigu_pruning",)),
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
    "tp_topk/table3": FigureSpec(tp_topk.table3, experiments=("tp_active_ratio",)),
    "tp_topk/table4": FigureSpec(tp_topk.table4, experiments=("tp_split",)),
    # DP-PSAC
    "dp_psac/figure1": FigureSpec(dp_psac.figure1, experiments=("psac_grid",)),
    "dp_psac/figure2": FigureSpec(dp_psac.figure2),
    "dp_psac/figure3": FigureSpec(dp_psac.figure3, experiments=("psac_grid",)),
    "dp_psac/figure4": FigureSpec(dp_psac.figure4, experiments=("psac_grid",)),
    "dp_psac/figure5": FigureSpec(dp_psac.figure5),
    "dp_psac/table2": FigureSpec(dp_psac.table2, cross=("dpsgd-gc", "auto-s", "dp-psac"), whole_run=True),
    # D2P2-SGD
    "d2p2_sgd/figure2": FigureSpec(d2p2_sgd.figure2, experiments=("d2p2_methods", "nonprivate")),
    "d2p2_sgd/figure4": FigureSpec(d2p2_sgd.figure4, experiments=("d2p2_sigma",)),
    "d2p2_sgd/figure5": FigureSpec(d2p2_sgd.figure5, experiments=("d2p2_sigma",)),
    "d2p2_sgd/figure6": FigureSpec(d2p2_sgd.figure6, experiments=("d2p2_sigma", "d2p2_batch", "d2p2_reduction")),
    "d2p2_sgd/table2": FigureSpec(
        d2p2_sgd.table2, cross=("dpsgd-auto", "d2p-sgd", "dp2-sgd", "d2p2-sgd"), whole_run=True
    ),
}
# name → drawing function, for the `figure` and `list` commands of `python -m reproduce`
FIGURES: dict[str, Callable[..., dict[str, Any]]] = {name: spec.draw for name, spec in FIGURE_SPECS.items()}

__all__ = ["FIGURES", "FIGURE_SPECS", "SERIES_STYLES", "FigureSpec", "figure_style", "save_figure", "series_style"]
