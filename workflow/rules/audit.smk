# The audit core. Two sections:
# - results/audit: DP-SGD-style runs at several theoretical ε, each trained with white-box gradient canaries on
#   its target and shadows on paired halves, scored by every attack in `audit.attacks` (metrics/audit.md);
# - results/audit_cross: every run of `optimizers.runs` at the same ε, targets only, scored by the attacks in
#   `audit.cross_optimizer.attacks` (metrics/audit_optimizers.md, figures/audit/).
# `dpaudit audit` turns each run's scores (trials pooled) into ε̂: point estimate, 95 % lower bound, ceiling.

AUD = config["audit"]
AUD_COMMON = {k: v for k, v in AUD["common"].items() if k != "trials"}
AUD_SETTINGS = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in AUD["runs"]}
CROSS = AUD["cross_optimizer"]
CROSS_COMMON = {**{k: v for k, v in AUD_COMMON.items() if k not in ("num_shadows", "split_design")},
                "num_shadows": 0, "diagnostics": False, "canaries": CROSS["canaries"]}
AUD_SECTIONS = {  # folder → (run settings by name, common settings, trials, attacks)
    "audit": (AUD_SETTINGS, AUD_COMMON, AUD["common"]["trials"], AUD["attacks"]),
    "audit_cross": (OPT_SETTINGS, CROSS_COMMON, CROSS["trials"], CROSS["attacks"]),
}


def audit_runs(section):
    return [f"{name}_eps{eps:g}" for name in AUD_SECTIONS[section][0] for eps in AUD["target_epsilons"]]


def audit_files(section):
    return expand("results/{section}/{run}/audit_{attack}.json", section=section, run=audit_runs(section),
                  attack=AUD_SECTIONS[section][3])


def audit_train_flags(wildcards, section):
    settings, common, _, _ = AUD_SECTIONS[section]
    name, eps = wildcards.run.rsplit("_eps", 1)
    return cli_flags({**common, "optimizer": name, **settings[name], "target_epsilon": float(eps)})


wildcard_constraints:
    section="audit|audit_cross",


rule audit_all:
    input:
        audit_files("audit"),  # the runs' audits too, so that a fresh clone re-runs them
        audit_files("audit_cross"),
        "metrics/audit.json",
        "metrics/audit_optimizers.json",


rule audit_train:
    output:
        "results/audit/{run}/trial_{trial}/config.json",
    params:
        flags=lambda wildcards: audit_train_flags(wildcards, "audit"),
        out="results/audit/{run}/trial_{trial}",
    shell:
        "dpaudit train --quiet --out {params.out} --trial {wildcards.trial} {params.flags}"


rule audit_cross_train:  # also summarises the run for the paper tables at matched ε (dpaudit.experiments)
    output:
        "results/audit_cross/{run}/trial_{trial}/config.json",
        "results/audit_cross/{run}/trial_{trial}/summary.json",
    params:
        flags=lambda wildcards: audit_train_flags(wildcards, "audit_cross"),
        out="results/audit_cross/{run}/trial_{trial}",
    shell:
        "dpaudit train --quiet --summarize --out {params.out} --trial {wildcards.trial} {params.flags}"


rule audit_shadow_attack:
    input:
        "results/{section}/{run}/trial_{trial}/config.json",
    output:
        "results/{section}/{run}/trial_{trial}/attack.json",
    params:
        run="results/{section}/{run}/trial_{trial}",
    shell:
        "dpaudit attack --quiet --run {params.run}"


def score_inputs(section):
    """The trial runs' files one scoring job reads (shadow scores come from `dpaudit attack`)."""
    files = ["config.json"] + (["attack.json"] if "shadow" in AUD_SECTIONS[section][3] else [])
    return lambda wildcards: expand("results/{section}/{run}/trial_{trial}/{file}", section=section, run=wildcards.run,
                                    trial=range(AUD_SECTIONS[section][2]), file=files)


SCORE_COMMAND = ("dpaudit audit --run {params.runs} --attack {params.attacks} --delta {params.delta}"
                 " --confidence {params.confidence} --no-plot --out-dir {params.out} > /dev/null")


rule audit_score:  # every attack on one run in one process (torch starts once); the trials are pooled
    input:
        score_inputs("audit"),
    output:
        expand("results/audit/{{run}}/audit_{attack}.json", attack=AUD["attacks"]),
    params:
        runs=lambda wildcards, input: run_folders(input),
        attacks=" ".join(AUD["attacks"]),
        out="results/audit/{run}",
        delta=AUD_COMMON["delta"],
        confidence=AUD["confidence"],
    shell:
        SCORE_COMMAND


use rule audit_score as audit_cross_score with:
    input:
        score_inputs("audit_cross"),
    output:
        expand("results/audit_cross/{{run}}/audit_{attack}.json", attack=CROSS["attacks"]),
    params:
        runs=lambda wildcards, input: run_folders(input),
        attacks=" ".join(CROSS["attacks"]),
        out="results/audit_cross/{run}",
        delta=AUD_COMMON["delta"],
        confidence=AUD["confidence"],


rule audit_table:
    input:
        audit_files("audit"),
    output:
        metrics="metrics/audit.json",
        table="metrics/audit.md",
    shell:
        "dpaudit audit-table {input} --metrics {output.metrics} --markdown {output.table}"


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
    shell:
        "dpaudit audit-table {input} --metrics {output.metrics} --markdown {output.table}"
        " --figures figures/audit --title '{params.title}' --roc-epsilon 4"
