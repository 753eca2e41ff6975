# dpaudit — reproduce the figures: `snakemake --cores all`.
# Parameters live in params.yaml (other presets: configs/smoke.yaml, configs/paper.yaml);
# rules call the `dpaudit` command line and the reproduction's (`python -m reproduce`), and parameters reach jobs
# through `params:`.
import json
import os
import sys
from pathlib import Path

import yaml
from snakemake.utils import validate

# The reproduction (package `reproduce` in workflow/, not in the installed dpaudit) imports here, at parse time, and
# in every job, local or Slurm, which inherits this process's PYTHONPATH.
REPRODUCE_PATH = str(Path(workflow.basedir, "workflow").resolve())
if REPRODUCE_PATH not in sys.path:
    sys.path.insert(0, REPRODUCE_PATH)
if REPRODUCE_PATH not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (REPRODUCE_PATH, os.environ.get("PYTHONPATH"))))

from reproduce.pipeline_config import black_box_settings, black_box_unfit, check_pipeline_config, whole_run_names


configfile: os.path.join(workflow.basedir, "params.yaml")  # also where a preset runs apart (--directory)


validate(config, "workflow/schemas/params.schema.yaml")  # the first gate: each field on its own
with open(workflow.source_path("workflow/schemas/params.schema.yaml"), encoding="utf-8") as _stream:
    SCHEMA = yaml.safe_load(_stream)
check_pipeline_config(config=config, schema=SCHEMA)  # then how fields refer to one another, before any job


# A local run's jobs share one warm interpreter (workflow/reproduce/worker.py): each job's `python -m reproduce` hands
# its command to a fork of it instead of importing torch and dp-accounting anew; DPAUDIT_NO_WORKER=1 turns it off.
from reproduce import worker

WORKER = []


onstart:
    if getattr(workflow, "local_exec", False) and not os.environ.get("DPAUDIT_NO_WORKER"):
        WORKER.append(worker.start(threads=1, log=Path("logs/worker.log")))  # the rules' jobs take one thread each


onsuccess:
    worker.stop(WORKER.pop() if WORKER else None)


onerror:
    worker.stop(WORKER.pop() if WORKER else None)


include: "workflow/rules/common.smk"
include: "workflow/rules/dpsgd_dc.smk"
include: "workflow/rules/optimizers.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/papers.smk"


rule all:
    input:
        rules.dpsgd_dc_all.input,
        rules.optimizers_all.input,
        rules.audit_all.input,
        rules.papers_all.input,
        "figures/manifest.json",


rule manifest:
    input:
        expand("figures/dpsgd_dc/{name}.manifest.json", name=THEORY_FIGURES + list(DATA_FIGURES) + ["table1"]),
        "figures/audit/audit.manifest.json",
        "figures/audit/validation.manifest.json",
        "figures/audit/validation_run.manifest.json",
        "figures/audit/ladder.manifest.json",
        [f"figures/{name}.manifest.json" for name in PAPER_FIGURES],
    output:
        manifest="figures/manifest.json",
        table="figures/claims.md",
        gallery="figures/gallery.md",
    params:
        skipped=json.dumps(PAPER_SKIPPED, sort_keys=True),
    log:
        "logs/manifest.log",
    shell:
        "{REPRODUCE} manifest {input:q} --out {output.manifest:q} --table {output.table:q} --gallery {output.gallery:q}"
        " --preset-skipped {params.skipped:q} > {log:q} 2>&1"
