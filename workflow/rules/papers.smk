# AdaDPIGU, TP-TopK, DP-PSAC and D2P2-SGD figures. Each experiment of `papers.experiments` is a set of target-only runs; a run is named by
# its settings (reproduce.experiments.run_id), so a run several experiments share is trained once. Every run is
# summarised (theoretical ε per epoch, loss-attack ε̂ per checkpoint, canary ε̂) and the figures draw those
# summaries, the cross-optimizer audit runs (matched ε) and the optimizers runs' training diagnostics.
from reproduce.experiments import plan_experiments, run_trials
from reproduce.figures import FIGURE_SPECS, check_figure_models, preset_figures
from reproduce.figures._paper import PAPERS as PAPER_FOLDERS  # folder → paper title

PAPERS = config["papers"]
PAPER_RESOURCES = section_resources(PAPERS)  # of the training jobs
TUNED = {settings.get("optimizer", name): {k: v for k, v in settings.items() if k != "optimizer"}
         for name, settings in OPT_SETTINGS.items()}
PAPER_EXPERIMENTS, PAPER_RUNS = plan_experiments(PAPERS, tuned=TUNED)
CROSS_EPSILONS = AUD["target_epsilons"]

# figure → what it draws (declared once, in reproduce.figures.FIGURE_SPECS): paper experiments, cross-audit runs
# (every ε) and their whole-run twins (results/audit_run), optimizers runs with diagnostics. A preset lacking an
# experiment or an optimizer (optimizers.runs) a figure needs is an error unless it opts out of the figure by name
# (papers.skip_figures; the manifest lists it with what the preset lacks); the DPSGD-GC/DC figures have rules of their own.
PAPER_FIGURES, PAPER_SKIPPED = preset_figures(
    experiments=PAPER_EXPERIMENTS, optimizer_runs=OPT_SETTINGS, skip=PAPERS.get("skip_figures", [])
)
check_figure_models(  # a figure never compares two models on one dataset
    PAPER_FIGURES, experiments=PAPER_EXPERIMENTS, paper_runs=PAPER_RUNS,
    cross_runs={name: {**CROSS_COMMON, **settings} for name, settings in OPT_SETTINGS.items()},
)
PAPER_TABLES = {name for name in PAPER_FIGURES if name.split("/")[1].startswith("table")}
PAPER_TRIALS = run_trials(  # only the experiments a drawn figure needs are trained
    PAPERS, PAPER_EXPERIMENTS, drawn={e for figure in PAPER_FIGURES.values() for e in figure.experiments}
)


def paper_figure_inputs(name):
    figure = PAPER_FIGURES[name]
    files = [f"results/papers/{run}/trial_{trial}/summary.json" for experiment in figure.experiments
             for run in PAPER_EXPERIMENTS[experiment] for trial in range(PAPER_TRIALS[run])]
    files += [f"results/audit_cross/{optimizer}_eps{eps:g}/trial_{trial}/summary.json"
              for optimizer in figure.cross for eps in CROSS_EPSILONS for trial in range(CROSS["trials"])]
    files += [f"results/optimizers/{optimizer}_eps{OPT['target_epsilons'][0]:g}/trial_0/config.json"
              for optimizer in figure.diagnostics]
    files += [f"{trial_folder('audit_run', f'{optimizer}_eps{eps:g}', 0)}/summary.json"  # whole-run twins
              for optimizer in figure.cross if figure.whole_run and optimizer in WHOLE_SETTINGS
              for eps in CROSS_EPSILONS]
    return list(dict.fromkeys(files))


def paper_figure_outputs(name):
    suffixes = [".md", ".tex"] if name in PAPER_TABLES else [".pdf", ".png"]
    return [f"figures/{name}{suffix}" for suffix in suffixes + [".manifest.json"]]


wildcard_constraints:
    run="[^/]+",


rule papers_all:
    input:
        # the runs too, so that a fresh clone (figures committed, results/ empty) re-runs them and redraws
        [path for name in PAPER_FIGURES for path in paper_figure_inputs(name)],
        [output for name in PAPER_FIGURES for output in paper_figure_outputs(name)],


# One job per optimizer trains and summarises all its paper runs in one process (`python -m reproduce batch`): a run
# is a few seconds of work, and starting torch for each would cost a third of the time. An edit to an optimizer's entry in
# optimizers.runs, or to an experiment, reruns the jobs of the optimizers it touches.
PAPER_GROUPS = {}
for _run in PAPER_TRIALS:
    PAPER_GROUPS.setdefault(PAPER_RUNS[_run]["optimizer"], []).extend(
        (_run, trial) for trial in range(PAPER_TRIALS[_run]))

for _optimizer, _runs in PAPER_GROUPS.items():

    rule:
        name:
            f"papers_{_optimizer.replace('-', '_')}"
        output:
            [f"results/papers/{run}/trial_{trial}/{file}" for run, trial in _runs
             for file in ("config.json", "summary.json")],
        priority: LONG_JOBS_FIRST
        params:
            commands=batch_command(*[train_command(trial_folder("papers", run, trial), trial,
                                                   cli_flags(PAPER_RUNS[run]), summarize=True) for run, trial in _runs]),
        resources:
            **PAPER_RESOURCES,
        log:
            f"logs/papers_{_optimizer}.log",
        shell:
            "{params.commands} > {log:q} 2>&1"


for _figure in PAPER_FIGURES:

    rule:
        name:
            f"figure_{_figure.replace('/', '_')}"
        input:
            paper_figure_inputs(_figure),
        output:
            paper_figure_outputs(_figure),
        params:
            name=_figure,
            folder=f"figures/{_figure.split('/')[0]}",
            runs=lambda wildcards, input: (" --runs " + shell_words(sorted({str(Path(path).parent) for path in input})))
            if input else "",
        log:
            f"logs/figure_{_figure.replace('/', '_')}.log",
        shell:
            "{REPRODUCE} figure {params.name:q} --out {params.folder:q} --preset {PRESET:q}{params.runs} > {log:q} 2>&1"



def paper_outputs(paper):
    return [output for name in PAPER_FIGURES if name.startswith(paper + "/") for output in paper_figure_outputs(name)]


# one paper's figures and tables alone, e.g. `snakemake --cores all paper_d2p2_sgd`: a `paper_<folder>` target for
# each paper of reproduce.figures._paper.PAPERS, whose figures are FIGURE_SPECS' names under "<folder>/"
for _paper in PAPER_FOLDERS:

    rule:
        name:
            f"paper_{_paper}"
        input:
            paper_outputs(_paper),
