"""The ``dpaudit`` command line: the commands that Snakemake rules, DVC stages and users call.

``dpaudit --help`` stays instant: torch loads only inside the commands that train or attack.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import re
import sys
import warnings
from dataclasses import fields
from pathlib import Path

from dpaudit import __version__
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig

_TRAIN_EXAMPLE = """example (target + 3 shadows, the DPSGD-GC/DC paper's σ_DP and C, on digits):
  dpaudit train --dataset digits --model cnn-digits --optimizer dpsgd-gc --sigma-dp 0.002 \\
      --clip-norm 20 --batch-size 50 --lr 0.1 --epochs 20 --eval-epochs 10,20 --sampling shuffle \\
      --num-shadows 3 --target-size 300 --out results/demo
  dpaudit attack --run results/demo"""


def _field_help() -> dict[str, str]:
    """Help text of each TrainConfig field, read from its docstring (one source of truth)."""
    helps: dict[str, str] = {}
    current = None
    for line in (TrainConfig.__doc__ or "").splitlines():
        match = re.match(r"\s{8}(\w+): (.*)", line)
        if match:
            current = match.group(1)
            helps[current] = match.group(2)
        elif current and line.startswith(" " * 12):
            helps[current] += " " + line.strip()
    return helps


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    helps = _field_help()
    converters = {"str": str, "int": int, "float": float, "float | None": float, "int | None": int}
    for item in fields(TrainConfig):
        flag = "--" + item.name.replace("_", "-")
        help_text = helps.get(item.name, "")
        if item.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif item.type == "tuple[int, ...]":
            parser.add_argument(flag, type=_int_list, metavar="E1,E2,...", help=help_text)
        else:
            parser.add_argument(flag, type=converters[item.type], help=f"{help_text} (default: {item.default})")


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    values = {}
    if args.config:
        import yaml

        with open(args.config, encoding="utf-8") as stream:
            loaded = yaml.safe_load(stream) or {}
        if not isinstance(loaded, dict):
            raise DPAuditError(f"{args.config} must hold a mapping of TrainConfig keys")
        values.update(loaded)
    for item in fields(TrainConfig):
        value = getattr(args, item.name)
        if value is not None:
            values[item.name] = value
    return TrainConfig.from_dict(values)


def _state_every(flag: float | None) -> float:
    """--state-every, else $DPAUDIT_STATE_EVERY, else the engine's default (seconds)."""
    from dpaudit.train import STATE_EVERY_SECONDS

    if flag is not None:
        return flag
    value = os.environ.get("DPAUDIT_STATE_EVERY")
    try:
        return STATE_EVERY_SECONDS if value is None else float(value)
    except ValueError:
        raise DPAuditError(f"DPAUDIT_STATE_EVERY must be a number of seconds, got {value!r}") from None


def _cmd_train(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    from dpaudit.train import train_configuration

    # validates (one-line errors before any data loads) and calibrates the noise once
    summary = train_configuration(
        config,
        out_dir=args.out,
        progress=not args.quiet,
        resume=not args.restart,
        state_every=_state_every(args.state_every),
    )
    derived = summary["derived"]
    print(
        f"trained {len(summary['models'])} models ({config.optimizer}, n={derived['dataset_size_n']}, "
        f"q={derived['sample_rate_q']:.4g}, z={derived['noise_multiplier_z']}, "
        f"{derived['steps_per_epoch']} steps/epoch × {config.epochs} epochs) → {args.out}"
    )
    if derived["planned_epsilon"] is not None:
        print(
            f"theoretical ε = {derived['planned_epsilon']:.4g} at δ = {config.delta:g} ({config.accountant} accountant"
            f"{', approximate: shuffled batches' if config.sampling == 'shuffle' else ''})"
        )
    if args.summarize:
        from dpaudit.experiments import summarize_run

        summarize_run(
            args.out,
            delta=config.delta,
            accountant=config.accountant,
            attacks=("loss", "canary") if config.canaries else ("loss",),
        )
    return 0


def _cmd_attack(args: argparse.Namespace) -> int:
    from dpaudit.attacks import ShadowAttackConfig, attack_run

    config = ShadowAttackConfig(epochs=args.attack_epochs, per_class=not args.pooled, seed=args.seed)
    results = attack_run(
        args.run,
        epochs=list(args.epochs) if args.epochs else None,
        config=config,
        delta=args.delta,
        out_dir=args.out,
        progress=not args.quiet,
    )
    print(f"{'epoch':>6} {'FPR':>8} {'FNR':>8} {'ε̂ (eq. 20)':>12}")
    for result in results:
        print(f"{result.epoch:>6} {result.fpr:>8.4f} {result.fnr:>8.4f} {result.epsilon_hat:>12.4f}")
    print(f"ε̂ is the papers' point estimate at δ = {args.delta:g}, not a confidence bound.")
    return 0


def _cmd_theory(args: argparse.Namespace) -> int:
    from dpaudit import theory

    params = {}
    for name in ("alpha", "L", "C", "sigma", "D", "n", "b", "eta", "m"):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    if args.bound == "alpha-star":
        payload = {"q": args.q, "sigma": args.sigma, "alpha_star": theory.alpha_star(q=args.q, sigma=args.sigma)}
    else:
        if args.epochs is not None:
            if "n" not in params or "b" not in params:
                raise DPAuditError("--epochs needs --n and --b to convert epochs to steps (T = ceil(n/b)·E)")
            steps = [
                int(t) for t in theory.epochs_to_steps(epochs=list(args.epochs), n=int(params["n"]), b=int(params["b"]))
            ]
        else:
            steps = list(args.steps)
        for key in ("n", "b"):
            if key in params and float(params[key]).is_integer():
                params[key] = int(params[key])
        used = {key: value for key, value in params.items() if key in theory.bound_parameters(args.bound)}
        values = theory.rdp_bound(args.bound, steps, check_conditions=False, **used)
        required, optional = theory.condition_parameters(args.bound)
        missing = [key for key in required if key not in params]
        conditions = (  # validity conditions may need parameters the formula does not (b for the SGM bounds)
            f"not checked: needs {', '.join(missing)}"
            if missing
            else theory.check_conditions(args.bound, **{k: v for k, v in params.items() if k in (*required, *optional)})
        )
        payload = {
            "bound": args.bound,
            "alpha": params.get("alpha"),
            "params": used,
            "steps": steps,
            "epsilon_rdp": [float(v) for v in values],
            "conditions_violated": conditions,
        }
        if args.delta is not None:
            payload["delta"] = args.delta
            payload["epsilon_dp_at_alpha"] = [
                float(v) for v in theory.rdp_to_dp(epsilon_rdp=values, alpha=params["alpha"], delta=args.delta)
            ]
    print(json.dumps(payload, indent=2, allow_nan=True, ensure_ascii=False))
    return 0


def _accounting_options(args: argparse.Namespace) -> dict:
    return {"delta": args.delta, "conversion": args.conversion, "eps_error": args.eps_error}


@contextlib.contextmanager
def _recorded_warnings():
    """Record the warnings raised inside: every accounting fallback (PRV → RDP), the others as filtered."""
    from dpaudit.theory import AccountingFallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AccountingFallbackWarning)
        yield caught


def _fallback_notes(caught: list) -> list[str]:
    """The messages of the accounting fallbacks among recorded warnings, each once; the others are shown as usual."""
    from dpaudit.theory import AccountingFallbackWarning

    notes = []
    for item in caught:
        if issubclass(item.category, AccountingFallbackWarning):
            notes.append(str(item.message))
        else:
            warnings.showwarning(item.message, item.category, item.filename, item.lineno)
    return list(dict.fromkeys(notes))


def _cmd_epsilon(args: argparse.Namespace) -> int:
    with _recorded_warnings() as caught:
        return _epsilon_report(args, caught)


def _epsilon_report(args: argparse.Namespace, caught: list) -> int:
    from dpaudit._io import read_json, write_json
    from dpaudit.theory import epsilon, ledger_epsilons

    direct = (args.noise_multiplier, args.sample_rate, args.steps)
    if (args.run is None) == all(value is None for value in direct):
        raise DPAuditError("give --run, or --noise-multiplier, --sample-rate and --steps")
    if args.run is None:
        if None in direct:
            raise DPAuditError("--noise-multiplier, --sample-rate and --steps go together")
        payload = {
            name: epsilon(
                noise_multiplier=args.noise_multiplier,
                sample_rate=args.sample_rate,
                steps=args.steps,
                accountant=name,
                **_accounting_options(args),
            )
            for name in args.accountants
        }
        print(
            json.dumps(
                {
                    "noise_multiplier": args.noise_multiplier,
                    "sample_rate": args.sample_rate,
                    "steps": args.steps,
                    "delta": args.delta,
                    "epsilon": payload,
                    "notes": _fallback_notes(caught),
                },
                ensure_ascii=False,
            )
        )
        return 0
    ledger_path = args.run / args.model / "ledger.json"
    if not ledger_path.is_file():
        raise DPAuditError(f"no privacy ledger at {ledger_path}; run `dpaudit train` first")
    ledger = read_json(ledger_path)
    epochs = list(args.epochs) if args.epochs else list(range(1, len(ledger["epoch_ends"]) + 1))
    curves = {
        name: ledger_epsilons(ledger, accountant=name, epochs=epochs, logging=args.logging, **_accounting_options(args))
        for name in args.accountants
    }
    result = {
        "model": args.model,
        "delta": args.delta,
        "conversion": args.conversion,
        "logging": args.logging,
        "sampling": ledger["sampling"],
        "dp_claim": ledger["dp_claim"],
        "epochs": epochs,
        "epsilon": curves,
        "notes": _fallback_notes(caught),
    }
    write_json(args.out or args.run / args.model / "epsilon.json", result)
    print(f"{'epoch':>6} " + " ".join(f"{'ε (' + name + ')':>12}" for name in curves))
    for row, epoch in enumerate(epochs):
        print(f"{epoch:>6} " + " ".join(f"{curves[name][row]:>12.4f}" for name in curves))
    notes = (
        [] if ledger["dp_claim"] else ["the optimizer makes no DP claim: these are the ε it claims, not a guarantee"]
    )
    if ledger["sampling"] == "shuffle":
        notes.append("shuffled batches: the accountants assume Poisson sampling, so ε is approximate")
    for note in notes + result["notes"]:
        print(f"note: {note}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from dpaudit.theory import calibrate_noise, epsilon

    with _recorded_warnings() as caught:
        z = calibrate_noise(
            target_epsilon=args.target_epsilon,
            sample_rate=args.sample_rate,
            steps=args.steps,
            accountant=args.accountant,
            **_accounting_options(args),
        )
        achieved = epsilon(
            noise_multiplier=z,
            sample_rate=args.sample_rate,
            steps=args.steps,
            accountant=args.accountant,
            **_accounting_options(args),
        )
    print(
        json.dumps(
            {
                "noise_multiplier": z,
                "epsilon": achieved,
                "target_epsilon": args.target_epsilon,
                "delta": args.delta,
                "sample_rate": args.sample_rate,
                "steps": args.steps,
                "accountant": args.accountant,
                "notes": _fallback_notes(caught),
            },
            ensure_ascii=False,
        )
    )
    return 0


def _add_accounting_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--delta", type=float, default=1e-5, help="δ (default: 1e-5)")
    parser.add_argument(
        "--conversion",
        choices=("improved", "classic"),
        default="improved",
        help="RDP → (ε, δ): improved (Balle et al. 2020, Opacus) or classic (Mironov 2017)",
    )
    parser.add_argument("--eps-error", type=float, default=0.01, help="PRV accountant ε error (default: 0.01)")


def _cmd_figure(args: argparse.Namespace) -> int:
    from dpaudit._io import write_json
    from dpaudit._validation import check_choice
    from dpaudit.figures import FIGURES

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
    write_json(args.out / f"{args.name.split('/')[-1]}.manifest.json", entry)
    for claim in entry["claims"]:
        print(f"[{'holds' if claim['holds'] else 'does NOT hold'}] {claim['claim']}")
    print("wrote " + ", ".join(entry["files"]))
    return 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    from dpaudit._io import atomic_write_bytes, read_json, write_json
    from dpaudit.figures._paper import SKIPPED

    entries = sorted((read_json(path) for path in args.entries), key=lambda entry: entry["name"])
    write_json(args.out, {"figures": entries, "skipped": SKIPPED})
    if args.table:
        lines = ["| figure | claim | holds on this data |", "|---|---|---|"]
        for entry in entries:
            for claim in entry["claims"]:
                verdict = "yes" if claim["holds"] else "**no**"
                lines.append(f"| {entry['name']} ({entry['figure']}) | {claim['claim']} | {verdict} |")
        lines += ["", "Not regenerated:", ""] + [
            f"- {item['name']} ({item['figure']}): {item['skipped']}" for item in SKIPPED
        ]
        atomic_write_bytes(args.table, ("\n".join(lines) + "\n").encode())
    if args.gallery:
        from dpaudit.results import gallery_markdown

        atomic_write_bytes(args.gallery, gallery_markdown(entries, root=args.gallery.parent).encode())
    held = sum(claim["holds"] for entry in entries for claim in entry["claims"])
    total = sum(len(entry["claims"]) for entry in entries)
    print(f"{len(entries)} figures, {held} of {total} paper claims hold on this data → {args.out}")
    return 0


def _cmd_summarize(args: argparse.Namespace) -> int:
    import csv
    import io

    from dpaudit._io import atomic_write_bytes, write_json
    from dpaudit.results import summarize

    metrics, rows = summarize(args.runs)
    write_json(args.metrics, metrics)
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=["config", "epoch", "epsilon_hat"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(args.plot, table.getvalue().encode())
    print(f"{len(metrics)} configurations → {args.metrics}, {args.plot}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    if args.what == "datasets":
        from dpaudit.data import available_datasets, dataset_info

        for name in available_datasets():
            info = dataset_info(name)
            print(
                f"{name:15} {info.input_shape}  classes={info.num_classes}  train={info.train_size}  "
                f"test={info.test_size}"
            )
    elif args.what == "figures":
        from dpaudit.figures import FIGURES

        for name, draw in FIGURES.items():
            print(f"{name:22} {(draw.__doc__ or '').splitlines()[0]}")
    elif args.what == "bounds":
        from dpaudit.theory import available_bounds, bound_parameters

        for name in available_bounds():
            print(f"{name:24} {', '.join(bound_parameters(name))}")
    else:
        registry = __import__(f"dpaudit.{args.what}", fromlist=["available"])
        for name in registry.available():
            spec = registry.get_spec(name)
            claim = "" if getattr(spec, "dp_claim", True) else "  [no DP claim]"
            print(f"{name:20} {spec.description}{claim}")
    return 0


AUDIT_ATTACKS = ("loss", "confidence", "shadow", "lira-online", "lira-offline", "canary")


def _read_score_csv(path: Path):
    """(member scores, non-member scores) from a CSV with columns ``score`` and ``is_member`` (1/0)."""
    import csv

    import numpy as np

    if not path.is_file():
        raise DPAuditError(f"score file not found: {path}")
    with open(path, encoding="utf-8", newline="") as stream:
        reader = csv.DictReader(stream)
        missing = {"score", "is_member"} - set(reader.fieldnames or ())
        if missing:
            raise DPAuditError(f"{path} lacks the column(s) {', '.join(sorted(missing))} (need score, is_member)")
        try:
            rows = [(float(row["score"]), int(row["is_member"])) for row in reader]
        except ValueError as error:
            raise DPAuditError(f"{path}: {error}") from None
    scores = np.array([s for s, _ in rows], dtype=float)
    member = np.array([m for _, m in rows])
    if not set(member.tolist()) <= {0, 1}:
        raise DPAuditError(f"{path}: is_member must be 0 or 1")
    return scores[member == 1], scores[member == 0]


def _run_scores(args: argparse.Namespace, attack: str):
    """(members, non-members, epoch, theory dict) of one attack, pooled over the given runs (trials)."""
    import numpy as np

    from dpaudit._io import read_json
    from dpaudit.run import load_run_config

    members, nonmembers, theory, epoch = [], [], {}, None
    for run in args.run:
        config = load_run_config(run)
        epoch = args.epoch or max(config.eval_epochs)
        theory["epsilon_run"] = read_json(run / "config.json")["derived"].get("planned_epsilon")
        if attack in ("loss", "confidence"):
            from dpaudit.attacks.loss import run_loss_scores

            scores = run_loss_scores(run, epoch=epoch, signal=attack)
        elif attack.startswith("lira-"):
            from dpaudit.attacks.lira import run_lira_scores

            scores = run_lira_scores(run, epoch=epoch, variant=attack.removeprefix("lira-"))
        elif attack == "shadow":
            path = run / f"scores_epoch_{epoch:04d}.csv"
            if not path.is_file():
                raise DPAuditError(f"no shadow-attack scores at {path}; run `dpaudit attack --run {run}` first")
            scores = _read_score_csv(path)
        else:
            from dpaudit.attacks.canary import CanaryObservations

            observed = CanaryObservations.load(run / "target" / "canaries.npz")
            scores = observed.scores()
            theory["epsilon_mechanism"] = max(
                theory.get("epsilon_mechanism", 0.0), observed.mechanism_epsilon(delta=args.delta)
            )
            theory["mechanism"] = (
                "the dense steps' composition, no subsampling; trials: the learned support"
                if observed.design == "support"
                else "one Gaussian step at the runs' smallest noise multiplier, no subsampling; "
                "trials: each run's steps at its smallest noise multiplier"
            )
            theory["selection"] = observed.selection
            epoch = None
        members.append(scores[0])
        nonmembers.append(scores[1])
    return np.concatenate(members), np.concatenate(nonmembers), epoch, theory


def _cmd_audit(args: argparse.Namespace) -> int:
    from dpaudit.estimate import _check_confidence, _check_delta

    if (args.scores is None) == (args.run is None):
        raise DPAuditError("give exactly one of --scores FILE.csv and --run RUN")
    _check_delta(args.delta, allow_zero=False)
    _check_confidence(args.confidence)
    if args.out is not None and args.out_dir is not None:
        raise DPAuditError("give --out (one attack) or --out-dir (one file per attack), not both")
    if args.scores is not None:
        members, nonmembers = _read_score_csv(args.scores)
        out = args.out or args.scores.with_name(args.scores.stem + "_audit.json")
        _audit_one(args, members, nonmembers, attack=None, epoch=None, theory={}, source=str(args.scores), out=out)
        return 0
    if args.out is not None and len(args.attack) > 1:
        raise DPAuditError("--out names one file: give one --attack, or --out-dir for several")
    for attack in args.attack:  # one process for all attacks of a run: the pipeline starts torch once
        members, nonmembers, epoch, theory = _run_scores(args, attack)
        out = args.out or (args.out_dir or args.run[0]) / f"audit_{attack}.json"
        _audit_one(
            args,
            members,
            nonmembers,
            attack=attack,
            epoch=epoch,
            theory=theory,
            source=" ".join(str(run) for run in args.run),
            out=out,
        )
    return 0


def _audit_one(args, members, nonmembers, *, attack, epoch, theory, source, out) -> None:
    from dpaudit._io import write_json
    from dpaudit.audit import audit_scores

    selection = args.selection or theory.get("selection") or "split"
    report = audit_scores(
        members, nonmembers, delta=args.delta, confidence=args.confidence, seed=args.seed, selection=selection
    )
    payload = {"source": source, "attack": attack or "scores", "epoch": epoch, **theory, "report": report.to_dict()}
    write_json(out, payload)
    label = payload["attack"]
    if not args.no_plot:
        from dpaudit.figures.roc import plot_roc

        plot_roc({label: payload["report"]}, stem=out.with_suffix(""), title=f"{label} attack: {source}")
    print(report.summary())
    for key in ("epsilon_run", "epsilon_mechanism"):
        if theory.get(key) is not None:
            print(f"theoretical ε ({key.split('_')[1]}) = {theory[key]:.4g}")
    print(f"wrote {out}" + ("" if args.no_plot else f" and {out.with_suffix('.png')}"))


def _cmd_summarize_run(args: argparse.Namespace) -> int:
    from dpaudit._validation import check_choice
    from dpaudit.estimate import _check_confidence, _check_delta
    from dpaudit.experiments import SUMMARY_FILE, summarize_run

    _check_delta(args.delta, allow_zero=False)
    _check_confidence(args.confidence)
    attacks = tuple(args.attacks.split(","))
    for attack in attacks:
        check_choice("attack", attack, ("loss", "canary"))
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
    from dpaudit.results import audit_table

    metrics, markdown = audit_table(args.files)
    if args.figures is not None:
        from dpaudit.figures.audit import plot_audit_figures

        plot_audit_figures(args.files, metrics, out_dir=args.figures, title=args.title, roc_epsilon=args.roc_epsilon)
    write_json(args.metrics, metrics)
    atomic_write_bytes(args.markdown, markdown.encode())
    print(markdown, end="")
    return 0


def _cmd_validation(args: argparse.Namespace) -> int:
    from dpaudit.figures.validation import write_validation

    pairs = dict(pair.split("=", 1) for pair in args.pair if "=" in pair)
    if len(pairs) != len(args.pair):
        raise DPAuditError(f"--pair takes VARIANT=TWIN, e.g. dpsgd-no-noise=dpsgd-gc; got {' '.join(args.pair)}")
    files = write_validation(args.files, pairs=pairs, attack=args.attack, out_dir=args.out, title=args.title)
    print(next(path for path in files if path.suffix == ".md").read_text(encoding="utf-8"), end="")
    return 0


def _cmd_batch(args: argparse.Namespace) -> int:
    import contextlib
    import shlex

    parser = build_parser()
    parsed = []
    for number, command in enumerate(args.commands, 1):  # every command is checked before the first runs
        argv = shlex.split(command)
        if not argv or argv[0] == "batch":
            raise DPAuditError(f"batch command {number} must name a dpaudit command other than batch: {command!r}")
        try:
            parsed.append(parser.parse_args(argv))
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
            except DPAuditError as error:
                raise DPAuditError(f"batch command {number} of {len(parsed)} (dpaudit {command}): {error}") from None
        if code:
            return code
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpaudit",
        description="Audit and reproduce differentially private training: train target and shadow models "
        "with DP optimizers, attack them, and compare empirical ε̂ with theoretical ε.",
    )
    parser.add_argument("--version", action="version", version=f"dpaudit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train",
        help="train the target and shadow models of one configuration and trial",
        description="Train the target and the shadow models of one configuration and Monte Carlo trial; "
        "write checkpoints, per-epoch metrics and the privacy ledger under --out.",
        epilog=_TRAIN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("--out", required=True, type=Path, help="output folder of the run")
    train.add_argument("--config", type=Path, help="YAML file of configuration keys (flags override it)")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.add_argument(
        "--summarize",
        action="store_true",
        help="then write summary.json as `dpaudit summarize-run` does (loss attack; canary if any)",
    )
    train.add_argument(
        "--restart",
        action="store_true",
        help="train from the start, ignoring the state an interrupted run of this configuration left "
        "in --out (by default it resumes after its last saved epoch)",
    )
    train.add_argument(
        "--state-every",
        type=float,
        metavar="SECONDS",
        help="save the training state for resuming at the first epoch end after this many seconds "
        "(0: every epoch; default: $DPAUDIT_STATE_EVERY, else 60)",
    )
    _add_config_arguments(train)
    train.set_defaults(handler=_cmd_train)

    audit = commands.add_parser(
        "audit",
        help="ε̂ point estimate, lower bound and ceiling, AUC, TPR at low FPR, log-log ROC",
        description="Audit membership scores: from a CSV (columns score, is_member; higher score = member) or "
        "from a trained run with one attack (loss, confidence, shadow — after `dpaudit attack` —, lira-online and "
        "lira-offline — runs trained with --split-design halves — or canary — after training with --canaries M). "
        "Writes JSON and a log-log ROC plot (PNG + PDF).",
    )
    audit.add_argument("--scores", type=Path, help="CSV of scores with columns score and is_member")
    audit.add_argument(
        "--run",
        type=Path,
        nargs="+",
        help="output folder(s) of `dpaudit train`; several (independent trials) are pooled",
    )
    audit.add_argument(
        "--attack", choices=AUDIT_ATTACKS, nargs="+", default=["loss"], help="attack(s) on --run (default: loss)"
    )
    audit.add_argument("--epoch", type=int, help="checkpoint epoch to attack (default: the last)")
    audit.add_argument("--delta", type=float, default=1e-5, help="δ (default: 1e-5)")
    audit.add_argument(
        "--confidence", type=float, default=0.95, help="confidence 1 − α of the lower bound (default: 0.95)"
    )
    audit.add_argument("--seed", type=int, default=0, help="seed of the threshold-selection split (default: 0)")
    audit.add_argument(
        "--selection",
        choices=("split", "gaussian"),
        help="how the lower bound picks its threshold: empirically on a held-out half (split) or by "
        "normal fits to a held-out fifth (gaussian); default: gaussian for Dirac and aligned canaries, "
        "whose scores are Gaussian by construction, split otherwise",
    )
    audit.add_argument(
        "--out",
        type=Path,
        help="JSON to write, one attack (default: the first RUN/audit_ATTACK.json, or FILE_audit.json)",
    )
    audit.add_argument("--out-dir", type=Path, help="folder for DIR/audit_ATTACK.json, one per attack")
    audit.add_argument("--no-plot", action="store_true", help="skip the ROC plot (PNG + PDF beside the JSON)")
    audit.set_defaults(handler=_cmd_audit)

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

    attack = commands.add_parser(
        "attack",
        help="run the shadow-model membership-inference attack on a trained run",
        description="The DPSGD-GC/DC paper's shadow-model attack (per-class 10→50→2 MLPs on logits) against the "
        "target of a `dpaudit train` run, at each checkpoint epoch. Prints FPR, FNR and ε̂ (eq. 20); writes "
        "attack.json and per-record scores (scores_epoch_EEEE.csv).",
    )
    attack.add_argument("--run", required=True, type=Path, help="output folder of `dpaudit train`")
    attack.add_argument("--epochs", type=_int_list, help="checkpoint epochs to attack (default: all)")
    attack.add_argument("--delta", type=float, default=1e-5, help="DP δ in ε̂ (default: 1e-5)")
    attack.add_argument("--attack-epochs", type=int, default=50, help="epochs of attack-model training (default: 50)")
    attack.add_argument(
        "--pooled", action="store_true", help="one attack model for all classes instead of one per class"
    )
    attack.add_argument("--seed", type=int, default=0, help="seed of the attack models (default: 0)")
    attack.add_argument("--out", type=Path, help="output folder (default: the run folder)")
    attack.add_argument("--quiet", action="store_true", help="no progress bars")
    attack.set_defaults(handler=_cmd_attack)

    theory = commands.add_parser(
        "theory",
        help="print a theoretical RDP bound (DPSGD-GC/DC and the bounds its paper compares with) as JSON",
        description="Print RDP ε at order α of a bound after T steps (or E epochs), as JSON. "
        "`dpaudit list bounds` names the bounds and their parameters; `alpha-star` prints α*(q, σ).",
    )
    theory.add_argument("bound", help="bound name (see `dpaudit list bounds`) or alpha-star")
    when = theory.add_mutually_exclusive_group()
    when.add_argument("--steps", type=_int_list, default=(0,), metavar="T1,T2,...", help="iterations T")
    when.add_argument("--epochs", type=_int_list, metavar="E1,E2,...", help="epochs E (T = ceil(n/b)·E)")
    for name, text in (
        ("alpha", "Rényi order α > 1"),
        ("L", "smoothness L"),
        ("C", "clipping threshold C"),
        ("sigma", "σ_DP, noise std on the averaged gradient"),
        ("D", "domain size D"),
        ("n", "dataset size n"),
        ("b", "batch size b"),
        ("eta", "learning rate η"),
        ("m", "weak convexity m (Kong & Ribero)"),
        ("q", "sample rate q (alpha-star)"),
    ):
        theory.add_argument(f"--{name}", type=float, help=text)
    theory.add_argument("--delta", type=float, help="also convert to (ε, δ)-DP at this α (Mironov 2017)")
    theory.set_defaults(handler=_cmd_theory)

    eps = commands.add_parser(
        "epsilon",
        help="theoretical ε of a trained run per epoch (from its ledger), or of T identical steps",
        description="Replay a run's privacy ledger through the RDP and/or PRV accountant and print ε per epoch "
        "(written to RUN/MODEL/epsilon.json), or account T steps of noise multiplier z at sample rate q.",
    )
    eps.add_argument("--run", type=Path, help="output folder of `dpaudit train`")
    eps.add_argument("--model", default="target", help="which model's ledger (default: target)")
    eps.add_argument("--epochs", type=_int_list, help="epochs to report (default: all)")
    eps.add_argument(
        "--logging",
        choices=("epoch-end", "first-step"),
        default="epoch-end",
        help="ε after each epoch's last step, or after its first (how the D2P2 authors logged)",
    )
    eps.add_argument("--noise-multiplier", type=float, help="z: noise std / sensitivity C")
    eps.add_argument("--sample-rate", type=float, help="Poisson sample rate q")
    eps.add_argument("--steps", type=int, help="number of steps T")
    eps.add_argument(
        "--accountants",
        type=lambda text: tuple(text.split(",")),
        default=("rdp",),
        metavar="rdp,prv",
        help="accountants to use (default: rdp)",
    )
    eps.add_argument("--out", type=Path, help="JSON to write (default: RUN/MODEL/epsilon.json)")
    _add_accounting_arguments(eps)
    eps.set_defaults(handler=_cmd_epsilon)

    calibrate = commands.add_parser("calibrate", help="smallest noise multiplier z meeting a target (ε, δ)")
    calibrate.add_argument("--target-epsilon", type=float, required=True, help="ε to meet")
    calibrate.add_argument("--sample-rate", type=float, required=True, help="Poisson sample rate q")
    calibrate.add_argument("--steps", type=int, required=True, help="number of steps T")
    calibrate.add_argument("--accountant", choices=("rdp", "prv"), default="rdp", help="accountant (default: rdp)")
    _add_accounting_arguments(calibrate)
    calibrate.set_defaults(handler=_cmd_calibrate)

    figure = commands.add_parser("figure", help="draw one paper figure or table (PDF + PNG, manifest entry)")
    figure.add_argument("name", help="figure name, e.g. dpsgd_dc/figure1 (see `dpaudit list figures`)")
    figure.add_argument("--out", required=True, type=Path, help="output folder, e.g. figures/dpsgd_dc")
    figure.add_argument("--runs", nargs="+", type=Path, help="run folders (trained and attacked) the figure draws")
    figure.add_argument("--alpha", type=float, default=1.1, help="Rényi order α of the theory panels (default 1.1)")
    figure.add_argument("--preset", default="default", help="preset named in the figure title (default: default)")
    figure.add_argument("--L", type=float, default=0.1, help="smoothness L of the theory panels (default 0.1)")
    figure.set_defaults(handler=_cmd_figure)

    manifest = commands.add_parser("manifest", help="merge per-figure manifest entries into figures/manifest.json")
    manifest.add_argument("entries", nargs="+", type=Path, help="*.manifest.json files written by `dpaudit figure`")
    manifest.add_argument("--out", required=True, type=Path, help="the manifest to write")
    manifest.add_argument("--table", type=Path, help="also write the claims as a Markdown table")
    manifest.add_argument("--gallery", type=Path, help="also write a Markdown gallery (PNG thumbnails by paper)")
    manifest.set_defaults(handler=_cmd_manifest)

    summary = commands.add_parser("summarize", help="DVC metrics and plot data from trained and attacked runs")
    summary.add_argument("runs", nargs="+", type=Path, help="run folders (…/<config>/trial_<t>)")
    summary.add_argument("--metrics", required=True, type=Path, help="metrics JSON to write")
    summary.add_argument("--plot", required=True, type=Path, help="CSV of mean ε̂ per configuration and epoch")
    summary.set_defaults(handler=_cmd_summarize)

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
        choices=AUDIT_ATTACKS,
        help="the attack whose audits the pairs show (default: canary)",
    )
    validation.add_argument("--out", required=True, type=Path, help="output folder, e.g. figures/audit")
    validation.add_argument("--title", default="", help="figure title (state dataset and preset)")
    validation.set_defaults(handler=_cmd_validation)

    batch = commands.add_parser(
        "batch",
        help="run several dpaudit commands in one process (torch starts once)",
        description="Run dpaudit commands one after another in this process, each given as one quoted string, "
        "e.g. dpaudit batch 'train --out r --epochs 2' 'attack --run r'. All are parsed before the first runs; "
        "the first that fails stops the batch, and what finished before it stays.",
    )
    batch.add_argument("commands", nargs="+", metavar="COMMAND", help="a dpaudit command line without `dpaudit`")
    batch.add_argument("--quiet", action="store_true", help="no progress lines; the commands' output is discarded")
    batch.set_defaults(handler=_cmd_batch)

    listing = commands.add_parser("list", help="list datasets, models, optimizers, bounds or figures")
    listing.add_argument("what", choices=("datasets", "models", "optim", "bounds", "figures"))
    listing.set_defaults(handler=_cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
