"""The shared look of every paper figure: :mod:`dpaudit.plot`'s, with one colour (and line style) per paper series."""

from __future__ import annotations

from dpaudit import plot
from dpaudit.plot import figure_style, save_figure

__all__ = ["SERIES_STYLES", "figure_style", "save_figure", "series_style"]

# One colour (and line style) per series, the same in every figure. Keys are "<kind>:<value>".
SERIES_STYLES: dict[str, dict] = {
    # theoretical bounds (Liang et al. Fig 1 / Fig 5 colours)
    "bound:feldman2018": {"color": "darkgoldenrod", "linestyle": "-.", "label": "Feldman et al. (2018)"},
    "bound:mironov-composition": {
        "color": "darkblue",
        "linestyle": "--",
        "label": "Mironov (2017) + Mironov et al. (2019)",
    },
    "bound:altschuler-talwar2022": {"color": "darkorange", "linestyle": "-.", "label": "Altschuler & Talwar (2022)"},
    "bound:kong-ribero2024": {"color": "darkred", "linestyle": ":", "label": "Kong & Ribero (2024)"},
    "bound:dpsgd-dc": {
        "color": "darkcyan",
        "linestyle": "-",
        "label": "Ours (Theorem 3.4; one adjacency direction only)",
    },
    "bound:trivial": {"color": "darkred", "linestyle": "--", "label": "Trivial upper bound"},
    # batch sizes (Liang et al. Figs 2 and 4)
    "b:100": {"color": "#d62728"},
    "b:150": {"color": "#e377c2"},
    "b:200": {"color": "#ff7f0e"},
    "b:300": {"color": "#bcbd22"},
    "b:400": {"color": "#1f77b4"},
    "b:600": {"color": "#2ca02c"},
    "b:1000": {"color": "#9467bd"},
}


def series_style(key: str, index: int = 0) -> dict:
    """Line properties of a series; unknown keys get a stable colour from tab20 by ``index``
    (:func:`dpaudit.plot.series_style` with :data:`SERIES_STYLES`)."""
    return plot.series_style(key, index, SERIES_STYLES)
