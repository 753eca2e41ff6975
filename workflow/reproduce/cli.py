"""``python -m reproduce``: the pipeline commands, which the Snakemake rules and DVC stages run: figure, manifest,
summarize, summarize-run, audit-table, validation, validation-run, ladder, batch.

They draw the paper figures and tables, settle the claims and collect the pipeline's metrics from runs that the
library's commands (``dpaudit train``, ``dpaudit attack``, ``dpaudit audit``, ``dpaudit epsilon``) made; ``batch``
runs several of those library commands in one process.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import shlex
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

from dpaudit import __version__
from dpaudit._validation import DPAuditError
from dpaudit.attacks import ATTACKS
from dpaudit.cli import user_error

__all__ = ["build_parser", "claims_markdown", "main", "verdict_counts"]

PROG = "python -m reproduce"


def _cmd_figure(args: argparse.Namespace) -> int:
    from dpaudit._io import write_json
    from dpaudit._validation import check_choice
    from reproduce.figures import FIGURES
    from reproduce.figures._paper import PAPERS, attach_quotes

    check_choice("figure", args.name, FIGURES)
    draw = FIGURES[args.name]
    wants_runs = "runs" in inspect.signature(draw).parameters
    if wants_runs != bool(args.runs):
        raise DPAuditError(f"figure {args.name} {'needs' if wants_runs else 'takes no'} --runs")
    options = {"runs": args.runs, "alpha": args.alpha, "L": args.L} if wants_runs else {}
    if "preset" in inspect.signature(draw).parameters:
        options["preset"] = args.preset
    entry = draw(out_dir=args.out, **options)
    entry["name"] = args.name
    if args.name.split("/")[0] in (*PAPERS, "dpsgd_dc"):  # a paper's figure: its claims in the paper's own words
        attach_quotes(entry, name=args.name)
    write_json(args.out / f"{args.name.split('/')[-1]}.manifest.json", entry)
    for claim in entry["claims"]:
        print(f"[{claim['verdict']}{' (check)' if claim['kind'] == 'check' else ''}] {claim['claim']}")
    print("wrote " + ", ".join(entry["files"]))
    return 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    from dpaudit._io import atomic_write_bytes, read_json, write_json
    from reproduce.figures._paper import PAPERS, SKIPPED, settle_by_measured_spread

    read = sorted(((read_json(path), path) for path in args.entries), key=lambda item: item[0]["name"])
    entries = [entry for entry, _ in read]
    before = [[claim["verdict"] for claim in entry["claims"]] for entry in entries]
    settle_by_measured_spread(entries)  # the spread is measured across figures: settled here, once all are read
    for (entry, path), verdicts in zip(read, before):  # the figure's own manifest says what the merged one says
        if [claim["verdict"] for claim in entry["claims"]] != verdicts:
            write_json(path, entry)
    skipped = SKIPPED + [
        {
            "name": name,
            "paper": PAPERS[name.split("/")[0]],
            "figure": name.split("/")[1].replace("figure", "Fig ").replace("table", "Table "),
            "skipped": f"not drawn by this preset: {reason}",
        }
        for name, reason in sorted(args.preset_skipped.items())
    ]
    write_json(args.out, {"figures": entries, "skipped": skipped})
    if args.table:
        atomic_write_bytes(args.table, claims_markdown(entries, skipped=skipped).encode())
    if args.gallery:
        from reproduce.results import gallery_markdown

        atomic_write_bytes(args.gallery, gallery_markdown(entries, root=args.gallery.parent).encode())
    paper = verdict_counts(entries, kind="paper")
    checks = verdict_counts(entries, kind="check")
    print(
        f"{len(entries)} figures; paper claims: {_counts_text(paper)}; checks of the toolkit: {_counts_text(checks)} "
        f"→ {args.out}"
    )
    return 0


def verdict_counts(entries: list[dict], *, kind: str) -> dict[str, int]:
    """Claims of ``kind`` ("paper" or "check") per verdict ("holds", "contradicted", "inconclusive"); one finding
    that several figures test (the same ``counts_once_as``) counts once, with its first figure's verdict."""
    from reproduce.figures._paper import VERDICTS

    counts = dict.fromkeys(VERDICTS, 0)
    seen = set()
    for entry in entries:
        for claim in entry["claims"]:
            once = claim.get("counts_once_as")
            if claim["kind"] == kind and (once is None or once not in seen):
                counts[claim["verdict"]] += 1
                seen.add(once)
    return counts


def _counts_text(counts: dict[str, int]) -> str:
    return f"{sum(counts.values())} (" + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) + ")"


def claims_markdown(entries: list[dict], *, skipped: list[dict]) -> str:
    """``figures/claims.md``: the paper's claims (figure | claim | verdict | test), counted per verdict, then the
    checks of the toolkit listed and counted apart, then the items not regenerated."""
    import numpy as np

    from reproduce.figures._paper import claim_training_sd_tolerated, comparison_verdicts, measured_training_sds

    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [
        "# Claims on this data",
        "",
        "Each claim's verdict is *holds*, *contradicted* or *inconclusive*, decided by the stated test on the "
        "trials and seeds the pipeline ran; its numbers are in the figure's `*.manifest.json`. An empirical claim "
        "holds when the confidence interval of the claimed difference lies entirely on the claimed side, is "
        "contradicted when it lies entirely on the other side, and is inconclusive otherwise; a claim over several "
        "settings holds when every comparison holds and is contradicted when one is. A single run's accuracy "
        "models no training spread (one seed); where such a verdict is decided, its test says how large one run's "
        "seed-to-seed standard deviation may be before the verdict changes.",
    ]
    measured = measured_training_sds(entries)
    if measured:
        lines[-1] += (
            f" For scale: where this run has two trials or more of a DP setting, that standard deviation is "
            f"{100 * float(np.median(measured)):.1f} points (median of {len(measured)} settings, "
            f"{100 * measured[0]:.1f}–{100 * measured[-1]:.1f}); a verdict that would change below the median is "
            "decided by noise, and is inconclusive."
        )
    for kind, heading in (("paper", "Claims of the papers"), ("check", "Checks of the toolkit")):
        counts = verdict_counts(entries, kind=kind)
        lines += ["", f"## {heading}", "", f"{_counts_text(counts)}.", ""]
        if kind == "check":
            lines += ["True by construction, or checks of dpaudit itself: not evidence about the papers.", ""]
        if kind == "paper":
            lines += ["| figure | claim | the paper's words | verdict | test |", "|---|---|---|---|---|"]
        else:
            lines += ["| figure | claim | verdict | test |", "|---|---|---|---|"]
        seen = set()
        for entry in entries:
            for claim in (c for c in entry["claims"] if c["kind"] == kind):
                verdict = claim["verdict"] if claim["verdict"] == "holds" else f"**{claim['verdict']}**"
                text = claim["claim"] + (f" — finding: {claim['finding']}" if claim.get("finding") else "")
                test = claim["test"]
                tolerated = claim_training_sd_tolerated(claim)
                if tolerated is not None:
                    test += f"; stands while one run's seed-to-seed SD is below {100 * tolerated:.1f} points"
                tally = comparison_verdicts(claim)
                if claim["verdict"] == "inconclusive" and sum(tally.values()) > 1:
                    test += "; of its {} comparisons: {} hold, {} contradicted, {} inconclusive".format(
                        sum(tally.values()), *tally.values()
                    )
                once = claim.get("counts_once_as")
                if once is not None and once in seen:
                    test += "; the same finding as above, counted once"
                seen.add(once)
                words = ""
                if kind == "paper":
                    quote = claim.get("quote")
                    words = (
                        f"“{quote}” ({claim.get('section', '')})"
                        if quote
                        else f"no sentence of the paper: {claim.get('note', '')}"
                    )
                    words = f" {cell(words)} |"
                figure = f"{cell(entry['name'])} ({cell(entry['figure'])})"
                lines.append(f"| {figure} | {cell(text)} |{words} {verdict} | {cell(test)} |")
    lines += ["", "Not regenerated:", ""] + [
        f"- {item['name']} ({item['figure']}): {item['skipped']}" for item in skipped
    ]
    return "\n".join(lines) + "\n"


def _cmd_summarize(args: argparse.Namespace) -> int:
    import csv
    import io

    from dpaudit._io import atomic_write_bytes, write_json
    from reproduce.results import summarize

    metrics, rows = summarize(args.runs)
    write_json(args.metrics, metrics)
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=["config", "epoch", "epsilon_hat"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(args.plot, table.getvalue().encode())
    print(f"{len(metrics)} configurations → {args.metrics}, {args.plot}")
    return 0


def _cmd_summarize_run(args: argparse.Namespace) -> int:
    from dpaudit._validation import check_choice, check_confidence, check_delta
    from dpaudit.summary import SUMMARY_ATTACKS, SUMMARY_FILE, summarize_run

    check_delta(args.delta, allow_zero=False)
    check_confidence(args.confidence)
    attacks = tuple(args.attacks.split(","))
    for attack in attacks:
        check_choice("attack", attack, SUMMARY_ATTACKS)
    summary = summarize_run(
        args.run, delta=args.delta, accountant=args.accountant, confidence=args.confidence, attacks=attacks
    )
    final = [value for value in summary["epsilon"] if value is not None]
    print(
        f"{args.run}: theoretical ε = {final[-1] if final else float('inf'):.4g}; "
        + "; ".join(
            f"{attack} ε̂ lower = {report['epsilon_lower']:.3g}"
            for attack, report in [
                ("canary", summary.get("canary")),
                ("loss", (summary.get("loss") or {}).get(str(summary["config"]["eval_epochs"][-1]))),
            ]
            if report
        )
        + f" → {args.run / SUMMARY_FILE}"
    )
    return 0


def _cmd_audit_table(args: argparse.Namespace) -> int:
    from dpaudit._io import atomic_write_bytes, write_json
    from reproduce.results import audit_table

    metrics, markdown = audit_table(args.files)
    if args.figures is not None:
        from reproduce.figures.audit import plot_audit_figures

        plot_audit_figures(args.files, metrics, out_dir=args.figures, title=args.title, roc_epsilon=args.roc_epsilon)
    write_json(args.metrics, metrics)
    atomic_write_bytes(args.markdown, markdown.encode())
    print(markdown, end="")
    return 0


def _pairs(items: list[str], *, flag: str, form: str) -> list[tuple[str, str]]:
    """``NAME=VALUE`` items split at their first "=" (a one-line error naming ``form`` for one without)."""
    if any("=" not in item for item in items):
        raise DPAuditError(f"{flag} takes {form}; got {' '.join(items)}")
    return [(name, value) for name, _, value in (item.partition("=") for item in items)]


def _cmd_validation(args: argparse.Namespace) -> int:
    from reproduce.figures.validation import write_validation

    form = "VARIANT=TWIN, e.g. dpsgd-no-noise=dpsgd-gc"
    pairs = dict(_pairs(args.pair, flag="--pair", form=form))
    if len(pairs) != len(args.pair):  # a variant named twice
        raise DPAuditError(f"--pair takes {form}; got {' '.join(args.pair)}")
    files = write_validation(args.files, pairs=pairs, attack=args.attack, out_dir=args.out, title=args.title)
    print(next(path for path in files if path.suffix == ".md").read_text(encoding="utf-8"), end="")
    return 0


def _cmd_batch(args: argparse.Namespace, *, parse: Callable[[list[str]], argparse.Namespace]) -> int:
    parsed = []
    for number, command in enumerate(args.commands, 1):  # every command is checked before the first runs
        argv = shlex.split(command)
        if not argv or argv[0] == "batch":
            raise DPAuditError(f"batch command {number} must name a dpaudit command other than batch: {command!r}")
        try:
            parsed.append(parse(argv))
        except SystemExit:
            raise DPAuditError(f"batch command {number} has bad arguments (above): {command!r}") from None
    for number, (command, sub_args) in enumerate(zip(args.commands, parsed), 1):
        if not args.quiet:
            print(f"[{number}/{len(parsed)}] dpaudit {command}", file=sys.stderr, flush=True)
        with (
            open(os.devnull, "w", encoding="utf-8") as devnull,
            contextlib.redirect_stdout(devnull if args.quiet else sys.stdout),
        ):
            try:
                code = sub_args.handler(sub_args)
            except Exception as error:  # noqa: BLE001 - a user's error gains where it happened; a bug propagates
                from dpaudit.cli import user_error

                message = user_error(error)
                if message is None:
                    raise
                raise DPAuditError(f"batch command {number} of {len(parsed)} (dpaudit {command}): {message}") from None
        if code:
            return code
    return 0


def add_summarize_run(commands: argparse._SubParsersAction) -> None:
    """Declare ``summarize-run`` and its handler."""
    run_summary = commands.add_parser(
        "summarize-run",
        help="one run's theoretical ε per epoch, loss-attack ε̂ per checkpoint and canary ε̂ → summary.json",
    )
    run_summary.add_argument("--run", required=True, type=Path, help="output folder of `dpaudit train` (target)")
    run_summary.add_argument("--attacks", default="loss,canary", help="comma-separated: loss, canary (default both)")
    run_summary.add_argument("--accountant", default="rdp", choices=("rdp", "prv"), help="accountant (default rdp)")
    run_summary.add_argument("--delta", type=float, default=1e-5, help="δ (default 1e-5)")
    run_summary.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bounds")
    run_summary.set_defaults(handler=_cmd_summarize_run)


def add_audit_table(commands: argparse._SubParsersAction) -> None:
    """Declare ``audit-table`` and its handler."""
    table = commands.add_parser(
        "audit-table",
        help="collect `dpaudit audit --run` results into one table",
        description="Mean over trials of each run and attack: ε̂ point, ε̂ lower bound, "
        "ceiling, theoretical ε and lower/theory; JSON metrics and a Markdown table.",
    )
    table.add_argument("files", nargs="+", type=Path, help="…/<run>/trial_<t>/audit_<attack>.json files")
    table.add_argument("--metrics", required=True, type=Path, help="JSON to write")
    table.add_argument("--markdown", required=True, type=Path, help="Markdown table to write")
    table.add_argument(
        "--figures",
        type=Path,
        help="also draw lower_bounds and roc_<attack> (PDF + PNG) in this folder; "
        "file folders must be named <optimizer>_eps<ε>",
    )
    table.add_argument("--title", default="", help="figure title (state dataset and preset)")
    table.add_argument(
        "--roc-epsilon", type=float, help="theoretical ε of the runs the ROC figures show (default: the median)"
    )
    table.set_defaults(handler=_cmd_audit_table)


def add_figure(commands: argparse._SubParsersAction) -> None:
    """Declare ``figure`` and its handler."""
    figure = commands.add_parser("figure", help="draw one paper figure or table (PDF + PNG, manifest entry)")
    figure.add_argument("name", help=f"figure name, e.g. dpsgd_dc/figure1 (see `{PROG} list`)")
    figure.add_argument("--out", required=True, type=Path, help="output folder, e.g. figures/dpsgd_dc")
    figure.add_argument("--runs", nargs="+", type=Path, help="run folders (trained and attacked) the figure draws")
    figure.add_argument("--alpha", type=float, default=1.1, help="Rényi order α of the theory panels (default 1.1)")
    figure.add_argument("--preset", default="default", help="preset named in the figure title (default: default)")
    figure.add_argument("--L", type=float, default=0.1, help="smoothness L of the theory panels (default 0.1)")
    figure.set_defaults(handler=_cmd_figure)


def add_manifest(commands: argparse._SubParsersAction) -> None:
    """Declare ``manifest`` and its handler."""
    manifest = commands.add_parser("manifest", help="merge per-figure manifest entries into figures/manifest.json")
    manifest.add_argument("entries", nargs="+", type=Path, help=f"*.manifest.json files written by `{PROG} figure`")
    manifest.add_argument("--out", required=True, type=Path, help="the manifest to write")
    manifest.add_argument("--table", type=Path, help="also write the claims as a Markdown table")
    manifest.add_argument("--gallery", type=Path, help="also write a Markdown gallery (PNG thumbnails by paper)")
    manifest.add_argument(
        "--preset-skipped",
        type=_skipped_figures,
        default={},
        metavar="JSON",
        help="the figures this preset opts out of (papers.skip_figures): a JSON object, figure name → what it lacks",
    )
    manifest.set_defaults(handler=_cmd_manifest)


def _skipped_figures(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({error.msg})") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise argparse.ArgumentTypeError(f"expected a JSON object of figure name → reason, got {text!r}")
    return value


def add_summarize(commands: argparse._SubParsersAction) -> None:
    """Declare ``summarize`` and its handler."""
    summary = commands.add_parser("summarize", help="DVC metrics and plot data from trained and attacked runs")
    summary.add_argument("runs", nargs="+", type=Path, help="run folders (…/<config>/trial_<t>)")
    summary.add_argument("--metrics", required=True, type=Path, help="metrics JSON to write")
    summary.add_argument("--plot", required=True, type=Path, help="CSV of mean ε̂ per configuration and epoch")
    summary.set_defaults(handler=_cmd_summarize)


def _cmd_validation_run(args: argparse.Namespace) -> int:
    from dpaudit._validation import check_delta
    from reproduce.figures.validation import write_validation_run

    pairs = _pairs(args.pair, flag="--pair", form="BUG_RUN=TWIN_RUN (run folders)")
    check_delta(args.delta, allow_zero=False)
    files = write_validation_run(pairs, delta=args.delta, out_dir=args.out, title=args.title)
    print(next(path for path in files if path.suffix == ".md").read_text(encoding="utf-8"), end="")
    return 0


def add_validation_run(commands: argparse._SubParsersAction) -> None:
    """Declare ``validation-run`` and its handler."""
    validation = commands.add_parser(
        "validation-run",
        help="the auditor on bugs only a whole-run audit sees, each run beside its correct twin",
        description="Flag each run with whole-run canaries whose lower bounds (every iterate: family and "
        "assumption-free; spread over the steps: assumption-free) exceed the ε of its own ledger, or whose canaries' "
        "presence refutes the ledger's sample rates, or whose measured σ_t or q_t·c departs from it (each of the k "
        "checks at level 0.05/k); figure, table, JSON and manifest "
        "entry.",
    )
    validation.add_argument("--pair", nargs="+", required=True, help="BUG_RUN=TWIN_RUN run folders")
    validation.add_argument("--delta", type=float, default=1e-5, help="δ (default: 1e-5)")
    validation.add_argument("--out", required=True, type=Path, help="output folder, e.g. figures/audit")
    validation.add_argument("--title", default="", help="figure title (state dataset and preset)")
    validation.set_defaults(handler=_cmd_validation_run)


def _cmd_ladder(args: argparse.Namespace) -> int:
    from dpaudit._validation import check_confidence, check_delta
    from reproduce.figures.ladder import write_ladder

    check_delta(args.delta, allow_zero=False)
    check_confidence(args.confidence)
    write_ladder(
        args.files,
        canaries=args.canaries,
        delta=args.delta,
        confidence=args.confidence,
        metrics=args.metrics,
        markdown=args.markdown,
        out_dir=args.figures,
        title=args.title,
        black_box_unfit=dict(_pairs(args.black_box_unfit, flag="--black-box-unfit", form="RUN=REASON")),
    )
    print(args.markdown.read_text(encoding="utf-8"), end="")
    return 0


def add_ladder(commands: argparse._SubParsersAction) -> None:
    """Declare ``ladder`` and its handler."""
    ladder = commands.add_parser(
        "ladder",
        help="the threat-model ladder: every rung's ε̂ lower bound beside the theoretical ε, per optimizer and ε",
        description="Collect the whole-run (every iterate, final model), per-step canary and black-box audits of "
        "the cross-optimizer runs into one table and one figure, each bound against the ε it tests.",
    )
    ladder.add_argument("files", nargs="+", type=Path, help="…/<section>/<run>/audit_<attack>.json files")
    ladder.add_argument("--canaries", required=True, type=int, help="whole-run canaries per run (both classes)")
    ladder.add_argument("--delta", type=float, default=1e-5, help="δ (default: 1e-5)")
    ladder.add_argument("--confidence", type=float, default=0.95, help="the bounds' confidence (default: 0.95)")
    ladder.add_argument("--metrics", required=True, type=Path, help="JSON to write")
    ladder.add_argument("--markdown", required=True, type=Path, help="Markdown table to write")
    ladder.add_argument("--figures", required=True, type=Path, help="folder for ladder.{pdf,png} and its manifest")
    ladder.add_argument("--title", default="", help="figure title (state dataset and preset)")
    ladder.add_argument(
        "--black-box-unfit",
        nargs="*",
        default=[],
        metavar="RUN=REASON",
        help="why the black-box rung left out a run (the ladder says so in its cell)",
    )
    ladder.set_defaults(handler=_cmd_ladder)


def add_validation(commands: argparse._SubParsersAction) -> None:
    """Declare ``validation`` and its handler."""
    validation = commands.add_parser(
        "validation",
        help="the auditor on broken optimizers beside their correct twins: figure, table, false alarms",
        description="Flag every audit whose ε̂ lower bound exceeds the ε its run claims against the attack (one step "
        "for canary, the run otherwise); draw each broken variant beside its twin and count false alarms over every "
        "audit of a DP-claiming run given. Writes validation.{pdf,png,md,tex,json} and validation.manifest.json.",
    )
    validation.add_argument("files", nargs="+", type=Path, help="…/<run>/audit_<attack>.json files (`dpaudit audit`)")
    validation.add_argument(
        "--pair",
        nargs="+",
        required=True,
        metavar="VARIANT=TWIN",
        help="broken variant and its correct twin, e.g. dpsgd-no-noise=dpsgd-gc",
    )
    validation.add_argument(
        "--attack",
        default="canary",
        choices=tuple(ATTACKS),
        help="the attack whose audits the pairs show (default: canary)",
    )
    validation.add_argument("--out", required=True, type=Path, help="output folder, e.g. figures/audit")
    validation.add_argument("--title", default="", help="figure title (state dataset and preset)")
    validation.set_defaults(handler=_cmd_validation)


def add_batch(commands: argparse._SubParsersAction, *, parse: Callable[[list[str]], argparse.Namespace]) -> None:
    """``batch``, whose commands ``parse`` reads (the ``dpaudit`` parser's ``parse_args``)."""
    batch = commands.add_parser(
        "batch",
        help="run several dpaudit commands in one process (torch starts once)",
        description="Run dpaudit commands one after another in this process, each given as one quoted string, "
        f"e.g. {PROG} batch 'train --out r --epochs 2' 'attack --run r'. All are parsed before the first runs; "
        "the first that fails stops the batch, and what finished before it stays.",
    )
    batch.add_argument("commands", nargs="+", metavar="COMMAND", help="a dpaudit command line without `dpaudit`")
    batch.add_argument("--quiet", action="store_true", help="no progress lines; the commands' output is discarded")
    batch.set_defaults(handler=partial(_cmd_batch, parse=parse))


def _cmd_list(args: argparse.Namespace) -> int:
    from reproduce.figures import FIGURES

    for name, draw in FIGURES.items():
        print(f"{name:22} {(draw.__doc__ or '').splitlines()[0]}")
    return 0


def add_list(commands: argparse._SubParsersAction) -> None:
    """Declare ``list`` (the figures) and its handler."""
    listing = commands.add_parser("list", help="list the paper figures and tables `figure` draws")
    listing.set_defaults(handler=_cmd_list)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m reproduce`` parser; each parsed command's ``handler(args)`` runs it and returns the exit
    status. ``batch`` parses its commands with the ``dpaudit`` parser."""
    from dpaudit.cli import build_parser as library_parser

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Reproduce the papers: draw their figures and tables, settle their claims and collect the "
        "pipeline's metrics from dpaudit runs (the commands the Snakemake rules run).",
    )
    parser.add_argument("--version", action="version", version=f"reproduce (dpaudit {__version__})")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_summarize_run(subcommands)
    add_audit_table(subcommands)
    add_figure(subcommands)
    add_manifest(subcommands)
    add_summarize(subcommands)
    add_validation(subcommands)
    add_validation_run(subcommands)
    add_ladder(subcommands)
    add_batch(subcommands, parse=library_parser().parse_args)
    add_list(subcommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one pipeline command (``argv``: default ``sys.argv[1:]``); a user's error is one line and exit status 2,
    as in ``dpaudit`` (:func:`dpaudit.cli.user_error`)."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("reproduce: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - every failure ends in one line; a bug's keeps its traceback
        message = user_error(error)
        if message is None:
            traceback.print_exc()
            print(
                f"reproduce: internal error ({type(error).__name__}): this is a bug in the reproduction "
                f"(dpaudit {__version__}), not in your input; please report it with the traceback above and the "
                "command",
                file=sys.stderr,
            )
            return 1
        print(f"reproduce: error: {message}", file=sys.stderr)
        return 2
