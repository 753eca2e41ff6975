"""The shared look of every dpaudit figure."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
_FALLBACK = plt.get_cmap("tab20").colors[0::2] + plt.get_cmap("tab20").colors[1::2]  # 10 strong, then 10 pale


def series_style(key: str, index: int = 0) -> dict:
    """Line properties of a series; unknown keys get a stable colour from tab10 by ``index``."""
    style = dict(SERIES_STYLES.get(key, {"color": _FALLBACK[index % len(_FALLBACK)]}))
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
