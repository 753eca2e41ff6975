"""D2P2-SGD (Jiang et al.) figures and tables: static vs dynamic noise, random projection, privacy loss vs σ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from reproduce.figures import _paper as P
from reproduce.figures.style import figure_style, save_figure, series_style

PAPER = "d2p2_sgd"
METHODS = ("sgd", "dpsgd-auto", "d2p-sgd", "dp2-sgd", "d2p2-sgd")
DYNAMIC = {"dpsgd-auto": "static", "dp2-sgd": "static", "d2p-sgd": "dynamic", "d2p2-sgd": "dynamic"}
#: The whole-run canary audit's bound, as the figures' legends name it.
TUNED_REDUCTION = 0.3  # the paper's and optimizers.runs' reduction rate
# The paper's reported privacy loss at its own parameters (z = 3, B = 1024, 40 epochs, δ = 1e-5, PRV accountant,
# ε logged after the first step of epoch 40): (dataset, n) → (static, dynamic). Reproduced from the privacy ledger
# by tests/theory/test_accounting.py::test_d2p2_reported_privacy_loss, which also checks these constants.
PAPER_PRIVACY = {("Fashion-MNIST", 60000): (1.07, 2.75), ("SVHN", 73257): (0.96, 2.45)}
PAPER_Z = 3.0


def accountant_name(runs: list[dict[str, Any]]) -> str:
    """The accountant behind the runs' theoretical ε, as an axis label names it ("RDP", "PRV"; joined if mixed)."""
    names = sorted({str(r["config"].get("accountant", "rdp")).upper() for r in runs if r.get("dp_claim", True)})
    return "/".join(names) or "RDP"


def _plain_log_ticks(ax, values) -> None:
    """Log x-axis with one plain tick label per value (no 3×10⁰-style labels, no minor labels)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ticks = sorted(set(float(v) for v in values))
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


EPSILON_FLOOR = 0.05
"""Figs 5 and 6a draw ε on a log axis from this floor (nats), so that ε̂ near 1 stays readable beside a theoretical
ε of 40; a value below it, such as a lower bound of 0 (nothing certified), is drawn on the floor."""


def _floored(values) -> np.ndarray:
    """``values`` with everything below :data:`EPSILON_FLOOR` raised to it (NaN stays NaN: not drawn)."""
    values = np.asarray(values, dtype=float)
    return np.where(values < EPSILON_FLOOR, EPSILON_FLOOR, values)


def _log_epsilon_axis(ax, label: str) -> None:
    """A log ε axis from :data:`EPSILON_FLOOR`, plain tick labels, the floor named in its label."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.set_ylim(bottom=EPSILON_FLOOR)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_ylabel(f"{label}\nlog axis; ≤ {EPSILON_FLOOR:g} (e.g. 0) drawn at {EPSILON_FLOOR:g}", fontsize=8)


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
    audited, whole_run = [], False
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
                audited += [(e, r) for e, r in zip(checkpoints, loss)]
                whole = P.whole_run_audit(group)
                if np.isfinite(whole["family"]):
                    axes[2].plot(epochs[-1], whole["family"], "^", color=_style(name)["color"], markeredgecolor="black")
                    whole_run = True
        if whole_run:
            axes[2].plot([], [], "k^", label=P.WHOLE_RUN_LABEL + ", at the last epoch")
        axes[2].plot([], [], "kv", label=f"{P.LOSS_EPSILON_LABEL} (95 % lower)")
        axes[2].plot([], [], "ko", markerfacecolor="none", label=f"{P.LOSS_EPSILON_LABEL} (point)")
        P.draw_null(axes[2], [e for e, _ in audited], [r for _, r in audited])
        privacy = f"privacy loss ε (δ = 1e-5, {accountant_name(found)} accountant)"
        axes[1].fill_between([], [], [], color="0.5", alpha=0.15, label="band: min–max over seeds")
        for ax, label in zip(axes, ("training loss", "test accuracy", privacy)):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch")
            ax.set_ylabel(label)
            ax.legend(fontsize=6)
        axes[2].legend(  # the accountant never sees p: the projected methods' curves lie under their twins'
            fontsize=6,
            title="ε curves coincide: dp2-sgd = dpsgd-auto, d2p2-sgd = d2p-sgd",
            title_fontsize=6,
        )
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        files = save_figure(fig, Path(out_dir) / "figure2")
    accuracy = {name: P.final(group) for name, group in groups.items()}
    eps = {name: P.final_epsilon(groups[name]) for name in DYNAMIC if name in groups}
    private = [m for m in DYNAMIC if m in accuracy]
    best = {m: P.accuracy_verdict(groups["d2p2-sgd"], groups[m]) for m in private if m != "d2p2-sgd"}
    repair = P.accuracy_verdict(groups["d2p2-sgd"], groups["dp2-sgd"])
    claims = [
        P.claim(
            "D2P2-SGD has the best final accuracy among the DP methods",
            P.combine(v for v, _ in best.values()),
            test=P.accuracy_test([groups[m] for m in private], what="D2P2-SGD minus each other DP method")
            + "; every comparison must hold",
            **{m: accuracy[m] for m in private},
            **{f"vs_{m}": n for m, (_, n) in best.items()},
        ),
        P.claim(
            "D2P2-SGD beats DP2-SGD (dynamic noise repairs static noise in the projected space)",
            repair[0],
            test=P.accuracy_test([groups["d2p2-sgd"], groups["dp2-sgd"]], what="D2P2-SGD minus DP2-SGD"),
            d2p2=accuracy["d2p2-sgd"],
            dp2=accuracy["dp2-sgd"],
            **repair[1],
        ),
        P.claim(
            "Dynamic noise spends more privacy than static noise (final ε)",
            P.exact(eps["d2p-sgd"] > eps["dpsgd-auto"]),
            test="accountant's final ε, D2P-SGD > DPSGD (exact; z·k^(−1/4) noise is smaller by design)",
            kind="check",
            dynamic=eps["d2p-sgd"],
            static=eps["dpsgd-auto"],
        ),
        P.claim(
            "Projection does not change the privacy loss (DP2 = DPSGD, D2P2 = D2P)",
            P.exact(abs(eps["dp2-sgd"] - eps["dpsgd-auto"]) < 1e-9 and abs(eps["d2p2-sgd"] - eps["d2p-sgd"]) < 1e-9),
            test="accountant's final ε equal within 1e-9 (exact; the accountant never sees p: by construction)",
            kind="check",
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
    accuracy, by_sigma = {}, {}
    with figure_style():
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        for name in DYNAMIC:
            groups = by_sigma[name] = _by_sigma(found, name)
            accuracy[name] = {z: P.final(g) for z, g in groups.items()}
            ax.plot(list(accuracy[name]), list(accuracy[name].values()), "o-", **{**_style(name), "label": name})
        ax.set_xlabel("noise multiplier z (σ_ε)")
        ax.set_ylabel("final test accuracy")
        ax.legend()
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure4")
    sigmas = sorted(accuracy["d2p2-sgd"])
    low, high = [z for z in sigmas if z < 6], [z for z in sigmas if z > 6]

    rivals = ("dpsgd-auto", "d2p-sgd")
    beats = {
        f"z_{z:g}_vs_{m}": P.accuracy_verdict(by_sigma["d2p2-sgd"][z], by_sigma[m][z]) for z in low for m in rivals
    }
    below = {  # below the better of the two rivals at that z
        f"z_{z:g}": P.accuracy_verdict(max((by_sigma[m][z] for m in rivals), key=P.final), by_sigma["d2p2-sgd"][z])
        for z in high
    }
    loses = {m: P.accuracy_verdict(by_sigma[m][sigmas[0]], by_sigma[m][sigmas[-1]]) for m in ("dp2-sgd", "d2p2-sgd")}
    all_z = [g for groups in by_sigma.values() for g in groups.values()]
    claims = [
        P.claim(
            "For z < 6 D2P2-SGD beats DPSGD and D2P-SGD",
            P.combine(v for v, _ in beats.values()),
            test=P.accuracy_test(all_z, what="D2P2-SGD minus each rival per z < 6") + "; every comparison must hold",
            z_compared=low,  # none trained: inconclusive
            **{f"z_{z:g}": {m: accuracy[m][z] for m in DYNAMIC} for z in low},
            **{k: n for k, (_, n) in beats.items()},
        ),
        P.claim(
            "For z > 6 D2P2-SGD falls below them",
            P.combine(v for v, _ in below.values()),
            test=P.accuracy_test(all_z, what="the better rival minus D2P2-SGD per z > 6")
            + "; every comparison must hold",
            z_compared=high,  # none trained: inconclusive
            **{f"z_{z:g}": {m: accuracy[m][z] for m in DYNAMIC} for z in high},
            **{f"gap_z_{k}": n for k, (_, n) in below.items()},
        ),
        P.claim(
            "The projected methods lose accuracy as z grows (smallest z above largest)",
            P.combine(v for v, _ in loses.values()),
            test=P.accuracy_test(all_z, what="accuracy at the smallest z minus at the largest, per method")
            + "; every comparison must hold",
            **{m: {"accuracy": [accuracy[m][sigmas[0]], accuracy[m][sigmas[-1]]], **n} for m, (_, n) in loses.items()},
        ),
    ]
    return P.entry(PAPER, "Fig 4", title, files, claims, dataset=P.describe(found, preset))


def figure5(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 5: final privacy loss against z, static vs dynamic, with each method's loss-attack ε̂."""
    found = P.summaries(runs)
    title = f"Fig 5: privacy loss vs noise multiplier ({P.describe(found, preset)})"
    theory, audited, whole_run = {}, [], {}
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
            losses = [P.loss_audit(g) for g in groups.values()]
            ax.plot(
                np.array(z) * shift,
                _floored([loss["lower"] for loss in losses]),
                "v",
                color=_style(name)["color"],
                label=f"{name}: {P.LOSS_EPSILON_LABEL} 95 % lower",
            )
            ax.plot(
                np.array(z) * shift,
                _floored([loss["point"] for loss in losses]),
                "o",
                markerfacecolor="none",
                color=_style(name)["color"],
                label=f"{name}: point",
            )
            audited += list(zip(np.array(z) * shift, losses))
            whole = {s: P.whole_run_audit(g) for s, g in groups.items()}
            if any(np.isfinite(w["family"]) for w in whole.values()):
                ax.plot(
                    np.array(z) * shift,
                    _floored([w["family"] for w in whole.values()]),
                    "^",
                    color=_style(name)["color"],
                    markeredgecolor="black",
                    label=f"{name}: {P.WHOLE_RUN_LABEL}",
                )
                whole_run.update({f"{name} z={s:g}": w for s, w in whole.items() if np.isfinite(w["family"])})
        P.draw_null(ax, [x for x, _ in audited], [loss for _, loss in audited])
        for index, ((dataset, n), (static, dynamic)) in enumerate(PAPER_PRIVACY.items()):
            marker = "*" if dataset == "SVHN" else "P"
            for value, kind in ((static, "static"), (dynamic, "dynamic")):
                ax.plot(
                    [PAPER_Z * (1.1 + 0.08 * index)],  # beside z = 3's audits, one column per dataset
                    [value],
                    marker,
                    color="0.3" if kind == "static" else "black",
                    markersize=8,
                    linestyle="none",
                    label=f"paper parameters, {dataset} (n = {n}), {kind}: ε = {value:g} (PRV)",
                )
        ax.set_xscale("log")
        _plain_log_ticks(ax, list({z for name in DYNAMIC for z in _by_sigma(found, name)}) + [PAPER_Z])
        ax.set_xlabel("noise multiplier z (σ_ε)")
        _log_epsilon_axis(ax, f"privacy loss ε (δ = 1e-5, {accountant_name(found)} accountant)")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
        ax.set_title(title, fontsize=8)
        files = save_figure(fig, Path(out_dir) / "figure5")
    sigmas = sorted(theory["d2p-sgd"])
    bounds = [(P.loss_audit(g)["lower"], P.final_epsilon(g)) for m in DYNAMIC for g in _by_sigma(found, m).values()]
    claims = [
        P.claim(
            "ε decreases as z grows",
            P.exact(all(np.all(np.diff([theory[m][s] for s in sigmas]) < 0) for m in DYNAMIC)),
            test="accountant's final ε strictly decreasing in z for every method (exact; by construction)",
            kind="check",
            **{m: [theory[m][s] for s in sigmas] for m in DYNAMIC},
        ),
        P.claim(
            "Dynamic noise lies above static noise at every z",
            P.exact(all(theory["d2p-sgd"][s] > theory["dpsgd-auto"][s] for s in sigmas)),
            test="accountant's final ε, D2P-SGD > DPSGD at every z (exact; by construction)",
            kind="check",
            **{f"z_{s:g}": [theory["dpsgd-auto"][s], theory["d2p-sgd"][s]] for s in sigmas},
        ),
        P.claim(
            "No ε̂ lower bound exceeds its theoretical ε",
            P.lower_bound_verdict([lo for lo, _ in bounds], [eps for _, eps in bounds]),
            test=P.LOWER_BOUND_TEST + " (loss attack, every method and z)",
            kind="check",
            lower_vs_epsilon=bounds,
        ),
    ]
    if whole_run:
        claims.append(P.whole_run_check(whole_run))
    return P.entry(PAPER, "Fig 5", title, files, claims, dataset=P.describe(found, preset))


PAPER_REDUCTION_KEPT = 0.7
"""p/d of the paper's best "30 % reduction rate": App. A.9.1 defines the rate as the share of dimensions compressed
("if d=10000 and the reduction rate is 0.3, then p=7000")."""


def kept_share(run: dict[str, Any]) -> float:
    """p/d of a D2P2-SGD run: its reduction rate under the authors' code's convention (p = rate·d), or one minus it
    under the paper's (p = (1 − rate)·d), rounded."""
    rate = float(run["config"]["reduction_rate"])
    return round(rate if run["config"].get("reduction_convention", "code") == "code" else 1 - rate, 6)


def figure6_runs(
    found: list[dict[str, Any]],
) -> tuple[dict[Any, list[dict[str, Any]]], dict[Any, list[dict[str, Any]]]]:
    """Fig 6's runs: (a) D2P2-SGD at the tuned reduction rate by batch size; (b) by the share of dimensions kept,
    p/d (:func:`kept_share`), at z = 3 and the most common batch size (at least two shares)."""
    d2p2 = [r for r in found if r["config"]["optimizer"] == "d2p2-sgd"]
    tuned = [r for r in d2p2 if r["config"]["reduction_rate"] == TUNED_REDUCTION]
    if not tuned:
        raise P.DPAuditError(f"no d2p2-sgd run with reduction_rate = {TUNED_REDUCTION} among the runs")
    sizes = [r["config"]["batch_size"] for r in d2p2]
    common_batch = max(set(sizes), key=sizes.count)
    reduction: dict[float, list[dict[str, Any]]] = {}
    for run in d2p2:
        if P.setting(run, "noise_multiplier") == 3 and run["config"]["batch_size"] == common_batch:
            reduction.setdefault(kept_share(run), []).append(run)
    reduction = dict(sorted(reduction.items()))
    if PAPER_REDUCTION_KEPT not in reduction:
        raise P.DPAuditError(
            f"no d2p2-sgd run keeping p/d = {PAPER_REDUCTION_KEPT:g} (the paper's 30 % reduction) at z = 3, batch "
            f"{common_batch}"
        )
    if len(reduction) < 2:
        raise P.DPAuditError(f"fewer than two reduction rates among the d2p2-sgd runs at z = 3, batch {common_batch}")
    return P.group(tuned, "batch_size"), reduction


def figure6(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Fig 6: (a) D2P2-SGD privacy loss against z per batch size, with ε̂; (b) accuracy and privacy loss
    against the reduction rate p/d."""
    found = P.summaries(runs)
    batches, reduction = figure6_runs(found)
    title = f"Fig 6: D2P2-SGD batch size and projection dimension ({P.describe(found, preset)})"
    eps_by_batch, audited = {}, []
    with figure_style():
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 3.8))
        for index, (b, group) in enumerate(batches.items()):
            by_z = P.group(group, "noise_multiplier")
            eps_by_batch[b] = {z: P.final_epsilon(g) for z, g in by_z.items()}
            colour = plt.get_cmap("tab10")(index)
            x = np.array(list(by_z)) * (1 + 0.07 * (index - (len(batches) - 1) / 2))  # the batch sizes side by side
            left.plot(  # markers only: a line between z = 1 and z = 8 would stand for ε at z never trained
                x, list(eps_by_batch[b].values()), "s", color=colour, label=f"b = {b}: theoretical ε"
            )
            left.plot(x, _floored([P.loss_audit(g)["lower"] for g in by_z.values()]), "v", color=colour)
            left.plot(
                x,
                _floored([P.loss_audit(g)["point"] for g in by_z.values()]),
                "o",
                color=colour,
                markerfacecolor="none",
            )
            audited += [(at, P.loss_audit(g)) for at, g in zip(x, by_z.values())]
        left.plot([], [], "kv", label=f"{P.LOSS_EPSILON_LABEL} (95 % lower)")
        left.plot([], [], "ko", markerfacecolor="none", label=f"{P.LOSS_EPSILON_LABEL} (point)")
        P.draw_null(left, [z for z, _ in audited], [loss for _, loss in audited])
        left.set_xlabel("noise multiplier z")
        _log_epsilon_axis(left, f"privacy loss ε (δ = 1e-5, {accountant_name(found)} accountant)")
        left.set_xscale("log")
        _plain_log_ticks(left, [z for group in batches.values() for z in P.group(group, "noise_multiplier")])
        left.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, frameon=False)
        left.set_title("(a) batch size vs privacy loss", fontsize=9)
        rates = list(reduction)
        accuracy = [P.final(g) for g in reduction.values()]
        epsilon = [P.final_epsilon(g) for g in reduction.values()]
        right.plot(rates, accuracy, "o-", color=_style("d2p2-sgd")["color"], label="test accuracy")
        right.set_xlabel("share of dimensions kept p/d (the paper's reduction rate is 1 − p/d)")
        right.set_ylabel("test accuracy (axis zoomed to the data)")
        spread_text = ""
        if accuracy:
            trials = min(len(g) for g in reduction.values())
            records = P.test_records(next(iter(reduction.values()))[0])
            spread = max(accuracy) - min(accuracy)
            spread_text = (
                f"\naccuracy spread {100 * spread:.1f} pt = {round(spread * records)} of {records} test records; "
                f"{trials} trial(s) per rate"
            )
        twin = right.twinx()
        twin.plot(rates, epsilon, "s--", color="black", label="theoretical ε")
        twin.plot(
            rates,
            [P.loss_audit(g)["lower"] for g in reduction.values()],
            "v",
            color="tab:red",
            label=f"{P.LOSS_EPSILON_LABEL} (95 % lower)",
        )
        twin.plot(
            rates,
            [P.loss_audit(g)["point"] for g in reduction.values()],
            "o",
            color="tab:orange",
            markerfacecolor="none",
            label=f"{P.LOSS_EPSILON_LABEL} (point)",
        )
        P.draw_null(twin, rates, [P.loss_audit(g) for g in reduction.values()])
        twin.set_ylabel(f"privacy loss ε ({accountant_name(found)} accountant)")
        # ε's own scale, with head room, so that its (constant) level is not read against an accuracy value
        tops = epsilon + [P.loss_audit(g)["point"] for g in reduction.values()]
        finite = [t for t in tops if np.isfinite(t)]
        twin.set_ylim(0, 1.6 * max(finite) if finite and max(finite) > 0 else None)
        handles = right.get_legend_handles_labels()
        extra = twin.get_legend_handles_labels()
        right.legend(  # below the panel, off the data
            handles[0] + extra[0],
            handles[1] + extra[1],
            fontsize=6,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=2,
            frameon=False,
        )
        right.set_title(f"(b) projection dimension (z = 3){spread_text}", fontsize=8)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        files = save_figure(fig, Path(out_dir) / "figure6")
    sizes = sorted(eps_by_batch)
    common = sorted(set.intersection(*(set(v) for v in eps_by_batch.values()))) if eps_by_batch else []
    paper_best = next((r for r in rates if abs(r - PAPER_REDUCTION_KEPT) < 1e-9), None)
    best_rate = (
        {f"vs_{r:g}": P.accuracy_verdict(reduction[paper_best], g) for r, g in reduction.items() if r != paper_best}
        if paper_best is not None
        else {}
    )
    claims = [
        P.claim(
            "Larger batches give a higher ε at every z",
            P.exact(all(eps_by_batch[a][z] < eps_by_batch[b][z] for a, b in zip(sizes, sizes[1:]) for z in common)),
            test="accountant's final ε strictly increasing in b at every shared z (exact; q = b/n: by construction)",
            kind="check",
            **{f"b_{b}": [eps_by_batch[b][z] for z in common] for b in sizes},
        ),
        P.claim(
            "The privacy loss does not depend on the projection dimension",
            P.exact(max(epsilon) - min(epsilon) < 1e-9),
            test="accountant's final ε equal within 1e-9 across p/d (exact; the accountant never sees p)",
            kind="check",
            epsilon=epsilon,
        ),
        P.claim(
            "The best accuracy is at a 30 % reduction rate (the paper's App. A.9.1: 30 % of the dimensions "
            "compressed, p/d = 0.7)",
            P.combine(v for v, _ in best_rate.values()),
            test=P.accuracy_test(list(reduction.values()), what="accuracy at p/d = 0.7 minus at each other p/d")
            + "; every comparison must hold",
            **{k: n for k, (_, n) in best_rate.items()},
            **{f"rate_{r:g}": a for r, a in zip(rates, accuracy)},
        ),
    ]
    return P.entry(PAPER, "Fig 6", title, files, claims, dataset=P.describe(found, preset))


def table2(*, out_dir: str | Path, runs: list[str | Path], preset: str = "default", **_: Any) -> dict[str, Any]:
    """Table 2: test accuracy of the four DP methods at matched ε, with the theoretical ε and ε̂."""
    table = P.matched_epsilon_table(
        out_dir, runs, preset=preset, caption="Table 2: test accuracy at matched (ε, 1e-5) with ε̂"
    )
    groups, accuracy, epsilons = table.groups, table.accuracy, table.epsilons
    best = {
        f"eps{e:g}_vs_{m}": P.accuracy_verdict(groups[(e, "d2p2-sgd")], groups[(e, m)])
        for e in epsilons
        for m in DYNAMIC
        if m != "d2p2-sgd" and (e, m) in groups and (e, "d2p2-sgd") in groups
    }
    claims = [
        P.claim(
            "D2P2-SGD is the best DP method at every ε",
            P.combine(v for v, _ in best.values()),
            test=P.accuracy_test(groups.values(), what="D2P2-SGD minus each other DP method per ε")
            + "; every comparison must hold",
            **{f"eps{e:g}": {m: accuracy.get((e, m)) for m in DYNAMIC} for e in epsilons},
            **{k: n for k, (_, n) in best.items()},
        ),
    ]
    return P.entry(
        PAPER, "Table 2", "accuracy at matched ε", table.files, claims, dataset=P.describe(table.found, preset)
    )
