"""``python -m reproduce``: the pipeline commands apart from the library's, their handlers, and ``batch``, which runs
library commands in one process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import TRAIN_ARGS, comparable, with_workflow_path

from dpaudit.cli import build_parser as library_parser
from reproduce.cli import build_parser, main

PIPELINE_COMMANDS = [
    "summarize-run",
    "audit-table",
    "figure",
    "manifest",
    "summarize",
    "validation",
    "validation-run",
    "ladder",
    "batch",
    "list",
]


def _commands(parser) -> dict:
    return next(action for action in parser._actions if action.dest == "command").choices


def test_the_pipeline_commands_are_reproduce_s_and_not_the_library_s():
    assert list(_commands(build_parser())) == PIPELINE_COMMANDS
    library = _commands(library_parser())
    assert [name for name in PIPELINE_COMMANDS if name in library] == ["list"]  # dpaudit list: datasets, bounds, …


@pytest.mark.parametrize("name", PIPELINE_COMMANDS)
def test_every_pipeline_command_has_its_handler(name):
    assert callable(_commands(build_parser())[name].get_default("handler"))


def test_python_m_reproduce_runs_with_workflow_on_the_path():
    env = with_workflow_path(dict(os.environ))
    done = subprocess.run(
        [sys.executable, "-m", "reproduce", "list"], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("dpsgd_dc/figure1 ") and "torch" not in done.stderr
    argv = [sys.executable, "-m", "reproduce", "figure", "nothing/here", "--out", "x"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("reproduce: error: unknown figure 'nothing/here'")


def test_batch_checks_every_command_before_running_one(capsys):
    assert main(["batch", "list datasets", "list nothing"]) == 2
    captured = capsys.readouterr()
    assert "batch command 2 has bad arguments (above): 'list nothing'" in captured.err
    assert captured.out == ""
    assert main(["batch", "--quiet", "list bounds", "list optim"]) == 0


def test_batch_runs_commands_in_one_process_exactly_as_separate_ones(tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    command = " ".join(TRAIN_ARGS[1:])
    assert (
        main(
            [
                "batch",
                "--quiet",
                f"train {command} --out {one}",
                f"attack --run {one} --attack-epochs 5 --quiet",
                f"train {command} --seed 7 --out {two}",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == ""
    assert (one / "attack.json").is_file()
    # the second run, trained after another in the same process, equals the run trained alone in a fresh process
    alone = tmp_path / "alone"
    subprocess.run(
        [sys.executable, "-m", "dpaudit.cli", *TRAIN_ARGS, "--seed", "7", "--out", str(alone)],
        check=True,
        capture_output=True,
    )
    files = sorted(path.relative_to(alone) for path in alone.rglob("*") if path.is_file())
    assert any(path.suffix == ".pt" for path in files)
    for path in files:  # wall-clock times differ (metrics.json, and the manifest's hashes of it), nothing else
        assert comparable(path, (two / path).read_bytes()) == comparable(path, (alone / path).read_bytes()), path


def test_batch_checks_every_command_before_running_and_names_the_one_that_fails(tmp_path, capsys):
    run = tmp_path / "run"
    command = " ".join(TRAIN_ARGS[1:])
    assert main(["batch", f"train {command} --out {run}", "train --epochs 2"]) == 2  # --out missing
    assert "batch command 2 has bad arguments" in capsys.readouterr().err and not run.exists()
    assert main(["batch", f"train {command} --out {run}", f"attack --run {tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("reproduce: error: batch command 2 of 2 (dpaudit attack") and "missing" in err
    assert (run / "config.json").is_file()  # what finished before the failure stays
