"""Figures: one shared matplotlib style, one colour per series everywhere, PDF + PNG output.

``FIGURES`` maps a figure name ("<paper folder>/<stem>") to the function drawing it; each writes its
files into a folder and returns a manifest entry with the paper's claims evaluated on the data.
Importing this package loads matplotlib (Agg backend) but not torch.
"""

from dpaudit.figures import adadpigu, d2p2_sgd, dp_psac, dpsgd_dc, tp_topk
from dpaudit.figures.style import SERIES_STYLES, figure_style, save_figure, series_style

FIGURES = {
    "dpsgd_dc/figure1": dpsgd_dc.figure1,
    "dpsgd_dc/figure2": dpsgd_dc.figure2,
    "dpsgd_dc/figure3": dpsgd_dc.figure3,
    "dpsgd_dc/figure4": dpsgd_dc.figure4,
    "dpsgd_dc/figure5": dpsgd_dc.figure5,
    "dpsgd_dc/table1": dpsgd_dc.table1,
    **{
        f"{module.PAPER}/{name}": getattr(module, name)
        for module, names in (
            (adadpigu, ("figure2", "figure5", "figure6", "figure7", "figure8", "table3", "table4")),
            (tp_topk, ("figure1", "figure2", "table2", "table3", "table4")),
            (dp_psac, ("figure1", "figure2", "figure3", "figure4", "figure5", "table2")),
            (d2p2_sgd, ("figure2", "figure4", "figure5", "figure6", "table2")),
        )
        for name in names
    },
}

__all__ = ["FIGURES", "SERIES_STYLES", "figure_style", "save_figure", "series_style"]
