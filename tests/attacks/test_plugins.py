"""Plugins: an attack and an optimizer registered outside dpaudit reach `dpaudit audit` and `dpaudit train`.

The attack is the recipe of docs/development.md ("How to add an attack"), run as written there; the optimizer comes
from an installed distribution's ``dpaudit.plugins`` entry point, made in a temporary folder.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from support import ROOT

import dpaudit.attacks
import dpaudit.plugins
from dpaudit._io import read_json
from dpaudit._validation import DPAuditError
from dpaudit.cli import main
from dpaudit.rundir import RunDir

DEVELOPMENT = ROOT / "docs" / "development.md"
PLUGIN_MODULES = ("my_optimizers_plugin",)  # the plugin modules the tests import by name (files: dpaudit_plugin_*)


@pytest.fixture
def isolated_registries():
    """Whatever a test's plugins register, and the modules they load, are gone after it."""
    from dpaudit.optim import base

    attacks, optimizers = dict(dpaudit.attacks._ATTACKS), dict(base._REGISTRY._entries)
    loaded = set(dpaudit.plugins._loaded)
    yield
    dpaudit.attacks._ATTACKS.clear()
    dpaudit.attacks._ATTACKS.update(attacks)
    base._REGISTRY._entries.clear()
    base._REGISTRY._entries.update(optimizers)
    for name in [name for name in sys.modules if name.startswith("dpaudit_plugin_") or name in PLUGIN_MODULES]:
        del sys.modules[name]
    dpaudit.plugins._loaded.clear()
    dpaudit.plugins._loaded.update(loaded)


def _recipe(tmp_path: Path) -> Path:
    """The attack module of docs/development.md's recipe, written to ``tmp_path/my_attack.py``."""
    section = DEVELOPMENT.read_text(encoding="utf-8").split("## How to add an attack\n", 1)[1].split("\n## ", 1)[0]
    # a fragment for tests/test_snippets.py (compiled, not run there: it would register the attack for good)
    code = re.search(r"<!-- fragment -->\n```python\n(.*?)```", section, re.DOTALL)
    assert code, "docs/development.md lost its attack recipe (the python block of 'How to add an attack')"
    path = tmp_path / "my_attack.py"
    path.write_text(code.group(1), encoding="utf-8")
    return path


def _auc(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """P(member score > non-member score) + ½ P(tie), over every pair (Mann–Whitney)."""
    difference = members[:, None] - nonmembers[None, :]
    return float(np.mean(difference > 0) + 0.5 * np.mean(difference == 0))


def test_the_documented_attack_plugin_reaches_dpaudit_audit(trained_run, tmp_path, capsys, isolated_registries):
    plugin = _recipe(tmp_path)
    out = tmp_path / "audit"
    command = ["audit", "--run", str(trained_run), "--attack", "margin", "--out-dir", str(out), "--no-plot"]
    with pytest.raises(SystemExit) as refused:  # without the plugin: not a choice
        main(command)
    assert refused.value.code == 2 and "invalid choice: 'margin'" in capsys.readouterr().err

    assert main(["--plugin", str(plugin), "list", "attacks"]) == 0
    assert re.search(r"^margin +true-class logit minus the largest other logit", capsys.readouterr().out, re.M)
    assert main(["--plugin", str(plugin), *command, "--json", "--delta", "1e-4"]) == 0
    captured = capsys.readouterr()
    [payload] = json.loads(captured.out)
    assert captured.err.strip() == f"wrote {out / 'audit_margin.json'}"
    assert read_json(out / "audit_margin.json") == payload

    # the CLI audited the plugin's own scores of the last checkpoint ...
    config = read_json(RunDir(trained_run).config)
    scores = dpaudit.attacks.get_attack("margin").scores(trained_run, epoch=4, delta=1e-4)
    assert payload["attack"] == "margin" and payload["epoch"] == 4
    assert payload["epsilon_run"] == config["derived"]["planned_epsilon"] == scores.epsilon_run
    assert payload["report"]["auc"] == pytest.approx(_auc(scores.members, scores.nonmembers), abs=1e-12)
    # ... which are margins: positive exactly where the model is right, so on the non-members (the held-out records
    # the engine evaluates at each epoch end) their share is the test accuracy training recorded
    metrics = read_json(RunDir(trained_run).target.metrics)
    accuracy = metrics["test_accuracy"][metrics["epoch"].index(4)]
    assert np.mean(scores.nonmembers > 0) == pytest.approx(accuracy, abs=1e-6)
    assert scores.members.size == scores.nonmembers.size == 200

    # its model scorer makes it an attack of dpaudit.audit_model too, with the same numbers as the run's audit
    from dpaudit.audit import audit_model
    from dpaudit.data import load_dataset
    from dpaudit.run import open_run

    run_config, split, load, _ = open_run(trained_run, epoch=4)
    train = load_dataset(run_config.data.dataset, split="train", root=run_config.data.data_root)
    held_out = load_dataset(run_config.data.dataset, split=split.nonmember_source, root=run_config.data.data_root)
    report = audit_model(
        load("target"), train.subset(split.target_members), held_out.subset(split.target_nonmembers), attack="margin"
    )
    assert report.auc == payload["report"]["auc"]


def test_a_plugin_registering_a_taken_name_or_failing_is_one_line(tmp_path, capsys, isolated_registries):
    twice = tmp_path / "twice.py"
    twice.write_text(
        "from dpaudit.attacks import AttackScores, register_attack\n"
        "register_attack(name='loss', description='again', scorer=lambda run, *, epoch, delta: None)\n"
    )
    optimizer = tmp_path / "optimizer_twice.py"
    optimizer.write_text(
        "from dpaudit.optim import DPSGD, register\n"
        "register('dpsgd-gc', dp_claim=True, description='again')(type('Again', (DPSGD,), {}))\n"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\nundefined_name\n")
    cases = [
        (["--plugin", str(twice)], f"plugin '{twice}': attack 'loss' is already registered"),
        (["--plugin", str(optimizer)], f"plugin '{optimizer}': optimizer 'dpsgd-gc' is already registered; choose"),
        (["--plugin", str(broken)], f"plugin '{broken}' failed to import: NameError: name 'undefined_name' is not "),
        (["--plugin", str(tmp_path / "absent.py")], f"plugin '{tmp_path / 'absent.py'}': no such file"),
        (["--plugin=no_such_plugin_module"], "plugin 'no_such_plugin_module': no such module on sys.path"),
    ]
    for options, message in cases:
        assert main([*options, "list", "attacks"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dpaudit: error: {message}") and err.count("\n") == 1, err
    assert f"({broken}, line 2)" in (main(["--plugin", str(broken), "list", "attacks"]), capsys.readouterr().err)[1]
    assert list(dpaudit.attacks.ATTACKS)[-1] == "canary-spread"  # nothing half-registered


def _installed_distribution(root: Path, *, module: str, code: str | None) -> None:
    """A distribution installed in ``root`` (a folder on sys.path) whose ``dpaudit.plugins`` entry point is
    ``module``, as pip would leave it: the module (None: none, a broken install) and its .dist-info."""
    if code is not None:
        (root / f"{module}.py").write_text(code)
    info = root / "my_optimizers-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-optimizers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[dpaudit.plugins]\nmy_optimizers = {module}\n")


def test_a_broken_installed_plugin_is_one_line(tmp_path, monkeypatch, capsys, isolated_registries):
    _installed_distribution(tmp_path, module="my_missing_plugin", code=None)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["list", "attacks"]) == 2
    assert capsys.readouterr().err == (
        "dpaudit: error: plugin 'my_optimizers' (entry point 'my_missing_plugin' of my-optimizers): no such module on "
        "sys.path (give a module name that Python can import, or the path of a .py file)\n"
    )


TRAIN = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "cnn-digits",
    "--sigma-dp",
    "0.002",
    "--clip-norm",
    "20",
    "--batch-size",
    "50",
    "--lr",
    "0.1",
    "--epochs",
    "2",
    "--sampling",
    "shuffle",
    "--num-shadows",
    "1",
    "--target-size",
    "100",
    "--quiet",
]


def test_an_installed_optimizer_plugin_reaches_dpaudit_train(tmp_path, monkeypatch, capsys, isolated_registries):
    site = tmp_path / "site"
    site.mkdir()
    _installed_distribution(
        site,
        module="my_optimizers_plugin",
        code="from dpaudit.optim import DPSGD, register\n\n\n"
        "@register('my-dpsgd', dp_claim=True, description='DP-SGD, registered by a package of its own')\n"
        "class MyDPSGD(DPSGD):\n    pass\n",
    )
    monkeypatch.syspath_prepend(str(site))
    assert main(["list", "optim", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed["my-dpsgd"] == {
        "name": "my-dpsgd",
        "description": "DP-SGD, registered by a package of its own",
        "dp_claim": True,
    }
    # a subclass that changes nothing trains exactly as the optimizer it derives from
    assert main([*TRAIN, "--optimizer", "my-dpsgd", "--out", str(tmp_path / "mine")]) == 0
    assert main([*TRAIN, "--optimizer", "dpsgd-gc", "--out", str(tmp_path / "theirs")]) == 0
    mine, theirs = (read_json(RunDir(tmp_path / name).config) for name in ("mine", "theirs"))
    assert mine["config"]["optimizer"] == "my-dpsgd" and theirs["config"]["optimizer"] == "dpsgd-gc"
    assert mine["derived"] == theirs["derived"]
    for name in ("target", "shadow_00"):
        mine_metrics, their_metrics = (
            read_json(RunDir(tmp_path / run).model(name).metrics) for run in ("mine", "theirs")
        )
        for key in ("train_loss", "test_loss", "test_accuracy"):
            assert mine_metrics[key] == their_metrics[key]


def test_plugins_load_once_and_not_on_import(tmp_path, isolated_registries):
    import subprocess

    code = "import sys, dpaudit, dpaudit.attacks, dpaudit.optim; assert 'dpaudit.plugins' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    imports = tmp_path / "imports.txt"
    counter = tmp_path / "counted.py"
    counter.write_text(f"with open({str(imports)!r}, 'a') as log:\n    log.write('imported\\n')\n")
    assert dpaudit.plugins.load_plugins(modules=[str(counter)], entry_points=False) == [str(counter)]
    assert dpaudit.plugins.load_plugins(modules=[str(counter)], entry_points=False) == []
    assert imports.read_text() == "imported\n"
    with pytest.raises(DPAuditError, match="--plugin needs a module name or a .py file"):
        dpaudit.plugins.load_plugins(modules=[""], entry_points=False)


def test_the_plugin_option_is_read_before_the_command_only():
    from dpaudit.cli import _plugin_arguments

    assert _plugin_arguments(["--plugin", "a", "--plugin=b.py", "audit", "--plugin", "c"]) == ["a", "b.py"]
    assert _plugin_arguments(["list", "attacks"]) == [] and _plugin_arguments(["--plugin"]) == []
