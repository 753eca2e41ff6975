"""Figures 2–4 from run folders: claims are computed from the data and can fail."""

import math

import numpy as np
import pytest

from dpaudit._io import write_json
from dpaudit._validation import DPAuditError
from reproduce.figures import FIGURES
from reproduce.results import load_run, mean_and_band

EPOCHS = [10, 20, 30]


def _fake_run(
    root, name, *, batch_size, epsilon_hat, loss_scale, domain_radius=None, n=120, epochs=30, trial=0, at=EPOCHS
):
    run = root / name
    config = {
        "seed": 0,
        "trial": trial,
        "dataset": "digits",
        "model": "cnn-digits",
        "batch_size": batch_size,
        "target_size": n,
        "clip_norm": 20.0,
        "sigma_dp": 0.002,
        "lr": 0.1,
        "domain_radius": domain_radius,
    }
    write_json(run / "config.json", {"config": config})
    write_json(run / "attack.json", {"results": [{"epoch": e, "epsilon_hat": v} for e, v in zip(at, epsilon_hat)]})
    loss = list(loss_scale * 2.3 * np.exp(-np.arange(epochs) / 10) + 0.01)
    write_json(run / "target" / "metrics.json", {"train_loss": loss})
    steps = math.ceil(n / batch_size)
    write_json(run / "target" / "ledger.json", {"epoch_ends": [steps * (e + 1) for e in range(epochs)]})
    return run


def _gc_runs(root, *, ordered):
    runs = []
    for trial in range(2):
        jitter = 0.01 * trial
        small = [0.3 + jitter, 0.6, 0.9]
        large = [0.1 + jitter, 0.2, 0.3] if ordered else [0.5, 0.8, 1.0]
        runs.append(_fake_run(root, f"b10_t{trial}", batch_size=10, epsilon_hat=small, loss_scale=1.0, trial=trial))
        runs.append(_fake_run(root, f"b40_t{trial}", batch_size=40, epsilon_hat=large, loss_scale=1.5, trial=trial))
    return runs


@pytest.mark.integration
def test_figure2_claims_hold_and_fail_with_the_data(tmp_path):
    good = FIGURES["dpsgd_dc/figure2"](out_dir=tmp_path / "good", runs=_gc_runs(tmp_path / "g", ordered=True))
    assert [c["verdict"] for c in good["claims"][:3]] == ["holds", "holds", "holds"]
    assert good["claims"][0]["numbers"]["mean_epsilon_hat"][0] == pytest.approx([0.305, 0.105])
    bad = FIGURES["dpsgd_dc/figure2"](out_dir=tmp_path / "bad", runs=_gc_runs(tmp_path / "b", ordered=False))
    assert bad["claims"][0]["verdict"] == "contradicted" and bad["claims"][0]["numbers"]["epochs_where_ordered"] == 0
    # theory: Theorem 3.3 per epoch ∝ 1/b², so the normalised b = 40 curve ends at (10/40)² = 1/16
    normalised = good["claims"][2]["numbers"]["normalised_at_last_epoch"]
    assert normalised == pytest.approx({"10": 1.0, "40": 1 / 16})
    assert (tmp_path / "good" / "figure2.png").stat().st_size > 1000
    # beside it, the exact accountant (both adjacency directions, additive over identical steps) at each run's T:
    # b = 10 on n = 120 takes 12 steps an epoch, 360 in 30 epochs; b = 40 takes 3, 90 in all
    from dpaudit import theory

    def one_step(b):
        return theory.one_step_check(alpha=1.1, C=20.0, sigma=0.002, n=120, b=b).exact

    assert good["exact_accountant_at_last_epoch"] == pytest.approx(
        {"b=10": 360 * one_step(10), "b=40": 90 * one_step(40)}
    )
    assert "both adjacency directions" in good["exact_accountant"]


@pytest.mark.integration
def test_figure2_pairs_the_trials_that_share_members_and_seeds(tmp_path):
    """Each trial shifts both batch sizes alike (its members and seeds), b = 10 lies 0.10 ± 0.02 above b = 40: paired
    by trial the difference is decided (t_2 interval 0.10 ± 4.30 · 0.0115); compared as independent samples
    (another set of trials for b = 40) the shared shift of ±0.4 swamps it."""

    def runs(root, large_trials):
        made = []
        for trial, base, gap in zip(range(3), (0.1, 0.5, 0.9), (0.10, 0.12, 0.08)):
            made.append(
                _fake_run(
                    root, f"b10_t{trial}", batch_size=10, epsilon_hat=[base + gap] * 3, loss_scale=1.0, trial=trial
                )
            )
        for trial, base in zip(large_trials, (0.1, 0.5, 0.9)):
            made.append(
                _fake_run(root, f"b40_t{trial}", batch_size=40, epsilon_hat=[base] * 3, loss_scale=1.5, trial=trial)
            )
        return made

    paired = FIGURES["dpsgd_dc/figure2"](out_dir=tmp_path / "p", runs=runs(tmp_path / "p", [0, 1, 2]))["claims"][0]
    assert paired["verdict"] == "holds"
    numbers = paired["numbers"]["comparisons"]["b=10 vs b=40"]
    assert numbers["paired"] and numbers["difference"] == pytest.approx(0.10)
    assert numbers["standard_error"] == pytest.approx(0.02 / math.sqrt(3))
    # t_2's 97.5 % quantile is 4.303: the interval the verdict rests on
    assert numbers["interval_95"] == pytest.approx(
        [0.10 - 4.3027 * 0.02 / math.sqrt(3), 0.10 + 4.3027 * 0.02 / math.sqrt(3)], rel=1e-4
    )
    unpaired = FIGURES["dpsgd_dc/figure2"](out_dir=tmp_path / "u", runs=runs(tmp_path / "u", [3, 4, 5]))["claims"][0]
    assert unpaired["verdict"] == "inconclusive"
    assert not unpaired["numbers"]["comparisons"]["b=10 vs b=40"]["paired"]


def test_figure4_loss_ordering(tmp_path):
    entry = FIGURES["dpsgd_dc/figure4"](out_dir=tmp_path, runs=_gc_runs(tmp_path / "g", ordered=True))
    assert [c["verdict"] for c in entry["claims"]] == ["holds", "holds"]


@pytest.mark.integration
def test_figure3_claims(tmp_path):
    runs = []
    for trial in range(2):
        for b, offset in ((10, 0.5), (40, 0.0)):
            for d, scale in ((1.0, 1.0), (2.0, 1.5)):
                values = [offset + scale * v for v in (0.2, 0.35, 0.4)]  # concave: stabilises
                runs.append(
                    _fake_run(
                        tmp_path / "r",
                        f"b{b}_D{d}_t{trial}",
                        batch_size=b,
                        epsilon_hat=values,
                        loss_scale=1.0,
                        domain_radius=d,
                        trial=trial,
                    )
                )
    entry = FIGURES["dpsgd_dc/figure3"](out_dir=tmp_path / "fig", runs=runs)
    verdicts = [c["verdict"] for c in entry["claims"]]
    assert verdicts[:3] == ["holds", "holds", "holds"]
    assert [c["kind"] for c in entry["claims"][:5]] == ["paper", "paper", "paper", "paper", "check"]
    control = entry["claims"][3]  # no DPSGD-GC runs among these: the control cannot be tested
    assert control["claim"].startswith("The levelling off is the domain constraint's") and control["verdict"] == (
        "inconclusive"
    )
    assert set(entry["exact_accountant_at_last_epoch"]) == {"b=10", "b=40"}  # one curve per b: it ignores D
    assert (tmp_path / "fig" / "figure3.pdf").is_file()


def test_figure3_stabilisation_splits_at_the_middle_epoch(tmp_path):
    """On evaluated epochs even in log E, ε̂ growing in proportion to E does not stabilise: from epoch 1 to 46 (the
    evaluated epoch nearest (1 + 120) / 2) it grows by 0.45, from 46 to 120 by 0.74. Split at the middle *index*
    (epoch 18) the same data would compare 0.17 with 1.02."""
    at = [1, 3, 7, 18, 46, 120]
    runs = [
        _fake_run(
            tmp_path / "r",
            f"b{b}_D{d}_t{trial}",
            batch_size=b,
            epsilon_hat=[0.01 * e + 0.01 * trial * (e == 46) for e in at],
            loss_scale=1.0,
            domain_radius=d,
            epochs=120,
            trial=trial,
            at=at,
        )
        for trial in range(3)
        for b in (10, 40)
        for d in (1.0, 2.0)
    ]
    entry = FIGURES["dpsgd_dc/figure3"](out_dir=tmp_path / "fig", runs=runs)
    stabilises = entry["claims"][2]
    assert stabilises["verdict"] == "contradicted"
    assert stabilises["numbers"]["halves_epochs"] == [1, 46, 120]
    assert stabilises["numbers"]["growth_first_half_second_half"]["b=10, R=1"] == pytest.approx([0.46, 0.73])
    assert "from epoch 1 to 46" in stabilises["test"]
    assert (tmp_path / "fig" / "figure3.png").stat().st_size > 1000  # the log epoch axis and its dodged bars draw


def test_incomplete_run_is_one_line_error(tmp_path):
    run = _fake_run(tmp_path, "r", batch_size=10, epsilon_hat=[0.1, 0.2, 0.3], loss_scale=1.0)
    (run / "attack.json").unlink()
    with pytest.raises(DPAuditError, match="missing attack.json"):
        load_run(run)


def test_mean_and_band_drops_infinite_values_and_counts_them():
    values = np.array([[0.1, math.inf], [0.3, 0.5], [0.2, 0.7]])
    mean, low, high, dropped = mean_and_band(values)
    assert mean == pytest.approx([0.2, 0.6]) and dropped == 1
    assert low[0] == pytest.approx(np.percentile([0.1, 0.3, 0.2], 2.5))


def test_figure_command_checks_runs_argument(tmp_path, capsys):
    from reproduce.cli import main

    assert main(["figure", "dpsgd_dc/figure2", "--out", str(tmp_path)]) == 2
    assert "needs --runs" in capsys.readouterr().err
    assert main(["figure", "dpsgd_dc/figure1", "--out", str(tmp_path), "--runs", str(tmp_path)]) == 2


def _write_scores(run, *, members, nonmembers):
    """Per-record shadow-attack scores at every epoch of EPOCHS, as ``dpaudit attack`` writes them."""
    for epoch in EPOCHS:
        rows = [f"{i},1,{i % 10},{s}" for i, s in enumerate(members)]
        rows += [f"{len(members) + i},0,{i % 10},{s}" for i, s in enumerate(nonmembers)]
        (run / f"scores_epoch_{epoch:04d}.csv").write_text("record,is_member,class,score\n" + "\n".join(rows) + "\n")


def test_figure2_lower_bound_reaches_the_ceiling_only_for_a_perfect_attack(tmp_path):
    from dpaudit.estimate import epsilon_ceiling

    runs = _gc_runs(tmp_path / "g", ordered=True)
    for run in runs:  # b = 10 perfectly separated, b = 40 no signal at all (every score equal)
        perfect = run.name.startswith("b10")
        _write_scores(
            run, members=[0.9] * 40 if perfect else [0.5] * 40, nonmembers=[0.1] * 40 if perfect else [0.5] * 40
        )
    power = FIGURES["dpsgd_dc/figure2"](out_dir=tmp_path / "fig", runs=runs)["attack_power"]
    # two trials pooled: 80 members and 80 non-members; perfect separation certifies exactly the ceiling
    ceiling = epsilon_ceiling(n_members=80, n_nonmembers=80, delta=1e-5)
    assert power["ceiling"] == pytest.approx(ceiling)
    assert power["lower_bound"]["10"] == pytest.approx([ceiling] * 3)
    assert power["lower_bound"]["40"] == [0.0, 0.0, 0.0]
    assert power["checkpoints"] == 6 and power["fraction_lower_bound_positive"] == pytest.approx(0.5)


def test_figure2_attack_power_unavailable_without_scores(tmp_path):
    entry = FIGURES["dpsgd_dc/figure2"](out_dir=tmp_path / "fig", runs=_gc_runs(tmp_path / "g", ordered=True))
    assert entry["attack_power"]["available"] is False
