# DPSGD-GC/DC (Liang et al.): train target + shadows per configuration and trial, attack every checkpoint,
# then draw Figs 1–5 and Table 1 into figures/dpsgd_dc/.
from reproduce.figures import FIGURE_SPECS

S4 = config["dpsgd_dc"]
RESOURCES = section_resources(S4)
COMMON = S4["common"]
TRIALS = list(range(COMMON["trials"]))
# run name → its own settings, from the config (a job's flags come from here, never from parsing its name)
RUN_SETTINGS = {
    **{f"gc_b{b}": {"kind": "gc", "batch_size": int(b), "optimizer": "dpsgd-gc"} for b in S4["gc"]["batch_sizes"]},
    **{f"dc_b{b}_D{d:g}": {"kind": "dc", "batch_size": int(b), "optimizer": "dpsgd-dc", "domain_radius": float(d)}
       for b in S4["dc"]["batch_sizes"] for d in S4["dc"]["domain_radii"]},
}
# one job per configuration (all its trials in one process: ≈ 3 s of start-up each instead of per trial, for the
# short CPU runs) or per trial (the paper preset: GPU runs of hours, in parallel on a cluster)
PER_TRIAL = S4.get("one_job_per", "trial") == "trial"
GC_RUNS = [name for name, run in RUN_SETTINGS.items() if run["kind"] == "gc"]
DC_RUNS = [name for name, run in RUN_SETTINGS.items() if run["kind"] == "dc"]
# the paper's figures, each declared once with the grids it draws (reproduce.figures.FIGURE_SPECS): figures drawn from
# theory alone, and figure → the runs it draws; Table 1 has a rule of its own
DPSGD_DC_FIGURES = {name.split("/")[1]: figure for name, figure in FIGURE_SPECS.items() if name.startswith("dpsgd_dc/")}
GRID_RUNS = {"gc": GC_RUNS, "dc": DC_RUNS}
THEORY_FIGURES = [name for name, figure in DPSGD_DC_FIGURES.items()
                  if not figure.draws_runs and not name.startswith("table")]
DATA_FIGURES = {name: [run for grid in figure.grids for run in GRID_RUNS[grid]]
                for name, figure in DPSGD_DC_FIGURES.items() if figure.grids}


def run_config(name):
    """Command-line flags of one DPSGD-GC/DC run, from params.yaml (so an edit reruns exactly its jobs)."""
    run = RUN_SETTINGS[name]
    grid = S4[run["kind"]]
    flags = {**{k: v for k, v in COMMON.items() if k != "trials"}, "epochs": grid["epochs"],
             "eval_epochs": grid["eval_epochs"], **{k: v for k, v in run.items() if k != "kind"}}
    return cli_flags(flags)


rule dpsgd_dc_all:
    input:
        # the runs themselves, so that a fresh clone (figures committed, results/ empty) re-runs the
        # experiments and then redraws every figure from them
        expand("results/dpsgd_dc/{run}/trial_{trial}/attack.json", run=GC_RUNS + DC_RUNS, trial=TRIALS),
        expand("figures/dpsgd_dc/{name}.{ext}", name=THEORY_FIGURES + list(DATA_FIGURES), ext=["pdf", "png"]),
        "figures/dpsgd_dc/table1.md",
        "figures/manifest.json",
        "figures/claims.md",
        "metrics/dpsgd_dc.json",


rule dpsgd_dc_metrics:
    input:
        expand("results/dpsgd_dc/{run}/trial_{trial}/attack.json", run=GC_RUNS + DC_RUNS, trial=TRIALS),
    output:
        metrics="metrics/dpsgd_dc.json",
        plot="metrics/dpsgd_dc_epsilon_hat.csv",
    params:
        runs=lambda wildcards, input: run_folders(input),
    log:
        "logs/dpsgd_dc_metrics.log",
    shell:
        "{REPRODUCE} summarize {params.runs} --metrics {output.metrics:q} --plot {output.plot:q} > {log:q} 2>&1"


def job_trials(wildcards):
    """The trials one dpsgd_dc_run job trains and attacks."""
    return [wildcards.trial] if PER_TRIAL else TRIALS


rule dpsgd_dc_run:  # train target + shadows, then attack every checkpoint, in one process
    output:
        expand("results/dpsgd_dc/{{run}}/trial_{trial}/{file}", trial=["{trial}"] if PER_TRIAL else TRIALS,
               file=["config.json", "attack.json"]),
    params:
        commands=lambda wildcards: batch_command(*[
            command
            for trial in job_trials(wildcards)
            for command in (train_command(trial_folder("dpsgd_dc", wildcards.run, trial), trial,
                                          run_config(wildcards.run)),
                            f"attack --quiet --run {shell_word(trial_folder('dpsgd_dc', wildcards.run, trial))}")]),
    resources:
        **RESOURCES,
    log:
        "logs/dpsgd_dc_run/{run}/trial_{trial}.log" if PER_TRIAL else "logs/dpsgd_dc_run/{run}.log",
    shell:
        "{params.commands} > {log:q} 2>&1"


rule dpsgd_dc_theory_figure:
    output:
        multiext("figures/dpsgd_dc/{name}", ".pdf", ".png", ".manifest.json"),
    wildcard_constraints:
        name="|".join(THEORY_FIGURES),
    log:
        "logs/dpsgd_dc_figure/{name}.log",
    shell:
        "{REPRODUCE} figure dpsgd_dc/{wildcards.name:q} --out figures/dpsgd_dc > {log:q} 2>&1"


rule dpsgd_dc_data_figure:
    input:
        lambda wildcards: expand("results/dpsgd_dc/{run}/trial_{trial}/attack.json",
                                 run=DATA_FIGURES[wildcards.name], trial=TRIALS),
    output:
        multiext("figures/dpsgd_dc/{name}", ".pdf", ".png", ".manifest.json"),
    wildcard_constraints:
        name="|".join(DATA_FIGURES),
    params:
        runs=lambda wildcards, input: run_folders(input),
        theory=S4["theory"],
    log:
        "logs/dpsgd_dc_figure/{name}.log",
    shell:
        "{REPRODUCE} figure dpsgd_dc/{wildcards.name:q} --out figures/dpsgd_dc --preset {PRESET:q} --runs {params.runs}"
        " > {log:q} 2>&1 --alpha {params.theory[alpha]:q} --L {params.theory[L]:q}"


rule dpsgd_dc_table1:
    output:
        multiext("figures/dpsgd_dc/table1", ".md", ".tex", ".manifest.json"),
    log:
        "logs/dpsgd_dc_table1.log",
    shell:
        "{REPRODUCE} figure dpsgd_dc/table1 --out figures/dpsgd_dc > {log:q} 2>&1"


# the DPSGD-GC/DC paper's figures, Table 1 and metrics alone, as `paper_<name>` does for the other papers
rule paper_dpsgd_dc:
    input:
        rules.dpsgd_dc_all.input,
