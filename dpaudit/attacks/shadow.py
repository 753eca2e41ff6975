"""Shokri-style shadow-model membership inference, exactly as Liang et al., App. D.2 and D.4.

Features are a model's raw output logits. For each true class c, a 10→50→2 MLP (ReLU; SGD with
lr 0.01, momentum 0.9, weight decay 5e-4, batch 100, 50 epochs, cross-entropy) is trained on the
shadow models' members (label 1) and non-members (label 0) of class c and applied to the target's
records of class c. Predictions are the argmax; the predictions of all classes are pooled into one
FPR and FNR, and ε̂ follows from eq. 20. The per-record member-class probability is kept as the
attack score so that threshold-sweeping estimators can use it.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from dpaudit._device import seed_global_rng
from dpaudit._io import atomic_write_bytes, write_json
from dpaudit._validation import DPAuditError, check_positive, check_positive_int
from dpaudit.estimate import empirical_epsilon, error_rates


@dataclass(frozen=True)
class ShadowAttackConfig:
    """Attack-model hyperparameters (defaults: the DPSGD-GC/DC authors' code)."""

    hidden: int = 50
    epochs: int = 50
    batch_size: int = 100
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    per_class: bool = True
    seed: int = 0

    def __post_init__(self):
        check_positive_int("attack hidden", self.hidden)
        check_positive_int("attack epochs", self.epochs)
        check_positive_int("attack batch_size", self.batch_size)
        check_positive("attack lr", self.lr)
        check_positive("attack momentum", self.momentum, allow_zero=True)
        check_positive("attack weight_decay", self.weight_decay, allow_zero=True)


@dataclass
class AttackResult:
    """Outcome of one attack on one target model.

    Attributes:
        fpr: non-members predicted "member" / non-members.
        fnr: members predicted "non-member" / members.
        epsilon_hat: eq. 20 point estimate at ``delta`` (not a confidence bound).
        scores: per target record, the attack's member-class probability.
        is_member: per target record, the ground truth.
        classes: per target record, its true class.
        fallback_classes: classes without both shadow members and non-members, scored by a
            model trained on all classes.
    """

    fpr: float
    fnr: float
    epsilon_hat: float
    delta: float
    scores: np.ndarray
    is_member: np.ndarray
    classes: np.ndarray
    epoch: int | None = None
    fallback_classes: list[int] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        predicted = self.scores > 0.5
        return float((predicted == self.is_member).mean())

    def summary(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "fpr": self.fpr,
            "fnr": self.fnr,
            "epsilon_hat": self.epsilon_hat,
            "delta": self.delta,
            "attack_accuracy": self.accuracy,
            "members": int(self.is_member.sum()),
            "nonmembers": int((~self.is_member).sum()),
            "fallback_classes": self.fallback_classes,
        }


def _fit_mlps(datasets: list[tuple[np.ndarray, np.ndarray, int]], config: ShadowAttackConfig) -> list[nn.Module]:
    """Train one attack MLP per ``(features, targets, seed)`` at once, each exactly as if trained alone.

    Each model starts from the weights ``torch.manual_seed(seed)`` gives a fresh ``Linear → ReLU → Linear`` and
    draws its own batch order from a generator seeded with ``seed``, as a lone fit would; the models are then
    stacked and trained together with batched matrix products. Each model's loss is the mean over its own batch
    (padding rows are masked out), its parameters get only its own gradient, and the SGD update (momentum, weight
    decay, the first step's buffer) is applied only to the models that have a batch at that step, so every model
    follows the same trajectory as ``torch.optim.SGD`` on it alone (up to floating-point summation order).
    """
    models: list[nn.Module] = []
    layers: list[tuple[nn.Linear, nn.Linear]] = []  # each model's two linear layers
    generators = []
    for _, _, seed in datasets:
        with torch.random.fork_rng(devices=[]):
            seed_global_rng(seed)
            first, second = nn.Linear(datasets[0][0].shape[1], config.hidden), nn.Linear(config.hidden, 2)
            models.append(nn.Sequential(first, nn.ReLU(), second))
            layers.append((first, second))
        generators.append(torch.Generator().manual_seed(seed))
    # stacked parameters [K, …], in the (in, out) layout bmm needs
    params = [
        torch.stack([first.weight.detach().T for first, _ in layers]),
        torch.stack([first.bias.detach() for first, _ in layers]),
        torch.stack([second.weight.detach().T for _, second in layers]),
        torch.stack([second.bias.detach() for _, second in layers]),
    ]
    params = [p.clone().requires_grad_(True) for p in params]
    buffers = [torch.zeros_like(p) for p in params]
    sizes = [len(features) for features, _, _ in datasets]
    width = max(sizes)
    inputs = torch.zeros(len(datasets), width, datasets[0][0].shape[1])
    labels = torch.zeros(len(datasets), width, dtype=torch.int64)
    for k, (features, targets, _) in enumerate(datasets):
        inputs[k, : sizes[k]] = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
        labels[k, : sizes[k]] = torch.from_numpy(targets.astype(np.int64))
    rows = torch.arange(len(datasets))[:, None]
    for _ in range(config.epochs):
        batches = [torch.randperm(n, generator=g).split(config.batch_size) for n, g in zip(sizes, generators)]
        for step in range(max(len(b) for b in batches)):
            index = torch.zeros(len(datasets), config.batch_size, dtype=torch.int64)
            mask = torch.zeros(len(datasets), config.batch_size)
            for k, model_batches in enumerate(batches):
                if step < len(model_batches):
                    index[k, : len(model_batches[step])] = model_batches[step]
                    mask[k, : len(model_batches[step])] = 1.0
            counts = mask.sum(dim=1)
            active = counts > 0
            hidden = torch.relu(torch.bmm(inputs[rows, index], params[0]) + params[1][:, None, :])
            logits = torch.bmm(hidden, params[2]) + params[3][:, None, :]
            losses = nn.functional.cross_entropy(logits.transpose(1, 2), labels[rows, index], reduction="none")
            per_model = (losses * mask).sum(dim=1) / counts.clamp(min=1)
            gradients = torch.autograd.grad(per_model.sum(), params)
            with torch.no_grad():
                for p, g, buffer in zip(params, gradients, buffers):
                    on = active.reshape(-1, *([1] * (p.dim() - 1)))
                    direction = g + config.weight_decay * p
                    buffer.copy_(torch.where(on, config.momentum * buffer + direction, buffer))
                    p.sub_(torch.where(on, config.lr * buffer, torch.zeros_like(p)))
    with torch.no_grad():
        for k, (first, second) in enumerate(layers):
            first.weight.copy_(params[0][k].T)
            first.bias.copy_(params[1][k])
            second.weight.copy_(params[2][k].T)
            second.bias.copy_(params[3][k])
    return models


@torch.no_grad()
def _member_probability(model: nn.Module, features: np.ndarray) -> np.ndarray:
    logits = model(torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)))
    return torch.softmax(logits, dim=1)[:, 1].numpy()


def shadow_attack(
    *,
    shadow_features: np.ndarray,
    shadow_membership: np.ndarray,
    shadow_classes: np.ndarray,
    target_features: np.ndarray,
    target_membership: np.ndarray,
    target_classes: np.ndarray,
    config: ShadowAttackConfig = ShadowAttackConfig(),
    delta: float = 1e-5,
    epoch: int | None = None,
) -> AttackResult:
    """Train per-class attack models on shadow features and attack the target's records.

    Args:
        shadow_features: [N_s, k] logits of the shadow models on their members and non-members.
        shadow_membership: [N_s] booleans, True for a shadow's member.
        shadow_classes: [N_s] true class of each shadow record.
        target_features: [N_t, k] logits of the target model on its members and non-members.
        target_membership: [N_t] booleans.
        target_classes: [N_t] true classes.
        config: attack-model hyperparameters.
        delta: the DP δ in ε̂ (eq. 20).
        epoch: the training epoch the features come from (recorded only).

    Returns:
        FPR, FNR, ε̂ and per-record scores.
    """
    shadow_membership = np.asarray(shadow_membership, dtype=bool)
    target_membership = np.asarray(target_membership, dtype=bool)
    shadow_classes = np.asarray(shadow_classes)
    target_classes = np.asarray(target_classes)
    if shadow_features.ndim != 2 or target_features.ndim != 2 or shadow_features.shape[1] != target_features.shape[1]:
        raise DPAuditError(
            f"shadow and target features must be 2-D with equal width, got {shadow_features.shape} and "
            f"{target_features.shape}"
        )
    if len(set(shadow_membership.tolist())) < 2:
        raise DPAuditError("shadow data need both members and non-members to train an attack")
    scores = np.empty(len(target_features), dtype=np.float64)
    classes = np.unique(target_classes)
    own = [c for c in classes if config.per_class and len(set(shadow_membership[shadow_classes == c].tolist())) == 2]
    fallback = [int(c) for c in classes if c not in own] if config.per_class else []
    # every class's own model in one batched fit; a model on all classes for the others
    models = _fit_mlps(
        [
            (shadow_features[shadow_classes == c], shadow_membership[shadow_classes == c], config.seed * 1000 + int(c))
            for c in own
        ],
        config,
    )
    if len(own) < len(classes):
        models += _fit_mlps([(shadow_features, shadow_membership, config.seed * 1000 - 1)], config)
    for cls in classes:
        model = models[own.index(cls)] if cls in own else models[-1]
        into = target_classes == cls
        scores[into] = _member_probability(model, target_features[into])
    # argmax over the two logits: "member" only when its probability is strictly larger.
    fpr, fnr = error_rates(scores > 0.5, target_membership)
    return AttackResult(
        fpr=fpr,
        fnr=fnr,
        epsilon_hat=empirical_epsilon(fpr, fnr, delta=delta),
        delta=delta,
        scores=scores,
        is_member=target_membership,
        classes=target_classes,
        epoch=epoch,
        fallback_classes=fallback,
    )


def attack_run(
    run_dir: str | Path,
    *,
    epochs: list[int] | None = None,
    config: ShadowAttackConfig = ShadowAttackConfig(),
    delta: float = 1e-5,
    out_dir: str | Path | None = None,
    progress: bool = True,
) -> list[AttackResult]:
    """Attack the target of a ``dpaudit train`` run with its shadows, at each checkpoint epoch.

    Args:
        run_dir: output folder of ``train_configuration``.
        epochs: checkpoint epochs to attack (default: every evaluation epoch of the run).
        config: attack-model hyperparameters.
        delta: DP δ used in ε̂.
        out_dir: where ``attack.json`` and ``scores_epoch_EEEE.csv`` go (default: ``run_dir``).
        progress: show a progress bar.

    Returns:
        One ``AttackResult`` per epoch.
    """
    from dpaudit import models as model_registry
    from dpaudit._device import resolve_device
    from dpaudit.data import dataset_info, load_dataset, load_split
    from dpaudit.inference import predict_logits
    from dpaudit.run import load_checkpoint, load_run_config, shadow_name
    from dpaudit.rundir import TARGET, RunDir

    run = Path(run_dir)
    train_config = load_run_config(run)
    if train_config.audit.num_shadows < 1:
        raise DPAuditError("the shadow-model attack needs at least one shadow model (num_shadows ≥ 1)")
    chosen = list(train_config.audit.eval_epochs) if epochs is None else sorted(set(epochs))
    for epoch in chosen:
        if epoch not in train_config.audit.eval_epochs:
            raise DPAuditError(
                f"epoch {epoch} has no checkpoint; evaluation epochs are {list(train_config.audit.eval_epochs)}"
            )
    split = load_split(RunDir(run).split)
    info = dataset_info(train_config.data.dataset)
    train_set = load_dataset(train_config.data.dataset, split="train", root=train_config.data.data_root)
    test_set = load_dataset(train_config.data.dataset, split="test", root=train_config.data.data_root)
    nonmember_set = train_set if split.nonmember_source == "train" else test_set
    device = resolve_device(train_config.engine.device)
    network = model_registry.build_model(
        train_config.model.name, input_shape=info.input_shape, num_classes=info.num_classes
    )

    def features(model_dir: str, epoch: int, member_data, nonmember_data):
        load_checkpoint(RunDir(run).model(model_dir).checkpoint(epoch), network)
        network.to(device)
        logits = np.concatenate(
            [predict_logits(network, d.images, device=device) for d in (member_data, nonmember_data)]
        )
        membership = np.concatenate([np.ones(len(member_data), bool), np.zeros(len(nonmember_data), bool)])
        return logits, membership, np.concatenate([member_data.labels, nonmember_data.labels])

    results = []
    out = Path(out_dir) if out_dir is not None else run
    for epoch in tqdm(chosen, desc="attack", disable=not progress, leave=False, unit="epoch"):
        shadow_parts = [
            features(shadow_name(i), epoch, train_set.subset(s.members), train_set.subset(s.nonmembers))
            for i, s in enumerate(split.shadows)
        ]
        target_parts = features(
            TARGET, epoch, train_set.subset(split.target_members), nonmember_set.subset(split.target_nonmembers)
        )
        result = shadow_attack(
            shadow_features=np.concatenate([p[0] for p in shadow_parts]),
            shadow_membership=np.concatenate([p[1] for p in shadow_parts]),
            shadow_classes=np.concatenate([p[2] for p in shadow_parts]),
            target_features=target_parts[0],
            target_membership=target_parts[1],
            target_classes=target_parts[2],
            config=config,
            delta=delta,
            epoch=epoch,
        )
        results.append(result)
        record_ids = np.concatenate([split.target_members, split.target_nonmembers])
        write_scores(RunDir(out).scores(epoch), result, record_ids)
    write_json(
        RunDir(out).attack,
        {"attack": "shadow-model (Liang et al.)", "config": asdict(config), "results": [r.summary() for r in results]},
    )
    return results


def write_scores(path: str | Path, result: AttackResult, record_ids: np.ndarray) -> Path:
    """Per-record scores as CSV: record (index in its split), is_member, class, score."""
    buffer = io.StringIO()
    buffer.write("record,is_member,class,score\n")
    for record, member, cls, score in zip(record_ids, result.is_member, result.classes, result.scores):
        buffer.write(f"{int(record)},{int(member)},{int(cls)},{score:.9g}\n")
    return atomic_write_bytes(path, buffer.getvalue().encode())
