# The audit core. Two sections:
# - results/audit: DP-SGD-style runs at several theoretical ε, each trained with white-box gradient canaries on
#   its target and shadows on paired halves, scored by every attack in `audit.attacks` (metrics/audit.md);
# - results/audit_cross: every run of `optimizers.runs` at the same ε, targets only, scored by the attacks in
#   `audit.cross_optimizer.attacks` (metrics/audit_optimizers.md, figures/audit/).
# `dpaudit audit` turns each run's scores (trials pooled) into ε̂: point estimate, 95 % lower bound, ceiling.

AUD = config["audit"]
AUD_RESOURCES = section_resources(AUD)  # of the training jobs
AUD_COMMON = {k: v for k, v in AUD["common"].items() if k != "trials"}
AUD_SHADOW = "shadow" in AUD["attacks"]  # the shadow attack's scores come from `dpaudit attack` after training
AUD_SETTINGS = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in AUD["runs"]}
CROSS = AUD["cross_optimizer"]
CROSS_COMMON = {**{k: v for k, v in AUD_COMMON.items() if k not in ("num_shadows", "split_design")},
                "num_shadows": 0, "diagnostics": False, "canaries": CROSS["canaries"]}
VALIDATION = AUD["validation"]
VALIDATION_PAIRS = {pair[0]: pair[1] for pair in VALIDATION["pairs"]}  # broken variant → correct twin
VALIDATION_AUDIT = {pair[0]: pair[2] if len(pair) > 2 else {} for pair in VALIDATION["pairs"]}  # e.g. canary_design
# each broken variant trains with its twin's settings: the two differ only where the variant breaks DP
# (the Snakefile has checked every pair with reproduce.pipeline_config before any job)
VALIDATION_SETTINGS = {variant: {**OPT_SETTINGS[twin], **VALIDATION_AUDIT[variant], "optimizer": variant}
                       for variant, twin in VALIDATION_PAIRS.items()}
# a pair audited with its own settings trains its twin with them here too (the cross-optimizer audit has the defaults)
for _variant, _twin in VALIDATION_PAIRS.items():
    if VALIDATION_AUDIT[_variant]:
        VALIDATION_SETTINGS[_twin] = {**OPT_SETTINGS[_twin], **VALIDATION_AUDIT[_variant]}
# whole-run canaries: every run of optimizers.runs they fit (results/audit_run), and the bugs only they see beside
# their twins (results/audit_run_validation), each trained once with the cross-optimizer settings
WHOLE = AUD["whole_run"]
WHOLE_COMMON = {**CROSS_COMMON, "canaries": WHOLE["canaries"], "canary_design": "whole-run"}
# (a run's own canary design, e.g. projection-aligned for the cross-optimizer audit, gives way to the whole-run one)
WHOLE_SETTINGS = {name: {k: v for k, v in OPT_SETTINGS[name].items() if k != "canary_design"}
                  for name in whole_run_names(OPT_SETTINGS, schema=SCHEMA)}
WHOLE_BUG_SETTINGS = {  # a bug departs from its twin by its broken optimizer or by its sampling
    bug["name"]: {"optimizer": OPT_SETTINGS[bug["twin"]].get("optimizer", bug["twin"]), **WHOLE_SETTINGS[bug["twin"]],
                  **{k: bug[k] for k in ("optimizer", "sampling") if k in bug}}
    for bug in WHOLE["validation"]
}
WHOLE_BUG_SETTINGS.update({bug["twin"]: WHOLE_SETTINGS[bug["twin"]] for bug in WHOLE["validation"]})
AUD_SECTIONS = {  # folder → (run settings by name, common settings, trials, attacks)
    "audit": (AUD_SETTINGS, AUD_COMMON, AUD["common"]["trials"], AUD["attacks"]),
    "audit_cross": (OPT_SETTINGS, CROSS_COMMON, CROSS["trials"], CROSS["attacks"]),
    "audit_validation": (VALIDATION_SETTINGS, CROSS_COMMON, CROSS["trials"], CROSS["attacks"]),
    "audit_run": (WHOLE_SETTINGS, WHOLE_COMMON, 1, WHOLE["attacks"]),
    "audit_run_validation": (WHOLE_BUG_SETTINGS, WHOLE_COMMON, 1, WHOLE["attacks"]),
}


# the black-box rung: its own run per DP-claiming, Poisson-sampled run of optimizers.runs and ε that the many-models
# design fits (black_box_settings: audit.black_box's settings over the cross-optimizer ones and the run's own), K models
# each, scored by `dpaudit blackbox`; the ladder names why it leaves out the others (BLACK_BOX_UNFIT)
BLACK_BOX = AUD.get("black_box")
BLACK_BOX_UNFIT = black_box_unfit(OPT_SETTINGS, audit=AUD, schema=SCHEMA) if BLACK_BOX else {}
BLACK_BOX_NAMES = [name for name in OPT_SETTINGS if name not in BLACK_BOX_UNFIT] if BLACK_BOX else []


def black_box_files():
    return [f"results/audit_blackbox/{name}_eps{eps:g}/blackbox.json" for name in BLACK_BOX_NAMES
            for eps in BLACK_BOX["target_epsilons"]] if BLACK_BOX else []

AUD_RUN_TABLES = {section: epsilon_run_table(settings, AUD["target_epsilons"])
                  for section, (settings, _, _, _) in AUD_SECTIONS.items() if section != "audit_run_validation"}


def whole_run_twin(twin, eps):
    """The run folder of a bug's twin at ε: the ladder's run where it has one (the same settings), else its own."""
    section = "audit_run" if f"{twin}_eps{eps:g}" in AUD_RUN_TABLES["audit_run"] else "audit_run_validation"
    return trial_folder(section, f"{twin}_eps{eps:g}", 0)


# each bug at its own ε, and its twin at each of them that the ladder does not train
AUD_RUN_TABLES["audit_run_validation"] = {
    **{run: entry for bug in WHOLE["validation"]
       for run, entry in epsilon_run_table([bug["name"]], bug["target_epsilons"]).items()},
    **{run: entry for bug in WHOLE["validation"]
       for run, entry in epsilon_run_table([bug["twin"]], bug["target_epsilons"]).items()
       if run not in AUD_RUN_TABLES["audit_run"]},
}
WHOLE_BUG_PAIRS = [  # (bug run folder, twin run folder) per bug and ε
    (trial_folder("audit_run_validation", f"{bug['name']}_eps{eps:g}", 0), whole_run_twin(bug["twin"], eps))
    for bug in WHOLE["validation"] for eps in bug["target_epsilons"]
]


def epsilon_runs(name):
    """The runs of one optimizer setting, one per theoretical ε."""
    return list(epsilon_run_table([name], AUD["target_epsilons"]))


def audit_runs(section):
    return list(AUD_RUN_TABLES[section])


def audit_files(section):
    return expand("results/{section}/{run}/audit_{attack}.json", section=section, run=audit_runs(section),
                  attack=AUD_SECTIONS[section][3])


def audit_train_flags(run, section):
    settings, common, _, _ = AUD_SECTIONS[section]
    name, eps = AUD_RUN_TABLES[section][run]
    return cli_flags({**common, "optimizer": name, **settings[name], "target_epsilon": eps})


wildcard_constraints:
    name="[^/]+",


rule audit_all:
    input:
        audit_files("audit"),  # the runs' audits too, so that a fresh clone re-runs them
        audit_files("audit_cross"),
        audit_files("audit_validation"),
        audit_files("audit_run"),
        audit_files("audit_run_validation"),
        black_box_files(),
        "figures/audit/validation.png",
        "figures/audit/validation_run.png",
        "figures/audit/ladder.png",
        "metrics/audit.json",
        "metrics/audit_optimizers.json",
        "metrics/audit_ladder.json",


rule audit_run:  # one trial: train (canaries on the target), then the shadow attack if scored, in one process
    output:
        "results/audit/{run}/trial_{trial}/config.json",
        *(["results/audit/{run}/trial_{trial}/attack.json"] if AUD_SHADOW else []),
    params:
        commands=lambda wildcards: batch_command(
            train_command(trial_folder("audit", wildcards.run, wildcards.trial), wildcards.trial,
                          audit_train_flags(wildcards.run, "audit")),
            *([f"attack --quiet --run {shell_word(trial_folder('audit', wildcards.run, wildcards.trial))}"]
              if AUD_SHADOW else [])),
    resources:
        **AUD_RESOURCES,
    log:
        "logs/audit_run/{run}/trial_{trial}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


def score_command(section, run):
    """`dpaudit audit` of every attack of a section on one run, its trials pooled."""
    _, _, trials, attacks = AUD_SECTIONS[section]
    folders = shell_words(trial_folder(section, run, trial) for trial in range(trials))
    return (f"audit --run {folders} --attack {shell_words(attacks)} --delta {shell_word(AUD_COMMON['delta'])}"
            f" --confidence {shell_word(AUD['confidence'])} --no-plot"
            f" --out-dir {shell_word(f'results/{section}/{run}')}")


rule audit_score:  # every attack on one run in one process; the trials are pooled
    input:
        expand("results/audit/{{run}}/trial_{trial}/{file}", trial=range(AUD["common"]["trials"]),
               file=["config.json"] + (["attack.json"] if AUD_SHADOW else [])),
    output:
        expand("results/audit/{{run}}/audit_{attack}.json", attack=AUD["attacks"]),
    params:
        commands=lambda wildcards: batch_command(score_command("audit", wildcards.run)),
    log:
        "logs/audit_score/{run}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


rule audit_optimizer:  # one optimizer at every ε: train (and summarise) each trial, then score each ε-run
    output:
        expand("results/{{section}}/{{name}}_eps{eps:g}/trial_{trial}/{file}", eps=AUD["target_epsilons"],
               trial=range(CROSS["trials"]), file=["config.json", "summary.json"]),
        expand("results/{{section}}/{{name}}_eps{eps:g}/audit_{attack}.json", eps=AUD["target_epsilons"],
               attack=CROSS["attacks"]),
    wildcard_constraints:
        section="audit_cross|audit_validation",
    params:
        commands=lambda wildcards: batch_command(
            *[train_command(trial_folder(wildcards.section, run, trial), trial,
                            audit_train_flags(run, wildcards.section), summarize=True)
              for run in epsilon_runs(wildcards.name) for trial in range(CROSS["trials"])],
            *[score_command(wildcards.section, run) for run in epsilon_runs(wildcards.name)]),
    resources:
        **AUD_RESOURCES,
    log:
        "logs/audit_optimizer/{section}/{name}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


rule audit_validation:  # the broken variants beside their twins; false alarms over every correct run's audits
    input:
        audit_files("audit_validation"),
        audit_files("audit_cross"),
        audit_files("audit"),
    output:
        multiext("figures/audit/validation", ".pdf", ".png", ".md", ".tex", ".json", ".manifest.json"),
    params:
        pairs=shell_words(f"{variant}={twin}" for variant, twin in VALIDATION_PAIRS.items()),
        title=f"{AUD_COMMON['dataset']}, {config.get('preset', 'default')} preset",
    log:
        "logs/audit_validation.log",
    shell:
        "{REPRODUCE} validation {input:q} --pair {params.pairs} --attack {VALIDATION[attack]:q} > {log:q} 2>&1"
        " --out figures/audit --title {params.title:q} > /dev/null"


rule audit_table:
    input:
        audit_files("audit"),
    output:
        metrics="metrics/audit.json",
        table="metrics/audit.md",
    log:
        "logs/audit_table.log",
    shell:
        "{REPRODUCE} audit-table {input:q} --metrics {output.metrics:q} --markdown {output.table:q} > {log:q} 2>&1"


rule audit_cross_table:
    input:
        audit_files("audit_cross"),
    output:
        metrics="metrics/audit_optimizers.json",
        table="metrics/audit_optimizers.md",
        figures=multiext("figures/audit/lower_bounds", ".pdf", ".png"),
        roc=expand("figures/audit/roc_{attack}.{ext}", attack=CROSS["attacks"], ext=["pdf", "png"]),
        manifest="figures/audit/audit.manifest.json",
    params:
        title=f"every optimizer, {AUD_COMMON['dataset']}, {config.get('preset', 'default')} preset",
    log:
        "logs/audit_cross_table.log",
    shell:
        "{REPRODUCE} audit-table {input:q} --metrics {output.metrics:q} --markdown {output.table:q} > {log:q} 2>&1"
        " --figures figures/audit --title {params.title:q} --roc-epsilon 4"


rule audit_run_optimizer:  # whole-run canaries on one optimizer at every ε: train each ε-run, then score it
    output:
        expand("results/audit_run/{{name}}_eps{eps:g}/trial_0/{file}", eps=AUD["target_epsilons"],
               file=["config.json", "summary.json"]),
        expand("results/audit_run/{{name}}_eps{eps:g}/audit_{attack}.json", eps=AUD["target_epsilons"],
               attack=WHOLE["attacks"]),
    params:
        commands=lambda wildcards: batch_command(
            *[train_command(trial_folder("audit_run", run, 0), 0, audit_train_flags(run, "audit_run"), summarize=True)
              for run in epsilon_runs(wildcards.name)],
            *[score_command("audit_run", run) for run in epsilon_runs(wildcards.name)]),
    resources:
        **AUD_RESOURCES,
    log:
        "logs/audit_run_optimizer/{name}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


rule audit_run_bug:  # one run of the whole-run validation (a bug or its twin at one ε): train, then score it
    output:
        "results/audit_run_validation/{run}/trial_0/config.json",
        "results/audit_run_validation/{run}/trial_0/summary.json",
        expand("results/audit_run_validation/{{run}}/audit_{attack}.json", attack=WHOLE["attacks"]),
    params:
        commands=lambda wildcards: batch_command(
            train_command(trial_folder("audit_run_validation", wildcards.run, 0), 0,
                          audit_train_flags(wildcards.run, "audit_run_validation"), summarize=True),
            score_command("audit_run_validation", wildcards.run)),
    resources:
        **AUD_RESOURCES,
    log:
        "logs/audit_run_bug/{run}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


def black_box_command(name, eps):
    """`dpaudit blackbox` of one optimizers run at one ε: K models of its own run, the report as JSON."""
    flags = cli_flags({**black_box_settings(name, runs=OPT_SETTINGS, audit=AUD), "target_epsilon": eps})
    return (f"blackbox --quiet {flags} --models {shell_word(BLACK_BOX['models'])}"
            f" --canary {shell_word(BLACK_BOX['canary'])} --initialisation {shell_word(BLACK_BOX['initialisation'])}"
            f" --out {shell_word(f'results/audit_blackbox/{name}_eps{eps:g}/blackbox.json')}")


rule audit_blackbox:  # the black-box rung of one optimizer at every ε of audit.black_box, in one process
    output:
        expand("results/audit_blackbox/{{name}}_eps{eps:g}/blackbox.json",
               eps=BLACK_BOX["target_epsilons"] if BLACK_BOX else []),
    priority: LONG_JOBS_FIRST
    params:
        commands=lambda wildcards: batch_command(
            *[black_box_command(wildcards.name, eps) for eps in BLACK_BOX["target_epsilons"]]),
    resources:
        **AUD_RESOURCES,
    log:
        "logs/audit_blackbox/{name}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


rule audit_ladder:  # the threat-model ladder: theory, whole-run (all iterates, final model), per step, black box
    input:
        black_box_files(),
        audit_files("audit_run"),
        audit_files("audit_cross"),
        [path for path in audit_files("audit") if "/audit_lira" in path or "/audit_rmia" in path],
    output:
        metrics="metrics/audit_ladder.json",
        table="metrics/audit_ladder.md",
        figures=multiext("figures/audit/ladder", ".pdf", ".png", ".manifest.json"),
        profile=multiext("figures/audit/profile", ".pdf", ".png"),
    params:
        title=f"{AUD_COMMON['dataset']}, {config.get('preset', 'default')} preset",
        unfit=shell_words(f"{name}={reason}" for name, reason in BLACK_BOX_UNFIT.items()),
    log:
        "logs/audit_ladder.log",
    shell:
        "{REPRODUCE} ladder {input:q} --metrics {output.metrics:q} --markdown {output.table:q} --figures figures/audit"
        " --title {params.title:q} --canaries {WHOLE[canaries]:q} --black-box-unfit {params.unfit} > {log:q} 2>&1"


rule audit_run_validation:  # the bugs only a whole-run audit sees, beside their twins
    input:
        [f"{folder}/config.json" for pair in WHOLE_BUG_PAIRS for folder in pair],
    output:
        multiext("figures/audit/validation_run", ".pdf", ".png", ".md", ".tex", ".json", ".manifest.json"),
    params:
        pairs=shell_words(f"{bug}={twin}" for bug, twin in WHOLE_BUG_PAIRS),
        title=f"{AUD_COMMON['dataset']}, {config.get('preset', 'default')} preset",
    log:
        "logs/audit_run_validation.log",
    shell:
        "{REPRODUCE} validation-run --pair {params.pairs} --delta {AUD_COMMON[delta]:q} --out figures/audit"
        " --title {params.title:q} > {log:q} 2>&1"
