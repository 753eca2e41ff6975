"""Black-box audits: input-space canaries, scored by the final model's outputs alone.

The adversary of this rung sees neither gradients nor iterates: it picks one record (the *canary*: a crafted input
with a label), and, for each trained model, reads the model's loss on it. Two designs:

* **many models** (:func:`audit_many_models`): K models of one configuration, trained together by the engine, each
  with the canary present with probability ½ (one trial per model). "Out" models draw the canary's slot in the
  sampler like any record and never train on it (``Member.absent``), so the two worlds differ by that record alone,
  at the same q (add/remove adjacency).
* **one run** (:func:`audit_one_run`): m mislabelled records in one model, each present with probability ½, and the
  one-run bound of Steinke, Nasr & Jagielski (2023).

Threat models, each labelled: the *natural* one (every model from its own random initialisation) and the
*worst-case initialisation* of Annamalai & De Cristofaro (NeurIPS 2024), where the adversary chooses θ₀: every
model starts from parameters trained (non-privately) on the records the adversary knows, so that their gradients are
small and the canary's dominates.

Statistics: the assumption-free Clopper–Pearson lower bound (its threshold chosen on a held-out fifth) with its
ceiling for the trials used, and, as a second reading, the Gaussian-DP reading of Nasr et al. (2023). That reading
is a *family bound* where the run is μ-GDP: full-batch training (q = 1) composes Gaussian mechanisms, which is
μ-GDP, and the final model is a post-processing; with subsampling (q < 1) the mechanism is not μ-GDP and the reading
is an estimate only. Each ε is reported against the run's ε (its accountant) and against the last-iterate
heuristic (Steinke et al., ICLR 2025), the honest target of a final-model audit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpaudit import models as model_registry
from dpaudit import optim
from dpaudit._names import CANARY_KINDS, INITIALISATIONS
from dpaudit._validation import DPAuditError, check_choice, check_count
from dpaudit.audit import audit_scores
from dpaudit.config import TrainConfig
from dpaudit.data import ArrayDataset, dataset_info, load_dataset
from dpaudit.estimate import epsilon_one_run, epsilon_one_run_scores
from dpaudit.inference import predict_logits
from dpaudit.theory.tradeoff import last_iterate_epsilon
from dpaudit.train import Member, planned_epsilon, train_models

THREAT_MODELS = {
    "natural": "black box: one crafted record, queries of the final model; random initialisation",
    "worst-case": "black box: one crafted record, queries of the final model; the adversary chooses θ₀ "
    "(pre-trained on the records it knows)",
}
AF_LABEL = "lower bound, assumption-free (Clopper–Pearson, threshold on a held-out fifth)"
GDP_FAMILY_LABEL = "family bound: a lower bound if the run is μ-GDP (full batch, the Gaussian mechanism composed)"
GDP_ESTIMATE_LABEL = "estimate (Gaussian-DP reading, Nasr et al. 2023): with subsampling the run is not μ-GDP"
PRETRAIN_STEPS = 300
ONE_RUN_GUESS_SHARE = 20  # the one-run design guesses IN for its top 1/20 of canaries, fixed in advance


@dataclass(frozen=True)
class InputCanary:
    """A crafted record: an input in the dataset's normalised scale and its label.

    Attributes:
        image: float32 array (C, H, W).
        label: Its class.
        kind: How it was crafted (one of :data:`CANARY_KINDS`).
    """

    image: np.ndarray
    label: int
    kind: str


@dataclass(frozen=True)
class BlackBoxReport:
    """A black-box audit's result; every ε in nats at ``delta``.

    Attributes:
        optimizer: The audited run's optimizer.
        model: Its model.
        dataset: Its dataset.
        design: "many models" or "one run".
        canary: The canary kind.
        initialisation: "natural" or "worst-case".
        threat_model: What the adversary controls.
        trials: Models (many models) or canaries (one run) audited.
        sample_rate: q of the run (1: full batch).
        steps: T.
        noise_multiplier: z.
        epsilon: The run's ε (its accountant's guarantee).
        epsilon_last_iterate: The last-iterate heuristic's ε (what a final-model attack on a linear loss reaches).
        epsilon_lower: The assumption-free 95 % lower bound.
        epsilon_ceiling: The most ``epsilon_lower`` could certify with these trials (a perfect attack).
        epsilon_gdp: The Gaussian-DP reading (``gdp_label`` says whether it is a family bound or an estimate).
        gdp_label: What ``epsilon_gdp`` is.
        auc: Area under the ROC curve of the scores.
        tpr_at_fpr: TPR at FPR 10⁻³ and 10⁻² (no interpolation).
        delta: δ.
        confidence: Of the lower bounds.
    """

    optimizer: str
    model: str
    dataset: str
    design: str
    canary: str
    initialisation: str
    threat_model: str
    trials: int
    sample_rate: float
    steps: int
    noise_multiplier: float
    epsilon: float
    epsilon_last_iterate: float | None
    epsilon_lower: float
    epsilon_ceiling: float
    epsilon_gdp: float | None
    gdp_label: str | None
    auc: float | None
    tpr_at_fpr: dict[str, float]
    delta: float
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the label of each ε."""
        return {
            **asdict(self),
            "labels": {
                "epsilon": "guarantee (the run's accountant: an upper bound)",
                "epsilon_last_iterate": "heuristic (Steinke et al. 2025): no guarantee",
                "epsilon_lower": AF_LABEL if self.design == "many models" else "lower bound, assumption-free (one run)",
                "epsilon_ceiling": "the most epsilon_lower can certify with these trials",
                "epsilon_gdp": self.gdp_label,
            },
        }


def _least_likely_label(model: nn.Module, image: np.ndarray) -> int:
    with torch.no_grad():
        return int(model(torch.from_numpy(image[None])).argmin())


def pretrain(
    *, model_name: str, data: ArrayDataset, steps: int = PRETRAIN_STEPS, lr: float = 0.1, seed: int = 0
) -> nn.Module:
    """A model trained without privacy by full-batch gradient descent on ``data``: the worst-case θ₀ (the adversary
    knows these records) and the reference model that crafts canaries.

    Args:
        model_name: A registered model.
        data: The records.
        steps: Gradient steps.
        lr: Step size.
        seed: Its initialisation's seed.
    """
    info = dataset_info(data.name)
    model = model_registry.build_model(
        model_name, input_shape=info.input_shape, num_classes=info.num_classes, seed=seed
    )
    images, labels = torch.from_numpy(data.images), torch.from_numpy(data.labels)
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(steps):
        # θ ← θ − η·∇, torch.optim.SGD's step without momentum (the same arithmetic), by hand: torch.optim's step
        # imports torch._dynamo at its first call, seconds at the start of every black-box job
        grads = torch.autograd.grad(F.cross_entropy(model(images), labels), params)
        with torch.no_grad():
            for p, grad in zip(params, grads):
                p.add_(grad, alpha=-lr)
    return model.eval()


def craft_canary(
    *, kind: str, reference: nn.Module, data: ArrayDataset, candidates: ArrayDataset, steps: int = 200, seed: int = 0
) -> InputCanary:
    """Craft one input-space canary against a reference model; its label is the class the reference finds least
    likely (so that its loss, and its gradient, stay large while the models train).

    Args:
        kind: "mislabelled" (a record of ``candidates``, relabelled), "blank" (the all-zero input: the data's mean
            pixel), "bright" (every pixel at the data's maximum: out of distribution), "gradient-aligned" (from
            "bright", optimised within the data's pixel range so that its gradient at the reference is orthogonal to
            the records' mean gradient, so that the records' sampling moves its loss little).
        reference: The model it is crafted against.
        data: The records the models train on (their pixel range; their mean gradient).
        candidates: Records not trained on (the mislabelled canary is one of them).
        steps: Optimisation steps of the gradient-aligned kind.
        seed: Which candidate the mislabelled kind takes.
    """
    check_choice("canary kind", kind, CANARY_KINDS)
    shape = data.images.shape[1:]
    low, high = float(data.images.min()), float(data.images.max())
    if kind == "mislabelled":
        image = candidates.images[int(np.random.default_rng(seed).integers(len(candidates)))]
    elif kind == "blank":
        image = np.zeros(shape, np.float32)
    else:
        image = np.full(shape, high, np.float32)
    label = _least_likely_label(reference, image)
    if kind == "gradient-aligned":
        image = _orthogonal_input(reference, data, image, label, steps=steps, low=low, high=high)
        label = _least_likely_label(reference, image)
    return InputCanary(image=np.ascontiguousarray(image, dtype=np.float32), label=label, kind=kind)


def _orthogonal_input(
    reference: nn.Module, data: ArrayDataset, start: np.ndarray, label: int, *, steps: int, low: float, high: float
) -> np.ndarray:
    params = [p for p in reference.parameters() if p.requires_grad]
    loss = F.cross_entropy(reference(torch.from_numpy(data.images)), torch.from_numpy(data.labels))
    mean = torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]).detach()
    x = torch.tensor(start[None], requires_grad=True)
    optimizer = torch.optim.Adam([x], lr=0.05)
    target = torch.tensor([label])
    for _ in range(steps):
        grads = torch.autograd.grad(F.cross_entropy(reference(x), target), params, create_graph=True)
        flat = torch.cat([g.flatten() for g in grads])
        cosine = torch.dot(flat, mean) / (flat.norm() * mean.norm() + 1e-12)
        optimizer.zero_grad()
        (cosine**2).backward()
        optimizer.step()
        with torch.no_grad():
            x.clamp_(low, high)
    return x.detach()[0].numpy()


@dataclass(frozen=True)
class _Run:
    """A validated configuration and what the reports state about its run."""

    config: TrainConfig
    noise_multiplier: float
    sample_rate: float
    steps: int
    epsilon: float
    epsilon_last_iterate: float | None

    def report(self, *, confidence: float, **fields: Any) -> BlackBoxReport:
        return BlackBoxReport(
            optimizer=self.config.optimizer.name,
            model=self.config.model.name,
            dataset=self.config.data.dataset,
            sample_rate=self.sample_rate,
            steps=self.steps,
            noise_multiplier=self.noise_multiplier,
            epsilon=self.epsilon,
            epsilon_last_iterate=self.epsilon_last_iterate,
            delta=self.config.privacy.delta,
            confidence=confidence,
            **fields,
        )


def _run(config: TrainConfig) -> _Run:
    """The validated config with its z, q, T, ε and last-iterate ε; a one-line error for a run the black-box audit
    cannot read."""
    config = config.validated()
    spec = optim.get_spec(config.optimizer.name)
    if not (spec.dp_claim and issubclass(spec.cls, optim.PrivateOptimizer)):
        raise DPAuditError(f"a black-box audit needs an optimizer with a DP claim, got {config.optimizer.name}")
    if config.optimizer.sampling != "poisson":
        raise DPAuditError("a black-box audit needs sampling: poisson (q = b/n; b = n for full batch)")
    hyper = config.hyperparameters(config.data.target_size)
    multipliers = np.asarray(spec.cls.planned_noise_multipliers(hyper), dtype=float)
    z, q, steps = float(multipliers.mean()), float(hyper.sample_rate), len(multipliers)
    epsilon = planned_epsilon(config)
    assert epsilon is not None  # a private optimizer (checked)
    heuristic = (  # the heuristic takes one noise multiplier
        last_iterate_epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=config.privacy.delta)
        if np.allclose(multipliers, multipliers[0])
        else None
    )
    return _Run(config, z, q, steps, float(epsilon), heuristic)


def _initial_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def _records(config: TrainConfig, extra: int, *, seed: int) -> tuple[ArrayDataset, ArrayDataset]:
    """(the n − ``extra`` records every model trains on, records none does), from a seeded draw of the training set."""
    train = load_dataset(config.data.dataset, split="train", root=config.data.data_root, download=config.data.download)
    n = config.data.target_size
    if n - extra < 1 or n - extra + 1 > len(train):
        raise DPAuditError(
            f"target_size {n} leaves no records beside the {extra} canary slot(s) in {len(train)} of "
            f"{config.data.dataset}"
        )
    order = np.random.default_rng(seed).permutation(len(train))
    return train.subset(order[: n - extra]), train.subset(order[n - extra :])


def _with(data: ArrayDataset, images: np.ndarray, labels: np.ndarray) -> ArrayDataset:
    return ArrayDataset(
        name=data.name,
        images=np.concatenate([data.images, images]).astype(np.float32),
        labels=np.concatenate([data.labels, labels]).astype(np.int64),
        num_classes=data.num_classes,
    )


def _scores(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The final model's negative loss on each record (higher: member): what a black-box adversary reads."""
    with torch.no_grad():
        logits = torch.from_numpy(predict_logits(model, images, device=next(model.parameters()).device))
    return -F.cross_entropy(logits, torch.from_numpy(labels), reduction="none").double().numpy()


#: The most d × p projection entries per model the many-models design holds (4 MB in float32): thousands of models
#: each keep their own projection and apply it to every record at every step.
PROJECTION_ENTRIES_LIMIT = 10**6


def many_models_unfit(*, config: TrainConfig) -> str | None:
    """Why the many-models design does not suit ``config``'s run at thousands of models (None: it does).

    A projected optimizer (DP2-SGD, D2P2-SGD) keeps a d_l × p_l projection per tensor and model and applies it to every
    record at every step: it suits only a model whose projections hold at most :data:`PROJECTION_ENTRIES_LIMIT`
    entries (e.g. ``linear`` on digits: 1.2·10⁵; ``mlp``: 2·10⁷)."""
    from dpaudit.optim.projection import projected_dimensions
    from dpaudit.settings import ProjectionSettings

    settings = config.optimizer.settings
    if not isinstance(settings, ProjectionSettings):
        return None
    info = dataset_info(config.data.dataset)
    model = model_registry.build_model(config.model.name, input_shape=info.input_shape, num_classes=info.num_classes)
    sizes = [p.numel() for p in model_registry.trainable_parameters(model)]
    entries = sum(d * p for d, p in zip(sizes, projected_dimensions(sizes, settings=settings)))
    if entries > PROJECTION_ENTRIES_LIMIT:
        return (
            f"its d × p projections hold {entries:,} entries per model on {config.model.name} (at most "
            f"{PROJECTION_ENTRIES_LIMIT:,}): a model with smaller tensors (e.g. linear on digits)"
        )
    return None


def audit_many_models(
    *,
    config: TrainConfig,
    models: int,
    canary: str = "bright",
    initialisation: str = "worst-case",
    seed: int = 0,
    chunk: int = 250,
    confidence: float = 0.95,
    progress: bool = True,
) -> BlackBoxReport:
    """Train ``models`` models of ``config`` with one input-space canary, each present with probability ½, and audit
    the final models' losses on it.

    ``config.data.target_size`` is n including the canary's slot: every model trains on the same n − 1 records, the
    "in" models on the canary too; q = b/n for all (b = n: full batch).

    Args:
        config: A private optimizer with Poisson sampling (``config.validated`` is called here).
        models: K ≥ 4 (one trial each).
        canary: One of :data:`CANARY_KINDS`.
        initialisation: "natural" or "worst-case" (:data:`INITIALISATIONS`).
        seed: Seeds the records, the canary, the memberships and (with ``config.seed``) the models.
        chunk: Models trained together at once (memory).
        confidence: 1 − α of the lower bounds.
        progress: Show a progress bar over the chunks.

    Raises:
        DPAuditError: a bad argument or a configuration the audit cannot read, before any training.
    """
    check_count("models", models, allow_zero=False)
    if models < 4:
        raise DPAuditError(f"models must be at least 4 (two per world at least), got {models}")
    check_count("chunk", chunk, allow_zero=False)
    check_choice("canary kind", canary, CANARY_KINDS)
    check_choice("initialisation", initialisation, INITIALISATIONS)
    run = _run(config)
    config = run.config
    unfit = many_models_unfit(config=config)
    if unfit:
        raise DPAuditError(f"the many-models design does not suit {config.optimizer.name} here: {unfit}")
    known, others = _records(config, 1, seed=seed)
    reference = pretrain(model_name=config.model.name, data=known, seed=seed)
    crafted = craft_canary(kind=canary, reference=reference, data=known, candidates=others, seed=seed)
    data = _with(known, crafted.image[None], np.array([crafted.label]))
    state = _initial_state(reference) if initialisation == "worst-case" else None
    present = np.random.default_rng([seed, 1]).random(models) < 0.5
    if present.all() or not present.any():
        present[0] = not present[0]
    from tqdm.auto import tqdm

    scores = np.empty(models)
    for start in tqdm(range(0, models, chunk), desc="black-box models", disable=not progress, leave=False):
        members = [
            Member(
                train_data=data,
                model_index=1 + k,
                label=f"model_{k}",
                absent=() if present[k] else (len(data) - 1,),
                initial_state=state,
            )
            for k in range(start, min(models, start + chunk))
        ]
        trained = train_models(config=config, members=members, test_data=None, progress=False)
        for k, result in zip(range(start, start + len(members)), trained):
            scores[k] = _scores(result.model, crafted.image[None], np.array([crafted.label]))[0]
    report = audit_scores(
        scores[present], scores[~present], delta=config.privacy.delta, confidence=confidence, selection="gaussian"
    )
    return run.report(
        confidence=confidence,
        design="many models",
        canary=canary,
        initialisation=initialisation,
        threat_model=THREAT_MODELS[initialisation],
        trials=models,
        epsilon_lower=float(report.epsilon_lower),
        epsilon_ceiling=float(report.epsilon_ceiling),
        epsilon_gdp=float(report.epsilon_gdp),
        gdp_label=GDP_FAMILY_LABEL if math.isclose(run.sample_rate, 1.0) else GDP_ESTIMATE_LABEL,
        auc=float(report.auc),
        tpr_at_fpr={f"{key:g}": float(value) for key, value in report.tpr_at_fpr.items()},
    )


def audit_one_run(
    *,
    config: TrainConfig,
    canaries: int,
    initialisation: str = "natural",
    seed: int = 0,
    confidence: float = 0.95,
    progress: bool = True,
) -> BlackBoxReport:
    """Train one model of ``config`` with ``canaries`` mislabelled records, each present with probability ½, and
    audit its losses on them with the one-run bound (Steinke, Nasr & Jagielski 2023), guessing IN for the top
    1/:data:`ONE_RUN_GUESS_SHARE` of the scores and abstaining on the rest.

    ``config.data.target_size`` is n including the canaries' slots.

    Args:
        config: A private optimizer with Poisson sampling.
        canaries: m ≥ 2 canaries.
        initialisation: "natural" or "worst-case".
        seed: Seeds the records, the canaries and their memberships.
        confidence: 1 − α of the bound.
        progress: Show a progress bar over the training steps.

    Raises:
        DPAuditError: a bad argument or a configuration the audit cannot read, before any training.
    """
    check_count("canaries", canaries, allow_zero=False)
    if canaries < 2:
        raise DPAuditError(f"canaries must be at least 2, got {canaries}")
    check_choice("initialisation", initialisation, INITIALISATIONS)
    run = _run(config)
    config = run.config
    known, others = _records(config, canaries, seed=seed)
    if len(others) < canaries:
        raise DPAuditError(f"{config.data.dataset} has {len(others)} records left for {canaries} canaries")
    rng = np.random.default_rng([seed, 2])
    pick = rng.choice(len(others), size=canaries, replace=False)
    labels = (others.labels[pick] + rng.integers(1, others.num_classes, size=canaries)) % others.num_classes
    images = others.images[pick]
    data = _with(known, images, labels)
    present = rng.random(canaries) < 0.5
    absent = tuple(int(i) for i in len(known) + np.flatnonzero(~present))
    state = (
        _initial_state(pretrain(model_name=config.model.name, data=known)) if initialisation == "worst-case" else None
    )
    member = Member(train_data=data, model_index=1, label="one run", absent=absent, initial_state=state)
    trained = train_models(config=config, members=[member], test_data=None, progress=progress)[0]
    scores = _scores(trained.model, images, labels.astype(np.int64))
    guesses = max(1, canaries // ONE_RUN_GUESS_SHARE)  # fixed before the scores are read
    bound = epsilon_one_run_scores(scores, present, delta=config.privacy.delta, confidence=confidence, guesses=guesses)
    ceiling = epsilon_one_run(
        guesses=guesses, correct=guesses, canaries=canaries, delta=config.privacy.delta, confidence=confidence
    )
    return run.report(
        confidence=confidence,
        design="one run",
        canary="mislabelled",
        initialisation=initialisation,
        threat_model=THREAT_MODELS[initialisation].replace("one crafted record", f"{canaries} mislabelled records"),
        trials=canaries,
        epsilon_lower=float(bound.epsilon),
        epsilon_ceiling=float(ceiling),
        epsilon_gdp=None,
        gdp_label=None,
        auc=None,
        tpr_at_fpr={},
    )
