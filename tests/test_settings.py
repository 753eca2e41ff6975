"""Each optimizer setting is declared once (dpaudit.settings) and held by one explicit field; the config, the CLI and
the schema follow it."""

from __future__ import annotations

import ast
from dataclasses import Field, fields
from pathlib import Path

import pytest
import yaml
from support import ROOT

from dpaudit._validation import DPAuditError
from dpaudit.config import GROUPS, OptimizerConfig, PrivacyConfig, TrainConfig
from dpaudit.settings import FAMILIES, SETTINGS, Setting, own_fields, schema_fragment

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


def _holders() -> dict[str, list[tuple[type, Field]]]:
    """Setting name → the (class, field) pairs that declare a field holding it."""
    holders: dict[str, list[tuple[type, Field]]] = {}
    for cls in (*GROUPS.values(), TrainConfig, *FAMILIES):
        for item in own_fields(cls):
            if "setting" in item.metadata:
                holders.setdefault(item.metadata["setting"].name, []).append((cls, item))
    return holders


def test_every_setting_is_held_by_one_field_that_takes_its_declaration():
    holders = _holders()
    assert sorted(holders) == sorted(SETTINGS)
    for name, found in holders.items():
        assert len(found) == 1, f"{name} is declared by {[cls.__name__ for cls, _ in found]}"
        (_, item), setting = found[0], SETTINGS[name]
        assert item.name == name and item.metadata["setting"] is setting and item.default == setting.default
    # the groups: lr and momentum with the optimizer, the mechanism's settings with privacy
    assert holders["lr"][0][0] is OptimizerConfig and holders["momentum"][0][0] is OptimizerConfig
    privacy = {name for name, ((cls, _),) in holders.items() if cls is PrivacyConfig}
    assert privacy == {"clip_norm", "sigma_dp", "noise_multiplier", "target_epsilon", "delta", "accountant"}


def _class_body_fields(path: Path) -> dict[str, list[str]]:
    """Class name → the names its body annotates, read from the source (what a type checker sees)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name: [item.target.id for item in node.body if isinstance(item, ast.AnnAssign)]
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def test_no_field_is_generated_at_runtime():
    import dpaudit.config
    import dpaudit.settings
    from dpaudit.optim import Hyperparameters
    from dpaudit.optim import base as optim_base

    written = {
        **_class_body_fields(Path(dpaudit.config.__file__)),
        **_class_body_fields(Path(dpaudit.settings.__file__)),
        **_class_body_fields(Path(optim_base.__file__)),
    }
    for cls in (*GROUPS.values(), TrainConfig, *FAMILIES, Hyperparameters):
        assert [item.name for item in own_fields(cls)] == written[cls.__name__], cls.__name__
    assert [item.name for item in fields(Hyperparameters)] == [
        "lr",
        "expected_batch_size",
        "dataset_size",
        "epochs",
        "momentum",
        "clip_norm",
        "sigma_dp",
        "settings",
    ]


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
    assert Setting("x", 0.5, "x.", range="from-zero-unit").schema() == {
        "type": "number",
        "minimum": 0,
        "exclusiveMaximum": 1,
    }
    assert Setting("x", "a", "x.", choices=("a", "b")).schema() == {"enum": ["a", "b"]}
    with pytest.raises(ValueError, match="unknown range"):
        Setting("x", 0.5, "x.", range="percent")


def test_train_config_rejects_a_bad_setting_through_its_declaration():
    with pytest.raises(DPAuditError, match=r"warmup_budget_fraction \(ε1/ε\) must be in \(0, 1\)"):
        TrainConfig.from_dict(
            dict(optimizer="tp-topk", warmup_budget_fraction=1.0, clip_norm=1.0, sigma_dp=0.1)
        ).validated()


def test_train_flags_carry_each_settings_help():
    from dpaudit.cli import build_parser

    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    helps = {action.dest: action.help for action in commands["train"]._actions}
    for name, setting in SETTINGS.items():
        assert helps[name].startswith(setting.help), name
