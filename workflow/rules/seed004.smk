# Seed 004 (DPSGD-GC/DC): train target + shadows per trial, attack each checkpoint; theory figures.
# Figures 2–4 (ε̂ and loss across batch sizes and D) come with the pipeline issue; the demo rules below
# already produce their kind of data for one configuration.

DEMO = config["seed004"]["demo"]
TRIALS = range(DEMO["trials"])
THEORY_FIGURES = ["figure1", "figure5"]


rule seed004_all:
    input:
        expand("results/seed004/demo/trial_{trial}/attack.json", trial=TRIALS),
        expand("figures/dpsgd_dc/{name}.{ext}", name=THEORY_FIGURES, ext=["pdf", "png"]),
        "figures/dpsgd_dc/table1.md",
        "figures/manifest.json",


rule seed004_train:
    output:
        "results/seed004/demo/trial_{trial}/config.json",
    params:
        cfg=DEMO,
        eval_epochs=",".join(str(e) for e in DEMO["eval_epochs"]),
        out="results/seed004/demo/trial_{trial}",
    shell:
        "dpaudit train --quiet --out {params.out} --trial {wildcards.trial} --seed {params.cfg[seed]}"
        " --dataset {params.cfg[dataset]} --model {params.cfg[model]} --optimizer {params.cfg[optimizer]}"
        " --sigma-dp {params.cfg[sigma_dp]} --clip-norm {params.cfg[clip_norm]} --batch-size {params.cfg[batch_size]}"
        " --lr {params.cfg[lr]} --epochs {params.cfg[epochs]} --eval-epochs {params.eval_epochs}"
        " --sampling {params.cfg[sampling]} --target-size {params.cfg[target_size]} --num-shadows {params.cfg[num_shadows]}"


rule seed004_attack:
    input:
        "results/seed004/demo/trial_{trial}/config.json",
    output:
        "results/seed004/demo/trial_{trial}/attack.json",
    params:
        run="results/seed004/demo/trial_{trial}",
    shell:
        "dpaudit attack --quiet --run {params.run}"


rule seed004_theory_figure:
    output:
        multiext("figures/dpsgd_dc/{name}", ".pdf", ".png", ".manifest.json"),
    wildcard_constraints:
        name="|".join(THEORY_FIGURES),
    shell:
        "dpaudit figure dpsgd_dc/{wildcards.name} --out figures/dpsgd_dc"


rule seed004_table1:
    output:
        multiext("figures/dpsgd_dc/table1", ".md", ".tex", ".manifest.json"),
    shell:
        "dpaudit figure dpsgd_dc/table1 --out figures/dpsgd_dc"


rule manifest:
    input:
        expand("figures/dpsgd_dc/{name}.manifest.json", name=THEORY_FIGURES + ["table1"]),
    output:
        "figures/manifest.json",
    shell:
        "dpaudit manifest {input} --out {output}"
