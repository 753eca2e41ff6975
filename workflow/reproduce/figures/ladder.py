"""The threat-model ladder: what each adversary can certify about one run, beside what its accountants claim.

For every DP-claiming optimizer of the cross-optimizer audit at each target ε, one row per run with its rungs,
from the strongest adversary to the weakest:

* theory: the run's ε from its ledger (z_t, q_t) by the PLD accountant (tight; the one the family bound's
  hypotheses use) and by RDP — guarantees if the
  run is the mechanism its ledger describes;
* white box, every iterate (``canary-run``): whole-run canaries scored by their log likelihood ratio Λ, with
  the assumption-free bound (Clopper–Pearson, its threshold fixed by the ledger before the scores are read, every
  canary certifying: ``dpaudit.privacy_profile``; the number no model props up) and the family bound, a test of
  the ledger's σ, q and T (a lower bound only if the run is a composed Poisson-subsampled Gaussian);
* white box, final model only (``canary-final``): the canary coordinate's total update, the same two bounds,
  and the last-iterate heuristic ε (a heuristic, not a guarantee);
* white box, one step (``canary``): the per-step Dirac canaries, against the ε of the one unsubsampled step
  each canary faces — a different claim, larger than the run's;
* black box: the loss attack on the target (and LiRA and RMIA where the audit core ran them), against the run's ε;
  and the crafted-canary audit of ``audit.black_box`` (``dpaudit blackbox``: K models of the optimizer's own run at
  the same target ε, one input-space canary, the final models' losses alone; the adversary chooses θ₀), against
  that run's ε.

Each lower bound is drawn against the claim it tests (y = x: the audit certifies all of it), beside what the
sample size allows: for the family bound, its value on one simulation of the claimed mechanism with as many
canaries (one draw, not a ceiling); for the assumption-free bound, what its fixed threshold predicts for a run that
is its claim (the expected counts' bound). The privacy profile (ε̂(δ') for δ' from δ to 10⁻², beside the ledger's
ε(δ')) is drawn per mechanism in ``profile.{pdf,png}`` and its 10⁻² point is a column of the table. Optimizers that
whole-run canaries do not fit say why in their panel: a low ε̂ there is
the canary design's limit, not evidence that the optimizer leaks less.

One row and one panel per *mechanism*: runs at one target ε whose whole-run canaries meet the same mechanism —
the same ledger (z_t, q_t), sampling and canary count, and a canary contribution φ(K)·K/C equal to 3 decimals —
are drawn once, with DP-SGD's bounds (else the first optimizer's), and the optimizers that share it listed. Where
their canaries also saw the same noise draws and batches (the clipping optimizers: the model draws as much noise in
each, so the canaries' derived noise is the same) their bounds are identical, one measurement; where not (a
projection, a support or a mask draws the model's noise otherwise) each is another measurement of the mechanism.
A second table gives every optimizer's own share of ε, and the check of bounds above their claims counts each
distinct bound once.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import atomic_write_bytes, read_json, write_json
from dpaudit._validation import DPAuditError
from reproduce.figures._paper import claim
from reproduce.figures.style import figure_style, save_figure

# why whole-run canaries do not fit an optimizer, by the module of its class (dpaudit.optim; every DP-claiming one
# registered here fits: a registered plugin may not)
UNFIT_REASONS = {"base": "no per-record clipping or noise"}
# the rungs: (key in a ladder row, label, colour, marker, filled)
RUNGS = (
    ("all_iterates_fixed", "every iterate: assumption-free", "#1f77b4", "o", True),
    (
        "all_iterates_family",
        "every iterate: test of the ledger's σ, q, T (assumes a subsampled Gaussian)",
        "#1f77b4",
        "o",
        False,
    ),
    ("final_model_fixed", "final model: assumption-free", "#ff7f0e", "s", True),
    (
        "final_model_family",
        "final model: test of the ledger's σ, q, T (assumes a subsampled Gaussian)",
        "#ff7f0e",
        "s",
        False,
    ),
    ("per_step_lower", "one step (per-step canaries), against one step's ε", "#9467bd", "D", True),
    ("loss_lower", "black box: loss attack", "#7f7f7f", "v", True),
    ("lira_lower", "black box: LiRA (online)", "#2ca02c", "^", True),
    ("rmia_lower", "black box: RMIA (online)", "#17becf", "<", True),
    ("black_box_lower", "black box: crafted canary, adversary's θ₀ (its own run's ε)", "#d62728", "P", True),
)
BLACK_BOX_FILE = "blackbox.json"  # results/audit_blackbox/<run>/: the report of `dpaudit blackbox`


def _run_parts(run: str) -> tuple[str, float]:
    name, _, epsilon = run.rpartition("_eps")
    return name, float(epsilon)


def _unfit_reason(optimizer: str) -> str | None:
    """None if whole-run canaries fit ``optimizer``; else why not (one phrase)."""
    from dpaudit.optim import get_spec

    cls = get_spec(optimizer).cls
    if cls.takes_dirac_records():
        return None
    return UNFIT_REASONS.get(
        cls.__module__.rpartition(".")[2], "no whole-run canary design for its per-record processing"
    )


def _ledger_claims(run_folder: str | Path, *, delta: float, whole_run: dict | None) -> dict[str, Any]:
    """ε of a run's ledger at δ by the PLD and RDP accountants (from its whole-run audit when it has one: the same
    ledger and δ), and its steps' z and q."""
    from dpaudit.audit import ledger_claims
    from dpaudit.ledger import PrivacyLedger
    from dpaudit.rundir import RunDir

    z, q = PrivacyLedger.from_dict(read_json(RunDir(run_folder).target.ledger)).per_step()
    claims = whole_run or ledger_claims(noise_multipliers=z, sample_rates=q, delta=delta, last_iterate=False)
    return {"epsilon_pld": claims["epsilon_pld"], "epsilon_rdp": claims["epsilon_rdp"], "z": z, "q": q}


def ladder_rows(
    files: list[str | Path],
    *,
    canaries: int,
    delta: float,
    black_box_unfit: Mapping[str, str] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per DP-claiming optimizer run (name and target ε) of the cross-optimizer audit.

    Args:
        files: ``dpaudit audit`` results: ``results/audit_run/<run>/audit_canary-*.json`` (whole-run canaries),
            ``results/audit_cross/<run>/audit_{canary,loss}.json`` and ``results/audit/<run>/audit_{lira,rmia}-*.json``;
            and ``dpaudit blackbox`` reports, ``results/audit_blackbox/<run>/blackbox.json``.
        canaries: M, the whole-run canaries per run (both classes), for the family bound's ceiling.
        delta: δ of every ε.
        black_box_unfit: optimizer run → why the black-box rung left it out (the pipeline's reasons; a run left out
            without one shows "–").
        seed: seed of the ceiling's simulation.

    Returns:
        Rows with the claims (``epsilon_pld``, ``epsilon_rdp``, ``epsilon_step`` of the per-step canaries), the
        lower bounds of each rung (nats; None where the rung was not audited), their ceilings, and
        ``whole_run_unfit`` (why whole-run canaries do not fit the optimizer, or None).
    """
    from dpaudit.optim import get_spec

    by_run: dict[tuple[str, str], dict[str, Any]] = {}
    for path in files:
        path = Path(path)
        payload = read_json(path)
        section, run = path.parent.parent.name, path.parent.name
        by_run.setdefault((section, run), {})["blackbox" if path.name == BLACK_BOX_FILE else payload["attack"]] = (
            payload
        )
    cross = sorted((run for section, run in by_run if section == "audit_cross"), key=lambda run: _run_parts(run)[::-1])
    if not cross:
        raise DPAuditError("the ladder needs the cross-optimizer audit's results (results/audit_cross/…)")
    rows = []
    ceilings: dict[float, float] = {}
    for run in cross:
        name, target = _run_parts(run)
        found = by_run[("audit_cross", run)]
        any_payload = next(iter(found.values()))
        source = str(any_payload["source"]).split()[0]
        config = read_json(Path(source) / "config.json")
        optimizer = config["config"]["optimizer"]
        if not get_spec(optimizer).dp_claim:
            continue
        whole = by_run.get(("audit_run", run), {})
        audited = next((p["whole_run"] for p in whole.values() if "epsilon_pld" in p.get("whole_run", {})), None)
        claims = _ledger_claims(source, delta=delta, whole_run=audited)
        core = by_run.get(("audit", run), {})
        black_box = by_run.get(("audit_blackbox", run), {}).get("blackbox")

        def lower(payload):
            return None if payload is None else float(payload["report"]["epsilon_lower"])

        def family(payload):
            return None if payload is None else float(payload["whole_run"]["family"]["epsilon"])

        def profile(payload, field: str, point: int = 0):
            """A field of the assumption-free profile's point (0: at the run's δ; −1: at 10⁻²)."""
            found = None if payload is None else payload["whole_run"].get("profile")
            return None if found is None else float(found[field][point])

        row = {
            "run": run,
            "name": name,
            "optimizer": optimizer,
            "target_epsilon": target,
            "epsilon_pld": claims["epsilon_pld"],
            "epsilon_rdp": claims["epsilon_rdp"],
            "whole_run_unfit": None if whole else _unfit_reason(optimizer),
            "all_iterates_family": family(whole.get("canary-run")),
            "all_iterates_family_capped": bool(whole["canary-run"]["whole_run"]["family"]["capped"])
            if "canary-run" in whole
            else None,
            "all_iterates_lower": lower(whole.get("canary-run")),  # assumption-free, threshold on held-out canaries
            "all_iterates_fixed": profile(whole.get("canary-run"), "epsilon_lower"),
            "all_iterates_expected": profile(whole.get("canary-run"), "epsilon_expected"),
            "all_iterates_fixed_wide": profile(whole.get("canary-run"), "epsilon_lower", -1),
            "epsilon_pld_wide": profile(whole.get("canary-run"), "epsilon_pld", -1),
            "delta_wide": profile(whole.get("canary-run"), "delta", -1),
            "profile": (whole["canary-run"]["whole_run"].get("profile") if "canary-run" in whole else None),
            "final_model_family": family(whole.get("canary-final")),
            "final_model_lower": lower(whole.get("canary-final")),
            "final_model_fixed": profile(whole.get("canary-final"), "epsilon_lower"),
            "spread_lower": lower(whole.get("canary-spread")),
            "epsilon_last_iterate": (
                whole["canary-final"]["whole_run"]["epsilon_last_iterate"] if "canary-final" in whole else None
            ),
            "lower_ceiling": float(whole["canary-run"]["report"]["epsilon_ceiling"]) if "canary-run" in whole else None,
            "per_step_lower": lower(found.get("canary")),
            "epsilon_step": float(found["canary"]["epsilon_mechanism"]) if "canary" in found else None,
            "loss_lower": lower(found.get("loss")),
            "lira_lower": lower(core.get("lira-online")),
            "rmia_lower": lower(core.get("rmia-online")),
            "black_box_lower": None if black_box is None else float(black_box["epsilon_lower"]),
            "black_box_epsilon": None if black_box is None else float(black_box["epsilon"]),
            "black_box_gdp": None if black_box is None else black_box["epsilon_gdp"],
            "black_box_gdp_label": None if black_box is None else black_box["gdp_label"],
            "black_box_last_iterate": None if black_box is None else black_box["epsilon_last_iterate"],
            "black_box_ceiling": None if black_box is None else float(black_box["epsilon_ceiling"]),
            "black_box_models": None if black_box is None else int(black_box["trials"]),
            "black_box_model": None if black_box is None else black_box["model"],
            "black_box_threat_model": None if black_box is None else black_box["threat_model"],
            "black_box_unfit": (black_box_unfit or {}).get(name) if black_box is None else None,
            "canaries": canaries if whole else None,
        }
        if whole:
            if target not in ceilings:  # one mechanism per ε: the first whole-run ledger at it (DP-SGD's when run)
                ceilings[target] = _family_on_simulation(
                    claims["z"], claims["q"], canaries=canaries, delta=delta, seed=seed
                )
            row["family_on_simulation"] = ceilings[target]
        else:
            row["family_on_simulation"] = None
        row["optimizers"] = [name]
        row["mechanism"] = _mechanism(whole, claims, target=target)
        rows.append(row)
    return _one_row_per_mechanism(rows)


MECHANISM_CONTRIBUTION_DIGITS = 3  # canary contributions c/C that agree to this many digits share a mechanism
BASELINE = "dpsgd-gc"  # the optimizer whose bounds a merged row gives where it is a member (DP-SGD, the reference)


def _mechanism(whole: dict[str, Any], claims: dict[str, Any], *, target: float) -> tuple | None:
    """What the run's whole-run canaries meet (None: no whole-run canaries, or a record without their sidecar):
    the target ε, the sampling, the canary count, c/C rounded and the ledger's (z_t, q_t)."""
    if "canary-run" not in whole:
        return None
    sidecar = Path(str(whole["canary-run"]["source"]).split()[0]) / "target" / "canaries_run.json"
    if not sidecar.is_file():
        return None
    record = read_json(sidecar)
    share = round(float(record["contribution"]) / float(record["clip_norm"]), MECHANISM_CONTRIBUTION_DIGITS)
    ledger = tuple(np.round(np.concatenate([claims["z"], claims["q"]]), 9))
    return (target, record["sampling"], int(record["canaries"]), share, ledger)


def _one_row_per_mechanism(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose whole-run canaries meet one mechanism (``_mechanism``) merged into DP-SGD's (``BASELINE``) where it
    is one of them, else into the first's by name, with
    ``optimizers`` (all of them), ``name`` (the optimizers joined) and ``family_spread`` (the largest difference of
    their every-iterate family bounds: 0 where they saw the same draws)."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["mechanism"] if row["mechanism"] is not None else row["run"], []).append(row)
    merged = []
    for group in groups.values():
        first = dict(min(group, key=lambda row: (row["name"] != BASELINE, row["name"])))
        names = sorted(row["name"] for row in group)
        families = [row["all_iterates_family"] for row in group if row["all_iterates_family"] is not None]
        first["optimizers"] = names
        first["name"] = " = ".join(names)
        first["members"] = {row["name"]: _share(row) for row in group}
        first["family_spread"] = max(families) - min(families) if len(families) > 1 else None
        first["distinct_bounds"] = {  # rung → the members' distinct bounds (one for one measurement)
            key: sorted({row[key] for row in group if row[key] is not None}) for key, *_ in RUNGS
        }
        first.pop("mechanism")
        merged.append(first)
    return merged


def _share(row: dict[str, Any]) -> dict[str, float | None]:
    """One optimizer's shares of the ε each rung tests: every iterate (family, assumption-free) of the run's PLD ε,
    the per-step canaries' bound of one step's ε, and the crafted-canary black-box audit's of its own run's ε (and of
    that run's last-iterate heuristic)."""

    def ratio(value, claimed):
        return None if value is None or not claimed else value / claimed

    return {
        "run": row["run"],
        "family_over_pld": ratio(row["all_iterates_family"], row["epsilon_pld"]),
        "assumption_free_over_pld": ratio(row["all_iterates_fixed"], row["epsilon_pld"]),
        "assumption_free_wide_over_pld": ratio(row["all_iterates_fixed_wide"], row["epsilon_pld_wide"]),
        "per_step_over_step": ratio(row["per_step_lower"], row["epsilon_step"]),
        "black_box_over_own": ratio(row["black_box_lower"], row["black_box_epsilon"]),
        "black_box_gdp_over_own": ratio(row["black_box_gdp"], row["black_box_epsilon"]),
        "black_box_over_last_iterate": ratio(row["black_box_lower"], row["black_box_last_iterate"]),
        "black_box_model": row["black_box_model"],
        "black_box_unfit": row["black_box_unfit"],
    }


def _family_on_simulation(z, q, *, canaries: int, delta: float, seed: int) -> float:
    """The family bound that an audit of the exact composed subsampled Gaussian (z_t, q_t) with ``canaries``
    canaries (half members) certifies on one simulation: one draw of what this sample size gives, not a ceiling."""
    from dpaudit.whole_run import family_lower_bound, simulate_scores

    per_side = max(canaries // 2, 2)
    simulated = simulate_scores(members=per_side, nonmembers=per_side, noise_multipliers=z, sample_rates=q, seed=seed)
    bound = family_lower_bound(
        simulated.member_lr, simulated.nonmember_lr, noise_multipliers=z, sample_rates=q, delta=delta
    )
    return float(bound.epsilon)


def _fmt(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def ladder_markdown(rows: list[dict[str, Any]], *, confidence: float) -> str:
    """The ladder as a Markdown table (every ε in nats at the runs' δ)."""
    level = f"{100 * confidence:g} %"
    lines = [
        f"Threat-model ladder. Lower bounds at {level} confidence. AF = assumption-free (Clopper–Pearson; its "
        "threshold fixed by the ledger before the scores are read, every canary certifying): the number no model "
        "props up. Ledger test = the family bound, a test of the ledger's σ, q and T: a lower bound on ε only if the "
        "run is a composed Poisson-subsampled Gaussian with its q and T. AF expected = what the fixed threshold "
        "predicts for a run that is its claim (these canary counts' reach); ledger test on a simulation = the family "
        "bound of one simulated run of the claim (one draw). The per-step canaries' bound is against one step's ε "
        "(no subsampling, no composition), every other bound against the run's ε; AF at δ' = 10⁻² against the "
        "ledger's ε at that δ'. Crafted canary = the black-box audit of audit.black_box: K models of the optimizer's "
        "own run at the same target ε (audit.black_box.settings; its model in the second table), one input-space "
        "canary, the final models' losses alone, the adversary choosing θ₀; its AF against that run's ε (in brackets).",
        "",
        "One row per mechanism: the whole-run canaries of optimizers joined by = meet the same mechanism (the same "
        "ledger, sampling and canary count, and a canary contribution φ(K)·K/C equal to 3 decimals: a Dirac canary "
        "of norm K ≥ C weighted by each one's φ, in the projected space for a projection). The row gives the first "
        "optimizer's bounds; the last column, the spread of the members' ledger tests: 0 where they saw the same "
        "noise draws and batches (one measurement), more where each is another measurement of the mechanism. Every "
        "optimizer's own shares are in the second table.",
        "",
        "| optimizer | target ε | ε PLD | ε RDP | every iterate: AF | AF expected | every iterate: ledger test | "
        "final model: AF | final model: ledger test | last-iterate heuristic | ledger test on a simulation | "
        "AF at δ' = 10⁻² (ε PLD there) | one step: AF (its ε) | loss: AF | LiRA: AF | RMIA: AF | "
        "crafted canary: AF (its ε) | AF / ε PLD | members' ledger-test spread |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = None if row["all_iterates_fixed"] is None else row["all_iterates_fixed"] / row["epsilon_pld"]
        family = _fmt(row["all_iterates_family"]) + (" (capped)" if row["all_iterates_family_capped"] else "")
        if row["whole_run_unfit"]:
            family = f"not fitted: {row['whole_run_unfit']}"
        lines.append(
            f"| {row['name']} | {row['target_epsilon']:g} | {_fmt(row['epsilon_pld'])} | {_fmt(row['epsilon_rdp'])} | "
            f"{_fmt(row['all_iterates_fixed'])} | {_fmt(row['all_iterates_expected'])} | {family} | "
            f"{_fmt(row['final_model_fixed'])} | {_fmt(row['final_model_family'])} | "
            f"{_fmt(row['epsilon_last_iterate'])} | {_fmt(row['family_on_simulation'])} | "
            f"{_fmt(row['all_iterates_fixed_wide'])} ({_fmt(row['epsilon_pld_wide'])}) | "
            f"{_fmt(row['per_step_lower'])} ({_fmt(row['epsilon_step'])}) | "
            f"{_fmt(row['loss_lower'])} | {_fmt(row['lira_lower'])} | {_fmt(row['rmia_lower'])} | "
            f"{_black_box_cell(row)} | {_fmt(ratio)} | "
            f"{_fmt(row['family_spread'])} |"
        )
    lines += [
        "",
        f"Share of ε by optimizer ({level} lower bounds over the ε each tests; – where the rung was not audited).",
        "",
        "| optimizer | target ε | mechanism (row above) | every iterate: AF / ε PLD | AF at 10⁻² / ε PLD there | "
        "every iterate: ledger test / ε PLD | one step: AF / its ε | crafted canary: AF / its ε | "
        "crafted canary: AF / its last-iterate ε | crafted canary: Gaussian-DP reading / its ε (an estimate) | "
        "crafted canary: its run's model |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    shares = [(name, row, share) for row in rows for name, share in row["members"].items()]
    for name, row, share in sorted(shares, key=lambda item: (item[0], item[1]["target_epsilon"])):
        lines.append(
            f"| {name} | {row['target_epsilon']:g} | {row['name']} | {_fmt(share['assumption_free_over_pld'])} | "
            f"{_fmt(share['assumption_free_wide_over_pld'])} | {_fmt(share['family_over_pld'])} | "
            f"{_fmt(share['per_step_over_step'])} | {_fmt(share['black_box_over_own'])} | "
            f"{_fmt(share['black_box_over_last_iterate'])} | {_fmt(share['black_box_gdp_over_own'])} | "
            f"{share['black_box_model'] or _black_box_not_run(share)} |"
        )
    return "\n".join(lines) + "\n"


def _black_box_not_run(row: dict[str, Any]) -> str:
    """Why the crafted-canary rung was not run for a row or a member's share ("–": no reason given)."""
    return f"not run: {row['black_box_unfit']}" if row["black_box_unfit"] else "–"


def _black_box_cell(row: dict[str, Any]) -> str:
    if row["black_box_lower"] is None:
        return _black_box_not_run(row)
    return f"{_fmt(row['black_box_lower'])} ({_fmt(row['black_box_epsilon'])})"


def plot_ladder(rows: list[dict[str, Any]], *, stem: str | Path, title: str, confidence: float) -> list[Path]:
    """One panel per optimizer: each rung's lower bound against the ε it tests, y = x, and the ceilings."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row["name"] for row in rows))
    columns = min(4, len(names))
    grid_rows = -(-len(names) // columns)
    with figure_style():
        legend_inches = 0.9
        fig, axes = plt.subplots(
            grid_rows, columns, figsize=(3.3 * columns, 3.0 * grid_rows + legend_inches), squeeze=False
        )
        for ax in axes.flat[len(names) :]:
            ax.set_visible(False)
        legend = {}
        for ax, name in zip(axes.flat, names):
            mine = sorted((row for row in rows if row["name"] == name), key=lambda row: row["target_epsilon"])
            claims = np.array([row["epsilon_pld"] for row in mine])
            top = 1.15 * max(
                [
                    *claims,
                    *(row["epsilon_step"] or 0 for row in mine),
                    *(_claim(r, "black_box_lower") or 0 for r in mine),
                ]
            )
            (legend["y = x: the audit certifies all of the claim"],) = ax.plot(
                [0, top], [0, top], color="black", linewidth=0.8
            )
            for key, label, style in (
                ("all_iterates_expected", "assumption-free: what these canaries reach if the run is its claim", "--"),
                ("family_on_simulation", "ledger test on one simulation of the claim (one draw)", ":"),
                ("epsilon_last_iterate", "last-iterate heuristic ε (not a guarantee)", "-."),
            ):
                points = [(row["epsilon_pld"], row[key]) for row in mine if row[key] is not None]
                if points:
                    x, y = np.array(points).T
                    color = "#ff7f0e" if key == "epsilon_last_iterate" else "#1f77b4"
                    (legend[label],) = ax.plot(
                        x, y, color=color, linestyle=style, marker="_", markersize=9, linewidth=0.8, alpha=0.7
                    )
            for key, label, color, marker, filled in RUNGS:
                points = [(_claim(row, key), row[key]) for row in mine if row[key] is not None]
                if not points:
                    continue
                x, y = np.array(points).T
                legend[label] = ax.scatter(
                    x,
                    y,
                    marker=marker,
                    s=30,
                    zorder=3,
                    **({"color": color} if filled else {"facecolors": "none", "edgecolors": color}),
                )
            reason = mine[0]["whole_run_unfit"]
            if reason:
                ax.text(
                    0.03,
                    0.97,
                    f"no whole-run canaries:\n{reason}\n(a low ε̂ here is the design's limit)",
                    transform=ax.transAxes,
                    fontsize=6,
                    va="top",
                )
            ax.set_xlim(0, top)
            ax.set_ylim(0, top)
            ax.set_title(textwrap.fill(" = ".join(mine[0]["optimizers"]), 48), fontsize=8)
            ax.set_xlabel("claimed ε (PLD; one step's for per-step; its own run's for the crafted canary)", fontsize=7)
            ax.set_ylabel(f"ε̂ lower bound ({100 * confidence:g} %)", fontsize=7)
        fig.suptitle(f"Threat-model ladder: what each adversary certifies, {title}", fontsize=10)
        fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=3, fontsize=7)
        return save_figure(fig, stem)


def plot_profiles(rows: list[dict[str, Any]], *, stem: str | Path, title: str, confidence: float) -> list[Path]:
    """One panel per mechanism: the ledger's ε(δ') (PLD: the claim) and the assumption-free ε̂(δ') of every iterate
    (thresholds fixed by the ledger), for δ' from the run's δ to 10⁻², one curve per target ε."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row["name"] for row in rows if row.get("profile")))
    with figure_style():
        if not names:  # no whole-run canaries: an empty figure that says so
            fig, ax = plt.subplots(figsize=(4, 2))
            ax.axis("off")
            ax.text(0.5, 0.5, "no run with whole-run canaries: no privacy profile", ha="center", va="center")
            return save_figure(fig, stem)
        columns = min(4, len(names))
        grid_rows = -(-len(names) // columns)
        fig, axes = plt.subplots(grid_rows, columns, figsize=(3.3 * columns, 3.0 * grid_rows + 0.8), squeeze=False)
        for ax in axes.flat[len(names) :]:
            ax.set_visible(False)
        legend = {}
        for ax, name in zip(axes.flat, names):
            mine = sorted((row for row in rows if row["name"] == name and row.get("profile")), key=_target)
            for index, row in enumerate(mine):
                color = f"C{index}"
                profile = row["profile"]
                (legend[f"ε = {row['target_epsilon']:g}: ledger's ε(δ') (PLD)"],) = ax.plot(
                    profile["delta"], profile["epsilon_pld"], color=color, linewidth=1.0
                )
                legend[f"ε = {row['target_epsilon']:g}: assumption-free ε̂(δ')"] = ax.scatter(
                    profile["delta"], profile["epsilon_lower"], color=color, marker="o", s=14, zorder=3
                )
            ax.set_xscale("log")
            ax.set_title(textwrap.fill(" = ".join(mine[0]["optimizers"]), 48), fontsize=8)
            ax.set_xlabel("δ'", fontsize=7)
            ax.set_ylabel(f"ε (lower bounds at {100 * confidence:g} %, pointwise)", fontsize=7)
        fig.suptitle(f"Privacy profile: the ledger's claim and what the canaries certify, {title}", fontsize=10)
        fig.tight_layout(rect=(0, 0.8 / fig.get_figheight(), 1, 1))
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=4, fontsize=6)
        return save_figure(fig, stem)


def _target(row: dict[str, Any]) -> float:
    return float(row["target_epsilon"])


def write_ladder(
    files: list[str | Path],
    *,
    canaries: int,
    delta: float,
    confidence: float,
    metrics: str | Path,
    markdown: str | Path,
    out_dir: str | Path,
    title: str,
    black_box_unfit: Mapping[str, str] | None = None,
) -> list[Path]:
    """``metrics`` (JSON rows), ``markdown`` (table), and ``ladder.{pdf,png}``, ``profile.{pdf,png}`` +
    ``ladder.manifest.json`` in ``out_dir`` (``black_box_unfit``: as :func:`ladder_rows`)."""
    rows = ladder_rows(files, canaries=canaries, delta=delta, black_box_unfit=black_box_unfit)
    from dpaudit.privacy_profile import LABEL as ASSUMPTION_FREE
    from dpaudit.whole_run import FAMILY_LABEL

    labels = {  # what each whole-run bound of a row is
        "all_iterates_fixed": ASSUMPTION_FREE,
        "final_model_fixed": ASSUMPTION_FREE,
        "all_iterates_fixed_wide": f"{ASSUMPTION_FREE}, at δ' = 10⁻² (against epsilon_pld_wide)",
        "all_iterates_expected": "what the fixed threshold predicts for a run that is its claim (not a measurement)",
        "all_iterates_lower": "assumption-free lower bound (threshold chosen on held-out canaries)",
        "final_model_lower": "assumption-free lower bound (threshold chosen on held-out canaries)",
        "all_iterates_family": FAMILY_LABEL,
        "final_model_family": FAMILY_LABEL,
        "family_on_simulation": f"{FAMILY_LABEL}; on one simulation of the claimed mechanism (one draw)",
        "black_box_lower": "assumption-free lower bound of the crafted-canary black-box audit (threshold on a held-out "
        "fifth of its models), against its own run's ε (black_box_epsilon); the adversary chooses θ₀",
        "black_box_gdp": "the crafted-canary audit's Gaussian-DP reading: a family bound at q = 1, an estimate with "
        "subsampling (black_box_gdp_label says which)",
        "black_box_last_iterate": "the last-iterate heuristic ε of the crafted-canary audit's run (no guarantee)",
    }
    write_json(metrics, {"confidence": confidence, "delta": delta, "labels": labels, "rows": rows})
    atomic_write_bytes(markdown, ladder_markdown(rows, confidence=confidence).encode("utf-8"))
    out = Path(out_dir)
    written = plot_ladder(rows, stem=out / "ladder", title=title, confidence=confidence)
    written += plot_profiles(rows, stem=out / "profile", title=title, confidence=confidence)
    from scipy import stats

    audited = [row for row in rows if row["all_iterates_fixed"] is not None]
    bounds = [(row["run"], key, value) for row in rows for key, *_ in RUNGS for value in row["distinct_bounds"][key]]
    above = [f"{run}/{key}" for run, key, value in bounds if value > _claim(_row(rows, run), key)]
    # each bound exceeds a true claim with probability ≤ 1 − confidence: more than the binomial's 95 % quantile
    # of such exceedances is evidence against the claims (or the bounds); a mechanism's bounds count once
    allowed = int(stats.binom.ppf(0.95, len(bounds), 1 - confidence))
    ratios = {
        f"{row['name']} at {row['target_epsilon']:g}": row["all_iterates_fixed"] / row["epsilon_pld"] for row in audited
    }
    entry = {
        "name": "audit/ladder",
        "paper": "all seeds: the threat-model ladder",
        "figure": "threat-model ladder",
        "title": title,
        "dataset": title,
        "files": [str(path) for path in written] + [str(metrics), str(markdown)],
        "claims": [
            claim(
                f"Lower bounds above the ε their run claims are no more than {100 * (1 - confidence):g} % "
                "errors allow (the binomial's 95 % quantile)",
                "holds" if len(above) <= allowed else "contradicted",
                test=f"count of {100 * confidence:g} % lower bounds above their run's claimed ε against the 95 % "
                f"quantile of Binomial({len(bounds)}, {1 - confidence:g})",
                kind="check",
                above=above,
                bounds=len(bounds),
                allowed=allowed,
            ),
            claim(
                "Whole-run canaries (every iterate, assumption-free) certify more of the run's ε than every "
                "black-box attack, on every optimizer they fit",
                "inconclusive"
                if not audited
                else "holds"
                if all(row["all_iterates_fixed"] >= _black_box_best(row) for row in audited)
                else "contradicted",
                test="assumption-free bound (threshold fixed by the ledger) ≥ the largest black-box lower bound "
                "(loss, LiRA, RMIA on the run; the crafted-canary audit on the optimizer's own run at the same target "
                "ε, as a share of its ε times the run's) per run, exact comparison of the bounds; inconclusive when "
                "no run has whole-run canaries",
                kind="check",
                assumption_free_over_pld=ratios,
                black_box_over_own={
                    f"{row['name']} at {row['target_epsilon']:g}": row["black_box_lower"] / row["black_box_epsilon"]
                    for row in audited
                    if row["black_box_lower"] is not None
                },
                runs_audited=len(audited),
            ),
        ],
    }
    write_json(out / "ladder.manifest.json", entry)
    return [*written, out / "ladder.manifest.json"]


def _black_box_best(row: dict[str, Any]) -> float:
    """The largest black-box lower bound of a row, on the scale of the run's ε (the crafted-canary audit's share of
    its own run's ε, times the run's)."""
    crafted = (
        0.0
        if row["black_box_lower"] is None
        else row["black_box_lower"] / row["black_box_epsilon"] * row["epsilon_pld"]
    )
    return max(row["loss_lower"] or 0.0, row["lira_lower"] or 0.0, row["rmia_lower"] or 0.0, crafted)


def _row(rows: list[dict[str, Any]], run: str) -> dict[str, Any]:
    return next(row for row in rows if row["run"] == run)


def _claim(row: dict[str, Any], key: str) -> float:
    """The ε a rung's lower bound tests: one step's for the per-step canaries, its own run's for the crafted-canary
    black-box audit, the run's (PLD) otherwise."""
    if key == "per_step_lower":
        return row["epsilon_step"]
    return row["black_box_epsilon"] if key == "black_box_lower" else row["epsilon_pld"]
