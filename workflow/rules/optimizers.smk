# DP-PSAC and D2P2-SGD optimizers (and DP-SGD beside them) trained at matched theoretical ε: each run is
# calibrated to a target ε at δ by its own noise schedule, then attacked, and its theoretical ε per checkpoint
# is replayed from its privacy ledger. The audit figures of later issues draw from these runs.

OPT = config["optimizers"]
OPT_RESOURCES = section_resources(OPT)
OPT_COMMON = {k: v for k, v in OPT["common"].items() if k != "trials"}
OPT_TRIALS = list(range(OPT["common"]["trials"]))
OPT_SETTINGS = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in OPT["runs"]}
OPT_RUN_TABLE = epsilon_run_table(OPT_SETTINGS, OPT["target_epsilons"])
OPT_RUNS = list(OPT_RUN_TABLE)


def optimizer_run_flags(run):
    name, eps = OPT_RUN_TABLE[run]
    settings = {"optimizer": name, **OPT_SETTINGS[name]}
    return cli_flags({**OPT_COMMON, **settings, "target_epsilon": eps})


def optimizer_run_commands(run, trial):
    folder = trial_folder("optimizers", run, trial)
    return batch_command(
        train_command(folder, trial, optimizer_run_flags(run)),
        f"attack --quiet --run {shell_word(folder)}",
        f"epsilon --run {shell_word(folder)} --epochs {shell_word(','.join(str(e) for e in OPT_COMMON['eval_epochs']))}"
        f" --accountants {shell_word(','.join(OPT['accountants']))} --delta {shell_word(OPT_COMMON['delta'])}")


rule optimizers_all:
    input:
        expand("results/optimizers/{run}/trial_{trial}/{file}", run=OPT_RUNS, trial=OPT_TRIALS,
               file=["attack.json", "target/epsilon.json"]),
        "metrics/optimizers.json",


rule optimizers_run:  # train target + shadows, attack every checkpoint, replay ε per checkpoint: one process
    output:
        "results/optimizers/{run}/trial_{trial}/config.json",
        "results/optimizers/{run}/trial_{trial}/attack.json",
        "results/optimizers/{run}/trial_{trial}/target/epsilon.json",
    params:
        commands=lambda wildcards: optimizer_run_commands(wildcards.run, wildcards.trial),
    resources:
        **OPT_RESOURCES,
    log:
        "logs/optimizers_run/{run}/trial_{trial}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


rule optimizers_metrics:
    input:
        expand("results/optimizers/{run}/trial_{trial}/{file}", run=OPT_RUNS, trial=OPT_TRIALS,
               file=["attack.json", "target/epsilon.json"]),
    output:
        metrics="metrics/optimizers.json",
        plot="metrics/optimizers_epsilon_hat.csv",
    params:
        runs=lambda wildcards, input: run_folders(input),
    log:
        "logs/optimizers_metrics.log",
    shell:
        "{REPRODUCE} summarize {params.runs} --metrics {output.metrics:q} --plot {output.plot:q} > {log:q} 2>&1"
