"""dpaudit.plot.plot_whole_run: the two-panel figure of a whole-run canary audit (ROC curves, every ε)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.audit import audit_whole_run
from dpaudit.whole_run import simulate_observations

LEDGER = {"noise_multipliers": np.full(20, 0.8), "sample_rates": np.full(20, 0.2)}


@pytest.fixture(scope="module")
def report():
    """The whole-run audit of 300 member and 300 non-member simulated canaries (T = 20, z = 0.8, q = 0.2)."""
    members, nonmembers = simulate_observations(members=300, nonmembers=300, seed=0, **LEDGER)
    flags = np.arange(600) < 300
    return audit_whole_run(np.concatenate([members, nonmembers]), flags, delta=1e-5, **LEDGER)


def _legend_texts(monkeypatch) -> list[list[str]]:
    """Record the legend entries of each panel of the figures that dpaudit.plot saves from now on."""
    import dpaudit.plot

    found: list[list[str]] = []
    save = dpaudit.plot.save_figure

    def recording(fig, stem):
        found.extend([text.get_text() for text in ax.get_legend().get_texts()] for ax in fig.axes)
        return save(fig, stem)

    monkeypatch.setattr(dpaudit.plot, "save_figure", recording)
    return found


def test_writes_both_files_and_labels_every_epsilon(report, tmp_path, monkeypatch):
    from dpaudit.plot import plot_whole_run

    legends = _legend_texts(monkeypatch)
    paths = plot_whole_run(
        report, stem=tmp_path / "audit", title="simulated run", claimed_epsilon=2.5, claim_label="PRV accountant"
    )
    assert [path.suffix for path in paths] == [".pdf", ".png"]
    assert all(path.is_file() and path.stat().st_size > 0 for path in paths)
    roc, epsilons = legends
    assert len(roc) == 3 and roc[-1] == "chance"  # both statistics' curves and the chance line
    # ledger, claim, and per statistic its ledger test (family bound) and two assumption-free bounds
    assert len(epsilons) == 8
    assert "guarantee if the run is the mechanism its ledger describes" in epsilons[0]
    assert epsilons[1].startswith("PRV accountant ε = 2.50") and "guarantee" in epsilons[1]
    level = f"at {100 * report.confidence:g} %"
    ledger_test = "a test of the ledger's σ, q and T: a lower bound only if the run is a composed subsampled Gaussian"
    assert sum(ledger_test in text for text in epsilons) == 2
    assert sum("assumption-free, Clopper–Pearson; threshold fixed by the ledger" in text for text in epsilons) == 2
    assert sum("assumption-free, Clopper–Pearson; threshold on held-out canaries" in text for text in epsilons) == 2
    assert all(level in text for text in epsilons[2:])
    assert f"{report.all_iterates_profile.headline.epsilon_lower:.2f}" in epsilons[3]
    assert f"{report.all_iterates_family.epsilon:.2f}" in epsilons[2]


def test_without_a_claim_or_the_final_model(tmp_path, monkeypatch):
    from dpaudit.plot import plot_whole_run

    members, nonmembers = simulate_observations(members=200, nonmembers=200, seed=1, **LEDGER)
    statistic = np.concatenate([members, nonmembers]).sum(axis=1)  # Σ_t x_t: the final-model statistic alone
    partial = audit_whole_run(statistics={"final_model": statistic}, members=np.arange(400) < 200, delta=1e-5, **LEDGER)
    legends = _legend_texts(monkeypatch)
    paths = plot_whole_run(partial, stem=tmp_path / "final", title="final model only")
    assert all(path.stat().st_size > 0 for path in paths)
    assert len(legends[0]) == 2 and len(legends[1]) == 4  # one curve and chance; the ledger and three bounds


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (lambda report: {"report": "no"}, "plot_whole_run takes a dpaudit.audit.WholeRunReport, got str"),
        (lambda report: {"report": None}, "got NoneType"),
        (lambda report: {"report": report.all_iterates}, "got AuditReport"),
        (lambda report: {"report": report, "claimed_epsilon": -1.0}, "claimed_epsilon must be a finite number"),
        (lambda report: {"report": report, "claimed_epsilon": float("nan")}, "claimed_epsilon must be a finite"),
        (lambda report: {"report": report, "claimed_epsilon": 1.0, "claim_label": 3}, "claim_label must be a string"),
    ],
    ids=["str", "none", "audit-report", "negative-claim", "nan-claim", "label"],
)
def test_bad_input_raises_one_line_error(report, tmp_path, case, message):
    from dpaudit.plot import plot_whole_run

    arguments = case(report)
    with pytest.raises(DPAuditError, match=message) as error:
        plot_whole_run(arguments.pop("report"), stem=tmp_path / "bad", title="bad", **arguments)
    assert "\n" not in str(error.value)
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_report_of_the_spread_alone_is_refused(tmp_path):
    from dpaudit.plot import plot_whole_run

    rng = np.random.default_rng(2)
    spread = audit_whole_run(
        statistics={"spread": rng.normal(size=100)}, members=np.arange(100) < 50, delta=1e-5, **LEDGER
    )
    assert spread.spread is not None and spread.all_iterates is None and spread.final_model is None
    with pytest.raises(DPAuditError, match="neither the all-iterates nor the final-model statistic"):
        plot_whole_run(spread, stem=tmp_path / "spread", title="spread")
