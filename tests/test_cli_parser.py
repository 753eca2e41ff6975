"""The ``dpaudit`` parser: user and pipeline commands under their own headings, every command still parsed."""

from __future__ import annotations

import pytest

from dpaudit.cli import COMMAND_GROUPS, build_parser, main


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current.append(line.split()[0])
    return sections


def test_help_lists_user_and_pipeline_commands_under_their_headings():
    parser = build_parser()
    sections = _sections(parser.format_help())
    assert sections["commands"] == ["train", "audit", "attack", "theory", "epsilon", "calibrate", "list"]
    assert sections["pipeline commands"] == [
        "summarize-run",
        "audit-table",
        "figure",
        "manifest",
        "summarize",
        "validation",
        "validation-run",
        "ladder",
        "batch",
    ]
    commands = next(action for action in parser._actions if action.dest == "command").choices
    assert sorted(name for _, names in COMMAND_GROUPS for name in names) == sorted(commands)


@pytest.mark.parametrize("name", [name for _, names in COMMAND_GROUPS for name in names])
def test_every_command_has_its_handler(name):
    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    assert callable(commands[name].get_default("handler"))


def test_batch_checks_every_command_before_running_one(capsys):
    assert main(["batch", "list datasets", "list nothing"]) == 2
    captured = capsys.readouterr()
    assert "batch command 2 has bad arguments (above): 'list nothing'" in captured.err
    assert captured.out == ""
    assert main(["batch", "--quiet", "list bounds", "list optim"]) == 0
