"""The workflow's Python side, without Snakemake: the cross-field checks of the pipeline parameters, and the figure
registry's declared inputs that the rules read."""

import copy
import inspect
from pathlib import Path

import pytest
import yaml

from dpaudit import DPAuditError
from dpaudit.figures import FIGURE_SPECS, FIGURES
from dpaudit.pipeline_config import check_pipeline_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


def _merged(base, override):
    """``override`` over ``base``, mappings merged key by key, as Snakemake merges a --configfile."""
    merged = dict(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _merged(base[key], value) if nested else value
    return merged


def _params():
    return copy.deepcopy(PARAMS)


def _pairs(config):
    return config["audit"]["validation"]["pairs"]


def _pair(config, variant):
    return next(pair for pair in _pairs(config) if pair[0] == variant)


@pytest.mark.parametrize("preset", [None, "configs/smoke.yaml", "configs/paper.yaml"])
def test_presets_pass(preset):
    config = _params() if preset is None else _merged(_params(), yaml.safe_load((ROOT / preset).read_text()))
    check_pipeline_config(config=config, schema=SCHEMA)


def _two_runs_share_a_name(config):
    config["optimizers"]["runs"].append(dict(config["optimizers"]["runs"][0]))


def _unknown_optimizer(config):
    config["optimizers"]["runs"].append({"name": "auto-w", "lr": 0.2})


def _unknown_optimizer_of_a_renamed_run(config):
    config["optimizers"]["runs"].append({"name": "fast", "optimizer": "auto-w"})


def _twin_not_a_run(config):
    _pair(config, "dpsgd-no-clip")[1] = "dpsgd-dc"


def _attack_not_scored(config):
    config["audit"]["validation"]["attack"] = "shadow"


def _projection_twin_without_projection(config):
    _pair(config, "dp2-sgd-as-published")[1:] = ["dpsgd-gc", {"canary_design": "projection-aligned"}]


def _projection_canaries_on_a_run_without_projection(config):
    config["optimizers"]["runs"][0]["canary_design"] = "projection-aligned"


def _support_twin_without_support(config):
    _pair(config, "adadpigu-code")[1] = "dpsgd-gc"


def _noise_scale_with_many_canaries(config):
    _pair(config, "dp-psac-batch-noise")[2]["canaries"] = 200


def _noise_scale_with_the_default_canaries(config):
    del _pair(config, "dp-psac-batch-noise")[2]["canaries"]


def _twin_with_own_settings_twice(config):
    _pair(config, "dp2-sgd-as-published")[2:] = [{"canary_design": "projection-aligned"}]
    _pairs(config).append(["dpsgd-auto", "dp2-sgd", {"canary_design": "projection-aligned"}])


def _whole_run_attack_in_the_audit(config):
    config["audit"]["attacks"].append("canary-run")


def _whole_run_attack_in_the_cross_audit(config):
    config["audit"]["cross_optimizer"]["attacks"].append("canary-final")


def _whole_run_twin_with_a_projection(config):
    _pairs(config).append(["dpsgd-auto", "dp2-sgd", {"canary_design": "whole-run"}])


def _whole_run_pair_scored_by_the_canary_attack(config):
    _pairs(config).append(["dpsgd-auto", "auto-v", {"canary_design": "whole-run"}])


def _whole_run_without_a_fitting_run(config):
    config["optimizers"]["runs"] = [
        run for run in config["optimizers"]["runs"] if run["name"] in ("dp2-sgd", "tp-topk")
    ]
    config["audit"]["validation"]["pairs"] = [["dp2-sgd-as-published", "dp2-sgd"]]


def _whole_run_bug_with_an_unfit_twin(config):
    config["audit"]["whole_run"]["validation"][0]["twin"] = "dp2-sgd"


def _whole_run_bug_departing_twice(config):
    config["audit"]["whole_run"]["validation"][0]["sampling"] = "shuffle"


def _whole_run_bugs_sharing_a_name(config):
    bugs = config["audit"]["whole_run"]["validation"]
    bugs[1]["name"] = bugs[0]["name"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (_two_runs_share_a_name, "params optimizers.runs: two runs share a name"),
        (
            _whole_run_without_a_fitting_run,
            "params audit.whole_run: no run of optimizers.runs has an optimizer that whole-run canaries fit",
        ),
        (
            _whole_run_bug_with_an_unfit_twin,
            "params audit.whole_run.validation.understated-q: twin 'dp2-sgd' is not a run of optimizers.runs that "
            "whole-run canaries fit (dpsgd-gc, auto-s, auto-v, dp-psac, dpsgd-auto, d2p-sgd)",
        ),
        (
            _whole_run_bug_departing_twice,
            "params audit.whole_run.validation.understated-q: give exactly one of optimizer (a broken variant) and "
            "sampling",
        ),
        (_whole_run_bugs_sharing_a_name, "params audit.whole_run.validation: two bugs share a name"),
        (
            _unknown_optimizer,
            "params optimizers.runs.auto-w: unknown optimizer 'auto-w'; set `optimizer:` to one of "
            + ", ".join(SCHEMA["$defs"]["optimizer_name"]["enum"]),
        ),
        (_unknown_optimizer_of_a_renamed_run, "params optimizers.runs.fast: unknown optimizer 'auto-w'; "),
        (
            _twin_not_a_run,
            "params audit.validation.pairs.dpsgd-no-clip: twin 'dpsgd-dc' is not a run of optimizers.runs ("
            + ", ".join(run["name"] for run in PARAMS["optimizers"]["runs"])
            + ")",
        ),
        (
            _attack_not_scored,
            "params audit.validation.attack: 'shadow' is not one of audit.cross_optimizer.attacks (canary, loss)",
        ),
        (
            _projection_twin_without_projection,
            "params audit.validation.pairs.dp2-sgd-as-published: projection-aligned canaries need a random "
            "projection; the twin 'dpsgd-gc' (dpsgd-gc) has none",
        ),
        (
            _projection_canaries_on_a_run_without_projection,
            "params optimizers.runs.dpsgd-gc: projection-aligned canaries need a random projection; dpsgd-gc has none",
        ),
        (
            _support_twin_without_support,
            "params audit.validation.pairs.adadpigu-code: support canaries need a support learned from dense steps; "
            "the twin 'dpsgd-gc' (dpsgd-gc) has none",
        ),
        (
            _noise_scale_with_many_canaries,
            "params audit.validation.pairs.dp-psac-batch-noise: noise-scale canaries insert one canary per step (the "
            "noise level is one number per step); set canaries: 1 in the pair's settings",
        ),
        (
            _noise_scale_with_the_default_canaries,
            "params audit.validation.pairs.dp-psac-batch-noise: noise-scale canaries insert one canary per step",
        ),
        (
            _twin_with_own_settings_twice,
            "params audit.validation.pairs.dpsgd-auto: twin 'dp2-sgd' with its own audit settings is in another "
            "pair too",
        ),
        (
            _whole_run_attack_in_the_audit,
            "params audit.attacks: canary-run scores whole-run canaries, which this section's runs do not train",
        ),
        (
            _whole_run_attack_in_the_cross_audit,
            "params audit.cross_optimizer.attacks: canary-final scores whole-run canaries",
        ),
        (
            _whole_run_twin_with_a_projection,
            "params audit.validation.pairs.dpsgd-auto: whole-run canaries need each record's gradient weighted by its "
            "norm alone; the twin 'dp2-sgd' (dp2-sgd) has none",
        ),
        (
            _whole_run_pair_scored_by_the_canary_attack,
            "params audit.validation.pairs.dpsgd-auto: whole-run canaries are not scored by the canary attack",
        ),
    ],
)
def test_each_cross_field_check_names_the_parameter_in_one_line(edit, message):
    config = _params()
    edit(config)
    with pytest.raises(DPAuditError) as error:
        check_pipeline_config(config=config, schema=SCHEMA)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_twin_without_its_own_settings_may_be_in_several_pairs():
    config = _params()
    _pairs(config).append(["dpsgd-auto", "dpsgd-gc"])
    check_pipeline_config(config=config, schema=SCHEMA)


def test_figures_are_the_drawing_functions_of_the_specs():
    assert list(FIGURES) == list(FIGURE_SPECS)
    assert all(FIGURES[name] is spec.draw for name, spec in FIGURE_SPECS.items())


@pytest.mark.parametrize("name", list(FIGURE_SPECS))
def test_a_figure_takes_runs_exactly_when_it_declares_inputs(name):
    spec = FIGURE_SPECS[name]
    assert ("runs" in inspect.signature(spec.draw).parameters) == spec.draws_runs
    assert not spec.grids or name.startswith("dpsgd_dc/")  # the grids are those of the DPSGD-GC/DC section


def test_the_default_parameters_have_every_input_a_figure_declares():
    runs = {run["name"] for run in PARAMS["optimizers"]["runs"]}
    for name, spec in FIGURE_SPECS.items():
        assert set(spec.experiments) <= set(PARAMS["papers"]["experiments"]), name
        assert set(spec.cross + spec.diagnostics) <= runs, name
        assert set(spec.grids) <= {"gc", "dc"} <= set(PARAMS["dpsgd_dc"]), name
