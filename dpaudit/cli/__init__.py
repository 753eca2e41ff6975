"""The ``dpaudit`` command line: the commands that users, Snakemake rules and DVC stages call.

:mod:`dpaudit.cli.commands` holds the user-facing commands (train, attack, audit, epsilon, calibrate, theory,
list), :mod:`dpaudit.cli.pipeline` those the pipeline runs (batch, figure, manifest, summarize, summarize-run,
audit-table, validation), listed under their own heading in ``dpaudit --help``. ``dpaudit --help`` stays instant:
torch loads only inside the commands that train or attack.
"""

from __future__ import annotations

import argparse
import sys

from dpaudit import __version__
from dpaudit._validation import DPAuditError
from dpaudit.cli import commands, pipeline

__all__ = ["build_parser", "main"]

#: ``dpaudit --help``'s headings and the commands under each, in the order it lists them.
COMMAND_GROUPS = (
    ("commands", ("train", "audit", "attack", "theory", "epsilon", "calibrate", "list")),
    (
        "pipeline commands",
        (
            "summarize-run",
            "audit-table",
            "figure",
            "manifest",
            "summarize",
            "validation",
            "validation-run",
            "ladder",
            "batch",
        ),
    ),
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
        description="Audit and reproduce differentially private training: train target and shadow models "
        "with DP optimizers, attack them, and compare empirical ε̂ with theoretical ε.",
    )
    parser.add_argument("--version", action="version", version=f"dpaudit {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # this order is the order of argparse's "invalid choice" message
    commands.add_train(subcommands)
    commands.add_audit(subcommands)
    pipeline.add_summarize_run(subcommands)
    pipeline.add_audit_table(subcommands)
    commands.add_attack(subcommands)
    commands.add_theory(subcommands)
    commands.add_epsilon(subcommands)
    commands.add_calibrate(subcommands)
    pipeline.add_figure(subcommands)
    pipeline.add_manifest(subcommands)
    pipeline.add_summarize(subcommands)
    pipeline.add_validation(subcommands)
    pipeline.add_validation_run(subcommands)
    pipeline.add_ladder(subcommands)
    pipeline.add_batch(subcommands, parse=parser.parse_args)
    commands.add_list(subcommands)
    _list_commands_by_group(parser, subcommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``dpaudit`` command (``argv``: default ``sys.argv[1:]``); a ``DPAuditError`` is a one-line message and
    exit status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except DPAuditError as error:
        print(f"dpaudit: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpaudit: interrupted", file=sys.stderr)
        return 130
