"""The attack registry: one declaration per attack, read by the command line, the run summaries and the schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from support import ROOT

from dpaudit._validation import DPAuditError
from dpaudit.attacks import ATTACKS, Attack, AttackScores, get_attack, read_scores_csv, register_attack
from dpaudit.cli import build_parser

SCHEMA = ROOT / "workflow" / "schemas" / "params.schema.yaml"


def _audit_schema() -> dict:
    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))["properties"]["audit"]["properties"]


def test_the_schema_lists_the_registered_attacks():
    audit = _audit_schema()
    assert audit["attacks"]["items"]["enum"] == list(ATTACKS)
    targets_only = [name for name, attack in ATTACKS.items() if not attack.needs_shadows]
    assert audit["cross_optimizer"]["properties"]["attacks"]["items"]["enum"] == targets_only
    assert audit["validation"]["properties"]["attack"]["enum"] == targets_only


def test_the_command_line_offers_the_registered_attacks():
    from reproduce.cli import build_parser as reproduce_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command").choices
    pipeline = next(action for action in reproduce_parser()._actions if action.dest == "command").choices
    for command, flag in ((commands["audit"], "--attack"), (pipeline["validation"], "--attack")):
        action = next(a for a in command._actions if flag in a.option_strings)
        assert list(action.choices) == list(ATTACKS)
    description = commands["audit"].description
    assert all(name in description for name in ATTACKS)
    assert all(attack.needs in description for attack in ATTACKS.values() if attack.needs)


def test_specs_are_consistent():
    for name, attack in ATTACKS.items():
        assert attack.name == name and attack.description
        assert attack.claim in ("run", "mechanism")
        assert attack.claim_key in ("epsilon_run", "epsilon_mechanism")
    assert [name for name, attack in ATTACKS.items() if attack.whole_run] == [
        "canary",
        "canary-run",
        "canary-final",
        "canary-spread",
    ]
    assert [name for name, attack in ATTACKS.items() if attack.whole_run and attack.claim == "run"] == [
        "canary-run",
        "canary-final",
        "canary-spread",
    ]
    assert ATTACKS["canary"].claim_key == "epsilon_mechanism" and ATTACKS["loss"].claim_key == "epsilon_run"
    # the statistic a family bound reads: Λ of every iterate, the final model; none for the spread over the steps
    assert {name: attack.family_statistic for name, attack in ATTACKS.items() if attack.family_statistic} == {
        "canary-run": "all-iterates",
        "canary-final": "final-model",
    }
    assert [name for name, attack in ATTACKS.items() if attack.model_scorer is not None] == ["loss", "confidence"]
    with pytest.raises(
        DPAuditError, match="unknown attack 'lira'; choose from: canary, canary-final, canary-run, canary-spread"
    ):
        get_attack("lira")


@pytest.mark.integration
def test_importing_the_registry_loads_no_torch():
    code = (
        "import sys, dpaudit.attacks, dpaudit.summary;"
        "assert 'torch' not in sys.modules, 'torch imported';"
        "from dpaudit.attacks import ShadowAttackConfig;"
        "assert 'torch' in sys.modules and ShadowAttackConfig().epochs == 50"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _run_folder(path: Path, planned_epsilon: float | None = 2.5) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"derived": {"planned_epsilon": planned_epsilon}}))
    return path


def test_shadow_scores_come_from_the_attack_csv(tmp_path):
    run = _run_folder(tmp_path / "run")
    with pytest.raises(DPAuditError, match=r"no shadow-attack scores at .*scores_epoch_0003.csv; run `dpaudit attack"):
        ATTACKS["shadow"].scores(run, epoch=3, delta=1e-5)
    (run / "scores_epoch_0003.csv").write_text("record,is_member,class,score\n0,1,2,0.9\n1,0,2,0.25\n2,1,0,0.5\n")
    found = ATTACKS["shadow"].scores(run, epoch=3, delta=1e-5)
    np.testing.assert_array_equal(found.members, [0.9, 0.5])
    np.testing.assert_array_equal(found.nonmembers, [0.25])
    assert found.epsilon_run == 2.5 and found.selection is None and found.epsilon_mechanism is None
    members, nonmembers = read_scores_csv(run / "scores_epoch_0003.csv")
    np.testing.assert_array_equal(members, found.members)


def test_canary_scores_carry_the_mechanism_claim(tmp_path):
    from dpaudit.attacks.canary import CanaryObservations

    run = _run_folder(tmp_path / "run", planned_epsilon=None)
    with pytest.raises(DPAuditError, match="no canary observations at .*canaries.npz"):
        ATTACKS["canary"].scores(run, epoch=None, delta=1e-5)
    rng = np.random.default_rng(0)
    observed = CanaryObservations(
        bits=rng.integers(0, 2, size=(6, 4)).astype(np.uint8),
        observations=rng.normal(size=(6, 4)),
        noise_multipliers=np.array([2.0, 1.0, 1.0, 1.5, 1.0, 3.0]),
        clip_norm=1.0,
    )
    (run / "target").mkdir()
    observed.save(run / "target" / "canaries.npz")
    found = ATTACKS["canary"].scores(run, epoch=None, delta=1e-5)
    members, nonmembers = observed.scores()
    np.testing.assert_array_equal(found.members, members)
    np.testing.assert_array_equal(found.nonmembers, nonmembers)
    assert found.selection == "gaussian" and found.epsilon_run is None
    assert found.epsilon_mechanism == observed.mechanism_epsilon(delta=1e-5)
    assert found.audited_steps == 3 and found.mechanism.startswith("one Gaussian step")


def test_the_family_statistics_are_those_of_the_family_bound():
    from dpaudit.attacks import FAMILY_STATISTICS
    from dpaudit.whole_run import STATISTICS

    assert FAMILY_STATISTICS == STATISTICS


def _constant(run_dir, *, epoch, delta):
    return AttackScores(members=np.ones(4), nonmembers=np.zeros(4))


@pytest.fixture
def restored_attacks():
    import dpaudit.attacks

    before = dict(dpaudit.attacks._ATTACKS)
    yield
    dpaudit.attacks._ATTACKS.clear()
    dpaudit.attacks._ATTACKS.update(before)


def test_register_attack_adds_a_checked_record(tmp_path, restored_attacks):
    attack = register_attack(name="always-one", description="members score 1, the rest 0", scorer=_constant)
    assert ATTACKS["always-one"] is attack and list(ATTACKS)[-1] == "always-one"
    assert attack == Attack("always-one", "members score 1, the rest 0", _constant)
    found = attack.scores(_run_folder(tmp_path / "run", planned_epsilon=1.5), epoch=2, delta=1e-5)
    assert found.epsilon_run == 1.5 and found.members.tolist() == [1, 1, 1, 1]
    with pytest.raises(TypeError):  # keyword-only
        register_attack("positional", "no", _constant)
    with pytest.raises(TypeError):
        ATTACKS["x"] = attack  # read-only: registration goes through register_attack


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": "loss"}, "attack 'loss' is already registered (dpaudit.attacks.ATTACKS); choose another name"),
        ({"name": "scores"}, "attack name 'scores' is reserved"),
        ({"name": "My_Attack"}, "attack name 'My_Attack' must be lowercase letters, digits and single hyphens"),
        ({"name": "a--b"}, "attack name 'a--b' must be lowercase letters"),
        ({"description": "two\nlines"}, "attack 'mine': description must be one non-empty line of text"),
        ({"description": " "}, "attack 'mine': description must be one non-empty line of text"),
        ({"needs": ""}, "attack 'mine': needs must be one non-empty line of text"),
        ({"scorer": "loss"}, "attack 'mine': scorer must be a function, got 'loss'"),
        ({"model_scorer": 3}, "attack 'mine': model_scorer must be a function, got 3"),
        ({"whole_run": 1}, "attack 'mine': whole_run must be True or False, got 1"),
        ({"claim": "epsilon"}, "unknown claim of attack 'mine' 'epsilon'; choose from: mechanism, run"),
        ({"family_statistic": "final-model"}, "attack 'mine': a family_statistic needs whole_run=True"),
        ({"family_statistic": "spread", "whole_run": True}, "unknown family_statistic of attack 'mine' 'spread'"),
    ],
)
def test_register_attack_refuses_a_bad_record_in_one_line(change, message, restored_attacks):
    fields = {"name": "mine", "description": "a test attack", "scorer": _constant, **change}
    with pytest.raises(DPAuditError) as error:
        register_attack(**fields)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert list(ATTACKS)[-1] == "canary-spread"


def test_a_scorer_that_returns_no_attack_scores_is_named(tmp_path, restored_attacks):
    register_attack(name="sloppy", description="returns a tuple", scorer=lambda run, *, epoch, delta: ([1.0], [0.0]))
    with pytest.raises(DPAuditError, match="the scorer of attack 'sloppy' returned tuple, not dpaudit.attacks.Attack"):
        ATTACKS["sloppy"].scores(_run_folder(tmp_path / "run"), epoch=1, delta=1e-5)
