"""The likelihood-ratio attack (LiRA, Carlini et al. 2022), online and offline.

A run trained with ``split_design: halves`` has 1 + S models on paired halves of one pool of train
records, so every record is in about half of the S shadow models. For record x with label y, the
signal of a model f is the logit-scaled confidence φ = log p_y − log(1 − p_y) of f(x), which is close to
Gaussian over training randomness. From the shadows:

* **online**: score(x) = log N(φ_target; μ_in, σ_in²) − log N(φ_target; μ_out, σ_out²), with μ_in the
  mean of φ over the shadows that trained on x and μ_out over those that did not;
* **offline**: score(x) = (φ_target − μ_out) / σ_out, the one-sided test against the "out" Gaussian
  alone (monotone in Carlini et al.'s p-value), which needs no shadow trained on x.

With few shadows per record the per-record variance is unreliable, so ``variance="global"`` (the
default, Carlini et al.'s choice below 64 shadows) pools the within-record spread over all records;
``"per-example"`` uses each record's own spread. Higher scores mean "member".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._validation import DPAuditError, check_choice

LIRA_VARIANTS = ("online", "offline")
VARIANCES = ("global", "per-example")


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """φ = log p_y − log(1 − p_y) of softmax(logits), computed without forming p (stable for p_y → 1).

    Args:
        logits: ``[N, classes]`` model outputs.
        labels: ``[N]`` true classes.

    Returns:
        ``[N]`` float64 φ values.
    """
    from scipy.special import logsumexp

    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels)
    if logits.ndim != 2 or labels.shape != (logits.shape[0],):
        raise DPAuditError(f"logits must be [N, classes] with N labels, got {logits.shape} and {labels.shape}")
    true = logits[np.arange(len(labels)), labels]
    others = logits.copy()
    others[np.arange(len(labels)), labels] = -np.inf
    return true - logsumexp(others, axis=1)


def _side_statistics(values: np.ndarray, mask: np.ndarray, variance: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-record mean and standard deviation of ``values[s, i]`` over the shadows s where ``mask[s, i]``."""
    counts = mask.sum(axis=0)
    mean = np.where(mask, values, 0.0).sum(axis=0) / np.maximum(counts, 1)
    squares = np.where(mask, (values - mean) ** 2, 0.0)
    if variance == "global":
        dof = int(counts.sum() - np.count_nonzero(counts))
        std = np.full(values.shape[1], np.sqrt(squares.sum() / dof) if dof > 0 else 0.0)
    else:
        std = np.sqrt(squares.sum(axis=0) / np.maximum(counts - 1, 1))
    floor = 1e-6 * max(1.0, float(np.abs(values).max(initial=0.0)))
    return mean, np.maximum(std, floor)


def lira_scores(
    target: np.ndarray, shadows: np.ndarray, shadow_in: np.ndarray, *, variant: str = "online", variance: str = "global"
) -> np.ndarray:
    """LiRA membership scores of the target's records from shadow-model signals.

    Args:
        target: ``[N]`` φ of the attacked model on each record.
        shadows: ``[S, N]`` φ of each shadow model on each record.
        shadow_in: ``[S, N]`` booleans, True where the shadow trained on the record.
        variant: "online" (in and out Gaussians) or "offline" (out Gaussian only).
        variance: "global" (pooled within-record spread) or "per-example".

    Returns:
        ``[N]`` scores, higher = member.

    Raises:
        DPAuditError: mismatched shapes, non-finite signals, or a record without the shadows its
            variant needs (online: at least one in and one out; per-example variance: two of each used).
    """
    check_choice("variant", variant, LIRA_VARIANTS)
    check_choice("variance", variance, VARIANCES)
    target = np.asarray(target, dtype=np.float64)
    shadows = np.asarray(shadows, dtype=np.float64)
    shadow_in = np.asarray(shadow_in, dtype=bool)
    if target.ndim != 1 or shadows.ndim != 2 or shadows.shape[1] != target.size or shadow_in.shape != shadows.shape:
        raise DPAuditError(
            f"need target [N], shadows [S, N] and shadow_in [S, N], got {target.shape}, "
            f"{shadows.shape} and {shadow_in.shape}"
        )
    if not (np.isfinite(target).all() and np.isfinite(shadows).all()):
        raise DPAuditError("LiRA signals must be finite")
    needed = 2 if variance == "per-example" else 1
    sides = [("out", ~shadow_in)] + ([("in", shadow_in)] if variant == "online" else [])
    for name, mask in sides:
        short = int(np.count_nonzero(mask.sum(axis=0) < needed))
        if short:
            raise DPAuditError(
                f"{short} record(s) have fewer than {needed} '{name}' shadow model(s); "
                f"train more shadows (LiRA {variant}, {variance} variance)"
            )
    mean_out, std_out = _side_statistics(shadows, ~shadow_in, variance)
    if variant == "offline":
        return (target - mean_out) / std_out
    mean_in, std_in = _side_statistics(shadows, shadow_in, variance)

    def log_normal(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
        return -0.5 * ((x - mean) / std) ** 2 - np.log(std)

    return log_normal(target, mean_in, std_in) - log_normal(target, mean_out, std_out)


def open_halves_run(run_dir: str | Path, *, epoch: int, why: str) -> tuple[Any, Any, Any, Any, Any]:
    """(config, split, model loader, device, the pool's records) of a ``split_design: halves`` run at ``epoch``.

    Raises:
        DPAuditError: another split design ("``why`` a run trained with split_design 'halves'").
    """
    from dpaudit.data import HalvesSplit, load_dataset
    from dpaudit.run import open_run

    config, split, load, device = open_run(run_dir, epoch=epoch)
    if not isinstance(split, HalvesSplit):
        raise DPAuditError(
            f"{why} a run trained with split_design 'halves' (every record in half the shadow models); {run_dir} "
            f"used '{config.audit.split_design}'"
        )
    pool = load_dataset(config.data.dataset, split="train", root=config.data.data_root).subset(split.pool)
    return config, split, load, device, pool


def run_lira_scores(
    run_dir: str | Path, *, epoch: int, variant: str = "online", variance: str = "global"
) -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) of LiRA against the target of a ``split_design: halves`` run.

    Args:
        run_dir: output folder of ``dpaudit train``.
        epoch: checkpoint epoch of every model.
        variant: "online" or "offline".
        variance: "global" or "per-example".
    """
    from dpaudit.inference import predict_logits
    from dpaudit.run import shadow_name

    check_choice("variant", variant, LIRA_VARIANTS)
    check_choice("variance", variance, VARIANCES)
    _, split, load, device, pool = open_halves_run(run_dir, epoch=epoch, why="LiRA needs")

    def signal(name: str) -> np.ndarray:
        return logit_confidence(predict_logits(load(name), pool.images, device=device), pool.labels)

    target = signal("target")
    shadows = np.stack([signal(shadow_name(i)) for i in range(split.num_shadows)])
    scores = lira_scores(target, shadows, split.keep[1:], variant=variant, variance=variance)
    return scores[split.keep[0]], scores[~split.keep[0]]
