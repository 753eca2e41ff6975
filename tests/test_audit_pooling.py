"""dpaudit.audit.pool_attack_scores: one attack's scores pooled over independent trials, with what the runs claim;
runs of another draw or (whole-run canaries) another ledger refused. Attacks and run configurations are stand-ins, so
that every number pooled is known."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import dpaudit.attacks
import dpaudit.run
from dpaudit._validation import DPAuditError
from dpaudit.attacks import Attack, AttackScores
from dpaudit.audit import PooledScores, pool_attack_scores, same_ledger


@dataclass
class _Audit:
    eval_epochs: tuple[int, ...] = (2, 5)


@dataclass
class _Config:
    """What pool_attack_scores reads of a run's TrainConfig: its identity, seed, trial and checkpoint epochs."""

    seed: int
    trial: int
    audit: _Audit = field(default_factory=_Audit)

    def to_dict(self):
        return {"seed": self.seed, "trial": self.trial}


def _runs(tmp_path: Path, count: int, planned=(1.5, 2.5, 3.5)) -> list[Path]:
    runs = []
    for index in range(count):
        run = tmp_path / f"trial_{index}"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"derived": {"planned_epsilon": planned[index]}}))
        runs.append(run)
    return runs


def _use(monkeypatch, attack: Attack, configs: dict[str, _Config]) -> None:
    monkeypatch.setattr(dpaudit.attacks, "get_attack", lambda name: attack if name == attack.name else None)
    monkeypatch.setattr(dpaudit.run, "load_run_config", lambda run: configs[Path(run).name])


def test_checkpoint_scores_are_concatenated_in_run_order_at_each_runs_last_epoch(tmp_path, monkeypatch):
    seen = []

    def scorer(run, *, epoch, delta):
        seen.append((run.name, epoch, delta))
        index = int(run.name[-1])
        return AttackScores(np.array([10.0 * index, 10.0 * index + 1]), np.array([-1.0 * index]))

    _use(monkeypatch, Attack("stand-in", "d", scorer), {f"trial_{i}": _Config(seed=0, trial=i) for i in range(3)})
    pooled = pool_attack_scores(runs=_runs(tmp_path, 3), attack="stand-in", delta=1e-3)
    assert isinstance(pooled, PooledScores)
    np.testing.assert_array_equal(pooled.members, [0.0, 1.0, 10.0, 11.0, 20.0, 21.0])
    np.testing.assert_array_equal(pooled.nonmembers, [-0.0, -1.0, -2.0])
    assert seen == [("trial_0", 5, 1e-3), ("trial_1", 5, 1e-3), ("trial_2", 5, 1e-3)]  # max(eval_epochs)
    # the claim is the last run's planned ε; no mechanism, selection or ledger for a checkpoint attack
    assert (pooled.epoch, pooled.epsilon_run) == (5, 3.5)
    assert pooled.epsilon_mechanism is pooled.mechanism is pooled.selection is pooled.ledger is None
    seen.clear()
    assert pool_attack_scores(runs=_runs(tmp_path / "b", 2), attack="stand-in", epoch=2, delta=1e-3).epoch == 2
    assert [epoch for _, epoch, _ in seen] == [2, 2]


def test_whole_run_scores_pool_the_largest_mechanism_epsilon_over_one_ledger(tmp_path, monkeypatch):
    ledger = {"noise_multipliers": np.array([1.0, 1.0]), "noise_std": np.array([1.0, 1.0]), "sample_rates": [0.1, 0.1]}
    mechanisms = {"trial_0": 0.7, "trial_1": 1.9, "trial_2": 1.2}

    def scorer(run, *, epoch, delta):
        assert epoch is None
        return AttackScores(
            np.array([1.0]),
            np.array([0.0]),
            selection="gaussian" if run.name == "trial_1" else None,
            epsilon_mechanism=mechanisms[run.name],
            mechanism=f"steps of {run.name}",
            ledger={key: np.asarray(value) for key, value in ledger.items()},
        )

    attack = Attack("whole", "d", scorer, whole_run=True)
    _use(monkeypatch, attack, {f"trial_{i}": _Config(seed=i, trial=0) for i in range(3)})
    pooled = pool_attack_scores(runs=_runs(tmp_path, 3), attack="whole", epoch=4, delta=1e-5)
    assert pooled.epoch is None and pooled.members.size == pooled.nonmembers.size == 3
    assert (pooled.epsilon_mechanism, pooled.mechanism, pooled.selection) == (1.9, "steps of trial_2", "gaussian")
    assert same_ledger(first=pooled.ledger, second={key: np.asarray(value) for key, value in ledger.items()})


def test_runs_of_another_ledger_or_the_same_draws_are_refused(tmp_path, monkeypatch):
    def scorer(run, *, epoch, delta):
        z = 1.0 if run.name == "trial_0" else 2.0
        ledger = {"noise_multipliers": np.array([z]), "noise_std": np.array([z]), "sample_rates": np.array([0.1])}
        return AttackScores(np.array([1.0]), np.array([0.0]), ledger=ledger)

    attack = Attack("whole", "d", scorer, whole_run=True)
    runs = _runs(tmp_path, 2)
    _use(monkeypatch, attack, {"trial_0": _Config(seed=0, trial=0), "trial_1": _Config(seed=1, trial=0)})
    with pytest.raises(DPAuditError, match=r"the whole audit pools runs of one ledger \(z_t, q_t\); .*trial_1 has"):
        pool_attack_scores(runs=runs, attack="whole", delta=1e-5)
    with pytest.raises(DPAuditError, match="is named twice"):
        pool_attack_scores(runs=[runs[0], runs[0]], attack="whole", delta=1e-5)
    _use(monkeypatch, attack, {"trial_0": _Config(seed=0, trial=0), "trial_1": _Config(seed=0, trial=0)})
    with pytest.raises(DPAuditError, match="same seed and trial"):
        pool_attack_scores(runs=runs, attack="whole", delta=1e-5)
    with pytest.raises(DPAuditError, match="at least one run"):
        pool_attack_scores(runs=[], attack="whole", delta=1e-5)


def test_same_ledger_compares_every_array_entry_by_entry():
    first = {"noise_multipliers": np.array([1.0, 2.0]), "sample_rates": np.array([0.1, 0.1])}
    assert same_ledger(first=first, second={key: value.copy() for key, value in first.items()})
    assert not same_ledger(first=first, second={**first, "sample_rates": np.array([0.1, 0.2])})
    assert not same_ledger(first=first, second={"noise_multipliers": first["noise_multipliers"]})
    with pytest.raises(TypeError):
        pool_attack_scores([Path(".")], "loss", delta=1e-5)  # type: ignore[misc]
