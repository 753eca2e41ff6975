"""TP-TopK (Zhang and Xie) figures and tables from summarised runs and training diagnostics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from dpaudit.rundir import RunDir
from reproduce.figures import _paper as P
from reproduce.figures.style import figure_style, save_figure, series_style

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
            P.exact(at_tenth > 0.5),
            test="oracle top-10 % share of the squared gradient (interpolated on the ρ grid) against 0.5 (one run's "
            "diagnostics; exact, no sampling error modelled)",
            top_10_percent=at_tenth,
        ),
        P.claim(
            "TP-TopK's warm-up support captures more oracle energy than random supports at every ρ < 1",
            P.combine(
                P.decide(difference=float(a - m), standard_error=float(sd))
                for a, m, sd in zip(score[inner], random_mean[inner], random_std[inner])
            ),
            test="per ρ < 1: TP-TopK score minus the random supports' mean, 95 % normal interval with the random "
            "supports' sd as its error (one run); every ρ must hold",
            random_sd=random_std.tolist(),
            score=score.tolist(),
            random=random_mean.tolist(),
        ),
    ]
    return P.entry(PAPER, "Fig 1", title, files, claims, dataset=config["config"]["dataset"])


METHOD_NAMES = {"dpsgd-gc": "DP-SGD", "tp-topk": "TP-TopK"}  # Fig 2's methods, in legend order


def figure2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 2 (data version): composed ε per epoch of TP-TopK (warm-up, then phase 2) and DP-SGD calibrated to
    the same ε, with the loss attack's ε̂ at the last checkpoint."""
    found, twins = P.whole_run_twins(P.summaries(runs))
    groups = P.group(found, "optimizer", "target_epsilon")
    epsilons = sorted({e for _, e in groups})
    title = f"Fig 2: composed ε of TP-TopK vs DP-SGD at matched ε ({P.describe(found, preset)})"
    finals, audited, whole_run = {}, [], set()
    with figure_style():
        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        for index, eps in enumerate(epsilons):
            colour = plt.get_cmap("tab10")(index)
            for column, (optimizer, style) in enumerate((("dpsgd-gc", "--"), ("tp-topk", "-"))):
                group = groups.get((optimizer, eps))
                if not group:
                    continue
                run = group[0]
                ax.plot(run["epoch"], run["epsilon"], color=colour, linestyle=style)
                loss = P.loss_audit(group)
                # after the last epoch, one column per (target ε, method): no two lower bounds of 0 hide each other
                x = run["epoch"][-1] + 0.012 * run["epoch"][-1] * (2 * index + column - len(epsilons) + 0.5)
                ax.plot(x, loss["point"], "o" if optimizer == "tp-topk" else "s", color=colour, markerfacecolor="none")
                ax.plot(x, loss["lower"], "v", color=colour)
                if twins.get((eps, optimizer)):  # the method's run in the whole-run ladder at the same ε
                    ax.plot(x, P.whole_run_audit(twins[(eps, optimizer)])["family"], "^", color=colour, mec="black")
                    whole_run.add(optimizer)
                finals[(optimizer, eps)] = run["epsilon"][-1]
                audited.append((x, loss))
            ax.plot([], [], color=colour, linewidth=4, label=f"target ε = {eps:g}")  # colour: the target ε
        # line style and marker: the method (one entry each, whatever the number of target ε)
        ax.plot([], [], "k-", label="TP-TopK: composed ε")
        ax.plot([], [], "k--", label="DP-SGD (dpsgd-gc): composed ε")
        ax.plot([], [], "ko", markerfacecolor="none", label=f"TP-TopK: {P.LOSS_EPSILON_LABEL} (point)")
        ax.plot([], [], "ks", markerfacecolor="none", label=f"DP-SGD: {P.LOSS_EPSILON_LABEL} (point)")
        ax.plot([], [], "kv", label=f"{P.LOSS_EPSILON_LABEL} (95 % lower), both methods")
        if whole_run:
            ax.plot(
                [],
                [],
                "w^",
                mec="black",
                label=" and ".join(name for optimizer, name in METHOD_NAMES.items() if optimizer in whole_run)
                + f": whole-run canaries, 95 % lower (family bound, {P.FAMILY_ASSUMPTION}; the method's run in the "
                "ladder)",
            )
        P.draw_null(ax, [x for x, _ in audited], [loss for _, loss in audited])
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("composed ε (RDP, δ = 1e-5)")
        ax.legend(
            fontsize=6,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            frameon=False,
            title="markers: the last epoch's, side by side\n(one column per target ε and method)",
            title_fontsize=6,
        )
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure2")
    claims = [
        P.claim(
            "Both methods end at the same target ε (|ε − target| ≤ 0.01)",
            P.exact(all(abs(value - eps) <= 0.01 for (_, eps), value in finals.items())),
            test="accountant's final ε within 0.01 of the target for every run (exact; calibration, by construction)",
            kind="check",
            **{f"{o}_eps{e:g}": v for (o, e), v in finals.items()},
        )
    ]
    return P.entry(PAPER, "Fig 2", title, files, claims, dataset=P.describe(found, preset))


def table2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 2: test accuracy of the five variants at matched ε, with the theoretical ε and ε̂."""
    table = P.matched_epsilon_table(
        out_dir, runs, preset=preset, caption="Table 2: five DP methods at matched (ε, 1e-5) with ε̂"
    )
    groups, accuracy, epsilons = table.groups, table.accuracy, table.epsilons

    def acc(optimizer, eps):
        return accuracy.get((eps, optimizer), float("nan"))

    def versus(a, b):  # (verdict, numbers) of "a's accuracy > b's"
        if not (groups.get(a) and groups.get(b)):
            return "inconclusive", {"missing": [list(k) for k in (a, b) if not groups.get(k)]}
        return P.accuracy_verdict(groups[a], groups[b])

    every = "; every comparison must hold"
    topk = {f"eps{e:g}": versus((e, "tp-topk"), (e, "tp-rand")) for e in epsilons}
    sparse = {f"{o}_eps{e:g}": versus((e, o), (e, "dpsgd-gc")) for e in epsilons for o in ("tp-topk", "tp-rand")}
    improves = {o: versus((epsilons[-1], o), (epsilons[0], o)) for o in VARIANTS}
    loss = [(P.loss_audit(g)["lower"], P.final_epsilon(g)) for g in groups.values()]
    canary = [(P.canary_audit(g)["lower"], P.canary_audit(g)["mechanism"]) for g in groups.values()]
    claims = [
        P.claim(
            "TP-TopK ≥ TP-Rand at every ε",
            P.combine(v for v, _ in topk.values()),
            test=P.accuracy_test(groups.values(), what="TP-TopK minus TP-Rand per ε") + every,
            **{k: n for k, (_, n) in topk.items()},
        ),
        P.claim(
            "The sparse TP methods beat dense DP-SGD at every ε (the paper: at every ε on CIFAR-10; on Fashion-MNIST "
            "essentially tied at ε = 8)",
            P.combine(v for v, _ in sparse.values()),
            test=P.accuracy_test(groups.values(), what="TP-TopK and TP-Rand minus DP-SGD per ε") + every,
            **{k: n for k, (_, n) in sparse.items()},
        ),
        P.claim(
            "Every method improves with ε (lowest ε below highest ε)",
            P.combine(v for v, _ in improves.values()),
            test=P.accuracy_test(groups.values(), what="highest- minus lowest-ε accuracy per method") + every,
            **{o: {"accuracy": [acc(o, e) for e in epsilons], **n} for o, (_, n) in improves.items()},
        ),
        P.claim(
            "No ε̂ lower bound exceeds its theoretical ε",
            P.lower_bound_verdict([lo for lo, _ in loss + canary], [eps for _, eps in loss + canary]),
            test=P.LOWER_BOUND_TEST + " (loss attack vs the run's ε; canaries vs one step's ε)",
            kind="check",
            loss_lower_vs_epsilon=loss,
            canary_lower_vs_step_epsilon=canary,
        ),
    ]
    return P.entry(
        PAPER, "Table 2", "five variants at matched ε", table.files, claims, dataset=P.describe(table.found, preset)
    )


def ratio_pairs(found: list[dict[str, Any]]) -> dict[tuple[float, str], list[dict[str, Any]]]:
    """Table 3's runs by (ρ, optimizer): TP-Rand and TP-TopK at each active ratio ρ of the runs."""
    groups = P.group(found, "active_ratio", "optimizer")
    for rho in sorted({rho for rho, _ in groups}):
        for optimizer in ("tp-rand", "tp-topk"):
            if (rho, optimizer) not in groups:
                raise P.DPAuditError(f"no {optimizer} run with active_ratio = {rho:g} among the runs")
    return groups


def table3(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 3: TP-Rand and TP-TopK per active ratio ρ at one ε, with Δ_TP and ε̂."""
    found = P.summaries(runs)
    groups = ratio_pairs(found)
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
        caption=f"Table 3: active-ratio ablation at ε = {eps:g} ({P.describe(found, preset)}). {P.TABLE_NOTE}",
    )
    estimates = {rho: [P.accuracy_estimate(groups[(rho, o)]) for o in ("tp-topk", "tp-rand")] for rho in ratios}
    delta = {rho: (t[0] - r[0], t[1] + r[1]) for rho, (t, r) in estimates.items()}  # Δ_TP and its variance
    decreasing = {f"rho_{a:g}_vs_{b:g}": P.accuracy_verdict(delta[a], delta[b]) for a, b in zip(ratios, ratios[1:])}
    positive = {f"rho_{rho:g}": P.accuracy_verdict(*estimates[rho]) for rho in ratios}
    every = "; every comparison must hold"
    claims = [
        P.claim(
            "Δ_TP decreases as ρ grows",
            P.combine(v for v, _ in decreasing.values()),
            test=P.accuracy_test(
                next(iter(groups.values())), what="Δ_TP at ρ minus Δ_TP at the next ρ (four accuracies' variances)"
            )
            + every,
            **{f"delta_rho_{rho:g}": gaps[rho] for rho in ratios},
            **{k: n for k, (_, n) in decreasing.items()},
        ),
        P.claim(
            "Δ_TP > 0 at every ρ",
            P.combine(v for v, _ in positive.values()),
            test=P.accuracy_test(groups.values(), what="Δ_TP = TP-TopK minus TP-Rand per ρ") + every,
            **{k: n for k, (_, n) in positive.items()},
        ),
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
        + [
            f"{P.percent(accuracy[(a, b)])} (ε̂ ≥ {c['lower']:.2f} / {c['mechanism']:.2f})"
            for b in budgets
            for c in [P.canary_audit(groups[(a, b)])]
        ]
        for a in epochs
    ]
    eps = found[0]["target_epsilon"]
    files = P.write_table(
        Path(out_dir) / "table4",
        ["E1/E \\ ε1/ε", *(f"{b:g}" for b in budgets)],
        rows,
        caption=f"Table 4: phase/budget split of TP-TopK at ε = {eps:g}, ρ = 0.4: test accuracy (%) "
        f"and canary ε̂ lower bound / the ε of the one step it is compared with (it changes with the split) "
        f"({P.describe(found, preset)})",
    )
    best = max(accuracy, key=accuracy.get)
    corners = [(a, b) for a in (epochs[0], epochs[-1]) for b in (budgets[0], budgets[-1])]
    centre = (epochs[len(epochs) // 2], budgets[len(budgets) // 2])
    interior = [k for k in accuracy if k[0] not in (epochs[0], epochs[-1]) and k[1] not in (budgets[0], budgets[-1])]
    boundary = [k for k in accuracy if k not in interior]
    if interior and boundary:
        best_in, best_out = max(interior, key=accuracy.get), max(boundary, key=accuracy.get)
        split = P.accuracy_verdict(groups[best_in], groups[best_out])
    else:
        best_in = best_out = None
        split = ("inconclusive", {})
    dominated = {str(c): P.accuracy_verdict(groups[centre], groups[c]) for c in corners}
    claims = [
        P.claim(
            "The best split lies in the interior of the grid",
            split[0],
            test=P.accuracy_test(groups.values(), what="best interior cell minus best boundary cell"),
            best=list(best),
            accuracy=accuracy[best],
            best_interior=best_in and list(best_in),
            best_boundary=best_out and list(best_out),
            **split[1],
        ),
        P.claim(
            "(0.3, 0.3) is not dominated by any corner",
            P.combine(v for v, _ in dominated.values()),
            test=P.accuracy_test(groups.values(), what="centre minus each corner")
            + "; holds when the centre is above every corner, contradicted when a corner is above it",
            centre=accuracy[centre],
            corners={str(c): accuracy[c] for c in corners},
            **{f"centre_vs_{k}": n for k, (_, n) in dominated.items()},
        ),
    ]
    return P.entry(PAPER, "Table 4", "phase/budget split", files, claims, dataset=P.describe(found, preset))
