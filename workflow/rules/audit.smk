# The audit core on DP-SGD-style runs at several theoretical ε: each run is trained with white-box gradient
# canaries on its target, then every attack in `audit.attacks` scores it and `dpaudit audit` turns the
# scores into ε̂ (point estimate, 95 % lower bound, ceiling) beside the theoretical ε.

AUD = config["audit"]
AUD_COMMON = {k: v for k, v in AUD["common"].items() if k != "trials"}
AUD_TRIALS = list(range(AUD["common"]["trials"]))
AUD_SETTINGS = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in AUD["runs"]}
AUD_RUNS = [f"{name}_eps{eps:g}" for name in AUD_SETTINGS for eps in AUD["target_epsilons"]]
AUD_FILES = expand("results/audit/{run}/audit_{attack}.json", run=AUD_RUNS, attack=AUD["attacks"])


rule audit_all:
    input:
        "metrics/audit.json",


rule audit_train:
    output:
        "results/audit/{run}/trial_{trial}/config.json",
    params:
        flags=lambda wildcards: cli_flags({**AUD_COMMON, "optimizer": wildcards.run.rsplit("_eps", 1)[0],
                                           **AUD_SETTINGS[wildcards.run.rsplit("_eps", 1)[0]],
                                           "target_epsilon": float(wildcards.run.rsplit("_eps", 1)[1])}),
        out="results/audit/{run}/trial_{trial}",
    shell:
        "dpaudit train --quiet --out {params.out} --trial {wildcards.trial} {params.flags}"


rule audit_shadow_attack:
    input:
        "results/audit/{run}/trial_{trial}/config.json",
    output:
        "results/audit/{run}/trial_{trial}/attack.json",
    params:
        run="results/audit/{run}/trial_{trial}",
    shell:
        "dpaudit attack --quiet --run {params.run}"


rule audit_score:  # the trials are independent training runs: their scores are pooled
    input:
        lambda wildcards: expand("results/audit/{run}/trial_{trial}/{file}", run=wildcards.run, trial=AUD_TRIALS,
                                 file="attack.json" if wildcards.attack == "shadow" else "config.json"),
    output:
        "results/audit/{run}/audit_{attack}.json",
    params:
        runs=lambda wildcards, input: run_folders(input),
        delta=AUD_COMMON["delta"],
        confidence=AUD["confidence"],
    shell:
        "dpaudit audit --run {params.runs} --attack {wildcards.attack} --delta {params.delta}"
        " --confidence {params.confidence} --out {output} > /dev/null"


rule audit_table:
    input:
        AUD_FILES,
    output:
        metrics="metrics/audit.json",
        table="metrics/audit.md",
    shell:
        "dpaudit audit-table {input} --metrics {output.metrics} --markdown {output.table}"
