"""The Snakemake workflow: schema validation, presets, profiles, dispatch through an executor plugin."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from support import ROOT, comparable, merged_config

# every test here starts Snakemake (a dry run or a pipeline) in a subprocess: CI's second step
pytestmark = pytest.mark.integration

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _copy_workflow(destination):
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, destination / name)
    for folder in ("workflow", "configs", "profiles"):
        shutil.copytree(ROOT / folder, destination / folder)
    return destination


@pytest.fixture()
def workflow_copy(tmp_path):
    """The workflow files in a scratch folder, so tests never touch the repository's results."""
    return _copy_workflow(tmp_path)


def _snakemake(folder, *args, check=True):
    result = subprocess.run([*SNAKEMAKE, *args], cwd=folder, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(result.stdout[-3000:] + result.stderr[-3000:])
    return result


# Part of the smoke DAG: a DPSGD-GC/DC run attacked, a cross-audit optimizer trained, summarised and scored (each
# through `python -m reproduce batch`), an optimizer run attacked and an audit run trained
SMOKE_TARGETS = [
    "results/dpsgd_dc/gc_b20/trial_1/attack.json",
    "results/audit_cross/dpsgd-gc_eps4/audit_canary.json",
    "results/optimizers/d2p2-sgd_eps4/trial_0/attack.json",
    "results/audit/dpsgd-gc_eps4/trial_0/config.json",
]


@pytest.fixture(scope="session")  # session: built at most once per xdist worker
def smoke_part(tmp_path_factory):
    """``SMOKE_TARGETS`` run once, clean, in a scratch workflow copy: shared by the tests that each check another
    property of such a run (reproduced bit for bit; an edit reruns exactly its jobs). Tests must not change it: one
    that edits works on a copy."""
    folder = _copy_workflow(tmp_path_factory.mktemp("smoke_part"))
    _snakemake(folder, "--cores", "2", "--configfile", "configs/smoke.yaml", "--", *SMOKE_TARGETS)
    return folder


PAPER_FIGURES = {
    "adadpigu": ["figure2", "figure5", "figure6", "figure7", "figure8", "table3", "table4"],
    "tp_topk": ["figure1", "figure2", "table2", "table3", "table4"],
    "dp_psac": ["figure1", "figure2", "figure3", "figure4", "figure5", "table2"],
    "d2p2_sgd": ["figure2", "figure4", "figure5", "figure6", "table2"],
}


def _job_count(output: str, rule: str) -> int:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == rule:
            return int(parts[1])
    return 0


@pytest.mark.parametrize(
    "preset, trainings, optimizer_runs, audit_runs, trials_per_run, cross_optimizers, validation_runs, whole_run",
    [
        # DPSGD-GC/DC configurations (paper: × trials); optimizers × target ε × trials; audit: ε × trials;
        # cross-optimizer audit and the auditor's validation: one job per optimizer (all its ε); validation: the
        # variants, and the twins of pairs with their own audit settings (support or noise-scale canaries);
        # whole-run canaries: one job per optimizer they fit (all its ε), and one per bug run and per twin run the
        # ladder does not train
        # (five bugs at two ε each, and shuffling's twin at ε = 32)
        (None, 4 + 6, 14 * 1 * 1, 4 * 2, 2, 14, 6 + 2, (13, 5 * 2 + 1)),
        ("configs/smoke.yaml", 2 + 4, 6 * 1 * 1, 1, 1, 6, 4 + 1, (6, 1)),
        ("configs/paper.yaml", 6 * 10 + 6 * 10, 13 * 5 * 5, 4 * 5, 5, 13, 6 + 2, (12, 5 * 2 + 1)),
        ("configs/mnist.yaml", 2 + 4, 12 * 1 * 1, 2 * 1, 1, 12, 1, (12, 1)),
    ],
)
def test_presets_build_the_same_dag(
    workflow_copy,
    preset,
    trainings,
    optimizer_runs,
    audit_runs,
    trials_per_run,
    cross_optimizers,
    validation_runs,
    whole_run,
):
    args = ["-n", "--cores", "1"] + (["--configfile", preset] if preset else [])
    output = _snakemake(workflow_copy, *args).stdout
    # DPSGD-GC/DC: one job per configuration trains and attacks all its trials in one process (`reproduce batch`);
    # the paper preset's GPU runs have one job per trial
    assert _job_count(output, "dpsgd_dc_run") == trainings
    assert _job_count(output, "dpsgd_dc_data_figure") == 3
    assert _job_count(output, "optimizers_run") == optimizer_runs
    assert _job_count(output, "audit_run") == audit_runs
    # one job per run scores all its attacks (audit: 5), trials pooled; one per optimizer trains and scores its
    # cross-optimizer runs at every ε
    assert _job_count(output, "audit_score") == audit_runs // trials_per_run
    assert _job_count(output, "audit_optimizer") == cross_optimizers + validation_runs
    assert _job_count(output, "audit_cross_table") == 1 and _job_count(output, "audit_validation") == 1
    assert (_job_count(output, "audit_run_optimizer"), _job_count(output, "audit_run_bug")) == whole_run
    assert _job_count(output, "audit_ladder") == 1 and _job_count(output, "audit_run_validation") == 1
    # the crafted-canary black-box rung: one job per DP-claiming, Poisson run (all its ε) whose rung settings fit the
    # many-models design: the projected pair only on digits' linear model (not on MNIST's, nor on the paper's data)
    black_box_jobs = {None: 13, "configs/smoke.yaml": 6, "configs/paper.yaml": 10, "configs/mnist.yaml": 10}
    assert _job_count(output, "audit_blackbox") == black_box_jobs[preset]
    # every paper figure and table (AdaDPIGU, TP-TopK, DP-PSAC, D2P2-SGD) whose optimizers the preset has
    figures = sum(
        _job_count(output, f"figure_{paper}_{name}") for paper, names in PAPER_FIGURES.items() for name in names
    )
    skipped = {"configs/smoke.yaml": 2, "configs/mnist.yaml": 1}.get(preset, 0)  # the figures it opts out of
    assert figures == len([n for names in PAPER_FIGURES.values() for n in names]) - skipped
    paper_rules = {
        line.split()[0] for line in output.splitlines() if line.startswith("papers_") and len(line.split()) == 2
    }
    paper_jobs = sum(_job_count(output, rule) for rule in paper_rules)
    assert 0 < paper_jobs <= 12 and _job_count(output, "manifest") == 1  # one per optimizer with paper runs


def test_bad_parameter_is_rejected_before_any_job(workflow_copy):
    params = workflow_copy / "params.yaml"
    params.write_text(params.read_text().replace("lr: 0.1 ", "lr: -0.1 "))
    result = _snakemake(workflow_copy, "-n", "--cores", "1", check=False)
    assert result.returncode != 0
    assert "Error validating config file" in result.stdout + result.stderr
    assert "dpsgd_dc_run" not in result.stdout


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "{name: d2p2-sgd, lr: 0.005, gamma: 0.01, reduction_rate: 0.3, projection_refresh: run,",
            "{name: d2p2-sgd, lr: 0.005, gamma: 0.01, reduction_rate: 1.5, projection_refresh: run,",
            "Error validating config file",
        ),
        ("{name: auto-v, lr: 0.2}", "{name: auto-w, lr: 0.2}", "unknown optimizer 'auto-w'"),
        ("target_epsilons: [4]", "target_epsilons: [0]", "Error validating config file"),
        (
            "attacks: [loss, shadow, lira-online, lira-offline, rmia-online, rmia-offline, canary]",
            "attacks: [loss, lira]",
            "Error validating config file",
        ),
        # LiRA needs the paired-halves split with an even model count
        ("    split_design: halves\n", "", "Error validating config file"),
        ("num_shadows: 8 ", "num_shadows: 7 ", "Error validating config file"),
        # the auditor's validation: a variant must be a registered optimizer, a twin a run of optimizers.runs
        ("- [dpsgd-no-clip, dpsgd-gc]", "- [dpsgd-no-clipping, dpsgd-gc]", "Error validating config file"),
        # run names become folder names: none may leave results/
        (
            "    - {name: dpsgd-gc, lr: 0.2}\npapers:",
            "    - {name: ../../escape, lr: 0.2}\npapers:",
            "Error validating config file",
        ),
        ("{name: auto-v, lr: 0.2}", "{name: auto-v.., lr: 0.2}", "Error validating config file"),
        (
            "- [dpsgd-no-clip, dpsgd-gc]",
            "- [dpsgd-no-clip, dpsgd-dc]",
            "audit.validation.pairs.dpsgd-no-clip: twin 'dpsgd-dc' is not a run of optimizers.runs",
        ),
        # projection-aligned canaries: only for the random-projection optimizers, variant (schema) and twin
        ("canary_design: projection-aligned}", "canary_design: aligned}", "Error validating config file"),
        (
            "- [dpsgd-no-clip, dpsgd-gc]",
            "- [dpsgd-no-clip, dpsgd-gc, {canary_design: projection-aligned}]",
            "Error validating config file",
        ),
        (
            "- [dp2-sgd-as-published, dp2-sgd]",
            "- [dp2-sgd-as-published, dpsgd-gc, {canary_design: projection-aligned}]",
            "projection-aligned canaries need a random projection; the twin 'dpsgd-gc' (dpsgd-gc) has none",
        ),
        # support canaries: only for optimizers that learn a support from dense steps
        (
            "- [dpsgd-no-clip, dpsgd-gc]",
            "- [dpsgd-no-clip, dpsgd-gc, {canary_design: support}]",
            "Error validating config file",
        ),
        (
            "- [adadpigu-code, adadpigu,",
            "- [adadpigu-code, dpsgd-gc,",
            "support canaries need a support learned from dense steps; the twin 'dpsgd-gc' (dpsgd-gc) has none",
        ),
        (
            "{canary_design: support, canaries: 1000}",
            "{canary_design: support, canaries: 0}",
            "Error validating config file",
        ),
        # noise-scale canaries: one per step
        (
            "{canary_design: noise-scale, canaries: 1}",
            "{canary_design: noise-scale, canaries: 200}",
            "noise-scale canaries insert one canary per step",
        ),
        (
            "{canary_design: noise-scale, canaries: 1}",
            "{canary_design: noise-scale}",
            "noise-scale canaries insert one canary per step",
        ),
        # what passes the schema's own types and bounds (NaN passes exclusiveMinimum, 36.0 counts as an integer)
        ("    lr: 0.1 ", "    lr: .nan ", "params dpsgd_dc.common.lr: nan is not a finite number"),
        ("target_epsilons: [4] ", "target_epsilons: [.inf] ", "params optimizers.target_epsilons[0]: inf is not a"),
        (
            "    batch_size: 36         # expected",
            "    batch_size: 36.0       # expected",
            "params optimizers.common.batch_size: 36.0 is not of type 'integer'",
        ),
        # every string reaches shell commands: a preset, a twin, an experiment's name are safe names
        ("preset: default ", 'preset: "x; touch pwned" ', "ValidationError: 'x; touch pwned' does not match"),
        ("preset: default ", "preset: my laptop ", "ValidationError: 'my laptop' does not match"),
        ("twin: dpsgd-gc,", "twin: dpsgd-gc`id`,", "Error validating config file"),
        ("  nonprivate:  ", "  non private:  ", "Error validating config file"),
    ],
)
def test_bad_optimizer_parameter_is_rejected_before_any_job(workflow_copy, old, new, message):
    params = workflow_copy / "params.yaml"
    assert old in params.read_text()
    params.write_text(params.read_text().replace(old, new))
    result = _snakemake(workflow_copy, "-n", "--cores", "1", check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "optimizers_run" not in result.stdout


def test_every_value_reaches_the_shell_quoted_even_past_the_checks(workflow_copy):
    """The second wall: with the schema and the checks switched off, a preset and a paper run's setting full of shell
    metacharacters reach every job's command as one word each (Snakemake's `:q`, the rules' shlex quoting; `python -m
    reproduce batch` splits each of its commands again)."""
    snakefile = workflow_copy / "Snakefile"
    text = snakefile.read_text()
    for gate in ("validate(config, ", "check_pipeline_config(config="):
        assert text.count("\n" + gate) == 1
        text = text.replace("\n" + gate, "\nif False: " + gate)
    snakefile.write_text(text)
    preset, sampling = "my laptop; touch pwned", "it's $(touch pwned)"
    params = workflow_copy / "params.yaml"
    old_run = "runs: [{optimizer: sgd, lr: 0.2, canaries: 0, clip_norm: null}]"
    assert "preset: default " in params.read_text() and old_run in params.read_text()
    params.write_text(
        params.read_text()
        .replace("preset: default ", f'preset: "{preset}" ')
        .replace(old_run, f'runs: [{{optimizer: sgd, lr: 0.2, canaries: 0, clip_norm: null, sampling: "{sampling}"}}]')
    )
    result = _snakemake(workflow_copy, "-n", "-p", "--cores", "1")
    output = result.stdout + result.stderr
    commands = [
        shlex.split(line.split("Shell command: ", 1)[1]) for line in output.splitlines() if "Shell command: " in line
    ]
    assert len(commands) > 100
    presets = [words[i + 1] for words in commands for i, word in enumerate(words) if word == "--preset"]
    titles = [words[i + 1] for words in commands for i, word in enumerate(words) if word == "--title"]
    assert len(presets) > 20 and set(presets) == {preset}
    assert len(titles) == 4 and all(title.endswith(f", {preset} preset") for title in titles)
    samplings = [
        inner[i + 1]
        for words in commands
        if words[1:4] == ["-m", "reproduce", "batch"]
        for command in words[5 : words.index(">")]
        for inner in [shlex.split(command)]
        for i, word in enumerate(inner)
        if word == "--sampling"
    ]
    assert sampling in samplings and set(samplings) <= {sampling, "poisson", "shuffle"}
    assert not (workflow_copy / "pwned").exists()


def test_schema_knows_every_registered_optimizer_model_and_dataset():
    import yaml

    from dpaudit import models, optim
    from dpaudit.data.datasets import available_datasets

    schema = yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())
    assert sorted(schema["$defs"]["optimizer_name"]["enum"]) == sorted(optim.available())
    assert sorted(schema["$defs"]["model_name"]["enum"]) == sorted(models.available())
    assert sorted(schema["$defs"]["dataset_name"]["enum"]) == sorted(available_datasets())
    projected = [name for name in optim.available() if issubclass(optim.get_spec(name).cls, optim.ProjectedNoise)]
    assert sorted(schema["$defs"]["projection_optimizer_name"]["enum"]) == sorted(projected)
    learned = [
        name
        for name in optim.available()
        if issubclass(optim.get_spec(name).cls, (optim.AdaDPIGU, optim.TwoPhaseSparse))
    ]
    assert sorted(schema["$defs"]["support_optimizer_name"]["enum"]) == sorted(learned)
    norm_weighted = [name for name in optim.available() if optim.get_spec(name).cls.takes_dirac_records()]
    assert sorted(schema["$defs"]["whole_run_optimizer_name"]["enum"]) == sorted(norm_weighted)
    no_claim = [name for name in optim.available() if not optim.get_spec(name).dp_claim]
    assert sorted(schema["$defs"]["no_dp_claim_optimizer_name"]["enum"]) == sorted(no_claim)


def test_slurm_profile_parses_and_builds_the_paper_dag(workflow_copy):
    output = _snakemake(
        workflow_copy, "-n", "--workflow-profile", "profiles/slurm", "--configfile", "configs/paper.yaml"
    ).stdout
    assert _job_count(output, "dpsgd_dc_run") == 120


def test_jobs_are_dispatched_through_an_executor_plugin(workflow_copy):
    submit = workflow_copy / "submit.sh"
    log = workflow_copy / "submitted.log"
    submit.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\nbash "${{@: -1}}" > /dev/null 2>&1 &\necho $!\n')
    submit.chmod(0o755)
    _snakemake(
        workflow_copy,
        "--executor",
        "cluster-generic",
        "--cluster-generic-submit-cmd",
        str(submit),
        "--jobs",
        "2",
        "--latency-wait",
        "30",
        # the plugin polls its jobs' markers every round of status checks (10 s by default): 1 s keeps the test short
        "--seconds-between-status-checks",
        "1",
        "figures/dpsgd_dc/figure1.pdf",
        "figures/dpsgd_dc/table1.md",
    )
    assert (workflow_copy / "figures" / "dpsgd_dc" / "figure1.png").is_file()
    assert (workflow_copy / "figures" / "dpsgd_dc" / "table1.tex").is_file()
    assert len(log.read_text().strip().splitlines()) == 2  # two jobs, each through the submit command


@pytest.mark.slow  # two `dvc repro` runs of the smoke DAG: about 5 min on 2 cores
def test_dvc_repro_reruns_only_the_jobs_a_parameter_touches(workflow_copy):
    from reproduce.figures import FIGURE_SPECS

    shutil.copy(ROOT / "dvc.yaml", workflow_copy / "dvc.yaml")
    # what `snakemake --configfile configs/smoke.yaml` reads: the preset over params.yaml, key by key
    smoke = merged_config(
        yaml.safe_load((workflow_copy / "params.yaml").read_text()),
        yaml.safe_load((workflow_copy / "configs" / "smoke.yaml").read_text()),
    )
    # keeps it short: one paper figure family per output folder (dvc needs every folder it tracks)
    kept = ("nonprivate", "d2p2_sigma", "d2p2_batch", "d2p2_reduction")
    smoke["papers"]["experiments"] = {name: smoke["papers"]["experiments"][name] for name in kept}
    lacking = [name for name, spec in FIGURE_SPECS.items() if not set(spec.experiments) <= set(kept)]
    smoke["papers"]["skip_figures"] = sorted(
        {*smoke["papers"].get("skip_figures", []), *(name.replace("/", ".", 1) for name in lacking)}
    )
    (workflow_copy / "params.yaml").write_text(yaml.safe_dump(smoke, sort_keys=False, allow_unicode=True))
    subprocess.run(["git", "init", "-q"], cwd=workflow_copy, check=True)
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "init", "-q"], cwd=workflow_copy, check=True)
    subprocess.run([*dvc, "config", "core.analytics", "false"], cwd=workflow_copy, check=True)
    # the stage depends on the library's code too (dvc.yaml: dpaudit/), compiled Python aside (.dvcignore)
    shutil.copytree(ROOT / "dpaudit", workflow_copy / "dpaudit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".dvcignore", workflow_copy / ".dvcignore")

    def repro():
        result = subprocess.run(
            [*dvc, "repro", "figures"], cwd=workflow_copy, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout + result.stderr

    params = workflow_copy / "params.yaml"
    first = repro()
    assert (workflow_copy / "figures" / "dpsgd_dc" / "figure3.png").is_file()
    assert (workflow_copy / "metrics" / "dpsgd_dc.json").is_file()
    assert "dpsgd_dc_run" in first
    gc_config = (workflow_copy / "results/dpsgd_dc/gc_b20/trial_0/config.json").stat().st_mtime_ns
    assert (workflow_copy / "metrics" / "optimizers.json").is_file()
    edited = yaml.safe_load(params.read_text())
    edited["dpsgd_dc"]["dc"]["domain_radii"] = [2, 5]
    next(run for run in edited["optimizers"]["runs"] if run["name"] == "d2p2-sgd")["lr"] = 0.01
    params.write_text(yaml.safe_dump(edited, sort_keys=False, allow_unicode=True))
    second = repro()
    # the `dpaudit train` steps of the jobs that ran (a job's "reason" may quote its old command too)
    trained = [
        step
        for line in second.splitlines()
        if line.startswith("Shell command:")
        for step in re.findall(r"'train [^']*'", line)
    ]
    # the new D = 5 runs (2 batch sizes × 2 trials), d2p2-sgd in the optimizer and cross-optimizer audit
    # sections (both take optimizers.runs), its broken variant in the validation section (a variant takes its
    # twin's settings), its whole-run audit run (audit_run) and the 4 d2p2-sgd paper runs (they start from its
    # tuned lr)
    assert len(trained) == 2 * 2 + 2 + 1 + 1 + 4, "\n".join(trained)
    assert sum("--domain-radius 5.0" in line for line in trained) == 4
    assert sum("--optimizer d2p2-sgd " in line and "--lr 0.01" in line for line in trained) == 3 + 4
    assert sum("--optimizer d2p2-sgd-as-published " in line and "--lr 0.01" in line for line in trained) == 1
    assert sum("results/audit_cross/d2p2-sgd_eps4/" in line for line in trained) == 1
    assert (workflow_copy / "results/dpsgd_dc/gc_b20/trial_0/config.json").stat().st_mtime_ns == gc_config
    assert "Nothing to be done" in repro() or "didn't change" in repro()
    # a change of the library's code is a change of the stage, compiled Python is not
    (workflow_copy / "dpaudit" / "__pycache__").mkdir(exist_ok=True)
    (workflow_copy / "dpaudit" / "__pycache__" / "stray.pyc").write_bytes(b"x")
    status = subprocess.run(
        [*dvc, "status", "figures"], cwd=workflow_copy, capture_output=True, text=True, check=True
    ).stdout
    assert "modified:" not in status, status
    with open(workflow_copy / "dpaudit" / "stats.py", "a", encoding="utf-8") as stream:
        stream.write("\n")
    status = subprocess.run(
        [*dvc, "status", "figures"], cwd=workflow_copy, capture_output=True, text=True, check=True
    ).stdout
    assert "modified:" in status and "dpaudit" in status, status


def test_editing_a_run_setting_reruns_exactly_its_jobs(smoke_part, tmp_path):
    """Snakemake's params trigger sees the `dpaudit train` flags of the training rules (a params function that
    takes `output` once hid them: an edit of params.yaml left the finished runs in place)."""
    targets = [
        "results/dpsgd_dc/gc_b20/trial_1/attack.json",
        "results/optimizers/d2p2-sgd_eps4/trial_0/attack.json",
        "results/audit/dpsgd-gc_eps4/trial_0/config.json",
    ]
    assert set(targets) <= set(SMOKE_TARGETS)
    workflow_copy = tmp_path / "edited"
    shutil.copytree(smoke_part, workflow_copy, symlinks=True)  # the finished runs, with Snakemake's records of them
    smoke = workflow_copy / "configs" / "smoke.yaml"
    edited = yaml.safe_load(smoke.read_text())
    edited["dpsgd_dc"]["gc"]["eval_epochs"] = [1, 4]
    next(run for run in edited["optimizers"]["runs"] if run["name"] == "d2p2-sgd")["lr"] = 0.01
    smoke.write_text(yaml.safe_dump(edited, sort_keys=False, allow_unicode=True))
    result = _snakemake(workflow_copy, "-n", "--cores", "2", "--configfile", "configs/smoke.yaml", "--", *targets)
    planned = result.stdout + result.stderr
    assert _job_count(planned, "dpsgd_dc_run") == 1 and _job_count(planned, "optimizers_run") == 1
    assert _job_count(planned, "audit_run") == 0


def test_an_interrupted_pipeline_resumes_training_and_ends_as_if_never_interrupted(workflow_copy, tmp_path):
    """Ctrl-C (SIGINT to Snakemake and its job) once a DPSGD-GC/DC run has saved epoch 3 or later of 40; `snakemake`
    again resumes the run and writes the same files as an uninterrupted pipeline."""
    from support import assert_same_results, wait_for_saved_epoch

    # one trial: the job trains every trial of its configuration
    (workflow_copy / "longer.yaml").write_text(
        "dpsgd_dc:\n  common: {trials: 1}\n  gc: {batch_sizes: [20, 30], epochs: 40, eval_epochs: [20, 40]}\n"
    )
    interrupted = tmp_path / "interrupted"
    shutil.copytree(workflow_copy, interrupted)
    run = "results/dpsgd_dc/gc_b20/trial_0"
    command = [
        *SNAKEMAKE,
        "--cores",
        "2",
        "--configfile",
        "configs/smoke.yaml",
        "longer.yaml",
        "--",
        f"{run}/attack.json",
    ]
    environment = {**os.environ, "DPAUDIT_STATE_EVERY": "0"}
    subprocess.run(command, cwd=workflow_copy, env=environment, check=True, capture_output=True, timeout=300)
    log = tmp_path / "interrupted.log"
    # SIGINT as in a terminal: a shell's background job (CI) would start it with SIGINT ignored
    process = subprocess.Popen(
        command,
        cwd=interrupted,
        env=environment,
        start_new_session=True,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for_saved_epoch(process, interrupted / run / "shadow_00", 3)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=120) != 0, (
        "the pipeline ended before it could be interrupted:\n" + log.read_text()[-3000:]
    )
    assert not (interrupted / run / "attack.json").exists()
    resumed = subprocess.run(command, cwd=interrupted, env=environment, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    job_log = (interrupted / "logs/dpsgd_dc_run/gc_b20.log").read_text()  # the rule's log: what the job said
    assert re.search(r"resuming target\+shadow_00 after epoch ([3-9]|\d\d) of 40", job_log)
    assert_same_results(workflow_copy / "results", interrupted / "results")


def test_same_configuration_and_seed_reproduce_every_result_bit_for_bit(smoke_part, tmp_path):
    """Two clean runs of part of the smoke DAG (a DPSGD-GC/DC configuration's trials attacked, a cross-audit
    optimizer trained, summarised and scored, each through `python -m reproduce batch`) write identical files; only
    wall-clock times differ."""
    workflow_copy = smoke_part  # the first run, shared (it has run more targets: only these folders are compared)
    second = _copy_workflow(tmp_path)
    targets = SMOKE_TARGETS[:2]
    _snakemake(second, *targets, "--cores", "2", "--configfile", "configs/smoke.yaml")
    folders = ("results/dpsgd_dc/gc_b20", "results/audit_cross/dpsgd-gc_eps4")  # every trial of the configuration
    files = sorted(
        path.relative_to(workflow_copy)
        for folder in folders
        for path in (workflow_copy / folder).rglob("*")
        if path.is_file()
    )
    assert len(files) > 20 and any(path.suffix == ".pt" for path in files)
    assert files == sorted(path.relative_to(second) for path in (second / "results").rglob("*") if path.is_file())
    for path in files:  # but for wall-clock seconds (test_resume.comparable)
        ours, theirs = (comparable(path, (folder / path).read_bytes()) for folder in (workflow_copy, second))
        assert ours == theirs, path
