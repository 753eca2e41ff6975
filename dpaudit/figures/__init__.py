"""Figures: one shared matplotlib style, one colour per series everywhere, PDF + PNG output.

``FIGURES`` maps a figure name ("<paper folder>/<stem>") to the function drawing it; each writes its
files into a folder and returns a manifest entry with the paper's claims evaluated on the data.
Importing this package loads matplotlib (Agg backend) but not torch.
"""

from dpaudit.figures import dpsgd_dc
from dpaudit.figures.style import SERIES_STYLES, figure_style, save_figure, series_style

FIGURES = {
    "dpsgd_dc/figure1": dpsgd_dc.figure1,
    "dpsgd_dc/figure2": dpsgd_dc.figure2,
    "dpsgd_dc/figure3": dpsgd_dc.figure3,
    "dpsgd_dc/figure4": dpsgd_dc.figure4,
    "dpsgd_dc/figure5": dpsgd_dc.figure5,
    "dpsgd_dc/table1": dpsgd_dc.table1,
}

__all__ = ["FIGURES", "SERIES_STYLES", "figure_style", "save_figure", "series_style"]
