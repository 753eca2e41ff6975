# dpaudit — reproduce the figures: `snakemake --cores all`.
# Parameters live in params.yaml (other presets: configs/smoke.yaml, configs/paper.yaml);
# rules call the `dpaudit` command line, and parameters reach jobs through `params:`.
from snakemake.utils import validate


configfile: "params.yaml"


validate(config, "workflow/schemas/params.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/seed004.smk"
include: "workflow/rules/optimizers.smk"
include: "workflow/rules/audit.smk"


rule all:
    input:
        rules.seed004_all.input,
        rules.optimizers_all.input,
        rules.audit_all.input,
