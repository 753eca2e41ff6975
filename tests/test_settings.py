"""Each optimizer setting is declared once (dpaudit.settings); the config, the CLI and the schema follow it."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.settings import SETTINGS, Setting, schema_fragment

ROOT = Path(__file__).resolve().parents[1]
# keys of a paper experiment's run that are not optimizer settings: the run's structure
RUN_STRUCTURE_KEYS = {
    "optimizer",
    "sampling",
    "canary_design",
    "batch_size",
    "canaries",
    "trials",
    "epochs",
    "eval_epochs",
    "dataset",
    "model",
    "target_size",
}


def _schema_defs() -> dict:
    return yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())["$defs"]


def test_schema_optimizer_settings_follow_the_declarations():
    expected = schema_fragment()["optimizer_settings"]
    declared = {
        name: constraint
        for name, constraint in _schema_defs()["optimizer_settings"]["properties"].items()
        if name not in {"name", "optimizer", "sampling", "canary_design"}
    }
    paste = yaml.safe_dump(expected, sort_keys=False, default_flow_style=None, allow_unicode=True)
    assert declared == expected, (
        f"$defs.optimizer_settings.properties should hold (besides name, optimizer, sampling, canary_design):\n{paste}"
    )


def test_schema_paper_run_keys_follow_the_declarations():
    keys = set(_schema_defs()["paper_run_keys"]["enum"])
    settings = set(schema_fragment()["paper_run_keys"])
    assert keys - RUN_STRUCTURE_KEYS == settings, f"paper_run_keys should be {sorted(settings | RUN_STRUCTURE_KEYS)}"


def test_train_config_has_every_setting_in_declaration_order_after_batch_size():
    names = [item.name for item in fields(TrainConfig)]
    start = names.index("batch_size") + 1
    assert names[start : start + len(SETTINGS)] == list(SETTINGS)
    for item in fields(TrainConfig):
        if item.name in SETTINGS:
            assert item.default == SETTINGS[item.name].default
            assert item.metadata["setting"] is SETTINGS[item.name]


def test_hyperparameters_have_exactly_the_optimizer_settings():
    from dpaudit.optim import Hyperparameters

    have = {item.name for item in fields(Hyperparameters)}
    wanted = {name for name, setting in SETTINGS.items() if setting.hyperparameter}
    assert wanted <= have
    assert not (have - wanted) & set(SETTINGS), "a setting not marked hyperparameter reached Hyperparameters"


@pytest.mark.parametrize(
    ("name", "good", "bad", "message"),
    [
        ("momentum", 0.0, 1.0, "momentum must be in [0, 1); got 1.0"),
        ("momentum", 0.9, -0.1, "momentum must be finite and ≥ 0, got -0.1"),
        ("warmup_fraction", 0.5, 0.0, "warmup_fraction (E1/E) must be in (0, 1); got 0.0"),
        ("active_ratio", 1.0, 1.5, "active_ratio (ρ) must be in (0, 1]; got 1.5"),
        ("gamma", 1e-9, 0.0, "gamma (γ) must be finite and > 0, got 0.0"),
        ("noise_decay_unit", "step", "day", "unknown noise_decay_unit 'day'; choose from: epoch, step"),
    ],
)
def test_setting_checks_accept_their_interval_and_name_the_setting(name, good, bad, message):
    assert SETTINGS[name].check(good) == good
    with pytest.raises(DPAuditError) as caught:
        SETTINGS[name].check(bad)
    assert str(caught.value) == message


def test_schema_constraints_match_the_intervals():
    assert Setting("x", "float", 0.5, "x.", range="from-zero-unit").schema() == {
        "type": "number",
        "minimum": 0,
        "exclusiveMaximum": 1,
    }
    assert Setting("x", "str", "a", "x.", choices=("a", "b")).schema() == {"enum": ["a", "b"]}
    with pytest.raises(ValueError, match="unknown range"):
        Setting("x", "float", 0.5, "x.", range="percent")


def test_train_config_rejects_a_bad_setting_through_its_declaration():
    with pytest.raises(DPAuditError, match=r"warmup_budget_fraction \(ε1/ε\) must be in \(0, 1\)"):
        TrainConfig(optimizer="tp-topk", warmup_budget_fraction=1.0, clip_norm=1.0, sigma_dp=0.1).validated()


def test_train_flags_carry_each_settings_help():
    from dpaudit.cli import build_parser

    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    helps = {action.dest: action.help for action in commands["train"]._actions}
    for name, setting in SETTINGS.items():
        assert helps[name].startswith(setting.help), name
