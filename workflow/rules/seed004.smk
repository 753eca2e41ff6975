# Seed 004 (DPSGD-GC/DC): train target + shadows per trial, attack each checkpoint, theory values.
# The figure rules (Figs 1–5, Table 1) come with the pipeline issue; these rules produce their data.

DEMO = config["seed004"]["demo"]
FIG1 = config["seed004"]["figure1"]
TRIALS = range(DEMO["trials"])


rule seed004_all:
    input:
        expand("results/seed004/demo/trial_{trial}/attack.json", trial=TRIALS),
        expand("results/seed004/theory/figure1_{bound}.json",
               bound=["feldman2018", "mironov-composition", "altschuler-talwar2022", "kong-ribero2024", "dpsgd-dc"]),


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


def _figure1_flags(wildcards):
    from dpaudit.theory import bound_parameters

    return " ".join(f"--{name} {FIG1[name]}" for name in bound_parameters(wildcards.bound))


rule seed004_theory_figure1:
    output:
        "results/seed004/theory/figure1_{bound}.json",
    params:
        flags=_figure1_flags,
        steps=",".join(str(t) for t in range(FIG1["steps"] + 1)),
    shell:
        "dpaudit theory {wildcards.bound} --steps {params.steps} {params.flags} > {output}"
