"""The dpaudit.estimate package's public surface: ScoreCounts, the threshold-selection objects, the shared
argument checks, and that the audit uses public names only."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from support import ROOT

import dpaudit.estimate as estimate
from dpaudit._validation import (
    DPAuditError,
    check_alpha,
    check_confidence,
    check_count,
    check_counts,
    check_delta,
    check_scores,
    check_seed,
    check_split_sizes,
)
from dpaudit.audit import audit_model, audit_scores
from dpaudit.estimate import (
    SELECTIONS,
    BonferroniSelection,
    GaussianSelection,
    GDPEstimate,
    ScoreCounts,
    SplitSelection,
    ThresholdSelection,
    resolve_selection,
)

#: Every name dpaudit.estimate exported before it became a package.
FORMER_PUBLIC = (
    "EpsilonBound",
    "GDPEstimate",
    "OneRunBound",
    "auc",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "empirical_epsilon",
    "epsilon_ceiling",
    "epsilon_from_counts",
    "epsilon_gdp",
    "epsilon_lower_bound",
    "epsilon_one_run",
    "epsilon_one_run_scores",
    "epsilon_point",
    "error_rates",
    "gdp_delta",
    "gdp_epsilon",
    "one_run_p_value",
    "roc_curve",
    "tpr_at_fpr",
    "GAUSSIAN_SELECTION_FRACTION",
)


def _scores(seed: int = 0, n: int = 200):
    rng = np.random.default_rng(seed)
    return rng.normal(1.0, 1.0, n), rng.normal(0.0, 1.0, n + 17)


def test_every_public_name_is_exported_once():
    assert len(set(estimate.__all__)) == len(estimate.__all__)
    for name in estimate.__all__:
        assert hasattr(estimate, name), name
    assert set(FORMER_PUBLIC) <= set(estimate.__all__) | {"GAUSSIAN_SELECTION_FRACTION"}
    for name in FORMER_PUBLIC:
        assert hasattr(estimate, name), name


def test_score_counts_agree_with_the_functions():
    members, nonmembers = _scores()
    counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
    fpr, tpr, thresholds = estimate.roc_curve(members, nonmembers)
    assert np.array_equal(counts.fpr, fpr) and np.array_equal(counts.tpr, tpr)
    assert np.array_equal(counts.thresholds, thresholds) and counts.thresholds[0] == math.inf
    assert np.all(np.diff(counts.thresholds) < 0)
    assert counts.auc() == estimate.auc(members, nonmembers)
    assert {f: counts.tpr_at(f) for f in (0.001, 0.01, 0.5)} == estimate.tpr_at_fpr(
        members, nonmembers, fprs=(0.001, 0.01, 0.5)
    )
    assert counts.epsilon_point(delta=1e-5) == estimate.epsilon_point(members, nonmembers, delta=1e-5)
    assert np.array_equal(counts.fn, counts.n_members - counts.tp)
    assert np.array_equal(counts.fnr, counts.fn / counts.n_members)
    assert (counts.n_members, counts.n_nonmembers) == (members.size, nonmembers.size)
    assert counts.tp[-1] == members.size and counts.fp[-1] == nonmembers.size


def test_score_counts_are_read_only_and_checked():
    counts = ScoreCounts.from_scores(member_scores=[1.0, 2.0, 2.0], nonmember_scores=[0.0, 2.0])
    assert counts.thresholds.tolist() == [math.inf, 2.0, 1.0, 0.0]
    assert counts.tp.tolist() == [0, 2, 3, 3] and counts.fp.tolist() == [0, 1, 1, 2]
    with pytest.raises(ValueError):
        counts.tp[0] = 5
    with pytest.raises(DPAuditError, match="nonmember_scores is empty"):
        ScoreCounts.from_scores(member_scores=[1.0], nonmember_scores=[])
    with pytest.raises(DPAuditError, match=r"fpr must be a number in \[0, 1\], got 1.5"):
        counts.tpr_at(1.5)
    with pytest.raises(DPAuditError, match=r"delta must lie in \[0, 1\), got 1"):
        counts.epsilon_point(delta=1)


def test_selection_registry_and_objects():
    assert list(SELECTIONS) == ["split", "gaussian", "bonferroni"]
    for name, selection in SELECTIONS.items():
        assert isinstance(selection, ThresholdSelection) and selection.name == name
        assert resolve_selection(name) is selection
        assert resolve_selection(selection) is selection
    assert SplitSelection() == SELECTIONS["split"]
    assert SplitSelection().holds_out and GaussianSelection().holds_out and not BonferroniSelection().holds_out
    assert SplitSelection().method == "Clopper-Pearson, threshold chosen on a held-out half"
    assert GaussianSelection().fraction == estimate.GAUSSIAN_SELECTION_FRACTION
    assert [SplitSelection().certifying_size(n) for n in (2, 5, 10)] == [1, 3, 5]
    assert [GaussianSelection().certifying_size(n) for n in (2, 5, 10)] == [1, 4, 8]
    assert BonferroniSelection().certifying_size(7) == 7
    assert SplitSelection().side_alphas(0.1) == (0.05, 0.05)
    assert BonferroniSelection().side_alphas(0.1, n_members=5, n_nonmembers=10) == (0.1 / 20, 0.1 / 10)


def test_bad_selection_names_read_as_before():
    members, nonmembers = _scores()
    message = "unknown selection 'nope'; choose from: bonferroni, gaussian, split"
    with pytest.raises(DPAuditError, match=message):
        estimate.epsilon_lower_bound(members, nonmembers, delta=1e-5, selection="nope")
    with pytest.raises(DPAuditError, match=message):
        estimate.epsilon_ceiling(n_members=5, n_nonmembers=5, delta=1e-5, selection="nope")
    with pytest.raises(DPAuditError, match="unknown selection 'bonferroni'; choose from: gaussian, split"):
        audit_scores(members, nonmembers, selection="bonferroni")
    with pytest.raises(DPAuditError, match="unknown selection 'bonferroni'; choose from: gaussian, split"):
        audit_scores(members, nonmembers, selection=BonferroniSelection())
    with pytest.raises(DPAuditError, match="unknown selection 'x'; choose from: gaussian, split"):
        audit_model(None, None, None, selection="x")


@pytest.mark.parametrize("name", ["split", "gaussian", "bonferroni"])
def test_objects_and_names_give_the_same_results(name):
    members, nonmembers = _scores(3)
    by_name = estimate.epsilon_lower_bound(members, nonmembers, delta=1e-5, selection=name, seed=4)
    by_object = estimate.epsilon_lower_bound(members, nonmembers, delta=1e-5, selection=SELECTIONS[name], seed=4)
    assert by_name == by_object and by_name.selection == name
    sizes = dict(n_members=members.size, n_nonmembers=nonmembers.size, delta=1e-5)
    assert estimate.epsilon_ceiling(**sizes, selection=name) == estimate.epsilon_ceiling(
        **sizes, selection=SELECTIONS[name]
    )
    if name != "bonferroni":
        report = audit_scores(members, nonmembers, selection=SELECTIONS[name], seed=4)
        assert report.selection == name
        assert report.to_dict() == audit_scores(members, nonmembers, selection=name, seed=4).to_dict()


def test_from_counts_match_the_score_functions():
    members, nonmembers = _scores(5)
    counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
    assert GDPEstimate.from_counts(counts, delta=1e-5, confidence=0.9) == estimate.epsilon_gdp(
        members, nonmembers, delta=1e-5, confidence=0.9
    )
    alpha = check_confidence(0.9)
    assert BonferroniSelection().lower_bound_from_counts(
        counts, delta=1e-5, alpha=alpha
    ) == estimate.epsilon_lower_bound(members, nonmembers, delta=1e-5, confidence=0.9, selection="bonferroni")


def test_shared_checks_keep_their_messages():
    cases = [
        (lambda: check_delta(1.0), r"delta must lie in \[0, 1\), got 1.0"),
        (lambda: check_delta(0, allow_zero=False), r"delta must lie in \(0, 1\), got 0"),
        (lambda: check_delta(True), "delta must be a number, got True"),
        (lambda: check_delta(-1), "delta must be finite and ≥ 0, got -1"),
        (lambda: check_confidence(1), r"confidence must lie in \(0, 1\), got 1"),
        (lambda: check_confidence(True), "confidence must be a number, got True"),
        (lambda: check_alpha(0.0), r"alpha must lie in \(0, 1\), got 0.0"),
        (lambda: check_seed(-1), "seed must be an integer ≥ 0, got -1"),
        (lambda: check_count("canaries", 0, allow_zero=False), "canaries must be an integer > 0, got 0"),
        (lambda: check_counts(11, 10), r"k must lie in \[0, n\], got k=11, n=10"),
        (lambda: check_scores("scores", [[1.0]]), r"scores must be a 1-D array, got shape \(1, 1\)"),
        (lambda: check_scores("scores", [np.nan]), r"scores has 1 non-finite value\(s\)"),
        (
            lambda: check_split_sizes(np.zeros(1), np.zeros(3)),
            "a split selection needs at least 2 member and 2 non-member scores, got 1 and 3",
        ),
    ]
    for call, message in cases:
        with pytest.raises(DPAuditError, match=message):
            call()
    assert check_confidence(0.75) == 0.25 and check_seed(np.int64(3)) == 3 and check_delta(0) == 0.0


def test_theory_checks_delta_as_everything_else_does():
    """One check of δ ∈ (0, 1), one wording: the bounds' conversions use check_delta(allow_zero=False)."""
    from dpaudit.theory.dpsgd_dc import dp_from_linear_rdp, rdp_to_dp

    for delta, message in ((0, r"delta must lie in \(0, 1\), got 0"), (1, r"delta must lie in \(0, 1\), got 1")):
        with pytest.raises(DPAuditError, match=message):
            rdp_to_dp(epsilon_rdp=1.0, alpha=2.0, delta=delta)
        with pytest.raises(DPAuditError, match=message):
            dp_from_linear_rdp(slope=0.01, delta=delta)
    with pytest.raises(DPAuditError, match="delta must be a number, got False"):
        rdp_to_dp(epsilon_rdp=1.0, alpha=2.0, delta=False)
    with pytest.raises(DPAuditError, match="delta must be finite and ≥ 0, got -0.5"):
        rdp_to_dp(epsilon_rdp=1.0, alpha=2.0, delta=-0.5)


def test_each_checker_name_has_one_meaning():
    """``check_alpha`` checks a significance level α ∈ (0, 1); a Rényi order α > 1 is ``check_order``."""
    from dpaudit import _validation
    from dpaudit.theory import _params

    assert _params.check_order(1.5) == 1.5 and not hasattr(_params, "check_alpha")
    with pytest.raises(DPAuditError, match=r"alpha must be finite and > 1 \(Rényi order\), got 0.5"):
        _params.check_order(0.5)
    assert _validation.check_alpha(0.05) == 0.05 and not hasattr(_validation, "check_order")


def _private_estimate_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpaudit.estimate"):
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_"):
            if node.value.id in ("estimate", "_est") and not node.attr.startswith("__"):
                found.append(f"{node.value.id}.{node.attr}")
    return found


def test_nothing_outside_the_package_reaches_into_its_private_names():
    paths = [
        path
        for folder in ("dpaudit", "tests", "benchmarks", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.relative_to(ROOT).parts[:2] != ("dpaudit", "estimate")
    ]
    offenders = {str(path.relative_to(ROOT)): found for path in paths if (found := _private_estimate_imports(path))}
    assert offenders == {}
