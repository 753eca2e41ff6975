"""The ``dpaudit`` parser: the library's commands under their heading (the pipeline's are ``python -m reproduce``'s),
every command parsed."""

from __future__ import annotations

import pytest

from dpaudit.cli import COMMAND_GROUPS, build_parser


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current.append(line.split()[0])
    return sections


def test_help_lists_the_library_commands_and_no_pipeline_command():
    parser = build_parser()
    sections = _sections(parser.format_help())
    assert sections["commands"] == ["train", "audit", "attack", "theory", "epsilon", "calibrate", "list"]
    assert "pipeline commands" not in sections
    commands = next(action for action in parser._actions if action.dest == "command").choices
    assert sorted(name for _, names in COMMAND_GROUPS for name in names) == sorted(commands)


@pytest.mark.parametrize("name", [name for _, names in COMMAND_GROUPS for name in names])
def test_every_command_has_its_handler(name):
    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    assert callable(commands[name].get_default("handler"))
