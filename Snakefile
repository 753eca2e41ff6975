# dpaudit — reproduce the figures: `snakemake --cores all`.
# Parameters live in params.yaml; rules call the `dpaudit` command line.
configfile: "params.yaml"


include: "workflow/rules/seed004.smk"


rule all:
    input:
        rules.seed004_all.input,
