"""The robust membership-inference attack (RMIA, Zarifzadeh, Liu, Mahloujifar & Shokri, ICML 2024), online and
offline, from the shadows of a ``split_design: halves`` run as reference models.

For record x with label y, Pr(x | θ) is model θ's probability of y. Its reference level Pr(x) is the mean of
Pr(x | θ') over reference models θ':

* **online**: over every shadow (about half trained on x);
* **offline**: over the shadows that did not train on x, corrected for their missing "in" half as the paper does,
  Pr(x) = ½·((1 + a)·Pr_out(x) + (1 − a)), with a ∈ [0, 1] (a = 1: no correction).

A population Z of records no model trained on (the dataset's test split) gives the same ratio for each z. The
score of x is the share of z whose pairwise likelihood ratio

    LR(x, z) = (Pr(x | θ) / Pr(x)) / (Pr(z | θ) / Pr(z))

is at least γ: how much more the target model favours x, against its reference level, than it favours typical
non-members. Higher scores mean "member".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit._validation import DPAuditError, check_choice

RMIA_VARIANTS = ("online", "offline")
OFFLINE_A = 0.3
"""The offline correction's a: the value the RMIA paper's experiments use without in-models (its App. B.2 tunes a
on reference models; 0.3 sits in the range it reports for image data)."""
POPULATION = 2000
"""Population records z drawn from the test split (all of it when smaller)."""
GAMMA = 1.0


def _reference(values: np.ndarray, trained: np.ndarray | None, *, variant: str, a: float) -> np.ndarray:
    """Pr(·) of each record from the reference models' values [S, N]; ``trained``: their [S, N] in-masks, or None
    where no reference model trained on any of the records (the population)."""
    if trained is None or variant == "online":
        level = values.mean(axis=0)
    else:
        out = ~trained
        counts = out.sum(axis=0)
        if (counts == 0).any():
            raise DPAuditError(
                f"{int((counts == 0).sum())} record(s) have no reference model that did not train on them; train "
                "more shadows (RMIA offline)"
            )
        level = (values * out).sum(axis=0) / counts
    return level if variant == "online" else 0.5 * ((1 + a) * level + (1 - a))


def rmia_scores(
    target: np.ndarray,
    shadows: np.ndarray,
    shadow_in: np.ndarray,
    *,
    population_target: np.ndarray,
    population_shadows: np.ndarray,
    variant: str = "offline",
    a: float = OFFLINE_A,
    gamma: float = GAMMA,
) -> np.ndarray:
    """RMIA membership scores of the target's records (module docstring).

    Args:
        target: ``[N]`` Pr(x | θ) of the attacked model on each record.
        shadows: ``[S, N]`` Pr(x | θ') of each reference model on each record.
        shadow_in: ``[S, N]`` True where the reference model trained on the record.
        population_target: ``[M]`` Pr(z | θ) of the attacked model on the population records.
        population_shadows: ``[S, M]`` Pr(z | θ') of each reference model on them (none trained on them).
        variant: "online" (every reference model) or "offline" (those out, corrected by ``a``).
        a: the offline correction, in [0, 1].
        gamma: the likelihood-ratio threshold γ > 0.

    Returns:
        ``[N]`` scores in [0, 1]: the share of population records z with LR(x, z) ≥ γ.

    Raises:
        DPAuditError: mismatched shapes, probabilities outside (0, 1], a record without an "out" reference model
            (offline), or a bad a or γ.
    """
    check_choice("variant", variant, RMIA_VARIANTS)
    if not 0 <= a <= 1:
        raise DPAuditError(f"a must be in [0, 1], got {a}")
    if not gamma > 0:
        raise DPAuditError(f"gamma must be > 0, got {gamma}")
    target, shadows = np.asarray(target, dtype=np.float64), np.asarray(shadows, dtype=np.float64)
    shadow_in = np.asarray(shadow_in, dtype=bool)
    population_target = np.asarray(population_target, dtype=np.float64)
    population_shadows = np.asarray(population_shadows, dtype=np.float64)
    if (
        target.ndim != 1
        or shadows.shape != (shadows.shape[0], target.size)
        or shadow_in.shape != shadows.shape
        or population_target.ndim != 1
        or population_shadows.shape != (shadows.shape[0], population_target.size)
        or population_target.size == 0
    ):
        raise DPAuditError(
            f"need target [N], shadows and shadow_in [S, N], population_target [M > 0] and population_shadows "
            f"[S, M], got {target.shape}, {shadows.shape}, {shadow_in.shape}, {population_target.shape} and "
            f"{population_shadows.shape}"
        )
    for name, values in (
        ("target", target),
        ("shadows", shadows),
        ("population_target", population_target),
        ("population_shadows", population_shadows),
    ):
        if not (np.isfinite(values).all() and (values > 0).all() and (values <= 1).all()):
            raise DPAuditError(f"RMIA's {name} must be probabilities in (0, 1]")
    ratio_x = target / _reference(shadows, shadow_in, variant=variant, a=a)
    ratio_z = np.sort(population_target / _reference(population_shadows, None, variant=variant, a=a))
    # LR(x, z) ≥ γ  ⇔  ratio_z ≤ ratio_x / γ
    return np.searchsorted(ratio_z, ratio_x / gamma, side="right") / ratio_z.size


def run_rmia_scores(run_dir: str | Path, *, epoch: int, variant: str = "offline") -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) of RMIA against the target of a ``split_design: halves`` run, its shadows
    the reference models and up to :data:`POPULATION` test-split records the population.

    Args:
        run_dir: output folder of ``dpaudit train``.
        epoch: checkpoint epoch of every model.
        variant: "online" or "offline".
    """
    from dpaudit.attacks.lira import open_halves_run
    from dpaudit.attacks.loss import loss_scores
    from dpaudit.data import load_dataset
    from dpaudit.run import shadow_name

    check_choice("variant", variant, RMIA_VARIANTS)
    config, split, load, device, pool = open_halves_run(run_dir, epoch=epoch, why="RMIA takes its references from")
    test = load_dataset(config.data.dataset, split="test", root=config.data.data_root)
    population = test.subset(np.arange(min(POPULATION, len(test))))

    names = ["target"] + [shadow_name(i) for i in range(split.num_shadows)]
    # Pr(x | θ) of each model: the true class's softmax probability, the "confidence" signal of the loss attack
    on_pool = np.stack([loss_scores(load(name), pool, signal="confidence", device=device) for name in names])
    on_population = np.stack(
        [loss_scores(load(name), population, signal="confidence", device=device) for name in names]
    )
    scores = rmia_scores(
        on_pool[0],
        on_pool[1:],
        split.keep[1:],
        population_target=on_population[0],
        population_shadows=on_population[1:],
        variant=variant,
    )
    return scores[split.keep[0]], scores[~split.keep[0]]
