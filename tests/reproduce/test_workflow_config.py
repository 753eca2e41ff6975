"""The workflow's Python side, without Snakemake: the cross-field checks of the pipeline parameters, and the figure
registry's declared inputs that the rules read."""

import copy
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import types

import pytest
import yaml
from jsonschema import Draft202012Validator
from support import ROOT, merged_config

from dpaudit import DPAuditError
from reproduce.figures import FIGURE_SPECS, FIGURES
from reproduce.pipeline_config import StrictValidator, check_pipeline_config

SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


def _params():
    return copy.deepcopy(PARAMS)


def _pairs(config):
    return config["audit"]["validation"]["pairs"]


def _pair(config, variant):
    return next(pair for pair in _pairs(config) if pair[0] == variant)


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


def _whole_run_twin_with_a_support(config):
    config["optimizers"]["runs"].append({"name": "sgd", "lr": 0.1})
    _pairs(config).append(["dpsgd-auto", "sgd", {"canary_design": "whole-run"}])


def _whole_run_pair_scored_by_the_canary_attack(config):
    _pairs(config).append(["dpsgd-auto", "auto-v", {"canary_design": "whole-run"}])


def _whole_run_without_a_fitting_run(config):
    config["optimizers"]["runs"] = [run for run in config["optimizers"]["runs"] if run["name"] == "adadpigu-code"]
    config["audit"]["validation"]["pairs"] = []


def _whole_run_bug_with_an_unfit_twin(config):
    config["audit"]["whole_run"]["validation"][0]["twin"] = "adadpigu-code"


def _black_box_without_a_fitting_run(config):
    config["optimizers"]["runs"] = [run for run in config["optimizers"]["runs"] if run["name"] == "dp2-sgd"]
    config["audit"]["black_box"]["run_settings"] = {}
    config["audit"]["validation"]["pairs"] = []
    config["audit"]["whole_run"]["validation"] = []


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
            "params audit.whole_run: no run of optimizers.runs has a DP-claiming optimizer that whole-run canaries fit",
        ),
        (
            _whole_run_bug_with_an_unfit_twin,
            "params audit.whole_run.validation.understated-q: twin 'adadpigu-code' is not a run of optimizers.runs "
            "that whole-run canaries fit (dpsgd-gc, auto-s, auto-v, dp-psac, dpsgd-auto, d2p-sgd, dp2-sgd, d2p2-sgd, "
            "tp-topk, tp-rand, on-topk, on-rand, adadpigu)",
        ),
        (
            _whole_run_bug_departing_twice,
            "params audit.whole_run.validation.understated-q: give exactly one of optimizer (a broken variant) and "
            "sampling",
        ),
        (_whole_run_bugs_sharing_a_name, "params audit.whole_run.validation: two bugs share a name"),
        (
            _black_box_without_a_fitting_run,
            "params audit.black_box: no run of optimizers.runs has a DP-claiming, Poisson-sampled optimizer that the "
            "many-models design fits",
        ),
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
            _whole_run_twin_with_a_support,
            "params audit.validation.pairs.dpsgd-auto: whole-run canaries need per-record clipping and noise; the "
            "twin 'sgd' (sgd) has none",
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


def _refused(config, message):
    """``check_pipeline_config`` refuses ``config`` with one line starting with ``message``."""
    with pytest.raises(DPAuditError) as error:
        check_pipeline_config(config=config, schema=SCHEMA)
    assert str(error.value).startswith(message) and "\n" not in str(error.value), str(error.value)


@pytest.mark.parametrize("preset", ["x; touch /tmp/pwned", "my laptop", "it's", '"quoted"', "$(id)", "-rf", ""])
def test_a_preset_that_is_not_a_safe_name_is_refused_by_the_schema_and_the_checks(preset):
    config = _params()
    config["preset"] = preset
    assert not Draft202012Validator(SCHEMA).is_valid(config)
    _refused(config, "params preset: ")


def _set(path, value):
    """An edit setting the value at ``path`` (keys and list indices) of the config."""

    def edit(config):
        *parents, last = path
        for part in parents:
            config = config[part]
        config[last] = value

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        # the schema's own gaps: jsonschema's `$` also matches before a final newline, so these pass its patterns
        (_set(["preset"], "default\n"), "params preset: 'default\\n' is not a safe name"),
        (
            _set(["audit", "whole_run", "validation", 0, "twin"], "dpsgd-gc\n"),
            "params audit.whole_run.validation[0].twin: 'dpsgd-gc\\n' is not a safe name",
        ),
        # shell metacharacters in nested places: a twin, a pair's twin, an experiment's name, a paper run's setting
        (
            _set(["audit", "whole_run", "validation", 0, "twin"], "dpsgd-gc; rm -rf ~"),
            "params audit.whole_run.validation[0].twin: 'dpsgd-gc; rm -rf ~' is not a safe name",
        ),
        (
            _set(["audit", "validation", "pairs", 0, 1], "dpsgd-gc`id`"),
            "params audit.validation.pairs[0][1]: 'dpsgd-gc`id`' is not a safe name",
        ),
        (
            _set(["papers", "experiments", "my runs"], {"runs": [{"optimizer": "sgd"}]}),
            "params papers.experiments: key 'my runs' is not a safe name",
        ),
        (
            _set(["papers", "experiments", "nonprivate", "runs", 0, "sampling"], "$(id)"),
            "params papers.experiments.nonprivate.runs[0].sampling: '$(id)' is not a safe name",
        ),
        (
            _set(["papers", "experiments", "tp_split", "grid", "warmup_fraction"], ["0.2'"]),
            'params papers.experiments.tp_split.grid.warmup_fraction[0]: "0.2\'" is not a safe name',
        ),
    ],
)
def test_a_string_that_is_not_a_safe_name_is_refused_wherever_it_is(edit, message):
    config = _params()
    edit(config)
    _refused(config, message)


@pytest.mark.parametrize(
    "text, message",
    [
        # what passes jsonschema's own types and bounds: NaN passes exclusiveMinimum, 36.0 counts as an integer
        ("dpsgd_dc: {common: {lr: .nan}}", "params dpsgd_dc.common.lr: nan is not a finite number"),
        (
            "optimizers: {runs: [{name: dpsgd-gc, lr: .nan}]}",
            "params optimizers.runs[0].lr: nan is not a finite number",
        ),
        ("audit: {target_epsilons: [.inf]}", "params audit.target_epsilons[0]: inf is not a finite number"),
        ("dpsgd_dc: {theory: {alpha: -.inf}}", "params dpsgd_dc.theory.alpha: -inf is not a finite number"),
        (
            "optimizers: {common: {batch_size: 36.0}}",
            "params optimizers.common.batch_size: 36.0 is not of type 'integer'",
        ),
        (
            "dpsgd_dc: {gc: {batch_sizes: [20, 40.0]}}",
            "params dpsgd_dc.gc.batch_sizes[1]: 40.0 is not of type 'integer'",
        ),
        ("papers: {common: {num_shadows: 0.0}}", "params papers.common.num_shadows: 0.0 is not of type 'integer'"),
        (  # a paper grid's values are typed as the run's own settings
            "papers: {experiments: {adadpigu_tradeoff: {grid: {batch_size: [36.0]}}}}",
            "params papers.experiments.adadpigu_tradeoff.grid.batch_size[0]: 36.0 is not of type 'integer'",
        ),
    ],
)
def test_non_finite_numbers_and_floats_for_integers_are_refused_naming_the_field(text, message):
    config = merged_config(_params(), yaml.safe_load(text))
    _refused(config, message)


def test_the_strict_types_refuse_what_jsonschema_takes_and_keep_what_the_presets_use():
    config = _params()
    config["dpsgd_dc"]["common"]["lr"] = float("nan")
    assert Draft202012Validator(SCHEMA).is_valid(config) and not StrictValidator(SCHEMA).is_valid(config)
    config = _params()
    config["optimizers"]["common"]["batch_size"] = 36.0
    assert Draft202012Validator(SCHEMA).is_valid(config) and not StrictValidator(SCHEMA).is_valid(config)
    config = _params()
    config["optimizers"]["common"]["clip_norm"] = 1  # an int where a number is expected: fine, as 1.0 is
    assert StrictValidator(SCHEMA).is_valid(config) and isinstance(PARAMS["optimizers"]["common"]["clip_norm"], float)


def _workflow_helpers():
    """The helpers of workflow/rules/common.smk (plain Python), as the rules see them (run from the repository)."""
    namespace = {"config": {}, "workflow": types.SimpleNamespace(basedir=str(ROOT))}
    exec(compile((ROOT / "workflow/rules/common.smk").read_text(), "common.smk", "exec"), namespace)
    return namespace


def test_a_preset_run_apart_passes_the_repositorys_data_folder(tmp_path, monkeypatch):
    """`snakemake --directory presets/NAME`: the jobs run there, and get --data-root pointing back to the data folder
    beside the Snakefile; from the repository itself, no flag (the runs' settings do not change)."""
    monkeypatch.chdir(ROOT)
    assert "--data-root" not in _workflow_helpers()["cli_flags"]({"lr": 0.1})
    (tmp_path / "presets" / "example").mkdir(parents=True)
    helpers = {"config": {}, "workflow": types.SimpleNamespace(basedir=str(tmp_path))}
    monkeypatch.chdir(tmp_path / "presets" / "example")
    exec(compile((ROOT / "workflow/rules/common.smk").read_text(), "common.smk", "exec"), helpers)
    assert helpers["cli_flags"]({"lr": 0.1}) == "--lr 0.1 --data-root ../../data"


def test_cli_flags_quote_each_value():
    cli_flags = _workflow_helpers()["cli_flags"]
    flags = cli_flags(
        {
            "dataset": "my data; id",
            "eval_epochs": [1, 2],
            "download": True,
            "diagnostics": False,
            "device": None,
            "lr": 0.1,
            "sampling": "it's",
        }
    )
    assert flags == (
        "--dataset 'my data; id' --eval-epochs 1,2 --download --no-diagnostics --lr 0.1 --sampling 'it'\"'\"'s'"
    )
    assert shlex.split(flags) == [
        "--dataset",
        "my data; id",
        "--eval-epochs",
        "1,2",
        "--download",
        "--no-diagnostics",
        "--lr",
        "0.1",
        "--sampling",
        "it's",
    ]
    # safe values read as they did before quoting (so a valid config's commands, and Snakemake's records, stay)
    assert cli_flags({"optimizer": "dpsgd-gc", "delta": 1e-05, "eval_epochs": [10, 20]}) == (
        "--optimizer dpsgd-gc --delta 1e-05 --eval-epochs 10,20"
    )


def test_batch_commands_keep_each_value_one_word_through_both_shell_splits():
    helpers = _workflow_helpers()
    train = helpers["train_command"]("results/a b/trial_0", 0, helpers["cli_flags"]({"dataset": "x;y"}), summarize=True)
    attack = "attack --quiet --run " + helpers["shell_word"]("results/a b/trial_0")
    command = helpers["batch_command"](train, attack)
    outer = shlex.split(command)  # the job's shell, then `python -m reproduce batch` splitting each command
    assert outer[:5] == [sys.executable, "-m", "reproduce", "batch", "--quiet"] and len(outer) == 7
    assert shlex.split(outer[5]) == [
        "train",
        "--quiet",
        "--overwrite",
        "--summarize",
        "--out",
        "results/a b/trial_0",
        "--trial",
        "0",
        "--dataset",
        "x;y",
    ]
    assert shlex.split(outer[6]) == ["attack", "--quiet", "--run", "results/a b/trial_0"]
    assert shlex.split(helpers["run_folders"](["results/a b/trial_0/x.json", "results/c/trial_1/y.json"])) == [
        "results/a b/trial_0",
        "results/c/trial_1",
    ]


# `{...}` fields of a rule's shell command that hold words the rule's helpers quoted already (batch_command,
# run_folders, shell_words; REPRODUCE, the interpreter as one word and `-m reproduce`); every other field must be
# quoted by Snakemake (`:q`)
PRE_QUOTED = {"params.commands", "params.runs", "params.pairs", "params.unfit", "REPRODUCE"}


def _shell_commands():
    """(file, line, text) of every `shell:` block of the Snakefile and the rule files."""
    for path in [ROOT / "Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() != "shell:":
                continue
            indent = len(line) - len(line.lstrip())
            block = []
            for following in lines[number + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                block.append(following.strip())
            yield path.name, number + 1, "\n".join(block)


def test_every_value_in_a_shell_command_is_quoted():
    commands = list(_shell_commands())
    assert len(commands) >= 20
    for name, number, block in commands:
        assert "+" not in block, f"{name}:{number}: a value pasted into the command: {block}"
        assert "'{" not in block and "}'" not in block, f"{name}:{number}: a field quoted by hand: {block}"
        for field in re.findall(r"\{([^{}]*)\}", block):
            assert field.endswith(":q") or field in PRE_QUOTED, f"{name}:{number}: {{{field}}} is not quoted"
    # the pre-quoted fields are built by the quoting helpers (optimizer_run_commands returns a batch_command)
    for path in sorted((ROOT / "workflow/rules").glob("*.smk")):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(commands|runs|pairs)=", line):
                helper = r"\b(batch_command|run_folders|shell_words|optimizer_run_commands)\("
                assert re.search(helper, line), f"{path.name}: {line}"
    assert "    return batch_command(" in (ROOT / "workflow/rules/optimizers.smk").read_text()
    common = (ROOT / "workflow/rules/common.smk").read_text()
    assert '\nREPRODUCE = f"{shell_word(sys.executable)} -m reproduce"\n' in common
    assert shlex.split(_workflow_helpers()["REPRODUCE"]) == [sys.executable, "-m", "reproduce"]


def _lock_numbers(value):
    """dvc.lock's values as params.yaml's: DVC writes 1.0e-5 as 1e-05, which YAML 1.1 reads as a string."""
    if isinstance(value, dict):
        return {key: _lock_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_lock_numbers(item) for item in value]
    if isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value):
        return float(value)
    return value


def test_dvc_lock_records_the_values_of_params_yaml():
    """`dvc status` in a fresh clone reports no changed parameter: the lock holds every section dvc.yaml lists, as
    params.yaml has it (a params.yaml edit commits the lock of the run it made)."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["figures"]
    recorded = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]["figures"]["params"]["params.yaml"]
    assert sorted(recorded) == sorted(stage["params"])
    for section in stage["params"]:
        assert _lock_numbers(recorded[section]) == PARAMS[section], section


def test_the_dvc_stage_depends_on_all_the_code_its_jobs_run():
    """The library and the whole workflow (rules, schema, the reproduction's package), not a list of files that
    falls behind the code; the lock records exactly those (compiled Python ignored: .dvcignore)."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["figures"]
    assert stage["deps"] == ["Snakefile", "dpaudit", "workflow"]
    locked = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]["figures"]["deps"]
    assert [dep["path"] for dep in locked] == stage["deps"]
    assert {"__pycache__/", "*.pyc"} <= set((ROOT / ".dvcignore").read_text().splitlines())


def _black_box_case() -> tuple[dict, dict]:
    """Runs of every kind the black-box rung leaves out or takes, and the audit section they run under."""
    runs = {
        "dpsgd-gc": {},
        "adadpigu": {"retention_ratio": 0.6},
        "d2p2-sgd": {"reduction_rate": 0.3},  # a projection per model: fits on linear, not on mlp
        "dp2-sgd": {"reduction_rate": 0.3},
        "dpsgd-no-noise": {},  # no DP claim
        "shuffled": {"optimizer": "dpsgd-gc", "sampling": "shuffle"},  # the accountants' Poisson claim does not hold
        "tp-topk": {},
    }
    audit = copy.deepcopy(PARAMS["audit"])
    audit["black_box"]["settings"]["model"] = "mlp"
    audit["black_box"]["run_settings"] = {"d2p2-sgd": {"model": "linear"}}
    audit["black_box"]["skip"] = ["tp-topk"]
    return runs, audit


def test_the_black_box_rung_takes_the_dp_claiming_poisson_runs_that_fit_and_says_why_it_leaves_out_the_others():
    from reproduce.pipeline_config import black_box_settings, black_box_unfit

    runs, audit = _black_box_case()
    reasons = black_box_unfit(runs, audit=audit, schema=SCHEMA)
    assert [name for name in runs if name not in reasons] == ["dpsgd-gc", "adadpigu", "d2p2-sgd"]
    assert set(reasons) == {"dp2-sgd", "dpsgd-no-noise", "shuffled", "tp-topk"}
    assert "20,624,158 entries per model on mlp" in reasons["dp2-sgd"]  # 64·128 weights × ⌊0.3·8192⌋ + … (mlp)
    assert reasons["dpsgd-no-noise"] == "no DP claim" and reasons["tp-topk"] == "in audit.black_box.skip"
    settings = black_box_settings("d2p2-sgd", runs=runs, audit=audit)  # run_settings over settings over the run's
    assert (settings["model"], settings["reduction_rate"], settings["eval_epochs"]) == ("linear", 0.3, [10])
    assert (settings["canaries"], settings["num_shadows"]) == (0, 0) and "trials" not in settings


# what the Snakefile calls while it parses, in a fresh Python as Snakemake's process is: it reads params.yaml
_PARSE_TIME = """
import json, sys, yaml
from reproduce.pipeline_config import black_box_unfit, check_pipeline_config, whole_run_names
case, schema, params = json.load(sys.stdin), yaml.safe_load(open(sys.argv[1])), yaml.safe_load(open(sys.argv[2]))
check_pipeline_config(config=params, schema=schema)
print(json.dumps({
    "whole_run": whole_run_names(case["runs"], schema=schema),
    "unfit": black_box_unfit(case["runs"], audit=case["audit"], schema=schema),
    "torch": "torch" in sys.modules,
}))
"""


def test_the_pipelines_parse_time_checks_leave_torch_out_of_snakemakes_process_with_the_same_answers():
    # Snakemake's process parses the pipeline, then schedules it to its end: torch in it would hold its memory
    # through every job. The black-box rung's projections are sized by a child Python there (dp2-sgd on mlp: unfit);
    # the answers are those of this process, which has torch
    from dpaudit import optim  # with torch: here the projections are sized in this process
    from reproduce.pipeline_config import black_box_unfit, whole_run_names

    runs, audit = _black_box_case()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            _PARSE_TIME,
            str(ROOT / "workflow/schemas/params.schema.yaml"),
            str(ROOT / "params.yaml"),
        ],
        input=json.dumps({"runs": runs, "audit": audit}),
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT / "workflow"), os.environ.get("PYTHONPATH")))),
        },
    )
    parsed = json.loads(child.stdout)
    assert parsed["torch"] is False
    assert parsed["unfit"] == black_box_unfit(runs, audit=audit, schema=SCHEMA)
    assert "entries per model on mlp" in parsed["unfit"]["dp2-sgd"]  # sized, by the child
    assert parsed["whole_run"] == whole_run_names(runs, schema=SCHEMA)
    assert parsed["whole_run"] == [  # every run here fits whole-run canaries: those whose optimizer claims DP
        name for name, settings in runs.items() if optim.get_spec(settings.get("optimizer", name)).dp_claim
    ]


def test_a_child_that_cannot_size_the_projections_gives_one_line():
    from reproduce.pipeline_config import _unfit_in_child

    with pytest.raises(DPAuditError, match=r"^params audit.black_box: building the rung's models .* failed: \S"):
        _unfit_in_child({"dp2-sgd": {"optimizer": "dp2-sgd", "model": "no-such-model"}})
