"""Every preset finishes: it builds, and each figure it draws finds its runs in its plan, before any training.

A preset is params.yaml with a configs/*.yaml merged over it (as Snakemake merges a --configfile). For each one the
test plans the paper experiments (``plan_experiments``, as papers.smk does), lists the figures it draws
(``preset_figures``: a figure whose experiment or optimizer run is missing is an error unless the preset opts out by
name) and calls every figure's ``select`` on summaries made from the planned settings, without training."""

import copy

import pytest
import yaml
from support import ROOT, merged_config

from dpaudit import DPAuditError
from dpaudit.config import TrainConfig
from reproduce.experiments import plan_experiments, run_trials
from reproduce.figures import FIGURE_SPECS, check_figure_models, preset_figures
from reproduce.pipeline_config import check_pipeline_config

SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
PRESETS = [None, *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "configs").glob("*.yaml"))]


def preset_config(preset):
    config = copy.deepcopy(PARAMS)
    return config if preset is None else merged_config(config, yaml.safe_load((ROOT / preset).read_text()))


def plan(config):
    """(experiments, settings, optimizer runs), as papers.smk and optimizers.smk build them."""
    runs = {run["name"]: {k: v for k, v in run.items() if k != "name"} for run in config["optimizers"]["runs"]}
    tuned = {
        settings.get("optimizer", name): {k: v for k, v in settings.items() if k != "optimizer"}
        for name, settings in runs.items()
    }
    experiments, settings = plan_experiments(config["papers"], tuned=tuned)
    return experiments, settings, runs


def summary(run, settings, trial):
    """What a figure reads of a trained run's summary.json, from its planned settings."""
    config = TrainConfig.from_dict(
        {k: v for k, v in settings.items() if k not in ("trials", "canary_design")} | {"seed": trial}
    )
    return {
        "path": f"results/papers/{run}/trial_{trial}",
        "config": config.to_dict(),
        "target_epsilon": settings.get("target_epsilon"),
        "noise_multiplier": settings.get("noise_multiplier"),
        "dp_claim": True,
    }


def cross_settings(config):
    """Each optimizers run's settings in the cross-optimizer audit (audit.common under the run's own, as audit.smk)."""
    return {run["name"]: {**config["audit"]["common"], **run} for run in config["optimizers"]["runs"]}


def test_a_figure_never_compares_two_models_on_one_dataset():
    """The paper preset trains D2P2-SGD's runs on its own CNN (`cnn` is too large to project): its non-private
    reference, drawn beside them in Fig 2, must be the same network."""
    config = preset_config("configs/paper.yaml")
    config["papers"]["experiments"]["nonprivate"]["settings"]["model"] = "cnn"
    experiments, settings, runs = plan(config)
    figures, _ = preset_figures(experiments=experiments, optimizer_runs=runs, skip=[])
    with pytest.raises(
        DPAuditError, match=r"^params: adadpigu/table4 would compare models cnn, cnn-d2p2 on fashion-mnist; give"
    ):
        check_figure_models(figures, experiments=experiments, paper_runs=settings, cross_runs=cross_settings(config))


def test_the_presets_are_the_configs_folder():
    assert {"configs/smoke.yaml", "configs/paper.yaml", "configs/mnist.yaml"} <= set(PRESETS)


def test_only_the_experiments_of_drawn_figures_are_trained():
    """The MNIST preset opts out of TP-TopK Table 4 (CIFAR-10 only): the tp_split experiment it inherits from
    params.yaml trains nothing; a run two drawn experiments share takes the larger trial count."""
    config = preset_config("configs/mnist.yaml")
    experiments, _, runs = plan(config)
    assert "tp_split" in experiments  # merged in from params.yaml
    figures, skipped = preset_figures(
        experiments=experiments, optimizer_runs=runs, skip=config["papers"]["skip_figures"]
    )
    assert "tp_topk/table4" in skipped
    trials = run_trials(config["papers"], experiments, drawn={e for f in figures.values() for e in f.experiments})
    assert not set(experiments["tp_split"]) & set(trials)
    assert set(experiments["d2p2_sigma"]) <= set(trials)
    papers = {"common": {"trials": 1}, "experiments": {"a": {"settings": {"trials": 3}}, "b": {}}}
    assert run_trials(papers, {"a": ["x"], "b": ["x", "y"]}, drawn={"a", "b"}) == {"x": 3, "y": 1}
    assert run_trials(papers, {"a": ["x"], "b": ["x", "y"]}, drawn={"b"}) == {"x": 1, "y": 1}


@pytest.mark.parametrize("preset", PRESETS)
def test_every_figure_of_every_preset_finds_its_runs(preset):
    config = preset_config(preset)
    check_pipeline_config(config=config, schema=SCHEMA)
    experiments, settings, runs = plan(config)
    figures, _ = preset_figures(
        experiments=experiments, optimizer_runs=runs, skip=config["papers"].get("skip_figures", [])
    )
    check_figure_models(figures, experiments=experiments, paper_runs=settings, cross_runs=cross_settings(config))
    # each run's trials as papers.smk trains them: the most any drawn figure's experiment asks
    trials = run_trials(config["papers"], experiments, drawn={e for f in figures.values() for e in f.experiments})
    selected = 0
    for name, figure in figures.items():
        if figure.select is None:
            continue
        found = [
            summary(run, settings[run], trial)
            for experiment in figure.experiments
            for run in experiments[experiment]
            for trial in range(trials[run])
        ]
        try:
            figure.select(found)
        except DPAuditError as error:
            pytest.fail(f"{preset or 'params.yaml'}: {name}: {error}")
        selected += 1
    assert selected >= 1 or not any(figure.select for figure in figures.values())


def test_a_preset_lacking_a_figures_experiment_must_opt_out_by_name():
    config = preset_config("configs/smoke.yaml")
    experiments, _, runs = plan(config)
    assert config["papers"]["skip_figures"] == ["tp_topk.table2", "d2p2_sgd.table2"]
    drawn, skipped = preset_figures(experiments=experiments, optimizer_runs=runs, skip=config["papers"]["skip_figures"])
    assert not {"tp_topk/table2", "d2p2_sgd/table2"} & set(drawn) and "tp_topk/table3" in drawn
    assert skipped["tp_topk/table2"] == (
        "this preset lacks optimizers run tp-rand, optimizers run on-rand, optimizers run on-topk"
    )
    with pytest.raises(
        DPAuditError,
        match=r"^params: tp_topk/table2 needs optimizers run tp-rand, optimizers run on-rand, optimizers run on-topk, "
        r"which this preset lacks; add it, or opt out with papers.skip_figures: \[tp_topk.table2\]$",
    ):
        preset_figures(experiments=experiments, optimizer_runs=runs, skip=["d2p2_sgd.table2"])
    del experiments["psac_grid"]
    with pytest.raises(DPAuditError, match=r"dp_psac/figure1 needs experiment psac_grid, which this preset lacks"):
        preset_figures(experiments=experiments, optimizer_runs=runs, skip=config["papers"]["skip_figures"])
    with pytest.raises(DPAuditError, match=r"'dp_psac.figure9' is not a figure"):
        preset_figures(experiments=experiments, optimizer_runs=runs, skip=["dp_psac.figure9"])


def test_a_selector_names_the_missing_run():
    config = preset_config(None)
    experiments, settings, _ = plan(config)
    found = [
        summary(run, settings[run], 0) for run in experiments["psac_grid"] if settings[run]["optimizer"] != "dpsgd-gc"
    ]
    with pytest.raises(DPAuditError, match=r"no dpsgd-gc run with lr = 0.2, clip_norm = 1.0"):
        FIGURE_SPECS["dp_psac/figure1"].select(found)
