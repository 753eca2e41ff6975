# Helpers shared by the rule files.
from pathlib import Path

PRESET = config.get("preset", "default")  # named in every figure title


def cli_flags(values):
    """`dpaudit train` flags from a mapping of TrainConfig keys (lists become comma-separated)."""
    parts = []
    for key, value in values.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            parts.append(f"{flag} {','.join(str(v) for v in value)}")
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def epsilon_run_table(settings, epsilons):
    """Run name → (setting name, target ε) for every setting at every ε. A run's parameters reach its job through
    this table, built from the config, never by parsing the run's name."""
    return {f"{name}_eps{eps:g}": (name, float(eps)) for name in settings for eps in epsilons}


def run_folders(paths):
    """The run folders (…/trial_<t>) holding a list of files, each once, in order."""
    import re

    folders = [re.match(r"(.*/trial_\d+)/", str(path)).group(1) for path in paths]
    return " ".join(dict.fromkeys(folders))


def trial_folder(section, run, trial):
    """results/<section>/<run>/trial_<trial>. Rules pass their wildcards, never `output`: Snakemake's params rerun
    trigger compares only params it can compute without the job's output paths, so a params function taking
    `output` would let a params.yaml edit go unnoticed."""
    return f"results/{section}/{run}/trial_{trial}"


def train_command(out, trial, flags, *, summarize=False):
    """The `dpaudit train` command (for `batch_command`) of one run-trial folder."""
    return f"train --quiet{' --summarize' if summarize else ''} --out {out} --trial {trial} {flags}"


def batch_command(*commands):
    """One shell command running several `dpaudit` commands in one process (`dpaudit batch`): the pipeline's jobs
    are small, and starting Python and torch (≈ 3 s) once per job instead of once per step is most of what they save."""
    import shlex

    return "dpaudit batch --quiet " + " ".join(shlex.quote(command) for command in commands)


def section_resources(section):
    """A section's training-job resources: its `resources:` (gpu, mem_mb, runtime in minutes) over the defaults of
    one CPU job (no GPU, 2000 MB, an hour); the other rules take the profile's default-resources."""
    return {"gpu": 0, "mem_mb": 2000, "runtime": 60, **section.get("resources", {})}
