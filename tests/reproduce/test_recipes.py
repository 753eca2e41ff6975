"""The recipes of docs/development.md for the reproduction, followed as written: how to add a figure and a paper."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from support import ROOT

# A paper and a theory-only figure of it, as a user adds them (docs/development.md, "How to add a figure or a
# paper"): the μ-GDP trade-off curve of Dong, Roth and Su, with a claim decided by a closed form.
NEW_PAPER = "gaussian_dp"
NEW_TITLE = "Gaussian differential privacy (Dong, Roth and Su): the trade-off curve, a theory-only example"
NEW_MODULE = '''"""Gaussian differential privacy (Dong, Roth and Su): the μ-GDP trade-off curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from reproduce.figures import _paper as P
from reproduce.figures.style import figure_style, save_figure

PAPER = "gaussian_dp"


def figure1(*, out_dir: str | Path, preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 1: the trade-off curve G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) of μ-GDP, μ ∈ {0.5, 1, 2} (closed form)."""
    alpha = np.linspace(1e-4, 1 - 1e-4, 999)
    mus = (0.5, 1.0, 2.0)
    curves = {mu: stats.norm.cdf(stats.norm.ppf(1 - alpha) - mu) for mu in mus}
    title = "Fig 1: μ-GDP trade-off curves (closed form)"
    with figure_style():
        fig, ax = plt.subplots(figsize=(4.0, 4.0))
        for mu, beta in curves.items():
            ax.plot(alpha, beta, label=f"μ = {mu:g}")
        ax.set_xlabel("type I error α")
        ax.set_ylabel("type II error β")
        ax.legend()
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure1")
    # G_μ is its own inverse: Φ⁻¹(1 − G_μ(α)) = μ − Φ⁻¹(1 − α), so G_μ(G_μ(α)) = Φ(Φ⁻¹(α)) = α
    error = max(
        float(np.max(np.abs(stats.norm.cdf(stats.norm.ppf(1 - beta) - mu) - alpha))) for mu, beta in curves.items()
    )
    claims = [
        P.claim(
            "The μ-GDP trade-off curve is symmetric: G_μ(G_μ(α)) = α",
            P.exact(error < 1e-9),
            test=f"largest |G_μ(G_μ(α)) − α| over {len(alpha)} α in (0, 1) and μ ∈ {{0.5, 1, 2}}, tolerance 1e-9",
            max_error=error,
        )
    ]
    return P.entry(PAPER, "Fig 1", title, files, claims, dataset="none (closed form)")
'''


def _copy_workflow(destination):
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, destination / name)
    for folder in ("workflow", "configs", "profiles"):
        shutil.copytree(ROOT / folder, destination / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return destination


def _edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name} no longer holds {old!r} once: update the recipe and this test"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _follow_recipes(folder):
    """docs/development.md's steps, in a workflow copy: the paper in `_paper.PAPERS`, the figure's function in
    `workflow/reproduce/figures/<paper>.py`, its `FigureSpec` in `FIGURE_SPECS`."""
    figures = folder / "workflow" / "reproduce" / "figures"
    _edit(figures / "_paper.py", "PAPERS = {\n", f"PAPERS = {{\n    {NEW_PAPER!r}: {NEW_TITLE!r},\n")
    (figures / f"{NEW_PAPER}.py").write_text(NEW_MODULE, encoding="utf-8")
    init = figures / "__init__.py"
    imports = re.search(r"^from reproduce\.figures import .*$", init.read_text(encoding="utf-8"), re.MULTILINE)
    assert imports, "reproduce/figures/__init__.py no longer imports the figure modules in one line"
    _edit(init, imports.group(0), f"{imports.group(0)}\nfrom reproduce.figures import {NEW_PAPER}")
    _edit(
        init,
        "FIGURE_SPECS: dict[str, FigureSpec] = {\n",
        f'FIGURE_SPECS: dict[str, FigureSpec] = {{\n    "{NEW_PAPER}/figure1": FigureSpec({NEW_PAPER}.figure1),\n',
    )
    quotes = figures / "quotes.yaml"  # the claim in the paper's own words
    quotes.write_text(
        quotes.read_text(encoding="utf-8")
        + f"{NEW_PAPER}/figure1:\n- claim: The μ-GDP trade-off curve is symmetric\n  quote: null\n"
        "  note: a closed-form property of the curve the paper defines (its Prop. 2.4), stated here, not quoted\n",
        encoding="utf-8",
    )


def _job_counts(output):
    counts = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


@pytest.mark.integration  # starts Snakemake and the reproduction's command line in subprocesses
def test_a_new_paper_and_its_theory_figure_reach_the_pipeline(tmp_path):
    """A paper added to `_paper.PAPERS` and a figure declared in `FIGURE_SPECS` (drawn from no runs) get their
    `paper_<folder>` target and figure job, and `python -m reproduce figure` draws the figure with its claim."""
    folder = _copy_workflow(tmp_path)
    _follow_recipes(folder)
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", f"paper_{NEW_PAPER}", "-n", "--configfile", "configs/smoke.yaml"]
        + ["--quiet", "rules"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    # the figure's rule and the paper's target, and nothing to train: it draws from no runs
    jobs = _job_counts(dry.stdout + dry.stderr)
    assert jobs == {f"figure_{NEW_PAPER}_figure1": 1, f"paper_{NEW_PAPER}": 1, "total": 2}, dry.stderr[-3000:]

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(folder / "workflow"), os.environ.get("PYTHONPATH")))),
    }
    out = folder / "figures" / NEW_PAPER
    drawn = subprocess.run(
        [sys.executable, "-m", "reproduce", "figure", f"{NEW_PAPER}/figure1", "--out", str(out), "--preset", "smoke"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert drawn.returncode == 0, drawn.stdout[-3000:] + drawn.stderr[-3000:]
    assert (out / "figure1.pdf").stat().st_size > 0 and (out / "figure1.png").stat().st_size > 0
    entry = json.loads((out / "figure1.manifest.json").read_text(encoding="utf-8"))
    assert entry["name"] == f"{NEW_PAPER}/figure1" and entry["paper"] == NEW_TITLE
    [claim] = entry["claims"]
    assert claim["verdict"] == "holds" and claim["kind"] == "paper" and claim["numbers"]["max_error"] < 1e-9
    assert claim["quote"] is None and "closed-form" in claim["note"]  # the quotes file's entry, attached
    assert "[holds] The μ-GDP trade-off curve is symmetric" in drawn.stdout


def test_every_paper_has_its_folder_in_dvc_yaml():
    """The paper recipe's last step: each paper's `figures/<folder>` is an output of the DVC stage, and every
    figure of `FIGURE_SPECS` outside DPSGD-GC/DC belongs to a paper of `_paper.PAPERS`."""
    from reproduce.figures import FIGURE_SPECS
    from reproduce.figures._paper import PAPERS

    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]["figures"]
    outs = {out if isinstance(out, str) else next(iter(out)) for out in stage["outs"]}
    assert {f"figures/{paper}" for paper in PAPERS} <= outs
    assert {name.split("/")[0] for name in FIGURE_SPECS} - {"dpsgd_dc"} <= set(PAPERS)
