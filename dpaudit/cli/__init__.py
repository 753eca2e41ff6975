"""The ``dpaudit`` command line: train, audit, blackbox, attack, theory, epsilon, calibrate, list, data.

:mod:`dpaudit.cli.commands` holds the commands. The reproduction's pipeline commands (figure, manifest, batch, …)
are not the library's: they are ``python -m reproduce`` (``workflow/reproduce``, beside the Snakemake rules that run
them). ``dpaudit --help`` stays instant: torch loads only inside the commands that train or attack. Before it builds
its parser, :func:`main` imports the plugins (:mod:`dpaudit.plugins`: the ``dpaudit.plugins`` entry points and each
``--plugin MODULE``), so that their attacks and optimizers are choices like dpaudit's own. Results go to stdout (JSON
with ``--json``), status lines ("wrote …") and errors to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from dpaudit import __version__
from dpaudit._validation import DPAuditError
from dpaudit.cli import commands

__all__ = ["build_parser", "main", "user_error"]

#: ``dpaudit --help``'s headings and the commands under each, in the order it lists them.
COMMAND_GROUPS = (
    ("commands", ("train", "audit", "blackbox", "attack", "theory", "epsilon", "calibrate", "list", "data")),
)


def _list_commands_by_group(parser: argparse.ArgumentParser, subcommands: argparse._SubParsersAction) -> None:
    """List the subcommands in ``parser``'s help under the headings of :data:`COMMAND_GROUPS`.

    argparse lists every subcommand under one "positional arguments" entry and offers no headings, so the
    listing entries move into argument groups (display only: parsing reads ``parser``'s actions, not its groups).
    """
    parser._positionals._group_actions.remove(subcommands)
    entries = {entry.dest: entry for entry in subcommands._choices_actions}
    for title, names in COMMAND_GROUPS:
        parser.add_argument_group(title)._group_actions.extend(entries[name] for name in names)


def build_parser() -> argparse.ArgumentParser:
    """The ``dpaudit`` parser; each parsed command's ``handler(args)`` runs it and returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="dpaudit",
        allow_abbrev=False,  # --plugin is read before parsing (main): no abbreviation may stand for it
        description="Audit and reproduce differentially private training: train target and shadow models "
        "with DP optimizers, attack them, and compare empirical ε̂ with theoretical ε.",
    )
    parser.add_argument("--version", action="version", version=f"dpaudit {__version__}")
    parser.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        help="import this module (a name on sys.path, or a .py file) before the command, for the attacks and "
        "optimizers it registers; repeatable; the installed `dpaudit.plugins` entry points are imported always",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # this order is the order of argparse's "invalid choice" message
    commands.add_train(subcommands)
    commands.add_audit(subcommands)
    commands.add_blackbox(subcommands)
    commands.add_attack(subcommands)
    commands.add_theory(subcommands)
    commands.add_epsilon(subcommands)
    commands.add_calibrate(subcommands)
    commands.add_list(subcommands)
    commands.add_data(subcommands)
    _list_commands_by_group(parser, subcommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``dpaudit`` command (``argv``: default ``sys.argv[1:]``); a ``DPAuditError`` is a one-line message and
    exit status 2.

    The plugins (:func:`dpaudit.plugins.load_plugins`: the installed entry points, then each ``--plugin`` given
    before the command) are imported first, so that the parser offers what they register."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        from dpaudit.plugins import load_plugins

        load_plugins(modules=_plugin_arguments(argv))
    except DPAuditError as error:
        print(f"dpaudit: error: {error}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("dpaudit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (``dpaudit list optim | head``): not an error of the command
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as error:  # noqa: BLE001 - every failure ends in one line; a bug's keeps its traceback
        message = user_error(error)
        if message is None:
            traceback.print_exc()
            print(
                f"dpaudit: internal error ({type(error).__name__}): this is a bug in dpaudit {__version__}, not in "
                "your input; please report it to the dpaudit developers with the traceback above and the command",
                file=sys.stderr,
            )
            return 1
        print(f"dpaudit: error: {message}", file=sys.stderr)
        return 2


def _plugin_arguments(argv: list[str]) -> list[str]:
    """The values of ``--plugin MODULE`` / ``--plugin=MODULE`` before the command (the first argument that is not
    an option), in order; a ``--plugin`` without a value is left to the parser's usage error."""
    found = []
    arguments = iter(argv)
    for argument in arguments:
        if argument == "--plugin":
            value = next(arguments, None)
            if value is not None:
                found.append(value)
        elif argument.startswith("--plugin="):
            found.append(argument.removeprefix("--plugin="))
        elif not argument.startswith("-"):
            break
    return found


# the optional dependencies (pyproject.toml's extras) a command may need beyond the core install
_EXTRA_OF = {name: "train" for name in ("torch", "torchvision", "opacus", "sklearn", "yaml", "tqdm")} | {
    "matplotlib": "plot"
}


def user_error(error: BaseException) -> str | None:
    """The one-line message of a failure the user can cause (bad input, a file, the disk), or None for a bug.

    A ``DPAuditError`` is its message; an OS error names the file and the system's reason (missing, a folder, no
    permission, a full disk); a decoding error says the file is not UTF-8 text; YAML and JSON errors say where the
    text is malformed; a missing optional dependency names the extra that brings it.
    """
    if isinstance(error, DPAuditError):
        return str(error)
    if isinstance(error, ModuleNotFoundError) and error.name is not None:
        package = error.name.split(".")[0]
        if package in _EXTRA_OF:
            extra = _EXTRA_OF[package]
            return f'this command needs {package}, which the core install leaves out: pip install "dpaudit[{extra}]"'
    if isinstance(error, OSError):
        where = " → ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
        reason = error.strerror or str(error) or type(error).__name__
        return f"{where}: {reason}" if where else reason
    if isinstance(error, UnicodeError):
        return f"input is not UTF-8 text ({' '.join(str(error).split())}); save the file as UTF-8"
    if isinstance(error, json.JSONDecodeError):
        return f"malformed JSON: {error.msg} (line {error.lineno}, column {error.colno})"
    if type(error).__module__.split(".")[0] == "yaml":
        return f"malformed YAML: {' '.join(str(error).split())}"
    return None
