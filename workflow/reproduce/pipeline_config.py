"""Cross-field checks of the pipeline's parameters (params.yaml and the presets under configs/).

The JSON schema (``workflow/schemas/params.schema.yaml``) is the first gate: it checks each field on its own.
:func:`check_pipeline_config` then checks what a schema cannot say — how fields refer to one another (an
optimizer run's name, a validation pair's twin, the canary design a twin must fit) — before Snakemake plans a
single job, so that a bad parameter fails in one line naming it instead of inside ``dpaudit train``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from dpaudit._validation import DPAuditError, brief

# every string of the config, key or value, matches this: the rules paste names into paths, flags and figure titles
# of shell commands (quoted there too), so a name with a space, quote or shell metacharacter is refused up front
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NOT_SAFE = "is not a safe name (a letter or digit, then letters, digits, '_', '.' or '-')"

# a canary design that fits only some optimizers → (the schema's enum of those optimizers, what they have)
CANARY_DESIGN_NEEDS = {
    "projection-aligned": ("projection_optimizer_name", "a random projection"),
    "support": ("support_optimizer_name", "a support learned from dense steps"),
    "whole-run": ("whole_run_optimizer_name", "per-record clipping and noise"),
}
# the attacks that score whole-run canaries (dpaudit.attacks.canary_run), which only audit.whole_run's runs have
# (the other audit sections' runs train Dirac canaries of one step)
WHOLE_RUN_CANARY_ATTACKS = ("canary-run", "canary-final", "canary-spread")


def _is_integer(checker, value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(checker, value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# the schema's validator with stricter types: an integer is an int (jsonschema's own takes 36.0), a number is finite
# (NaN passes every bound: `exclusiveMinimum: 0` lets `.nan` through), neither is a bool
StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def check_pipeline_config(*, config: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Check the fields of a pipeline config that refer to one another.

    Call it after the config has passed the schema; it reads the schema's lists of optimizer names
    (``$defs``: ``optimizer_name``, ``projection_optimizer_name``, ``support_optimizer_name``,
    ``whole_run_optimizer_name``, ``no_dp_claim_optimizer_name``). It first walks the whole config: every string,
    key or value, must be a safe name (:data:`SAFE_NAME`) and every number finite, wherever it is, so that a gap in
    the schema cannot let a shell metacharacter or a NaN through; then it validates the config against the schema
    again with stricter types (:data:`StrictValidator`: an integer field refuses 36.0, a number field NaN and ±inf).

    Args:
        config: The pipeline parameters (params.yaml or a preset), already validated against ``schema``.
        schema: The parsed params schema.

    Raises:
        DPAuditError: One line naming the offending parameter: a string that is not a safe name, a number that is
            not finite, a float or a bool where the schema expects an integer (or any other error of the schema), two
            ``optimizers.runs`` sharing a name, a run whose optimizer is not registered, an ``audit.validation`` pair
            whose twin is not a run of ``optimizers.runs`` or whose twin cannot carry the pair's canary design
            (projection-aligned canaries need a random projection, support canaries a support learned from dense
            steps, noise-scale canaries one canary per step, whole-run canaries per-record weights by the norm), a
            twin with its own audit settings in two pairs, a validation attack that the cross-optimizer audit does not
            score, or an attack of whole-run canaries (``canary-run``, ``canary-final``, ``canary-spread``), which the
            pipeline's runs do not train (their canaries are Dirac canaries of one step; whole-run canaries in a
            validation pair are not scored by ``canary``).
    """
    _check_values(config)
    _check_types(config, schema=schema)
    runs = _check_optimizer_runs(config["optimizers"]["runs"], known=schema["$defs"]["optimizer_name"]["enum"])
    for name, settings in runs.items():
        design = settings.get("canary_design")
        optimizer = settings.get("optimizer", name)
        if design in CANARY_DESIGN_NEEDS and optimizer not in schema["$defs"][CANARY_DESIGN_NEEDS[design][0]]["enum"]:
            raise DPAuditError(
                f"params optimizers.runs.{name}: {design} canaries need {CANARY_DESIGN_NEEDS[design][1]}; "
                f"{optimizer} has none"
            )
    for where, attacks in (
        ("audit.attacks", config["audit"]["attacks"]),
        ("audit.cross_optimizer.attacks", config["audit"]["cross_optimizer"]["attacks"]),
    ):
        for attack in attacks:
            if attack in WHOLE_RUN_CANARY_ATTACKS:
                raise DPAuditError(
                    f"params {where}: {attack} scores whole-run canaries, which this section's runs do not train "
                    "(theirs are Dirac canaries of one step); list it in audit.whole_run.attacks"
                )
    _check_validation(config["audit"], runs=runs, schema=schema)
    _check_whole_run(config["audit"]["whole_run"], runs=runs, schema=schema)
    if "black_box" in config["audit"]:
        _check_black_box(config["audit"], runs=runs, schema=schema)


def _where(path: list[str | int]) -> str:
    """A place in the config as the messages name it: ``audit.whole_run.validation[0].twin``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".") or "(top)"


def _check_values(value: Any, path: list[str | int] | None = None) -> None:
    """Every string of the config, key or value, a safe name; every float finite; anywhere in the config."""
    path = path or []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not SAFE_NAME.fullmatch(key):
                raise DPAuditError(f"params {_where(path)}: key {brief(key)} {_NOT_SAFE}")
            _check_values(item, [*path, key])
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_values(item, [*path, index])
    elif isinstance(value, str) and not SAFE_NAME.fullmatch(value):
        raise DPAuditError(f"params {_where(path)}: {brief(value)} {_NOT_SAFE}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise DPAuditError(f"params {_where(path)}: {value} is not a finite number")


def _check_types(config: Mapping[str, Any], *, schema: Mapping[str, Any]) -> None:
    """The schema again, with an integer an int and a number finite (:data:`StrictValidator`): the most relevant of
    the errors that only the stricter types see. A config the schema itself refuses is the schema gate's to report
    (the Snakefile validates before it calls :func:`check_pipeline_config`)."""
    strict = StrictValidator(schema)
    if strict.is_valid(config) or not jsonschema.Draft202012Validator(schema).is_valid(config):
        return
    error = jsonschema.exceptions.best_match(strict.iter_errors(config))
    raise DPAuditError(f"params {_where(list(error.absolute_path))}: {' '.join(error.message.split())}")


def _check_optimizer_runs(runs: list[Mapping[str, Any]], *, known: list[str]) -> dict[str, dict[str, Any]]:
    """The runs of ``optimizers.runs`` by name (their settings without the name), each naming a known optimizer."""
    settings = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in runs}
    if len(settings) != len(runs):
        raise DPAuditError("params optimizers.runs: two runs share a name")
    for name, run in settings.items():
        optimizer = run.get("optimizer", name)
        if optimizer not in known:
            raise DPAuditError(
                f"params optimizers.runs.{name}: unknown optimizer {optimizer!r}; "
                f"set `optimizer:` to one of {', '.join(known)}"
            )
    return settings


def _check_validation(audit: Mapping[str, Any], *, runs: Mapping[str, Mapping[str, Any]], schema: Mapping) -> None:
    """The auditor's validation: each broken variant's twin is a run that can carry the pair's audit settings."""
    validation = audit["validation"]
    cross = audit["cross_optimizer"]
    twins = {pair[0]: pair[1] for pair in validation["pairs"]}  # broken variant → correct twin
    own_settings = {pair[0]: pair[2] if len(pair) > 2 else {} for pair in validation["pairs"]}  # e.g. canary_design
    for variant, twin in twins.items():
        if twin not in runs:
            raise DPAuditError(
                f"params audit.validation.pairs.{variant}: twin {twin!r} is not a run of optimizers.runs "
                f"({', '.join(runs)})"
            )
    if validation["attack"] not in cross["attacks"]:
        raise DPAuditError(
            f"params audit.validation.attack: {validation['attack']!r} is not one of "
            f"audit.cross_optimizer.attacks ({', '.join(cross['attacks'])})"
        )
    trained = set(twins)  # the runs of the validation section: every variant, and the twins with their own settings
    for variant, twin in twins.items():
        settings = own_settings[variant]
        if not settings:
            continue
        optimizer = runs[twin].get("optimizer", twin)
        design = settings.get("canary_design")
        if design in CANARY_DESIGN_NEEDS and optimizer not in schema["$defs"][CANARY_DESIGN_NEEDS[design][0]]["enum"]:
            raise DPAuditError(
                f"params audit.validation.pairs.{variant}: {design} canaries need "
                f"{CANARY_DESIGN_NEEDS[design][1]}; the twin {twin!r} ({optimizer}) has none"
            )
        if design == "whole-run" and "canary" in cross["attacks"]:
            raise DPAuditError(
                f"params audit.validation.pairs.{variant}: whole-run canaries are not scored by the canary attack "
                "of audit.cross_optimizer.attacks (it scores Dirac canaries of one step)"
            )
        if design == "noise-scale" and settings.get("canaries", cross["canaries"]) != 1:
            raise DPAuditError(
                f"params audit.validation.pairs.{variant}: noise-scale canaries insert one canary per "
                "step (the noise level is one number per step); set canaries: 1 in the pair's settings"
            )
        if twin in trained:
            raise DPAuditError(
                f"params audit.validation.pairs.{variant}: twin {twin!r} with its own audit settings "
                "is in another pair too"
            )
        trained.add(twin)


def whole_run_names(runs: Mapping[str, Mapping[str, Any]], *, schema: Mapping[str, Any]) -> list[str]:
    """The runs of ``optimizers.runs`` (name → settings) that the pipeline audits with whole-run canaries: those
    whose optimizer claims DP (not in the schema's ``no_dp_claim_optimizer_name``) and the design fits (its
    ``whole_run_optimizer_name``), in their order."""
    fits = set(schema["$defs"]["whole_run_optimizer_name"]["enum"]) - _no_dp_claim(schema)
    return [name for name, settings in runs.items() if settings.get("optimizer", name) in fits]


def _no_dp_claim(schema: Mapping[str, Any]) -> set[str]:
    """The optimizers that make no DP claim, from the schema (the registry's ``dp_claim``, mirrored there so that
    Snakemake's process, which parses the pipeline and then schedules it to its end, never imports torch)."""
    return set(schema["$defs"]["no_dp_claim_optimizer_name"]["enum"])


def black_box_settings(name: str, *, runs: Mapping[str, Mapping[str, Any]], audit: Mapping[str, Any]) -> dict[str, Any]:
    """The flat ``TrainConfig`` settings (but ``target_epsilon``) of the black-box rung's run of ``name``: targets only
    on ``audit.common``, the run's own settings (``optimizers.runs``, but its canary design), then
    ``audit.black_box.settings`` and the run's ``audit.black_box.run_settings``, each over the ones before; evaluated
    at its last epoch."""
    black_box = audit["black_box"]
    common = {
        key: value for key, value in audit["common"].items() if key not in ("num_shadows", "split_design", "trials")
    }
    settings = {
        **common,
        "num_shadows": 0,
        "diagnostics": False,
        "canaries": 0,
        "optimizer": name,
        **{key: value for key, value in runs[name].items() if key != "canary_design"},
        **black_box["settings"],
        **black_box.get("run_settings", {}).get(name, {}),
    }
    settings["eval_epochs"] = [settings["epochs"]]
    return settings


def black_box_unfit(
    runs: Mapping[str, Mapping[str, Any]], *, audit: Mapping[str, Any], schema: Mapping[str, Any]
) -> dict[str, str]:
    """Run of ``optimizers.runs`` → why the black-box rung (``audit.black_box``) leaves it out, for those it leaves
    out (in their order): no DP claim (the schema's ``no_dp_claim_optimizer_name``), shuffled sampling, in ``skip``,
    or its rung settings unfit for the many-models design (:func:`_projections_unfit`)."""
    reasons, rung, no_claim = {}, {}, _no_dp_claim(schema)
    for name, settings in runs.items():
        if settings.get("optimizer", name) in no_claim:
            reasons[name] = "no DP claim"
        elif settings.get("sampling") == "shuffle":
            reasons[name] = "shuffled sampling (the audit reads q = b/n of Poisson sampling)"
        elif name in audit["black_box"].get("skip", []):
            reasons[name] = "in audit.black_box.skip"
        else:
            rung[name] = black_box_settings(name, runs=runs, audit=audit)
    reasons.update({name: reason for name, reason in _projections_unfit(rung, schema=schema).items() if reason})
    return {name: reasons[name] for name in runs if name in reasons}


def _projections_unfit(
    settings: Mapping[str, Mapping[str, Any]], *, schema: Mapping[str, Any]
) -> dict[str, str | None]:
    """Run → why the many-models design does not suit its flat ``TrainConfig`` settings (None: it does;
    :func:`dpaudit.blackbox.many_models_unfit`: a projection too large for thousands of models).

    Only a projected optimizer (the schema's ``projection_optimizer_name``) can be unfit, and telling means building
    its model, which imports torch. Snakemake's process calls this while it parses the pipeline, then schedules the
    pipeline to its end, and torch would stay in it for nothing (the pipeline's peak memory:
    ``benchmarks/results/pipeline_time.json``): where torch is not imported yet, a child Python builds the models
    (:func:`_unfit_in_child`)."""
    projection = set(schema["$defs"]["projection_optimizer_name"]["enum"])
    projected = {name: values for name, values in settings.items() if values["optimizer"] in projection}
    reasons: dict[str, str | None] = dict.fromkeys(settings)
    if projected:
        reasons.update((_unfit_here if "torch" in sys.modules else _unfit_in_child)(projected))
    return reasons


def _unfit_here(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, str | None]:
    """:func:`dpaudit.blackbox.many_models_unfit` of each run's flat settings, in this process."""
    from dpaudit.blackbox import many_models_unfit
    from dpaudit.config import TrainConfig

    return {name: many_models_unfit(config=TrainConfig.from_dict(values)) for name, values in settings.items()}


def _unfit_in_child(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, str | None]:
    """:func:`_unfit_here` in a child Python (this module run as a script): the settings go as JSON on its standard
    input, the reasons come back as JSON on its output; no shell, no string of the config on a command line. The
    parse asks twice (the config's check, then the rung's jobs): one child answers both."""
    return json.loads(_unfit_in_child_json(json.dumps(settings, sort_keys=True)))


@functools.cache
def _unfit_in_child_json(settings: str) -> str:
    """The child's JSON answer to the JSON ``settings`` (a failed child: a one-line :class:`DPAuditError`)."""
    package = str(Path(__file__).resolve().parents[1])  # the folder of the package reproduce, for the child's imports
    child = subprocess.run(
        [sys.executable, "-m", "reproduce.pipeline_config"],
        input=settings,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package, os.environ.get("PYTHONPATH"))))},
    )
    if child.returncode:
        last = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        raise DPAuditError(
            f"params audit.black_box: building the rung's models to size their projections failed: {last}"
        )
    return child.stdout


def _check_black_box(
    audit: Mapping[str, Any], *, runs: Mapping[str, Mapping[str, Any]], schema: Mapping[str, Any]
) -> None:
    """``audit.black_box``: a run it audits, at target ε the ladder has (``audit.target_epsilons``)."""
    unknown = sorted(set(audit["black_box"].get("skip", [])) - set(runs))
    if unknown:
        raise DPAuditError(f"params audit.black_box.skip: {unknown[0]!r} is not a run of optimizers.runs")
    if set(runs) <= set(black_box_unfit(runs, audit=audit, schema=schema)):
        raise DPAuditError(
            "params audit.black_box: no run of optimizers.runs has a DP-claiming, Poisson-sampled optimizer that the "
            "many-models design fits (e.g. dpsgd-gc); remove the section or add one"
        )
    missing = sorted(set(audit["black_box"]["target_epsilons"]) - set(audit["target_epsilons"]))
    if missing:
        raise DPAuditError(
            f"params audit.black_box.target_epsilons: {', '.join(f'{e:g}' for e in missing)} not in "
            "audit.target_epsilons (the ladder's rows)"
        )


def _check_whole_run(whole_run: Mapping[str, Any], *, runs: Mapping[str, Mapping[str, Any]], schema) -> None:
    """``audit.whole_run``: at least one run the design fits; each bug of its validation names a twin of
    ``optimizers.runs`` that whole-run canaries fit, and departs from it by a broken optimizer or a sampling."""
    if not whole_run_names(runs, schema=schema):
        raise DPAuditError(
            "params audit.whole_run: no run of optimizers.runs has a DP-claiming optimizer that whole-run canaries "
            "fit (any with per-record clipping and noise, e.g. dpsgd-gc)"
        )
    names = [bug["name"] for bug in whole_run["validation"]]
    if len(set(names)) != len(names):
        raise DPAuditError("params audit.whole_run.validation: two bugs share a name")
    for bug in whole_run["validation"]:
        where = f"params audit.whole_run.validation.{bug['name']}"
        if bug["twin"] not in whole_run_names(runs, schema=schema):
            raise DPAuditError(
                f"{where}: twin {bug['twin']!r} is not a run of optimizers.runs that whole-run canaries fit "
                f"({', '.join(whole_run_names(runs, schema=schema))})"
            )
        if ("optimizer" in bug) == ("sampling" in bug):
            raise DPAuditError(f"{where}: give exactly one of optimizer (a broken variant) and sampling")
        if "sampling" in bug and bug["sampling"] == runs[bug["twin"]].get("sampling", "poisson"):
            raise DPAuditError(f"{where}: sampling {bug['sampling']!r} is the twin's own; the bug must depart from it")


if __name__ == "__main__":  # the child of _unfit_in_child: run → flat settings on stdin, run → reason on stdout
    json.dump(_unfit_here(json.load(sys.stdin)), sys.stdout)
