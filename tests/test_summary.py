"""One run's summary (dpaudit.summary.summarize_run, ``dpaudit train --summarize``): theory per epoch, the loss
attack per checkpoint and the canary audits, on tiny real runs."""

import json
import math

import numpy as np
import pytest
import torch

from dpaudit._validation import DPAuditError
from dpaudit.cli import main
from dpaudit.summary import SUMMARY_FILE, summarize_run


@pytest.fixture(scope="session")  # session: built at most once per xdist worker
def trained_run(tmp_path_factory):
    """A tiny real run with canaries, trained and summarised through the command line."""
    out = tmp_path_factory.mktemp("run")
    assert (
        main(
            [
                "train",
                "--quiet",
                "--summarize",
                "--out",
                str(out),
                "--optimizer",
                "dpsgd-gc",
                "--dataset",
                "digits",
                "--model",
                "cnn-digits",
                "--batch-size",
                "20",
                "--epochs",
                "3",
                "--eval-epochs",
                "2,3",
                "--clip-norm",
                "1",
                "--lr",
                "0.2",
                "--target-epsilon",
                "4",
                "--target-size",
                "60",
                "--num-shadows",
                "0",
                "--canaries",
                "20",
                "--no-diagnostics",
            ]
        )
        == 0
    )
    return out


def test_summary_holds_theory_per_epoch_and_both_audits(trained_run):
    summary = json.loads((trained_run / SUMMARY_FILE).read_text())
    epsilon = summary["epsilon"]
    assert len(epsilon) == 3 and epsilon[0] < epsilon[1] < epsilon[2]
    assert epsilon[-1] == pytest.approx(summary["planned_epsilon"], rel=1e-9) and epsilon[-1] <= 4 + 1e-9
    assert set(summary["loss"]) == {"2", "3"}
    for report in [*summary["loss"].values(), summary["canary"]]:
        assert 0 <= report["epsilon_lower"] <= report["epsilon_ceiling"]
        assert report["n_members"] > 0 and 0 <= report["auc"] <= 1
    for report in summary["loss"].values():  # the point estimate's null level, stored beside it
        most = math.log(max(report["n_members"], report["n_nonmembers"]))
        assert 0 <= report["epsilon_point_null"] <= most and "permutations" in report["epsilon_point_null_method"]
    assert summary["canary"]["n_members"] + summary["canary"]["n_nonmembers"] == 20 * summary["steps"][-1]
    assert len(summary["train_accuracy"]) == len(summary["elapsed_seconds"]) == 3
    assert summary["elapsed_seconds"] == sorted(summary["elapsed_seconds"])


def test_summarize_run_refuses_canary_audit_without_canaries(tmp_path):
    assert (
        main(
            [
                "train",
                "--quiet",
                "--out",
                str(tmp_path),
                "--optimizer",
                "sgd",
                "--dataset",
                "digits",
                "--model",
                "cnn-digits",
                "--batch-size",
                "20",
                "--epochs",
                "1",
                "--lr",
                "0.1",
                "--target-size",
                "40",
                "--num-shadows",
                "0",
                "--no-diagnostics",
            ]
        )
        == 0
    )
    with pytest.raises(DPAuditError, match="has no canaries"):
        summarize_run(tmp_path)
    returned = summarize_run(tmp_path, attacks=("loss",))
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert summary["epsilon"] == returned["epsilon"] and summary["loss"].keys() == returned["loss"].keys() == {"1"}
    assert summary["epsilon"] == [None] and summary["dp_claim"] is False  # non-private: no finite ε


def test_a_whole_run_design_is_summarised_with_its_family_bound_against_the_ledgers_claim(tmp_path):
    flags = ["--optimizer", "dp-psac", "--r", "0.1", "--dataset", "digits", "--model", "cnn-digits"]
    flags += ["--batch-size", "20", "--epochs", "2", "--clip-norm", "1", "--lr", "0.2", "--target-epsilon", "4"]
    flags += ["--target-size", "60", "--num-shadows", "0", "--no-diagnostics"]
    whole_run = ["--canaries", "2000", "--canary-design", "whole-run"]
    assert main(["train", "--quiet", "--summarize", "--out", str(tmp_path), *flags, *whole_run]) == 0
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    audit = summary["canary-run"]
    assert "canary" not in summary and audit["n_members"] + audit["n_nonmembers"] == 2000
    # a lower bound under the family assumption: positive here (ε = 4, 1000 canaries per side), at most the PLD ε the
    # ledger claims, which is at most its RDP ε (the run's planned ε)
    assert 0 < audit["family_epsilon"] <= audit["epsilon_pld"] <= audit["epsilon_rdp"]
    assert audit["epsilon_rdp"] == pytest.approx(summary["planned_epsilon"], rel=1e-6)
    assert 0 <= audit["epsilon_lower"] <= audit["family_epsilon"] and not audit["family_capped"]
    assert "composed Poisson-subsampled Gaussian" in audit["family_label"]


def test_gradient_alignment_with_unit_weights_is_exactly_the_batch_gradient(trained_run):
    from dpaudit.diagnostics import gradient_alignment

    result = gradient_alignment(trained_run, batches=3, weights={"one": torch.ones_like})
    assert result["epochs"] == [2, 3]
    assert np.allclose(result["weighted"]["one"], 1.0)
    cosine = np.asarray(result["cosine"])
    assert len(cosine) == 2 * 3 * 20 and np.all(np.abs(cosine) <= 1 + 1e-12)
    assert np.all(np.asarray(result["norms"]) > 0)


def test_summary_of_a_shuffled_run_gives_a_valid_upper_bound_beside_the_poisson_figure(tmp_path, capsys):
    from scipy.stats import norm

    out = tmp_path / "shuffled"
    argv = ["train", "--optimizer", "dpsgd-gc", "--dataset", "digits", "--model", "mlp", "--batch-size", "20"]
    argv += ["--epochs", "2", "--eval-epochs", "2", "--clip-norm", "1", "--lr", "0.2", "--sigma-dp", "0.05"]
    argv += ["--target-size", "60", "--num-shadows", "0", "--sampling", "shuffle", "--no-diagnostics", "--quiet"]
    assert main(argv + ["--out", str(out), "--summarize"]) == 0
    printed = capsys.readouterr().out
    assert "Poisson-sampling ε, not a guarantee for shuffled batches =" in printed
    assert "upper bound for shuffled batches: each epoch one unsubsampled Gaussian step per record: ε =" in printed
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["sampling"] == "shuffle" and "not a guarantee" in summary["epsilon_label"]
    # z = σ_DP·b/C = 1: two epochs are two Gaussian steps of sensitivity 1, μ = √2 (Balle & Wang 2018)
    mu, eps = math.sqrt(2), summary["epsilon_shuffled_upper"][-1]
    assert norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) == pytest.approx(1e-5, rel=1e-4)
    config = json.loads((out / "config.json").read_text())
    assert config["derived"]["planned_epsilon_shuffled_upper"] == pytest.approx(eps, rel=1e-9)
    assert config["derived"]["planned_epsilon_shuffled_upper_label"] == summary["epsilon_shuffled_upper_label"]
