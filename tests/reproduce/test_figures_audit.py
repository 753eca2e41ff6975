"""The cross-optimizer audit figures and table from `dpaudit audit` results."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit._io import read_json, write_json
from dpaudit.audit import audit_scores
from reproduce.cli import main


def _audit_file(folder, attack, shift, theory, *, old=False, n=400):
    """An audit JSON; ``old``: written before reports carried the point estimate's null level."""
    rng = np.random.default_rng(int(10 * shift))
    report = audit_scores(rng.normal(shift, 1, n), rng.normal(0, 1, n)).to_dict()
    if old:
        del report["epsilon_point_null"]
    key = "epsilon_mechanism" if attack == "canary" else "epsilon_run"
    path = folder / f"audit_{attack}.json"
    write_json(path, {"attack": attack, key: theory, "report": report})
    return path


@pytest.mark.integration
def test_audit_table_draws_lower_bounds_and_rocs(tmp_path, capsys):
    files = []
    for name, strength in (("dpsgd-gc", 1.0), ("tp-topk", 0.5)):
        for eps in (1, 4, 8):
            folder = tmp_path / "results" / f"{name}_eps{eps}"
            folder.mkdir(parents=True)
            files += [
                _audit_file(folder, "canary", strength * eps / 2, eps / 2),
                _audit_file(folder, "loss", strength * 0.1, eps, old=True),
            ]
    out = tmp_path / "figures"
    assert (
        main(
            [
                "audit-table",
                *map(str, files),
                "--metrics",
                str(tmp_path / "m.json"),
                "--markdown",
                str(tmp_path / "m.md"),
                "--figures",
                str(out),
                "--title",
                "test",
                "--roc-epsilon",
                "5",
            ]
        )
        == 0
    )
    for stem in ("lower_bounds", "roc_canary", "roc_loss"):
        for suffix in (".pdf", ".png"):
            assert (out / (stem + suffix)).stat().st_size > 1000
    metrics = read_json(tmp_path / "m.json")
    assert set(metrics) == {
        f"{n}_eps{e}/{a}" for n in ("dpsgd-gc", "tp-topk") for e in (1, 4, 8) for a in ("canary", "loss")
    }
    # the stronger canary separation certifies more, and theory is the mechanism's ε for canaries
    assert metrics["dpsgd-gc_eps8/canary"]["epsilon_lower"] > metrics["tp-topk_eps8/canary"]["epsilon_lower"]
    assert metrics["dpsgd-gc_eps8/canary"]["epsilon_theory"] == 4.0
    assert "| dpsgd-gc_eps8 | canary |" in capsys.readouterr().out
    table = (tmp_path / "m.md").read_text()
    # the eq. 20 point estimate stays in the metrics (with its null level), not in the table: it can exceed the
    # theoretical ε under allowed leakage; the table gives the GDP estimate and the lower bound with its confidence
    assert "point" not in table.splitlines()[0] and "ε̂ lower bound (95 % confidence)" in table.splitlines()[0]
    assert metrics["dpsgd-gc_eps8/loss"]["epsilon_point_null"] is None
    assert metrics["dpsgd-gc_eps8/canary"]["epsilon_point_null"] > 0  # new files carry it from the report


def test_tpr_at_a_tenth_of_a_percent_fpr_is_given_only_where_the_sample_resolves_it(tmp_path):
    """400 non-members: the smallest non-zero FPR is 1/400 = 0.25 % > 0.1 %, so TPR at 0.1 % FPR cannot be measured
    (n/a, with a note); 1000 non-members resolve it exactly (1/1000 = 0.1 %) and the table gives the number."""
    from reproduce.results import UNRESOLVED_TPR, audit_table, low_fpr_resolved

    assert not low_fpr_resolved(n_nonmembers=999) and low_fpr_resolved(n_nonmembers=1000)
    assert not low_fpr_resolved(n_nonmembers=0)
    files = []
    for name, n in (("small_eps1", 400), ("large_eps1", 1000)):
        folder = tmp_path / name
        folder.mkdir()
        files.append(_audit_file(folder, "canary", 3.0, 1.0, n=n))
    metrics, markdown = audit_table(files)
    assert metrics["small_eps1/canary"]["tpr_at_0.1%_fpr"] is None
    large = metrics["large_eps1/canary"]["tpr_at_0.1%_fpr"]
    assert 0 < large <= 1
    small_row = next(line for line in markdown.splitlines() if line.startswith("| small_eps1"))
    large_row = next(line for line in markdown.splitlines() if line.startswith("| large_eps1"))
    assert small_row.endswith(f"| {UNRESOLVED_TPR} |") and large_row.endswith(f"| {large:.4f} |")
    assert "fewer than 1000 non-members" in markdown
    _, resolved_only = audit_table(files[1:])
    assert "n/a" not in resolved_only  # no note where every row is resolved


@pytest.mark.integration
def test_no_claim_optimizer_is_left_out_of_the_lower_bound_claim_and_marked(tmp_path):
    """adadpigu-code makes no DP claim: its ε̂ above its (claimed) ε neither breaks "no optimizer exceeds its ε"
    nor goes unnoticed (listed apart, drawn as "no DP claim")."""
    from reproduce.figures.audit import makes_dp_claim, plot_audit_figures
    from reproduce.results import audit_table

    assert not makes_dp_claim("adadpigu-code") and makes_dp_claim("dpsgd-gc") and makes_dp_claim("not-registered")
    files = []
    for name, shift in (("dpsgd-gc", 0.0), ("adadpigu-code", 6.0)):
        folder = tmp_path / f"{name}_eps1"
        folder.mkdir()
        files.append(_audit_file(folder, "canary", shift, 0.5))
    metrics, _ = audit_table(files)
    assert metrics["adadpigu-code_eps1/canary"]["epsilon_lower"] > 0.5  # would contradict the claim if counted
    plot_audit_figures(files, metrics, out_dir=tmp_path / "fig", title="test")
    (claim,) = read_json(tmp_path / "fig" / "audit.manifest.json")["claims"]
    assert claim["verdict"] != "contradicted" and claim["numbers"]["points"] == 1
    assert list(claim["numbers"]["no_dp_claim"]) == ["adadpigu-code_eps1/canary"]


@pytest.mark.parametrize(
    "fpr, n, expected",
    [(0.001, 360, "below resolution (1/n = 0.28 %)"), (0.01, 360, "12 %"), (0.001, 1000, "12 %")],
)
def test_tpr_below_the_fpr_resolution_is_not_reported_as_a_number(fpr, n, expected):
    """360 non-members measure FPR in steps of 1/360 = 0.28 %: a TPR "at 0.1 % FPR" is below that resolution."""
    from dpaudit.plot import tpr_text

    assert tpr_text(fpr, 0.12, n_nonmembers=n) == expected


def _validation_run(root, optimizer, eps, dp_claim, shift, design=None):
    """A run folder (config.json) and its canary and loss audits; ``shift`` separates members from non-members."""
    trial = root / (design or "") / f"{optimizer}_eps{eps}" / "trial_0"
    trial.mkdir(parents=True)
    settings = {} if design is None else {"canary_design": design}  # runs from before the design existed have none
    write_json(
        trial / "config.json",
        {
            "config": {"optimizer": optimizer, "target_epsilon": None, **settings},
            "derived": {"dp_claim": dp_claim, "target_epsilon": eps},
        },
    )
    files = []
    for attack, claimed in (("canary", eps / 2), ("loss", eps)):
        path = _audit_file(trial.parent, attack, shift, claimed)
        payload = read_json(path)
        write_json(path, {**payload, "source": str(trial), "epsilon_run": eps})
        files.append(path)
    return files


@pytest.mark.integration
def test_validation_flags_broken_variants_and_counts_false_alarms(tmp_path, capsys):
    files = []
    for eps in (1, 4):
        files += _validation_run(tmp_path, "dpsgd-no-noise", eps, False, 8.0)  # members far apart: ε̂ ≫ claim
        files += _validation_run(tmp_path, "dpsgd-gc", eps, True, 0.0)  # no separation: never flagged
        files += _validation_run(tmp_path, "auto-s", eps, True, 0.0)
        files += _validation_run(tmp_path, "dp2-sgd", eps, True, 0.0)  # Dirac canaries (the cross-optimizer audit)
        # a pair audited with projection-aligned canaries pairs with the twin trained with them too
        files += _validation_run(tmp_path, "dp2-sgd", eps, True, 0.0, design="projection-aligned")
        files += _validation_run(tmp_path, "dp2-sgd-as-published", eps, False, 8.0, design="projection-aligned")
    out = tmp_path / "figures"
    assert (
        main(
            [
                "validation",
                *map(str, files),
                "--pair",
                "dpsgd-no-noise=dpsgd-gc",
                "dp2-sgd-as-published=dp2-sgd",
                "--out",
                str(out),
                "--title",
                "test",
            ]
        )
        == 0
    )
    for suffix in (".pdf", ".png", ".md", ".tex", ".json", ".manifest.json"):
        assert (out / f"validation{suffix}").stat().st_size > 200
    report = read_json(out / "validation.json")
    broken = [row for row in report["rows"] if row["role"] == "broken"]
    assert [row["target_epsilon"] for row in broken] == [1, 4, 1, 4] and all(row["flagged"] for row in broken)
    assert {row["canary_design"] for row in report["rows"] if row["pair"] == "dp2-sgd-as-published"} == {
        "projection-aligned"
    }
    for row in report["rows"]:  # flagged means the lower bound exceeds the claim the attack faces
        assert row["flagged"] == (row["lower"] > row["claimed"]) and row["claimed"] == row["target_epsilon"] / 2
    # every audit of a DP-claiming run counts: 4 runs × 2 ε × 2 attacks, none flagged
    assert report["false_alarms"]["audits"] == 16 and report["false_alarms"]["flagged"] == 0
    assert report["false_alarms"]["rate_upper_95"] == pytest.approx(1 - 0.05 ** (1 / 16))  # Clopper–Pearson, k = 0
    claims = read_json(out / "validation.manifest.json")["claims"]
    assert [claim["verdict"] for claim in claims] == ["holds"] * 3 and {c["kind"] for c in claims} == {"check"}
    margin = claims[0]["numbers"]["largest_margin"]["dpsgd-no-noise"]  # how far the best bound clears its claim
    best = max((row for row in broken if row["pair"] == "dpsgd-no-noise"), key=lambda r: r["lower"] - r["claimed"])
    assert margin == {"target_epsilon": best["target_epsilon"], "lower_minus_claimed": best["lower"] - best["claimed"]}
    assert margin["lower_minus_claimed"] > 0 and claims[0]["numbers"]["audits"]["dpsgd-no-noise"] == 2
    table = capsys.readouterr().out
    assert "| dpsgd-no-noise | dpsgd-no-noise | broken | dirac | 1 |" in table
    assert "| dp2-sgd-as-published | dp2-sgd | correct twin | projection-aligned | 4 |" in table


def test_validation_rejects_bad_pairs_in_one_line(tmp_path, capsys):
    files = _validation_run(tmp_path, "dpsgd-gc", 1, True, 0.0)
    for pair, message in (
        ("dpsgd-no-noise", "--pair takes VARIANT=TWIN"),
        ("dpsgd-no-noise=dpsgd-gc", "no canary-attack audit given for: dpsgd-no-noise"),
        ("dpsgd-gc=dpsgd-gc", "dpsgd-gc claims DP"),
    ):
        assert main(["validation", *map(str, files), "--pair", pair, "--out", str(tmp_path / "f")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def _ladder_run(root, section, run, *, optimizer, noise_multiplier, attacks, contribution=None):
    """A run folder (config.json, the target's ledger; the whole-run canaries' sidecar where ``contribution`` is
    given) and its `dpaudit audit` results, made up."""
    from dpaudit.ledger import PrivacyLedger

    source = root / "results" / section / run / "trial_0"
    (source / "target").mkdir(parents=True)
    write_json(source / "config.json", {"config": {"optimizer": optimizer}, "derived": {}})
    if contribution is not None:
        sidecar = {"canaries": 200, "clip_norm": 1.0, "contribution": contribution, "sampling": "poisson"}
        write_json(source / "target" / "canaries_run.json", sidecar)
    ledger = PrivacyLedger()
    for _ in range(20):
        ledger.record(noise_multiplier=noise_multiplier, sample_rate=0.1)
    write_json(source / "target" / "ledger.json", ledger.to_dict())
    files = []
    for attack, lower, extra in attacks:
        report = audit_scores(np.arange(40.0), np.arange(40.0) - 100)  # perfect separation: epsilon_lower > 0
        payload = {"source": str(source), "attack": attack, "report": {**report.to_dict(), "epsilon_lower": lower}}
        path = source.parent / f"audit_{attack}.json"
        write_json(path, {**payload, **extra})
        files.append(path)
    return files


@pytest.mark.integration
def test_the_ladder_puts_every_rung_against_the_epsilon_it_tests(tmp_path, monkeypatch):
    from reproduce.figures import ladder

    monkeypatch.chdir(tmp_path)
    from dpaudit.optim import AdaDPIGUPaper

    monkeypatch.setattr(AdaDPIGUPaper, "fits_dirac_records", False)  # as a plugin no whole-run design fits
    profile = {
        "delta": [1e-5, 1e-2],
        "epsilon_lower": [0.6, 0.9],
        "epsilon_pld": [1.2, 0.95],
        "epsilon_expected": [0.7, 0.9],
    }
    whole = {"family": {"epsilon": 0.8, "capped": False}, "epsilon_last_iterate": 1.1, "profile": profile}
    files = []
    for name in ("dpsgd-gc", "adadpigu"):
        files += _ladder_run(
            tmp_path,
            "audit_cross",
            f"{name}_eps2",
            optimizer=name,
            noise_multiplier=1.0,
            attacks=[("canary", 1.5, {"epsilon_mechanism": 4.0}), ("loss", 0.0, {})],
        )
    files += _ladder_run(
        tmp_path,
        "audit_run",
        "dpsgd-gc_eps2",
        optimizer="dpsgd-gc",
        noise_multiplier=1.0,
        attacks=[("canary-run", 0.5, {"whole_run": whole}), ("canary-final", 0.4, {"whole_run": whole})],
    )
    black_box = tmp_path / "results" / "audit_blackbox" / "dpsgd-gc_eps2" / "blackbox.json"
    black_box.parent.mkdir(parents=True)
    write_json(
        black_box,
        {
            "epsilon_lower": 0.2,
            "epsilon": 2.0,
            "epsilon_gdp": 1.2,
            "gdp_label": "estimate",
            "epsilon_last_iterate": 1.0,
            "epsilon_ceiling": 4.0,
            "trials": 2000,
            "threat_model": "black box",
            "model": "mlp",
        },
    )
    files.append(black_box)
    unfit = {"adadpigu": "in audit.black_box.skip"}  # the pipeline's reason
    rows = {row["name"]: row for row in ladder.ladder_rows(files, canaries=200, delta=1e-5, black_box_unfit=unfit)}
    gc, topk = rows["dpsgd-gc"], rows["adadpigu"]
    # the crafted-canary black-box rung: against its own run's ε, shared per optimizer (none for AdaDPIGU here)
    assert (gc["black_box_lower"], gc["black_box_epsilon"], topk["black_box_lower"]) == (0.2, 2.0, None)
    assert (gc["black_box_model"], ladder._black_box_cell(topk)) == ("mlp", "not run: in audit.black_box.skip")
    assert gc["members"]["dpsgd-gc"]["black_box_over_own"] == 0.1
    assert gc["members"]["dpsgd-gc"]["black_box_over_last_iterate"] == 0.2
    # compared with the run's bounds as a share of its own run's ε: 0.1 of the run's PLD ε
    assert ladder._black_box_best(gc) == pytest.approx(0.1 * gc["epsilon_pld"])
    assert gc["whole_run_unfit"] is None and "no whole-run canary design" in topk["whole_run_unfit"]
    assert (gc["all_iterates_family"], gc["all_iterates_lower"], gc["final_model_lower"]) == (0.8, 0.5, 0.4)
    # the assumption-free headline: the profile's point at the run's δ; its 10⁻² point beside the claim there
    assert (gc["all_iterates_fixed"], gc["all_iterates_expected"], gc["all_iterates_fixed_wide"]) == (0.6, 0.7, 0.9)
    assert gc["epsilon_pld_wide"] == 0.95 and gc["delta_wide"] == 1e-2
    assert gc["per_step_lower"] == 1.5 and gc["epsilon_step"] == 4.0 and gc["epsilon_last_iterate"] == 1.1
    assert topk["all_iterates_family"] is None and topk["family_on_simulation"] is None
    # the claims are those of the ledger: PLD (tight) below RDP; a made-up mechanism of 20 steps at z = 1, q = 0.1
    assert 0 < gc["epsilon_pld"] < gc["epsilon_rdp"] and gc["epsilon_pld"] == topk["epsilon_pld"]
    # 100 canaries per side cannot certify much of the exact mechanism's ε
    assert 0 <= gc["family_on_simulation"] < gc["epsilon_pld"]
    written = ladder.write_ladder(
        files,
        canaries=200,
        delta=1e-5,
        confidence=0.95,
        metrics=tmp_path / "ladder.json",
        markdown=tmp_path / "ladder.md",
        out_dir=tmp_path,
        title="test",
    )
    assert all(path.stat().st_size > 0 for path in written)
    table = (tmp_path / "ladder.md").read_text()
    assert "not fitted: no whole-run canary design for its per-record processing" in table and "1.50 (4.00)" in table
    assert "0.90 (0.95)" in table and (tmp_path / "profile.png").stat().st_size > 0
    assert "| 0.20 (2.00) |" in table and "| 0.10 | 0.20 | 0.60 |" in table
    claims = read_json(tmp_path / "ladder.manifest.json")["claims"]
    assert claims[0]["verdict"] == "holds" and claims[0]["numbers"]["above"] == []
    # the assumption-free bound (0.6, 0.17 of the run's ε) is above the loss attack's (0) and the crafted canary's
    # share (0.1) where whole-run canaries fit; a crafted canary above it would contradict the claim
    assert claims[1]["verdict"] == "holds" and claims[1]["numbers"]["black_box_over_own"] == {"dpsgd-gc at 2": 0.1}


@pytest.mark.integration
def test_the_ladder_draws_optimizers_that_meet_one_mechanism_once(tmp_path, monkeypatch):
    """Whole-run canaries of the same ledger whose contributions c/C are equal to 3 decimals are one measurement:
    one row (the names joined), every optimizer's share in the second table; another c or ledger is its own row."""
    from reproduce.figures import ladder

    monkeypatch.chdir(tmp_path)
    files = []
    for name, contribution, z, family in (
        ("dpsgd-gc", 1.0, 1.0, 0.8),
        ("auto-s", 0.99990, 1.0, 0.8),
        ("dp-psac", 0.9, 1.0, 0.7),
        ("d2p-sgd", 1.0, 1.3, 0.5),
    ):
        whole = {"family": {"epsilon": family, "capped": False}, "epsilon_last_iterate": 1.1}
        for section, attacks in (
            ("audit_cross", [("canary", 1.5, {"epsilon_mechanism": 4.0}), ("loss", 0.0, {})]),
            ("audit_run", [("canary-run", 0.5, {"whole_run": whole})]),
        ):
            files += _ladder_run(
                tmp_path,
                section,
                f"{name}_eps2",
                optimizer=name,
                noise_multiplier=z,
                attacks=attacks,
                contribution=contribution if section == "audit_run" else None,
            )
    rows = {row["name"]: row for row in ladder.ladder_rows(files, canaries=200, delta=1e-5)}
    assert set(rows) == {"auto-s = dpsgd-gc", "dp-psac", "d2p-sgd"}
    shared = rows["auto-s = dpsgd-gc"]
    assert shared["optimizers"] == ["auto-s", "dpsgd-gc"] and shared["family_spread"] == 0.0
    assert shared["members"]["dpsgd-gc"]["family_over_pld"] == pytest.approx(0.8 / shared["epsilon_pld"])
    table = ladder.ladder_markdown(list(rows.values()), confidence=0.95)
    assert "| auto-s = dpsgd-gc | 2 |" in table and "| dpsgd-gc | 2 | auto-s = dpsgd-gc |" in table
