"""D2P2-SGD (Jiang et al.) figures and tables: static vs dynamic noise, random projection, privacy loss vs σ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from dpaudit.figures import _paper as P
from dpaudit.figures.style import figure_style, save_figure, series_style

PAPER = "d2p2_sgd"
METHODS = ("sgd", "dpsgd-auto", "d2p-sgd", "dp2-sgd", "d2p2-sgd")
DYNAMIC = {"dpsgd-auto": "static", "dp2-sgd": "static", "d2p-sgd": "dynamic", "d2p2-sgd": "dynamic"}
TUNED_REDUCTION = 0.3  # the paper's and optimizers.runs' reduction rate


def _style(name: str) -> dict:
    return series_style(name, METHODS.index(name) if name in METHODS else 0)


def figure2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Figs 2, 3, 7–13 on this dataset: training loss and test accuracy per epoch (mean, min–max over seeds) for
    SGD and the four DP methods at one noise multiplier; privacy loss per epoch, static vs dynamic, with ε̂."""
    found = P.summaries(runs)
    groups = P.group(found, "optimizer")
    z = next(P.setting(r, "noise_multiplier") for r in found if r["dp_claim"])
    title = (
        f"Figs 2/3/7–13: methods at z = {z:g} ({P.describe(found, preset)}; {len(next(iter(groups.values())))} seeds)"
    )
    with figure_style():
        fig, axes = plt.subplots(1, 3, figsize=(13.0, 3.8))
        for name in [m for m in METHODS if m in groups]:
            group = groups[name]
            epochs = group[0]["epoch"]
            for ax, key in zip(axes[:2], ("train_loss", "test_accuracy")):
                values = P.series(group, key)
                ax.plot(epochs, values.mean(0), **{**_style(name), "label": name})
                ax.fill_between(epochs, values.min(0), values.max(0), color=_style(name)["color"], alpha=0.15)
            if name in DYNAMIC:
                loss = [P.loss_audit(group, int(e)) for e in sorted(int(e) for e in group[0]["loss"])]
                checkpoints = sorted(int(e) for e in group[0]["loss"])
                axes[2].plot(epochs, group[0]["epsilon"], **{**_style(name), "label": f"{name} ({DYNAMIC[name]})"})
                axes[2].plot(checkpoints, [r["lower"] for r in loss], "v", color=_style(name)["color"])
                axes[2].plot(
                    checkpoints, [r["point"] for r in loss], "o", color=_style(name)["color"], markerfacecolor="none"
                )
        axes[2].plot([], [], "ko", markerfacecolor="none", label=f"{P.LOSS_EPSILON_LABEL} (point)")
        axes[2].plot([], [], "kv", label=f"{P.LOSS_EPSILON_LABEL} (95 % lower)")
        for ax, label in zip(axes, ("training loss", "test accuracy", "privacy loss ε (δ = 1e-5)")):
            ax.set_xlabel("epoch")
            ax.set_ylabel(label)
            ax.legend(fontsize=6)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        files = save_figure(fig, Path(out_dir) / "figure2")
    accuracy = {name: P.final(group) for name, group in groups.items()}
    eps = {name: P.final_epsilon(groups[name]) for name in DYNAMIC if name in groups}
    private = [m for m in DYNAMIC if m in accuracy]
    claims = [
        P.claim(
            "D2P2-SGD has the best final accuracy among the DP methods",
            max(private, key=accuracy.get) == "d2p2-sgd",
            **{m: accuracy[m] for m in private},
        ),
        P.claim(
            "D2P2-SGD beats DP2-SGD (dynamic noise repairs static noise in the projected space)",
            accuracy["d2p2-sgd"] > accuracy["dp2-sgd"],
            d2p2=accuracy["d2p2-sgd"],
            dp2=accuracy["dp2-sgd"],
        ),
        P.claim(
            "Dynamic noise spends more privacy than static noise (final ε)",
            eps["d2p-sgd"] > eps["dpsgd-auto"],
            dynamic=eps["d2p-sgd"],
            static=eps["dpsgd-auto"],
        ),
        P.claim(
            "Projection does not change the privacy loss (DP2 = DPSGD, D2P2 = D2P)",
            abs(eps["dp2-sgd"] - eps["dpsgd-auto"]) < 1e-9 and abs(eps["d2p2-sgd"] - eps["d2p-sgd"]) < 1e-9,
            **eps,
        ),
    ]
    return P.entry(PAPER, "Figs 2, 3, 7–13", title, files, claims, dataset=P.describe(found, preset))


def _by_sigma(found, optimizer):
    return P.group(found, "noise_multiplier", where=lambda r: r["config"]["optimizer"] == optimizer)


def figure4(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 4: final test accuracy against the noise multiplier z, four DP methods."""
    found = P.summaries(runs)
    title = f"Fig 4: accuracy vs noise multiplier ({P.describe(found, preset)})"
    accuracy = {}
    with figure_style():
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        for name in DYNAMIC:
            groups = _by_sigma(found, name)
            accuracy[name] = {z: P.final(g) for z, g in groups.items()}
            ax.plot(list(accuracy[name]), list(accuracy[name].values()), "o-", **{**_style(name), "label": name})
        ax.set_xlabel("noise multiplier z (σ_ε)")
        ax.set_ylabel("final test accuracy")
        ax.legend()
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure4")
    sigmas = sorted(accuracy["d2p2-sgd"])
    low, high = [z for z in sigmas if z < 6], [z for z in sigmas if z > 6]

    def better(z):
        return accuracy["d2p2-sgd"][z] > max(accuracy["dpsgd-auto"][z], accuracy["d2p-sgd"][z])

    claims = [
        P.claim(
            "For z < 6 D2P2-SGD beats DPSGD and D2P-SGD",
            all(better(z) for z in low),
            **{f"z_{z:g}": {m: accuracy[m][z] for m in DYNAMIC} for z in low},
        ),
        P.claim(
            "For z > 6 D2P2-SGD falls below them",
            all(not better(z) for z in high),
            **{f"z_{z:g}": {m: accuracy[m][z] for m in DYNAMIC} for z in high},
        ),
        P.claim(
            "The projected methods lose accuracy as z grows (smallest z above largest)",
            all(accuracy[m][sigmas[0]] > accuracy[m][sigmas[-1]] for m in ("dp2-sgd", "d2p2-sgd")),
        ),
    ]
    return P.entry(PAPER, "Fig 4", title, files, claims, dataset=P.describe(found, preset))


def figure5(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 5: final privacy loss against z, static vs dynamic, with each method's loss-attack ε̂."""
    found = P.summaries(runs)
    title = f"Fig 5: privacy loss vs noise multiplier ({P.describe(found, preset)})"
    theory = {}
    with figure_style():
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        for index, name in enumerate(DYNAMIC):
            groups = _by_sigma(found, name)
            z = list(groups)
            theory[name] = {s: P.final_epsilon(g) for s, g in groups.items()}
            if name in ("dpsgd-auto", "d2p-sgd"):
                ax.plot(
                    z,
                    list(theory[name].values()),
                    color="black",
                    linestyle="-" if name == "d2p-sgd" else "--",
                    label=f"theoretical ε, {DYNAMIC[name]} noise",
                )
            shift = 1 + 0.03 * (index - 1.5)
            ax.plot(
                np.array(z) * shift,
                [P.loss_audit(g)["point"] for g in groups.values()],
                "o",
                markerfacecolor="none",
                color=_style(name)["color"],
                label=f"{name}: {P.LOSS_EPSILON_LABEL} point",
            )
            ax.plot(
                np.array(z) * shift,
                [P.loss_audit(g)["lower"] for g in groups.values()],
                "v",
                color=_style(name)["color"],
                label=f"{name}: lower",
            )
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_xlabel("noise multiplier z (σ_ε)")
        ax.set_ylabel("privacy loss ε (δ = 1e-5)")
        ax.legend(fontsize=6)
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure5")
    sigmas = sorted(theory["d2p-sgd"])
    claims = [
        P.claim("ε decreases as z grows", all(np.all(np.diff([theory[m][s] for s in sigmas]) < 0) for m in DYNAMIC)),
        P.claim(
            "Dynamic noise lies above static noise at every z",
            all(theory["d2p-sgd"][s] > theory["dpsgd-auto"][s] for s in sigmas),
            **{f"z_{s:g}": [theory["dpsgd-auto"][s], theory["d2p-sgd"][s]] for s in sigmas},
        ),
        P.claim(
            "No ε̂ lower bound exceeds its theoretical ε",
            all(P.loss_audit(g)["lower"] <= P.final_epsilon(g) for m in DYNAMIC for g in _by_sigma(found, m).values()),
        ),
    ]
    return P.entry(PAPER, "Fig 5", title, files, claims, dataset=P.describe(found, preset))


def figure6(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 6: (a) D2P2-SGD privacy loss against z per batch size, with ε̂; (b) accuracy and privacy loss
    against the reduction rate p/d."""
    found = P.summaries(runs)
    d2p2 = [r for r in found if r["config"]["optimizer"] == "d2p2-sgd"]
    tuned = [r for r in d2p2 if r["config"]["reduction_rate"] == TUNED_REDUCTION]
    batches = P.group(tuned, "batch_size")
    sizes = [r["config"]["batch_size"] for r in d2p2]
    common_batch = max(set(sizes), key=sizes.count)
    reduction = P.group(
        d2p2,
        "reduction_rate",
        where=lambda r: P.setting(r, "noise_multiplier") == 3 and r["config"]["batch_size"] == common_batch,
    )
    title = f"Fig 6: D2P2-SGD batch size and projection dimension ({P.describe(found, preset)})"
    eps_by_batch = {}
    with figure_style():
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 3.8))
        for index, (b, group) in enumerate(batches.items()):
            by_z = P.group(group, "noise_multiplier")
            eps_by_batch[b] = {z: P.final_epsilon(g) for z, g in by_z.items()}
            colour = plt.get_cmap("tab10")(index)
            left.plot(list(by_z), list(eps_by_batch[b].values()), "-", color=colour, label=f"b = {b}: theoretical ε")
            left.plot(list(by_z), [P.loss_audit(g)["lower"] for g in by_z.values()], "v", color=colour)
            left.plot(
                list(by_z), [P.loss_audit(g)["point"] for g in by_z.values()], "o", color=colour, markerfacecolor="none"
            )
        left.plot([], [], "ko", markerfacecolor="none", label=f"{P.LOSS_EPSILON_LABEL} (point)")
        left.plot([], [], "kv", label=f"{P.LOSS_EPSILON_LABEL} (95 % lower)")
        left.set_xlabel("noise multiplier z")
        left.set_ylabel("privacy loss ε")
        left.set_yscale("symlog", linthresh=0.1)  # as Fig 5: a lower bound of 0 (nothing certified) stays visible
        left.set_ylim(bottom=0)
        left.legend(fontsize=6)
        left.set_title("(a) batch size vs privacy loss", fontsize=9)
        rates = list(reduction)
        accuracy = [P.final(g) for g in reduction.values()]
        epsilon = [P.final_epsilon(g) for g in reduction.values()]
        right.plot(rates, accuracy, "o-", color=_style("d2p2-sgd")["color"], label="test accuracy")
        right.set_xlabel("reduction rate p/d")
        right.set_ylabel("test accuracy")
        twin = right.twinx()
        twin.plot(rates, epsilon, "s--", color="black", label="theoretical ε")
        twin.plot(
            rates,
            [P.loss_audit(g)["point"] for g in reduction.values()],
            "o",
            color="tab:orange",
            markerfacecolor="none",
            label=f"{P.LOSS_EPSILON_LABEL} (point)",
        )
        twin.plot(
            rates,
            [P.loss_audit(g)["lower"] for g in reduction.values()],
            "v",
            color="tab:red",
            label=f"{P.LOSS_EPSILON_LABEL} (lower)",
        )
        twin.set_ylabel("privacy loss ε")
        twin.set_ylim(bottom=0)
        handles = right.get_legend_handles_labels()
        extra = twin.get_legend_handles_labels()
        right.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=6, loc="lower right")
        right.set_title("(b) projection dimension (z = 3)", fontsize=9)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        files = save_figure(fig, Path(out_dir) / "figure6")
    sizes = sorted(eps_by_batch)
    common = sorted(set.intersection(*(set(v) for v in eps_by_batch.values()))) if eps_by_batch else []
    claims = [
        P.claim(
            "Larger batches give a higher ε at every z",
            all(eps_by_batch[a][z] < eps_by_batch[b][z] for a, b in zip(sizes, sizes[1:]) for z in common),
            **{f"b_{b}": [eps_by_batch[b][z] for z in common] for b in sizes},
        ),
        P.claim(
            "The privacy loss does not depend on the projection dimension",
            max(epsilon) - min(epsilon) < 1e-9,
            epsilon=epsilon,
        ),
        P.claim(
            "The best accuracy is at a 30 % reduction rate",
            rates[int(np.argmax(accuracy))] == TUNED_REDUCTION,
            **{f"rate_{r:g}": a for r, a in zip(rates, accuracy)},
        ),
    ]
    return P.entry(PAPER, "Fig 6", title, files, claims, dataset=P.describe(found, preset))


def table2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 2: test accuracy of the four DP methods at matched ε, with the theoretical ε and ε̂."""
    found, _, accuracy, epsilons, files = P.matched_epsilon_table(
        out_dir, runs, preset=preset, caption="Table 2: test accuracy at matched (ε, 1e-5) with ε̂"
    )
    claims = [
        P.claim(
            "D2P2-SGD is the best DP method at every ε",
            all(accuracy[(e, "d2p2-sgd")] >= max(accuracy[(e, m)] for m in DYNAMIC) for e in epsilons),
            **{f"eps{e:g}": {m: accuracy[(e, m)] for m in DYNAMIC} for e in epsilons},
        )
    ]
    return P.entry(PAPER, "Table 2", "accuracy at matched ε", files, claims, dataset=P.describe(found, preset))
