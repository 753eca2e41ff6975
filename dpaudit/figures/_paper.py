"""Helpers of the AdaDPIGU, TP-TopK, DP-PSAC and D2P2-SGD figures: run summaries, manifest entries, tables,
the ε̂ conventions.

Conventions of every paper figure: the theoretical ε is the run's composed ε at δ (RDP accountant,
replayed from its privacy ledger). Beside it, ε̂ of the black-box loss attack on the checkpoint (point
estimate and 95 % lower bound; comparable to the run's ε). Tables also give the white-box canary audit's
ε̂ lower bound, which is comparable to the theoretical ε of one step (the mechanism each canary faces).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import atomic_write_bytes, read_json
from dpaudit._validation import DPAuditError
from dpaudit.experiments import load_summaries
from dpaudit.rundir import RunDir

PAPERS = {
    "adadpigu": "AdaDPIGU, differentially private SGD with adaptive importance-based gradient updates",
    "tp_topk": "When do fewer coordinates suffice in DP-SGD? (TP-TopK)",
    "dp_psac": "Differentially private learning with per-sample adaptive clipping (DP-PSAC)",
    "d2p2_sgd": "Dynamically private SGD with random projection (D2P2-SGD)",
}
LOSS_EPSILON_LABEL = "ε̂ loss attack"
SKIPPED = [  # listed in figures/manifest.json with the reason; drawn when the user supplies the data
    {
        "name": "tp_topk/table5",
        "paper": PAPERS["tp_topk"],
        "figure": "Table 5",
        "skipped": "needs EyePACS retinal images (Kaggle licence, not freely downloadable); supply them as a dataset "
        "to run it",
    },
    {
        "name": "dp_psac/table3",
        "paper": PAPERS["dp_psac"],
        "figure": "Table 3",
        "skipped": "needs GLUE with a pretrained RoBERTa (private-transformers); supply the data and weights to run it",
    },
    {
        "name": "tp_topk/table6",
        "paper": PAPERS["tp_topk"],
        "figure": "Table 6",
        "skipped": "contextual table of literature numbers; its own rows are Table 2's",
    },
]


def claim(text: str, holds: bool, **numbers: Any) -> dict[str, Any]:
    return {"claim": text, "holds": bool(holds), "numbers": numbers}


def entry(
    paper: str, figure: str, title: str, files: Sequence[Path], claims: list[dict], *, dataset: str, **extra: Any
) -> dict[str, Any]:
    return {
        "paper": PAPERS[paper],
        "figure": figure,
        "title": title,
        "files": [str(p) for p in files],
        "dataset": dataset,
        "claims": claims,
        **extra,
    }


def summaries(runs: Iterable[str | Path]) -> list[dict[str, Any]]:
    found = load_summaries(runs)
    if not found:
        raise DPAuditError("this figure needs --runs (run folders with summary.json)")
    return found


def setting(run: dict[str, Any], key: str) -> Any:
    """A training setting of a summarised run (``noise_multiplier``: the run's z, set or calibrated)."""
    if key == "noise_multiplier":  # z = σ_DP·b/C, recomputed: rounded so that equal settings group together
        return None if run["noise_multiplier"] is None else round(run["noise_multiplier"], 6)
    if key == "target_epsilon":
        return run.get("target_epsilon")
    return run["config"][key]


def group(
    runs: list[dict[str, Any]], *keys: str, where: Callable[[dict], bool] | None = None
) -> dict[Hashable, list[dict[str, Any]]]:
    """Runs (trials together) grouped by settings ``keys`` (one key: plain values), sorted."""
    groups: dict[Hashable, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if where is None or where(run):
            value = tuple(setting(run, key) for key in keys)
            groups[value[0] if len(keys) == 1 else value].append(run)
    return dict(
        sorted(
            groups.items(),
            key=lambda item: tuple(str(v) if v is None else v for v in (item[0] if len(keys) > 1 else (item[0],))),
        )
    )


def describe(runs: list[dict[str, Any]], preset: str) -> str:
    datasets = sorted({run["config"]["dataset"] for run in runs})
    return f"{', '.join(datasets)}, {preset} preset"


def series(runs: list[dict[str, Any]], key: str) -> np.ndarray:
    """[trials, epochs] of a per-epoch field (None → NaN)."""
    return np.array([[np.nan if v is None else v for v in run[key]] for run in runs], dtype=float)


def final(runs: list[dict[str, Any]], key: str = "test_accuracy", *, last: int = 1) -> float:
    """Mean over trials of a per-epoch field, averaged over the ``last`` epochs."""
    return float(np.nanmean(series(runs, key)[:, -last:]))


def final_epsilon(runs: list[dict[str, Any]]) -> float:
    values = [run["epsilon"][-1] for run in runs]
    return float("inf") if any(v is None for v in values) else float(np.mean(values))


def loss_audit(runs: list[dict[str, Any]], epoch: int | None = None) -> dict[str, float]:
    """Loss-attack ε̂ point and lower bound at ``epoch`` (default: the last checkpoint), mean over trials."""
    reports = []
    for run in runs:
        epochs = sorted(int(e) for e in run.get("loss", {}))
        if epochs:
            reports.append(run["loss"][str(epochs[-1] if epoch is None else epoch)])
    if not reports:
        return {"point": float("nan"), "lower": float("nan"), "ceiling": float("nan")}
    return {
        "point": float(np.mean([float(r["epsilon_point"]) for r in reports])),
        "lower": float(np.mean([float(r["epsilon_lower"]) for r in reports])),
        "ceiling": float(np.mean([float(r["epsilon_ceiling"]) for r in reports])),
    }


def canary_audit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Canary ε̂ point and lower bound with the per-step mechanism ε they face, mean over trials."""
    reports = [run["canary"] for run in runs if run.get("canary")]
    if not reports:
        return {"point": float("nan"), "lower": float("nan"), "mechanism": float("nan")}
    return {
        "point": float(np.mean([float(r["epsilon_point"]) for r in reports])),
        "lower": float(np.mean([float(r["epsilon_lower"]) for r in reports])),
        "mechanism": float(np.mean([r["epsilon_mechanism"] for r in reports])),
    }


def audit_cells(runs: list[dict[str, Any]]) -> list[str]:
    """Table cells: theoretical ε, loss ε̂ point / lower, canary ε̂ lower / per-step ε."""
    loss, canary = loss_audit(runs), canary_audit(runs)
    return [
        f"{final_epsilon(runs):.2f}",
        f"{loss['point']:.2f} / {loss['lower']:.2f}",
        f"{canary['lower']:.2f} / {canary['mechanism']:.2f}",
    ]


AUDIT_HEADER = ["ε (theory)", "ε̂ loss: point / lower", "ε̂ canary lower / ε per step"]


def matched_epsilon_table(out_dir: str | Path, runs: Iterable[str | Path], *, preset: str, caption: str):
    """Table 2 of the TP-TopK, DP-PSAC and D2P2-SGD papers: test accuracy per (target ε, method) with the
    theoretical ε and ε̂.

    Returns:
        (summaries, runs grouped by (target ε, optimizer), final test accuracy per group, sorted target ε,
        the files written: ``table2.md`` and ``table2.tex``).
    """
    found = summaries(runs)
    groups = group(found, "target_epsilon", "optimizer")
    rows = [[f"{eps:g}", name, percent(final(runs_)), *audit_cells(runs_)] for (eps, name), runs_ in groups.items()]
    files = write_table(
        Path(out_dir) / "table2",
        ["target ε", "method", "test accuracy (%)", *AUDIT_HEADER],
        rows,
        caption=f"{caption} ({describe(found, preset)})",
    )
    accuracy = {key: final(runs_) for key, runs_ in groups.items()}
    return found, groups, accuracy, sorted({eps for eps, _ in accuracy}), files


def write_table(stem: str | Path, header: list[str], rows: list[list[str]], *, caption: str) -> list[Path]:
    """``stem.md`` (caption as a first line) and ``stem.tex`` (booktabs tabular with the caption)."""
    stem = Path(stem)
    lines = [f"**{caption}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    markdown = atomic_write_bytes(stem.with_suffix(".md"), ("\n".join(lines) + "\n").encode())
    tex_lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        r"\begin{tabular}{" + "l" * len(header) + "}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in header) + r" \\",
        r"\midrule",
        *(" & ".join(latex_escape(c) for c in row) + r" \\" for row in rows),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    tex = atomic_write_bytes(stem.with_suffix(".tex"), ("\n".join(tex_lines) + "\n").encode())
    return [markdown, tex]


def latex_escape(text: str) -> str:
    for char, replacement in (("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
        text = text.replace(char, replacement)
    return text


def diagnostics(run: str | Path) -> dict[str, Any]:
    path = RunDir(run).target.diagnostics
    if not path.is_file():
        raise DPAuditError(f"{path} is missing: train the run with diagnostics on")
    return read_json(path)


def percent(value: float) -> str:
    return "–" if not np.isfinite(value) else f"{100 * value:.1f}"
