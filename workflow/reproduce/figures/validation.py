"""The auditor's own check: optimizers broken on purpose (no DP claim) audited beside their correct twins.

An audit flags a run when its ε̂ lower bound (95 %) exceeds the ε the run claims against that attack: the
ε of one step for the white-box canary attack (the mechanism each canary faces), the run's composed ε for
the others. A correct optimizer is flagged with probability ≤ 1 − confidence by construction of the bound;
the false-alarm rate over every audit of a DP-claiming run measures it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import read_json, write_json
from dpaudit._validation import DPAuditError
from dpaudit.attacks import get_attack
from dpaudit.rundir import RunDir
from reproduce.figures._paper import claim
from reproduce.figures.style import figure_style, save_figure

INDEPENDENCE_NOTE = (
    "which treats the audits as independent, though runs sharing a seed and trial share their sampling, noise "
    "and canary streams across ε and optimizers"
)
"""What the false-alarm rate's Clopper–Pearson bound assumes (privacy review, D6: common random numbers)."""


def audit_row(path: str | Path) -> dict[str, Any]:
    """One ``dpaudit audit --run`` result with its run's settings and whether it flags the run.

    Args:
        path: ``…/<run>/audit_<attack>.json``; its ``source`` names the trial folders (their config.json).
    """
    payload = read_json(path)
    source = str(payload.get("source", "")).split()
    if not source or not RunDir(source[0]).config.is_file():
        raise DPAuditError(f"{path}: its source run ({' '.join(source) or 'none'}) has no config.json")
    run = read_json(RunDir(source[0]).config)
    attack = payload["attack"]
    claimed = payload.get(get_attack(attack).claim_key)
    report = payload["report"]
    lower, ceiling = float(report["epsilon_lower"]), float(report["epsilon_ceiling"])
    settings = {key: value for key, value in run["config"].items() if key != "optimizer"}
    return {
        "file": str(path),
        "optimizer": run["config"]["optimizer"],
        "settings": json.dumps(settings, sort_keys=True),
        "canary_design": run["config"].get("canary_design", "dirac"),
        "target_epsilon": run["derived"]["target_epsilon"],
        "dp_claim": bool(run["derived"]["dp_claim"]),
        "attack": attack,
        "claimed": None if claimed is None else float(claimed),
        "lower": lower,
        "point": float(report["epsilon_point"]),
        "ceiling": ceiling,
        "confidence": float(report["confidence"]),
        "flagged": claimed is not None and lower > float(claimed),
        "detectable": claimed is not None and ceiling > float(claimed),
    }


def _same_run(row: dict[str, Any]) -> tuple[str, Any]:
    """What a variant's run and its twin's share: every setting but the optimizer, and the target ε."""
    return row["settings"], row["target_epsilon"]


def validation_report(files: list[str | Path], *, pairs: dict[str, str], attack: str = "canary") -> dict[str, Any]:
    """Variant-beside-twin rows for ``attack`` and the false-alarm rate over every DP-claiming audit given.

    Args:
        files: audit JSON files: the variants', their twins' and any other correct runs' (for the rate).
        pairs: broken variant → its correct twin (optimizer names).
        attack: the attack whose audits decide "flagged" in the rows.
    """
    from dpaudit.estimate import clopper_pearson_upper

    rows = [audit_row(path) for path in files]
    missing = sorted(
        {name for pair in pairs.items() for name in pair}
        - {row["optimizer"] for row in rows if row["attack"] == attack}
    )
    if missing:
        raise DPAuditError(f"no {attack}-attack audit given for: {', '.join(missing)}")
    for variant, twin in pairs.items():
        if any(row["dp_claim"] for row in rows if row["optimizer"] == variant):
            raise DPAuditError(f"{variant} claims DP: a broken variant must be registered with dp_claim=False")
        if not all(row["dp_claim"] for row in rows if row["optimizer"] == twin):
            raise DPAuditError(f"{twin}, the twin of {variant}, makes no DP claim")
    correct = [row for row in rows if row["dp_claim"] and row["claimed"] is not None]
    alarms = [row for row in correct if row["flagged"]]
    confidence = rows[0]["confidence"]
    upper = float(clopper_pearson_upper(len(alarms), len(correct), alpha=1 - confidence)) if correct else float("nan")
    pair_rows = []
    for variant, twin in pairs.items():
        # a variant's audit pairs with its twin's at the same settings (ε, data, seed, canaries); other audits of
        # the twin (another section's settings) count towards the false-alarm rate only
        twins = {_same_run(r): r for r in rows if r["optimizer"] == twin and r["attack"] == attack}
        broken = sorted(
            (r for r in rows if r["optimizer"] == variant and r["attack"] == attack and _same_run(r) in twins),
            key=lambda r: r["target_epsilon"],
        )
        if not broken:
            raise DPAuditError(f"no {attack}-attack audit of {variant} has a twin ({twin}) trained with its settings")
        twins = [twins[_same_run(r)] for r in broken]
        pair_rows += [{**row, "pair": variant, "role": "broken"} for row in broken]
        pair_rows += [{**row, "pair": variant, "role": "correct twin"} for row in twins]
    variants = {
        variant: {
            "flagged_at": [
                r["target_epsilon"]
                for r in pair_rows
                if r["pair"] == variant and r["role"] == "broken" and r["flagged"]
            ],
            "audits": sum(r["pair"] == variant and r["role"] == "broken" for r in pair_rows),
            # how far the bound clears the claim at its best ε (< 0: nowhere): a flag resting on one ε by a hair
            # is a weaker finding than one at every ε
            "largest_margin": max(
                (
                    {"target_epsilon": r["target_epsilon"], "lower_minus_claimed": r["lower"] - r["claimed"]}
                    for r in pair_rows
                    if r["pair"] == variant and r["role"] == "broken" and r["claimed"] is not None
                ),
                key=lambda margin: margin["lower_minus_claimed"],
                default=None,
            ),
        }
        for variant in pairs
    }
    return {
        "attack": attack,
        "confidence": confidence,
        "rows": pair_rows,
        "variants": variants,
        "false_alarms": {
            "flagged": len(alarms),
            "audits": len(correct),
            "rate": len(alarms) / len(correct) if correct else float("nan"),
            f"rate_upper_{100 * confidence:g}": upper,
            "which": [row["file"] for row in alarms],
        },
    }


def plot_validation(report: dict[str, Any], *, stem: str | Path, title: str) -> list[Path]:
    """One panel per broken variant: ε̂ lower bound against claimed ε for it and its twin, y = x, ceiling."""
    import matplotlib.pyplot as plt

    pairs = list(report["variants"])
    columns = min(3, len(pairs))
    grid_rows = -(-len(pairs) // columns)
    with figure_style():
        legend_inches = 0.5  # two rows of legend under the panels
        fig, axes = plt.subplots(
            grid_rows, columns, figsize=(3.4 * columns, 3.1 * grid_rows + legend_inches), squeeze=False
        )
        for ax in axes.flat[len(pairs) :]:
            ax.set_visible(False)
        legend = {}
        for ax, variant in zip(axes.flat, pairs):
            rows = [row for row in report["rows"] if row["pair"] == variant]
            limit = 1.1 * max([row["claimed"] for row in rows] + [min(row["lower"], row["ceiling"]) for row in rows])
            for role, color, marker in (("correct twin", "#1f77b4", "o"), ("broken", "#d62728", "X")):
                points = sorted((row["claimed"], row["lower"], row["flagged"]) for row in rows if row["role"] == role)
                x, y, flagged = (np.array(values) for values in zip(*points))
                ax.plot(x, y, color=color, linewidth=0.8, alpha=0.5)
                for hit, label in ((True, "flagged"), (False, "not flagged")):
                    if (flagged == hit).any():
                        legend[f"{role}, {label}"] = ax.scatter(
                            x[flagged == hit],
                            y[flagged == hit],
                            marker=marker if hit else "o",
                            s=50 if hit else 36,
                            zorder=3,
                            **({"color": color} if hit else {"facecolors": "none", "edgecolors": color}),
                        )
            (legend["ε̂ = claimed ε (above: flagged)"],) = ax.plot(
                [0, limit], [0, limit], color="grey", linestyle="--", linewidth=1
            )
            ceiling = float(np.mean([row["ceiling"] for row in rows]))
            if ceiling < limit:
                legend["ceiling (most a perfect attack certifies)"] = ax.axhline(
                    ceiling, color="black", linestyle=":", linewidth=1
                )
            ax.set_xlim(0, limit)
            ax.set_ylim(0, limit)
            twin = next(row["optimizer"] for row in rows if row["role"] == "correct twin")
            design = "" if report["attack"] != "canary" else f", {rows[0]['canary_design']} canaries"
            ax.set_title(f"{variant}\n(twin: {twin}{design})", fontsize=9)
            if report["attack"] != "canary":
                claim = "claimed ε of the run"
            elif rows[0]["canary_design"] == "support":
                claim = "claimed ε of the dense steps (canary's mechanism)"
            else:
                claim = "claimed ε of one step (canary's mechanism)"
            ax.set_xlabel(claim, fontsize=8)
            ax.set_ylabel(f"ε̂ lower bound ({100 * report['confidence']:g} %)", fontsize=8)
        alarms = report["false_alarms"]
        fig.suptitle(
            f"Auditor validation ({report['attack']} attack), {title}\nfalse alarms on correct optimizers "
            f"(every attack): {alarms['flagged']} of {alarms['audits']} audits",
            fontsize=10,
        )
        fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=3, fontsize=7)
        return save_figure(fig, stem)


def write_validation(
    files: list[str | Path], *, pairs: dict[str, str], attack: str, out_dir: str | Path, title: str
) -> list[Path]:
    """``validation.{pdf,png,md,tex,json}`` and ``validation.manifest.json`` under ``out_dir``."""
    from reproduce.figures._paper import write_table

    report = validation_report(files, pairs=pairs, attack=attack)
    out = Path(out_dir)
    written = plot_validation(report, stem=out / "validation", title=title)
    header = [
        "broken variant",
        "optimizer",
        "role",
        "canaries",
        "target ε (run)",
        "claimed ε",
        "ε̂ lower",
        "ceiling",
        "flagged",
    ]
    table = [
        [
            row["pair"],
            row["optimizer"],
            row["role"],
            row["canary_design"] if attack == "canary" else "–",
            f"{row['target_epsilon']:g}",
            f"{row['claimed']:.3g}",
            f"{row['lower']:.3g}",
            f"{row['ceiling']:.3g}",
            "yes" if row["flagged"] else ("no" if row["detectable"] else "no (ceiling ≤ claim)"),
        ]
        for row in report["rows"]
    ]
    alarms = report["false_alarms"]
    upper = alarms[f"rate_upper_{100 * report['confidence']:g}"]
    caption = (
        f"Auditor validation, {attack} attack: flagged = ε̂ lower bound ({100 * report['confidence']:g} %) > "
        f"claimed ε. False alarms on correct optimizers: {alarms['flagged']} of {alarms['audits']} audits "
        f"(every attack; rate {alarms['rate']:.3f}, {100 * report['confidence']:g} % upper bound {upper:.3f}, "
        f"{INDEPENDENCE_NOTE}). {title}"
    )
    written += write_table(out / "validation", header, table, caption=caption)
    write_json(out / "validation.json", report)
    written.append(out / "validation.json")
    missed = sorted(variant for variant, found in report["variants"].items() if not found["flagged_at"])
    correct_flagged = sorted(
        {row["optimizer"] for row in report["rows"] if row["role"] == "correct twin" and row["flagged"]}
    )
    entry = {
        "name": "audit/validation",
        "paper": "all seeds: the auditor on optimizers broken on purpose",
        "figure": "auditor validation",
        "title": title,
        "dataset": title,
        "files": [str(path) for path in written],
        "claims": [
            claim(
                "Every broken variant (no DP claim) is flagged at some claimed ε",
                "contradicted" if missed else "holds",
                test=f"each variant flagged (ε̂ lower bound at {100 * report['confidence']:g} % > its claimed ε) at "
                "one claimed ε or more (exact)",
                kind="check",
                flagged_at={v: found["flagged_at"] for v, found in report["variants"].items()},
                audits={v: found["audits"] for v, found in report["variants"].items()},
                largest_margin={v: found["largest_margin"] for v, found in report["variants"].items()},
                not_flagged=missed,
            ),
            claim(
                "No correct twin is flagged",
                "contradicted" if correct_flagged else "holds",
                test=f"no correct twin's ε̂ lower bound ({100 * report['confidence']:g} %) above its claimed ε (exact)",
                kind="check",
                flagged=correct_flagged,
                twins=len({row["optimizer"] for row in report["rows"] if row["role"] == "correct twin"}),
            ),
            claim(
                f"False-alarm rate on correct optimizers ≤ {1 - report['confidence']:.2g} "
                "(by construction of the bound)",
                "holds" if alarms["rate"] <= 1 - report["confidence"] else "contradicted",
                test=f"observed false-alarm rate over {alarms['audits']} audits against {1 - report['confidence']:.2g} "
                f"(exact; its Clopper–Pearson {100 * report['confidence']:g} % upper bound is in the numbers, "
                f"{INDEPENDENCE_NOTE})",
                kind="check",
                **{key: value for key, value in alarms.items() if key != "which"},
            ),
        ],
    }
    write_json(out / "validation.manifest.json", entry)
    return written


def whole_run_validation_report(pairs: list[tuple[str | Path, str | Path]], *, delta: float) -> dict[str, Any]:
    """The bugs only a whole-run audit sees, each run beside its correct twin, by the rule of
    :func:`dpaudit.audit.validation_flag` (three lower bounds against the ε of the run's own ledger, the members'
    presence against its sample rates and the direct checks of σ_t and q_t·c, each of the k checks at level 0.05/k: a
    run that keeps its claim is flagged with probability ≤ 5 %).

    Args:
        pairs: (bug run, twin run) folders of ``dpaudit train`` with whole-run canaries, the bug's run folder
            named ``<bug>_eps<ε>/trial_<t>``.
        delta: δ of every ε.
    """
    from dpaudit.audit import validation_flag

    rows = []
    for bug_folder, twin_folder in pairs:
        bug, _, epsilon = Path(bug_folder).parent.name.rpartition("_eps")
        for role, folder in (("bug", bug_folder), ("correct twin", twin_folder)):
            flag = validation_flag(canaries=folder, epsilon=None, delta=delta)
            config = read_json(RunDir(folder).config)["config"]
            rows.append(
                {
                    "bug": bug,
                    "role": role,
                    "run": str(folder),
                    "optimizer": config["optimizer"],
                    "sampling": config["sampling"],
                    "target_epsilon": float(epsilon),
                    **flag.to_dict(),
                }
            )
    bugs = list(dict.fromkeys(row["bug"] for row in rows))
    return {
        "rule": "flagged = a lower bound above the ε of the run's own ledger (PLD) — the family bound (a test of the "
        "ledger's σ, q and T) and the assumption-free bound on every iterate's log likelihood ratio and the "
        "assumption-free bound on the spread over the steps — or a direct check refuting the ledger: the members' "
        "presence against its sample rates, σ_t measured at every step (step_noise), q_t times a canary's "
        "contribution (contribution); each of the k checks at level 0.05/k",
        "rows": rows,
        "bugs": {
            bug: [
                row["target_epsilon"] for row in rows if row["bug"] == bug and row["role"] == "bug" and row["flagged"]
            ]
            for bug in bugs
        },
        "twins_flagged": [row["run"] for row in rows if row["role"] == "correct twin" and row["flagged"]],
    }


def write_validation_run(
    pairs: list[tuple[str | Path, str | Path]], *, delta: float, out_dir: str | Path, title: str
) -> list[Path]:
    """``validation_run.{pdf,png,md,json}`` and ``validation_run.manifest.json`` under ``out_dir``."""
    import matplotlib.pyplot as plt

    from reproduce.figures._paper import write_table

    report = whole_run_validation_report(pairs, delta=delta)
    out = Path(out_dir)
    bugs = list(report["bugs"])
    names = ("all_iterates_family", "all_iterates", "spread")
    labels = {"all_iterates_family": "Λ, family", "all_iterates": "Λ, assumption-free", "spread": "spread"}
    with figure_style():
        fig, axes = plt.subplots(1, len(bugs), figsize=(3.6 * len(bugs), 3.4), squeeze=False)
        for ax, bug in zip(axes[0], bugs):
            rows = [row for row in report["rows"] if row["bug"] == bug]
            epsilons = sorted({row["target_epsilon"] for row in rows})
            width = 0.8 / (2 * len(names))
            for k, (role, color) in enumerate((("correct twin", "#1f77b4"), ("bug", "#d62728"))):
                for j, name in enumerate(names):
                    values = [
                        next(r["bounds"][name] for r in rows if r["role"] == role and r["target_epsilon"] == e)
                        for e in epsilons
                    ]
                    x = np.arange(len(epsilons)) + (k * len(names) + j - len(names) + 0.5) * width
                    ax.bar(
                        x,
                        values,
                        width,
                        color=color,
                        alpha=0.35 + 0.3 * j,
                        label=f"{role}: {labels[name]}",
                    )
            top = 1.3 * max([r["epsilon_claimed"] for r in rows] + [v for r in rows for v in r["bounds"].values()])
            ax.set_ylim(0, top)
            for i, e in enumerate(epsilons):
                bug_row = next(r for r in rows if r["role"] == "bug" and r["target_epsilon"] == e)
                ax.hlines(bug_row["epsilon_claimed"], i - 0.45, i + 0.45, color="black", linewidth=1.2)
                verdict = "flagged" if bug_row["flagged"] else "not flagged"
                ax.text(i, 0.97 * top, verdict, ha="center", va="top", fontsize=7)
            ax.set_xticks(range(len(epsilons)), [f"{e:g}" for e in epsilons])
            ax.set_xlabel("target ε (black line: the ledger's claimed ε)", fontsize=8)
            ax.set_ylabel("ε̂ lower bound (1 − 0.05/k each, k checks)", fontsize=8)
            ax.set_title(bug, fontsize=9)
        handles, legend_labels = axes[0][0].get_legend_handles_labels()
        fig.suptitle(f"Auditor validation, whole-run canaries: bugs only a whole-run audit sees, {title}", fontsize=10)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
        fig.legend(handles, legend_labels, loc="lower center", ncol=3, fontsize=7)
        written = save_figure(fig, out / "validation_run")
    header = ["bug", "role", "optimizer", "sampling", "target ε", "claimed ε (PLD)", *labels.values(), "flagged by"]
    table = [
        [
            row["bug"],
            row["role"],
            row["optimizer"],
            row["sampling"],
            f"{row['target_epsilon']:g}",
            f"{row['epsilon_claimed']:.3g}",
            *(f"{row['bounds'][name]:.3g}" for name in names),
            ", ".join(row["flagged_by"]) or "not flagged",
        ]
        for row in report["rows"]
    ]
    written += write_table(out / "validation_run", header, table, caption=f"{report['rule']}. {title}")
    write_json(out / "validation_run.json", report)
    written.append(out / "validation_run.json")
    missed = [bug for bug, flagged_at in report["bugs"].items() if not flagged_at]
    entry = {
        "name": "audit/validation_run",
        "paper": "all seeds: the auditor on optimizers broken on purpose",
        "figure": "auditor validation, whole run",
        "title": title,
        "dataset": title,
        "files": [str(path) for path in written],
        "claims": [
            claim(
                "Every bug only a whole-run audit sees (understated sample rate, reused noise, shuffled "
                "batches accounted as Poisson) is flagged at some claimed ε",
                "contradicted" if missed else "holds",
                test="each bug's whole-run ε̂ lower bound above its claimed ε at one claimed ε or more (exact)",
                kind="check",
                flagged_at=report["bugs"],
                not_flagged=missed,
            ),
            claim(
                "No correct twin is flagged (each with probability ≤ 5 % by construction)",
                "contradicted" if report["twins_flagged"] else "holds",
                test="no correct twin's whole-run ε̂ lower bound above its claimed ε (exact)",
                kind="check",
                flagged=report["twins_flagged"],
            ),
        ],
    }
    write_json(out / "validation_run.manifest.json", entry)
    return written
