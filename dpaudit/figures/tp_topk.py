"""TP-TopK (Zhang and Xie) figures and tables from summarised runs and training diagnostics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from dpaudit.figures import _paper as P
from dpaudit.figures.style import figure_style, save_figure, series_style
from dpaudit.rundir import RunDir

PAPER = "tp_topk"
VARIANTS = ("dpsgd-gc", "tp-rand", "tp-topk", "on-rand", "on-topk")


def figure1(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 1: (a) share of gradient energy in the top-k coordinates against k/d; (b) share of the oracle's
    squared gradient that TP-TopK's warm-up support (DP score) captures against random supports."""
    run = Path(runs[0])
    support = P.diagnostics(run)["supports"][0]
    config = P.read_json(RunDir(run).config)
    curves = support["curves"]
    ratios = np.asarray(curves["active_ratio"])
    energy = np.asarray(curves["energy_oracle_topk"])
    score = np.asarray(curves.get("oracle_capture_score_topk", [np.nan] * len(ratios)))
    random_mean, random_std = (
        np.asarray(curves["oracle_capture_random_mean"]),
        np.asarray(curves["oracle_capture_random_std"]),
    )
    eps = config["derived"]["target_epsilon"]
    title = (
        f"Fig 1: gradient energy and TP-TopK support recovery (ε = {eps:g}, support of epoch {support['epoch']}; "
        f"{config['config']['dataset']}, {preset} preset)"
    )
    at_tenth = float(np.interp(0.1, ratios, energy))
    with figure_style():
        fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
        left.plot(ratios, energy, "o-", label="oracle top-k (sorted energy)")
        left.plot([0, 1], [0, 1], color="grey", linestyle="--", label="random (expected)")
        left.plot(
            [0.1], [at_tenth], "*", color="red", markersize=10, label=f"top 10 %: {100 * at_tenth:.1f} % (paper 86.4 %)"
        )
        left.set_xlabel("fraction of coordinates kept")
        left.set_ylabel("fraction of gradient energy")
        left.legend(fontsize=7)
        left.set_title("(a) energy concentration", fontsize=9)
        right.plot(
            ratios, score, "o-", color=series_style("tp-topk", 0)["color"], label=f"TP-TopK warm-up score, ε = {eps:g}"
        )
        right.errorbar(
            ratios, random_mean, yerr=random_std, color="grey", capsize=2, label="random supports (mean ± sd)"
        )
        right.set_xlabel("active ratio ρ")
        right.set_ylabel("oracle gradient energy captured")
        right.legend(fontsize=7)
        right.set_title("(b) support recovery", fontsize=9)
        fig.suptitle(title, fontsize=8)
        fig.tight_layout()
        files = save_figure(fig, Path(out_dir) / "figure1")
    inner = ratios < 1
    claims = [
        P.claim(
            "The top 10 % of coordinates hold most of the gradient energy (paper: 86.4 %)",
            at_tenth > 0.5,
            top_10_percent=at_tenth,
        ),
        P.claim(
            "TP-TopK's warm-up support captures more oracle energy than random supports at every ρ < 1",
            bool(np.all(score[inner] > random_mean[inner])),
            score=score.tolist(),
            random=random_mean.tolist(),
        ),
    ]
    return P.entry(PAPER, "Fig 1", title, files, claims, dataset=config["config"]["dataset"])


def figure2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 2 (data version): composed ε per epoch of TP-TopK (warm-up, then phase 2) and DP-SGD calibrated to
    the same ε, with the loss attack's ε̂ at the last checkpoint."""
    found = P.summaries(runs)
    groups = P.group(found, "optimizer", "target_epsilon")
    title = f"Fig 2: composed ε of TP-TopK vs DP-SGD at matched ε ({P.describe(found, preset)})"
    finals = {}
    with figure_style():
        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        for index, eps in enumerate(sorted({e for _, e in groups})):
            colour = plt.get_cmap("tab10")(index)
            for optimizer, style in (("tp-topk", "-"), ("dpsgd-gc", "--")):
                group = groups.get((optimizer, eps))
                if not group:
                    continue
                run = group[0]
                ax.plot(
                    run["epoch"],
                    run["epsilon"],
                    color=colour,
                    linestyle=style,
                    label=f"{optimizer}, ε = {eps:g}" if index == 0 or optimizer == "tp-topk" else None,
                )
                loss = P.loss_audit(group)
                ax.plot(
                    run["epoch"][-1],
                    loss["point"],
                    "o" if optimizer == "tp-topk" else "s",
                    color=colour,
                    markerfacecolor="none",
                )
                ax.plot(run["epoch"][-1], loss["lower"], "v", color=colour)
                finals[(optimizer, eps)] = run["epsilon"][-1]
        ax.plot([], [], "ko", markerfacecolor="none", label=f"{P.LOSS_EPSILON_LABEL} (point)")
        ax.plot([], [], "kv", label=f"{P.LOSS_EPSILON_LABEL} (95 % lower)")
        ax.set_xlabel("epoch")
        ax.set_ylabel("composed ε (RDP, δ = 1e-5)")
        ax.legend(fontsize=6, loc="upper left")
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure2")
    claims = [
        P.claim(
            "Both methods end at the same target ε (|ε − target| ≤ 0.01)",
            all(abs(value - eps) <= 0.01 for (_, eps), value in finals.items()),
            **{f"{o}_eps{e:g}": v for (o, e), v in finals.items()},
        )
    ]
    return P.entry(PAPER, "Fig 2", title, files, claims, dataset=P.describe(found, preset))


def table2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 2: test accuracy of the five variants at matched ε, with the theoretical ε and ε̂."""
    found, groups, accuracy, epsilons, files = P.matched_epsilon_table(
        out_dir, runs, preset=preset, caption="Table 2: five DP methods at matched (ε, 1e-5) with ε̂"
    )

    def acc(optimizer, eps):
        return accuracy.get((eps, optimizer), float("nan"))

    claims = [
        P.claim(
            "TP-TopK ≥ TP-Rand at every ε",
            all(acc("tp-topk", e) >= acc("tp-rand", e) for e in epsilons),
            **{f"gap_eps{e:g}": acc("tp-topk", e) - acc("tp-rand", e) for e in epsilons},
        ),
        P.claim(
            "The sparse TP methods beat dense DP-SGD at every ε",
            all(min(acc("tp-topk", e), acc("tp-rand", e)) > acc("dpsgd-gc", e) for e in epsilons),
            **{f"dpsgd_eps{e:g}": acc("dpsgd-gc", e) for e in epsilons},
        ),
        P.claim(
            "Every method improves with ε (lowest ε below highest ε)",
            all(acc(o, epsilons[0]) < acc(o, epsilons[-1]) for o in VARIANTS),
            **{o: [acc(o, e) for e in epsilons] for o in VARIANTS},
        ),
        P.claim(
            "No ε̂ lower bound exceeds its theoretical ε",
            all(
                P.loss_audit(g)["lower"] <= P.final_epsilon(g)
                and P.canary_audit(g)["lower"] <= P.canary_audit(g)["mechanism"]
                for g in groups.values()
            ),
        ),
    ]
    return P.entry(PAPER, "Table 2", "five variants at matched ε", files, claims, dataset=P.describe(found, preset))


def table3(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 3: TP-Rand and TP-TopK per active ratio ρ at one ε, with Δ_TP and ε̂."""
    found = P.summaries(runs)
    groups = P.group(found, "active_ratio", "optimizer")
    ratios = sorted({rho for rho, _ in groups})
    eps = found[0]["target_epsilon"]
    rows, gaps = [], {}
    for rho in ratios:
        rand, topk = groups[(rho, "tp-rand")], groups[(rho, "tp-topk")]
        gaps[rho] = P.final(topk) - P.final(rand)
        rows.append(
            [
                f"{rho:g}",
                P.percent(P.final(rand)),
                P.percent(P.final(topk)),
                f"{100 * gaps[rho]:+.1f}",
                *P.audit_cells(topk),
            ]
        )
    files = P.write_table(
        Path(out_dir) / "table3",
        ["ρ", "TP-Rand (%)", "TP-TopK (%)", "Δ_TP (points)", *(f"TP-TopK {h}" for h in P.AUDIT_HEADER)],
        rows,
        caption=f"Table 3: active-ratio ablation at ε = {eps:g} ({P.describe(found, preset)})",
    )
    values = [gaps[rho] for rho in ratios]
    claims = [
        P.claim(
            "Δ_TP decreases as ρ grows",
            all(a > b for a, b in zip(values, values[1:])),
            **{f"rho_{rho:g}": gaps[rho] for rho in ratios},
        ),
        P.claim("Δ_TP > 0 at every ρ", all(v > 0 for v in values)),
    ]
    return P.entry(PAPER, "Table 3", "active-ratio ablation", files, claims, dataset=P.describe(found, preset))


def table4(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 4: TP-TopK accuracy over the warm-up share of epochs (E1/E) × share of ε (ε1/ε), with ε̂."""
    found = P.summaries(runs)
    groups = P.group(found, "warmup_fraction", "warmup_budget_fraction")
    epochs = sorted({a for a, _ in groups})
    budgets = sorted({b for _, b in groups})
    accuracy = {key: P.final(group) for key, group in groups.items()}
    rows = [
        [f"{a:g}"]
        + [f"{P.percent(accuracy[(a, b)])} (ε̂ ≥ {P.canary_audit(groups[(a, b)])['lower']:.2f})" for b in budgets]
        for a in epochs
    ]
    eps = found[0]["target_epsilon"]
    files = P.write_table(
        Path(out_dir) / "table4",
        ["E1/E \\ ε1/ε", *(f"{b:g}" for b in budgets)],
        rows,
        caption=f"Table 4: phase/budget split of TP-TopK at ε = {eps:g}, ρ = 0.4: test accuracy (%) "
        f"and canary ε̂ lower bound ({P.describe(found, preset)})",
    )
    best = max(accuracy, key=accuracy.get)
    corners = [(a, b) for a in (epochs[0], epochs[-1]) for b in (budgets[0], budgets[-1])]
    centre = (epochs[len(epochs) // 2], budgets[len(budgets) // 2])
    claims = [
        P.claim(
            "The best split lies in the interior of the grid",
            best[0] not in (epochs[0], epochs[-1]) and best[1] not in (budgets[0], budgets[-1]),
            best=list(best),
            accuracy=accuracy[best],
        ),
        P.claim(
            "(0.3, 0.3) is not dominated by any corner",
            all(accuracy[centre] >= accuracy[c] for c in corners),
            centre=accuracy[centre],
            corners={str(c): accuracy[c] for c in corners},
        ),
    ]
    return P.entry(PAPER, "Table 4", "phase/budget split", files, claims, dataset=P.describe(found, preset))
