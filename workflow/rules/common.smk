# Helpers shared by the rule files. Every value that reaches a shell command is quoted: in a rule's `shell:` with
# `{...:q}`, and in the commands these helpers build with `shell_word` (shlex.quote; a safe name stays as it is, so
# the commands of valid parameters read as before). The parameters' strings are safe names anyway (the schema and
# reproduce.pipeline_config check every one): the quoting is the second wall, not the first.
import os
import shlex
import sys
from pathlib import Path

PRESET = config.get("preset", "default")  # named in every figure title
# The data folder beside the Snakefile (`dpaudit data fetch`'s default), as the jobs reach it from the working
# directory: "data" for a run in the repository, "../../data" for a preset run apart (`--directory presets/mnist`).
DATA_ROOT = os.path.relpath(Path(workflow.basedir) / "data")


def shell_word(value):
    """One value as one shell word (quoted if it needs to be)."""
    return shlex.quote(str(value))


# The reproduction's pipeline commands (workflow/reproduce): this interpreter, which has dpaudit and the Snakefile's
# PYTHONPATH, as one quoted word. The library's commands (`dpaudit train`, `dpaudit audit`, …) are the installed script.
REPRODUCE = f"{shell_word(sys.executable)} -m reproduce"


def shell_words(values):
    """Values as shell words, each quoted if it needs to be, separated by spaces."""
    return " ".join(shell_word(value) for value in values)


def cli_flags(values):
    """`dpaudit train` flags from a mapping of TrainConfig keys (lists become comma-separated), each value quoted;
    with `--data-root` where the jobs run outside the repository (a preset's own folder)."""
    if DATA_ROOT != "data":
        values = {**values, "data_root": DATA_ROOT}
    parts = []
    for key, value in values.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            parts.append(shell_word(flag if value else "--no-" + key.replace("_", "-")))
        elif isinstance(value, (list, tuple)):
            parts.append(f"{shell_word(flag)} {shell_word(','.join(str(v) for v in value))}")
        else:
            parts.append(f"{shell_word(flag)} {shell_word(value)}")
    return " ".join(parts)


def epsilon_run_table(settings, epsilons):
    """Run name → (setting name, target ε) for every setting at every ε. A run's parameters reach its job through
    this table, built from the config, never by parsing the run's name."""
    return {f"{name}_eps{eps:g}": (name, float(eps)) for name in settings for eps in epsilons}


def run_folders(paths):
    """The run folders (…/trial_<t>) holding a list of files, each once, in order, as shell words."""
    import re

    folders = [re.match(r"(.*/trial_\d+)/", str(path)).group(1) for path in paths]
    return shell_words(dict.fromkeys(folders))


def trial_folder(section, run, trial):
    """results/<section>/<run>/trial_<trial>. Rules pass their wildcards, never `output`: Snakemake's params rerun
    trigger compares only params it can compute without the job's output paths, so a params function taking
    `output` would let a params.yaml edit go unnoticed."""
    return f"results/{section}/{run}/trial_{trial}"


def train_command(out, trial, flags, *, summarize=False):
    """The `dpaudit train` command (for `batch_command`) of one run-trial folder; `flags` from `cli_flags`. The folder
    is the pipeline's own: `--overwrite` replaces the run a parameter change left there (a run of the same
    configuration resumes)."""
    summary = " --summarize" if summarize else ""
    return f"train --quiet --overwrite{summary} --out {shell_word(out)} --trial {shell_word(trial)} {flags}"


def batch_command(*commands):
    """One shell command running several `dpaudit` commands in one process (`python -m reproduce batch`, which splits
    each with shlex): the pipeline's jobs are small, and starting Python and torch (≈ 3 s) once per job instead of once
    per step is most of what they save. Each command is one quoted word; its own values are quoted where it is built."""
    return f"{REPRODUCE} batch --quiet " + shell_words(commands)


# The priority of the rules whose jobs take minutes (the black-box rung, the papers' per-optimizer batches): they start
# first, and the short jobs fill the cores around them, so that no long job is left running alone on one core at the
# end (longest first; the outputs do not depend on the order).
LONG_JOBS_FIRST = 1


def section_resources(section):
    """A section's training-job resources: its `resources:` (gpu, mem_mb, runtime in minutes) over the defaults of
    one CPU job (no GPU, 2000 MB, an hour); the other rules take the profile's default-resources."""
    return {"gpu": 0, "mem_mb": 2000, "runtime": 60, **section.get("resources", {})}
