"""Training configuration: small validated frozen dataclasses, importable without torch.

A :class:`TrainConfig` nests one dataclass per concern: :class:`DataConfig`, :class:`ModelConfig`,
:class:`OptimizerConfig` (with the optimizer family's settings, a dataclass of :mod:`dpaudit.settings`),
:class:`PrivacyConfig`, :class:`AuditConfig` and :class:`EngineConfig`, beside the Monte Carlo ``trial`` and ``seed``.
Its serialized form (:meth:`TrainConfig.to_dict`, :meth:`TrainConfig.from_dict`; a run's ``config.json``, a
``--config`` YAML file, the pipeline's run settings) is one flat mapping with the keys of :data:`FLAT_KEYS`, each the
name of a ``dpaudit train`` flag. Every field carries its help in its metadata (``"setting"``: a
:class:`dpaudit.settings.Setting`, else ``"help"``), with the accepted ``"choices"`` where there are some, and
``"key"`` where its flat key is not its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit._names import model_names, optimizer_names
from dpaudit._validation import DPAuditError, check_choice, check_positive, check_positive_int, check_probability
from dpaudit.data import HalvesSplit, MIASplit, available_datasets, dataset_info, make_halves_split, make_mia_split
from dpaudit.data.splits import SPLIT_DESIGNS
from dpaudit.settings import SETTINGS, OptimizerSettings, ProjectionSettings, TwoPhaseSettings, setting_field

SAMPLING_SCHEMES = ("poisson", "shuffle")
# dpaudit.attacks.canary, and "whole-run": dpaudit.attacks.canary_run
CANARY_DESIGNS = ("dirac", "projection-aligned", "support", "noise-scale", "whole-run")
#: how whole-run canaries share the run's randomness (``AuditConfig.canary_randomness``)
CANARY_RANDOMNESS = ("derived", "joint")
#: where a learned support puts whole-run canaries (``AuditConfig.canary_support``)
CANARY_SUPPORT = ("kept", "ranked")
# fewer whole-run canaries leave a class with < 2 canaries too often (probability 2·11/2¹⁰ ≈ 2 % at 10)
WHOLE_RUN_MIN_CANARIES = 10
GRAD_SAMPLE_BACKENDS = ("auto", "layers", "functorch", "opacus", "ghost")
ENGINES = ("ensemble", "sequential")
DEVICES = ("auto", "cpu", "cuda")
# the privacy settings only private optimizers read (delta and accountant: every run's, for its ε and audits)
_PRIVATE_SETTINGS = ("clip_norm", "sigma_dp", "noise_multiplier", "target_epsilon")

if TYPE_CHECKING:  # pragma: no cover
    from dpaudit.optim import Hyperparameters, Optimizer


def _option(
    default: Any,
    help: str,
    *,
    choices: tuple[str, ...] | Callable[[], list[str]] | None = None,
    key: str | None = None,
) -> Any:
    """A field that is not a setting: its default, and its help (and choices, flat key) as metadata."""
    metadata: dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = choices
    if key is not None:
        metadata["key"] = key
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class DataConfig:
    """The records a run trains on.

    Attributes:
        dataset: dataset name (``dpaudit.data.available_datasets()``).
        target_size: n, the number of target members (and of target non-members).
        data_root: folder holding the downloaded datasets.
        download: fetch a missing dataset (torchvision datasets only).
    """

    dataset: str = _option("digits", "dataset name", choices=available_datasets)
    target_size: int = _option(300, "n, the number of target members (and of target non-members)")
    data_root: str = _option("data", "folder holding the downloaded datasets")
    download: bool = _option(False, "fetch a missing dataset (torchvision datasets only)")


@dataclass(frozen=True)
class ModelConfig:
    """The model every run of the configuration trains.

    Attributes:
        name: model name (``dpaudit.models.available()``); flat key ``model``.
    """

    name: str = _option("cnn-digits", "model name", choices=model_names, key="model")


@dataclass(frozen=True)
class OptimizerConfig:
    """The optimizer, its schedule and its settings.

    Attributes:
        name: optimizer name (``dpaudit.optim.available()``); flat key ``optimizer``.
        epochs: number of epochs E; T = ceil(n / b) · E steps.
        batch_size: (expected) batch size b.
        sampling: "poisson" (each record with probability q = b / n; what accountants assume) or "shuffle" (a
            permutation cut into ceil(n / b) batches per epoch; the DPSGD-GC/DC experiments).
        lr: learning rate η.
        momentum: heavy-ball momentum μ of the outer SGD update (0: plain SGD).
        settings: the settings of the optimizer's family: an instance of the optimizer class's ``settings_type``
            (:mod:`dpaudit.settings`); the base :class:`dpaudit.settings.OptimizerSettings` stands for the
            family's defaults until :meth:`TrainConfig.validated`.
    """

    name: str = _option("dpsgd-gc", "optimizer name", choices=optimizer_names, key="optimizer")
    epochs: int = _option(10, "number of epochs E; T = ceil(n / b) · E steps")
    batch_size: int = _option(50, "(expected) batch size b")
    sampling: str = _option(
        "poisson",
        '"poisson" (each record with probability q = b / n; what accountants assume) or "shuffle" (a permutation '
        "cut into ceil(n / b) batches per epoch; the DPSGD-GC/DC experiments)",
        choices=SAMPLING_SCHEMES,
    )
    lr: float = setting_field("lr")
    momentum: float = setting_field("momentum")
    settings: OptimizerSettings = field(default_factory=OptimizerSettings)


@dataclass(frozen=True)
class PrivacyConfig:
    """The clipping threshold, the noise (given or calibrated) and the δ and accountant of the run's ε.

    Attributes:
        clip_norm: C, the per-sample ℓ2 clipping threshold.
        sigma_dp: σ_DP, the std of the noise on the averaged clipped gradient.
        noise_multiplier: z = σ_DP · b / C, instead of ``sigma_dp``.
        target_epsilon: ε to calibrate the noise to, instead of ``sigma_dp`` or ``noise_multiplier``.
        delta: δ of ``target_epsilon``, of the planned ε and of the audits.
        accountant: the accountant of ``target_epsilon`` and of the planned ε: "rdp" or "prv".
    """

    clip_norm: float | None = setting_field("clip_norm")
    sigma_dp: float | None = setting_field("sigma_dp")
    noise_multiplier: float | None = setting_field("noise_multiplier")
    target_epsilon: float | None = setting_field("target_epsilon")
    delta: float = setting_field("delta")
    accountant: str = setting_field("accountant")


@dataclass(frozen=True)
class AuditConfig:
    """What the run gives an audit: canaries, shadow models, checkpoints and diagnostics.

    Attributes:
        canaries: m white-box gradient canaries observed in the target's released updates
            (``dpaudit.attacks.canary``; 0: none). They do not touch the model.
        canary_design: "dirac" (one coordinate per canary), "projection-aligned" (along the top singular
            directions of the optimizer's random projection; dp2-sgd, d2p2-sgd and their variants only),
            "support" (in or out of every dense step; scored by the learned support; AdaDPIGU and the
            two-phase optimizers only) or "noise-scale" (one canary per step, every other record's gradient
            zeroed; scored by the noise level of the release; needs canaries = 1) — each audits the
            mechanism of one step — or "whole-run" (an audit of the whole run's composed, subsampled ε: each
            canary a member with probability ½, drawn once, and a member sampled into the batches as a record
            is; ``dpaudit.attacks.canary_run``; every private optimizer, each canary where the optimizer adds
            its noise).
        canary_randomness: how whole-run canaries share the target's randomness. Either way their presence comes
            from the run's own sampler call and their noise from the model's noise generator, through the same
            code, so a bug in the model's sampling or noise is a bug in the canaries' observations. "derived"
            (default): the canaries' values come from generators seeded by the state each of the model's draws
            leaves (a function of the model's stream that the model never draws from), so the model trains bit
            for bit as without canaries; "joint": one draw for records and canaries (one uniform per record and
            canary per step; one normal draw for the model's and the canaries' coordinates), so the model's later
            batches and noise differ from a run without canaries, as another seed's would.
        canary_support: where an optimizer with a learned support puts whole-run canaries: "kept" (default: left
            out of the ranking, released at every step; the sparse optimizers and AdaDPIGU) or "ranked" (ranked by
            the optimizer's own score among themselves, the same fraction kept: a support chosen from un-noised
            gradients shows; the supports learned once, TP-TopK, TP-Rand, AdaDPIGU and their variants).
        num_shadows: number of shadow models.
        shadow_size: members per shadow (default ``target_size``).
        split_design: "disjoint" (target non-members from the test split, shadows on disjoint train
            records) or "halves" (LiRA: the target on a random half of a pool of 2·target_size train
            records, an even num_shadows on complementary halves; every record is in half the shadows).
        diagnostics: record the target's gradient histogram and support diagnostics (diagnostics.json).
        histogram_epoch: epoch of the gradient-value histogram (default: min(5, epochs); AdaDPIGU's Fig 2).
        eval_epochs: epochs at which checkpoints are saved (default: the last epoch).
    """

    canaries: int = _option(
        0, "m white-box gradient canaries observed in the target's released updates (0: none; the model is untouched)"
    )
    canary_design: str = _option(
        "dirac",
        '"dirac" (one coordinate per canary), "projection-aligned" (along the top singular directions of the '
        'random projection; dp2-sgd, d2p2-sgd and variants), "support" (in or out of every dense step; AdaDPIGU '
        'and the two-phase optimizers), "noise-scale" (one canary per step, scored by the noise level; canaries '
        '1) or "whole-run" (each canary a member with probability ½ of the whole run, against its composed ε; '
        "every private optimizer)",
        choices=CANARY_DESIGNS,
    )
    canary_randomness: str = _option(
        "derived",
        'how whole-run canaries share the run\'s sampler and noise generator: "derived" (from generators seeded by '
        'the state of each of the model\'s draws: the model trains bit for bit as without canaries) or "joint" (one '
        "draw for records and canaries)",
        choices=CANARY_RANDOMNESS,
    )
    canary_support: str = _option(
        "kept",
        'where a learned support puts whole-run canaries: "kept" (out of the ranking, released at every step) or '
        '"ranked" (ranked by the optimizer\'s own score among themselves; tp-topk, tp-rand, adadpigu and variants)',
        choices=CANARY_SUPPORT,
    )
    num_shadows: int = _option(3, "number of shadow models")
    shadow_size: int | None = _option(None, "members per shadow (default: target_size)")
    split_design: str = _option(
        "disjoint",
        '"disjoint" (target non-members from the test split, shadows on disjoint train records) or "halves" '
        "(LiRA: every model on a random half of a pool of 2·target_size train records, an even num_shadows on "
        "complementary halves)",
        choices=SPLIT_DESIGNS,
    )
    diagnostics: bool = _option(True, "record the target's gradient histogram and support diagnostics")
    histogram_epoch: int | None = _option(None, "epoch of the gradient-value histogram (default: min(5, epochs))")
    eval_epochs: tuple[int, ...] = _option((), "epochs at which checkpoints are saved (default: the last epoch)")


@dataclass(frozen=True)
class EngineConfig:
    """How the engine computes: none of these changes what a run trains, bit for bit (the device aside).

    Attributes:
        microbatch_size: per-sample gradients are computed this many records at a time.
        grad_sample: how per-sample gradients are computed: "layers" (the model's layers in closed form,
            ``dpaudit.layerwise``; sequential CNNs and MLPs), "functorch" (torch.func's vmap, any model),
            "opacus" (Opacus hooks, one model at a time), "ghost" (each layer's input and output gradient kept as
            factors: per-sample norms and clipped sums without the per-sample gradients, ``dpaudit.ghost``; models
            built on Conv2d, Linear and GroupNorm, one at a time) or "auto" (layers where the model allows; else
            the ensemble engine times functorch, opacus and ghost on the first step and keeps the fastest, the
            sequential engine takes functorch).
        name: "ensemble" (the target and shadows train together, gradients of all models in one call;
            ``dpaudit.ensemble``) or "sequential" (one model's gradients at a time); flat key ``engine``.
        memory_budget_mb: MiB one ensemble gradient call may take (models × samples per call are chosen
            to fit).
        device: "cpu", "cuda" or "auto".
    """

    microbatch_size: int = _option(256, "per-sample gradients are computed this many records at a time")
    grad_sample: str = _option(
        "auto",
        'how per-sample gradients are computed: "layers" (the layers in closed form; sequential CNNs and MLPs), '
        '"functorch" (vmap, any model), "opacus" (Opacus hooks, one model at a time), "ghost" (per-sample norms and '
        "clipped sums from each layer's input and output gradient; Conv2d, Linear and GroupNorm models) or "
        '"auto" (layers where the model allows, else the fastest of functorch, opacus and ghost on the first step)',
        choices=GRAD_SAMPLE_BACKENDS,
    )
    name: str = _option(
        "ensemble",
        '"ensemble" (the target and shadows train together, gradients of all models in one call) or '
        '"sequential" (one model\'s gradients at a time); the same algorithm and seeds',
        choices=ENGINES,
        key="engine",
    )
    memory_budget_mb: float = _option(2048, "MiB one ensemble gradient call may take")
    device: str = _option("auto", "where to train", choices=DEVICES)


#: The groups of :class:`TrainConfig`, by attribute: ``dpaudit train --help`` shows one section for each.
GROUPS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "privacy": PrivacyConfig,
    "audit": AuditConfig,
    "engine": EngineConfig,
}

#: The keys of the flat form of a :class:`TrainConfig` (``to_dict``, ``from_dict``, ``config.json``), in order.
FLAT_KEYS: tuple[str, ...] = (
    "dataset",
    "model",
    "optimizer",
    "epochs",
    "batch_size",
    *SETTINGS,
    "diagnostics",
    "histogram_epoch",
    "canaries",
    "canary_design",
    "canary_randomness",
    "canary_support",
    "sampling",
    "eval_epochs",
    "target_size",
    "num_shadows",
    "shadow_size",
    "split_design",
    "trial",
    "seed",
    "data_root",
    "download",
    "microbatch_size",
    "grad_sample",
    "engine",
    "memory_budget_mb",
    "device",
)


def flat_key(item: Field) -> str:
    """The key of a field of :class:`TrainConfig` or of one of its groups in the flat form."""
    return item.metadata.get("key", item.name)


@dataclass(frozen=True)
class TrainConfig:
    """One training configuration: data, model, optimizer with its settings, privacy, audit and engine.

    Build it nested, e.g. ``TrainConfig(optimizer=OptimizerConfig(name="tp-topk", settings=TwoPhaseSettings(
    active_ratio=0.2)), privacy=PrivacyConfig(clip_norm=1.0, target_epsilon=3.0))``, or from the flat form,
    ``TrainConfig.from_dict({"optimizer": "tp-topk", "active_ratio": 0.2, ...})``.

    Attributes:
        data: the records (:class:`DataConfig`).
        model: the model (:class:`ModelConfig`).
        optimizer: the optimizer and its settings (:class:`OptimizerConfig`).
        privacy: clipping, noise and the run's δ (:class:`PrivacyConfig`).
        audit: canaries, shadows, checkpoints, diagnostics (:class:`AuditConfig`).
        engine: how gradients are computed (:class:`EngineConfig`).
        trial: Monte Carlo trial index; shadows and noise are re-drawn per trial.
        seed: base seed; (seed, trial, model) fixes initialisation, sampling and noise.
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trial: int = _option(0, "Monte Carlo trial index; shadows and noise are re-drawn per trial")
    seed: int = _option(0, "base seed; (seed, trial, model) fixes initialisation, sampling and noise")

    def validated(self) -> TrainConfig:
        """Check every field and return the config with derived defaults filled in.

        Raises:
            DPAuditError: one line naming the first bad value, before any data is loaded; among them a setting the
                optimizer does not read, given a value other than its default.
        """
        from dpaudit import optim

        spec = optim.get_spec(self.optimizer.name)
        return self._with_family_settings(spec.cls)._validated(spec)

    def _validated(self, spec) -> TrainConfig:
        """``validated`` of a config whose family settings are its optimizer's (``spec``: its registry entry)."""
        from dpaudit import models as model_registry

        data, optimizer, privacy, audit, engine = self.data, self.optimizer, self.privacy, self.audit, self.engine
        read = _read_settings(spec.cls, canaries=audit.canaries)
        for name in _PRIVATE_SETTINGS:
            if name not in read and getattr(privacy, name) != SETTINGS[name].default:
                raise _not_read(name, optimizer.name, read)
        info = dataset_info(data.dataset)
        model_registry.check_model_input(self.model.name, input_shape=info.input_shape, num_classes=info.num_classes)
        check_positive_int("epochs", optimizer.epochs)
        check_positive_int("batch_size", optimizer.batch_size)
        check_positive_int("target_size", data.target_size)
        check_positive_int("num_shadows", audit.num_shadows, allow_zero=True)
        check_positive_int("microbatch_size", engine.microbatch_size)
        check_positive_int("canaries", audit.canaries, allow_zero=True)
        self._check_canary_design(spec.cls)
        check_positive_int("trial", self.trial, allow_zero=True)
        check_positive_int("seed", self.seed, allow_zero=True)
        check_choice("sampling", optimizer.sampling, SAMPLING_SCHEMES)
        check_choice("split_design", audit.split_design, SPLIT_DESIGNS)
        if audit.split_design == "halves" and audit.shadow_size not in (None, data.target_size):
            raise DPAuditError(
                "split_design 'halves' trains every model on target_size records; leave shadow_size unset"
            )
        check_probability("delta (δ)", privacy.delta)
        SETTINGS["accountant"].check(privacy.accountant)
        check_choice("grad_sample", engine.grad_sample, GRAD_SAMPLE_BACKENDS)
        check_choice("engine", engine.name, ENGINES)
        check_positive("memory_budget_mb", engine.memory_budget_mb)
        if engine.grad_sample in ("layers", "ghost"):
            from dpaudit.ensemble import resolve_method

            resolve_method(
                model_registry.build_model(self.model.name, input_shape=info.input_shape, num_classes=info.num_classes),
                engine.grad_sample,
                name=self.model.name,
            )
        check_choice("device", engine.device, DEVICES)
        if optimizer.batch_size > data.target_size:
            raise DPAuditError(
                f"batch_size {optimizer.batch_size} is larger than the training data (target_size {data.target_size})"
            )
        shadow_size = audit.shadow_size if audit.shadow_size is not None else data.target_size
        check_positive_int("shadow_size", shadow_size)
        if audit.num_shadows and optimizer.batch_size > shadow_size:
            raise DPAuditError(f"batch_size {optimizer.batch_size} is larger than shadow_size {shadow_size}")
        if (
            audit.histogram_epoch is not None
            and not 1 <= check_positive_int("histogram_epoch", audit.histogram_epoch) <= optimizer.epochs
        ):
            raise DPAuditError(
                f"histogram_epoch {audit.histogram_epoch} is not an epoch of the run (1 … {optimizer.epochs})"
            )
        eval_epochs = tuple(sorted(set(audit.eval_epochs))) or (optimizer.epochs,)
        for epoch in eval_epochs:
            check_positive_int("eval_epochs entries", epoch)
            if epoch > optimizer.epochs:
                raise DPAuditError(f"eval_epochs entry {epoch} exceeds epochs {optimizer.epochs}")
        sigma_dp = privacy.sigma_dp
        if sum(value is not None for value in (privacy.sigma_dp, privacy.noise_multiplier, privacy.target_epsilon)) > 1:
            raise DPAuditError("give one of sigma_dp, noise_multiplier and target_epsilon")
        settings = optimizer.settings
        warmup_sigma_dp = None
        if isinstance(settings, TwoPhaseSettings):
            SETTINGS["warmup_budget_fraction"].check(settings.warmup_budget_fraction)
            warmup_sigma_dp = settings.warmup_sigma_dp
        if privacy.target_epsilon is not None:
            sigma_dp, warmup_sigma_dp = self._calibrated_noise(spec.cls, target_epsilon=privacy.target_epsilon)
        if privacy.noise_multiplier is not None:
            check_positive("noise_multiplier", privacy.noise_multiplier, allow_zero=True)
            if privacy.clip_norm is None:
                raise DPAuditError("noise_multiplier needs clip_norm (C) to give σ_DP = z·C/b")
            SETTINGS["clip_norm"].check(privacy.clip_norm)
            sigma_dp = privacy.noise_multiplier * privacy.clip_norm / optimizer.batch_size  # σ_DP = z·C/b
        if isinstance(settings, TwoPhaseSettings):
            settings = replace(settings, warmup_sigma_dp=sigma_dp if warmup_sigma_dp is None else warmup_sigma_dp)
        config = replace(
            self,
            optimizer=replace(optimizer, settings=settings),
            privacy=replace(privacy, sigma_dp=sigma_dp, noise_multiplier=None, target_epsilon=None),
            audit=replace(audit, eval_epochs=eval_epochs, shadow_size=shadow_size),
        )
        spec.cls.check(config.hyperparameters(data.target_size))
        # The split is cheap; building it now reports an impossible data budget before training.
        config.make_split()
        return config

    def _with_family_settings(self, optimizer_cls: type[Optimizer]) -> TrainConfig:
        """This config with its optimizer's family settings: the family's defaults for the base
        ``OptimizerSettings``; settings of another family are a one-line DPAuditError."""
        settings, wanted = self.optimizer.settings, optimizer_cls.settings_type
        if type(settings) is wanted:
            return self
        if type(settings) is not OptimizerSettings:
            raise DPAuditError(
                f"{self.optimizer.name} reads {wanted.__name__} "
                f"({', '.join(item.name for item in fields(wanted)) or 'no settings'}), not {type(settings).__name__}"
            )
        return replace(self, optimizer=replace(self.optimizer, settings=wanted()))

    def _check_canary_design(self, optimizer_cls: type[Optimizer]) -> None:
        design, canaries, name = self.audit.canary_design, self.audit.canaries, self.optimizer.name
        check_choice("canary_design", design, CANARY_DESIGNS)
        check_choice("canary_randomness", self.audit.canary_randomness, CANARY_RANDOMNESS)
        if self.audit.canary_randomness != CANARY_RANDOMNESS[0] and not (design == "whole-run" and canaries):
            raise DPAuditError(
                f"canary_randomness {self.audit.canary_randomness!r} is read by whole-run canaries only "
                f"(canary_design 'whole-run' with canaries > 0); leave it at {CANARY_RANDOMNESS[0]!r}"
            )
        check_choice("canary_support", self.audit.canary_support, CANARY_SUPPORT)
        if self.audit.canary_support != CANARY_SUPPORT[0] and not (
            design == "whole-run" and canaries and getattr(optimizer_cls, "ranks_audit_block", False)
        ):
            raise DPAuditError(
                f"canary_support {self.audit.canary_support!r} is read by whole-run canaries of an optimizer whose "
                f"support is learned once (tp-topk, tp-rand, adadpigu and variants); {name} with canary_design "
                f"{design!r} and {canaries} canaries leaves it at {CANARY_SUPPORT[0]!r}"
            )
        if design == "projection-aligned":
            from dpaudit.optim import ProjectedNoise

            if not issubclass(optimizer_cls, ProjectedNoise):
                raise DPAuditError(
                    f"canary_design 'projection-aligned' aligns canaries with a random projection; "
                    f"{name} has none (use dp2-sgd, d2p2-sgd or their variants)"
                )
            settings = self.optimizer.settings  # ProjectionSettings (``_with_family_settings``: the class's)
            if (
                isinstance(settings, ProjectionSettings)
                and settings.reduction_convention == "paper"
                and settings.reduction_rate >= 1
            ):
                raise DPAuditError(
                    "canary_design 'projection-aligned' needs a projection that keeps coordinates "
                    "(reduction_rate < 1 with the paper convention)"
                )
        if design == "support":
            from dpaudit.optim import AdaDPIGU, TwoPhaseSparse

            if not issubclass(optimizer_cls, (AdaDPIGU, TwoPhaseSparse)):
                raise DPAuditError(
                    f"canary_design 'support' audits a support learned once from dense steps; "
                    f"{name} learns none (use adadpigu, tp-topk, tp-rand or their variants)"
                )
        if design == "whole-run" and not optimizer_cls.takes_dirac_records():
            from dpaudit.optim import PrivateOptimizer, available, get_spec

            supported = [name for name in available() if get_spec(name).cls.takes_dirac_records()]
            if not issubclass(optimizer_cls, PrivateOptimizer):
                why = "does not clip per record"
            else:
                why = "processes each record's gradient its own way"
            raise DPAuditError(
                f"canary_design 'whole-run' supports the optimizers that clip each record's gradient and add noise "
                f"({', '.join(supported)}); {name} {why}, which is not supported yet"
            )
        if design == "whole-run" and 0 < canaries < WHOLE_RUN_MIN_CANARIES:
            raise DPAuditError(
                f"canary_design 'whole-run' needs at least {WHOLE_RUN_MIN_CANARIES} canaries (each is a member with "
                f"probability ½, and an audit needs 2 of each); got {canaries}"
            )
        if design == "noise-scale" and canaries not in (0, 1):
            raise DPAuditError(
                f"canary_design 'noise-scale' inserts one canary per step (the noise level is one "
                f"number per step); set canaries to 1, not {canaries}"
            )

    def _calibrated_noise(self, optimizer_cls: type[Optimizer], *, target_epsilon: float) -> tuple[float, float | None]:
        """(σ_DP, warm-up σ_DP) whose run has ε = ``target_epsilon`` (the privacy settings') at δ (this optimizer's
        schedule, q = b/n).

        Two-phase optimizers: σ_1 meets ε1 = warmup_budget_fraction · ε for the warm-up alone, then σ_2 is
        the smallest noise whose composition with the warm-up meets ε (TP-TopK's Section 7.3 budget split,
        composed exactly).
        """
        from dpaudit.optim import TwoPhaseSparse
        from dpaudit.theory import calibrate_noise

        privacy = self.privacy
        SETTINGS["target_epsilon"].check(target_epsilon)
        if privacy.clip_norm is None:
            raise DPAuditError("target_epsilon needs clip_norm (C) to give σ_DP = z·C/b")
        SETTINGS["clip_norm"].check(privacy.clip_norm)
        hyper = self.hyperparameters(self.data.target_size)
        delta, sample_rate, accountant = privacy.delta, hyper.sample_rate, privacy.accountant
        to_sigma_dp = privacy.clip_norm / self.optimizer.batch_size  # σ_DP = z·C/b
        schedule = optimizer_cls.noise_schedule(hyper)
        if not issubclass(optimizer_cls, TwoPhaseSparse):
            z = calibrate_noise(
                target_epsilon=target_epsilon,
                noise_schedule=schedule,
                delta=delta,
                sample_rate=sample_rate,
                accountant=accountant,
            )
            return z * to_sigma_dp, None
        warmup = hyper.warmup_steps
        if not 1 <= warmup < len(schedule):
            raise DPAuditError(f"the warm-up must leave steps for phase 2: T1 = {warmup} of T = {len(schedule)}")
        z1 = calibrate_noise(
            target_epsilon=hyper.settings.warmup_budget_fraction * target_epsilon,
            noise_schedule=schedule[:warmup],
            delta=delta,
            sample_rate=sample_rate,
            accountant=accountant,
        )
        z2 = calibrate_noise(
            target_epsilon=target_epsilon,
            noise_schedule=schedule[warmup:],
            preceding=(np.full(warmup, z1), sample_rate),
            delta=delta,
            sample_rate=sample_rate,
            accountant=accountant,
        )
        return z2 * to_sigma_dp, z1 * to_sigma_dp

    def hyperparameters(self, dataset_size: int) -> Hyperparameters[Any]:
        """The optimizer's ``dpaudit.optim.Hyperparameters`` for a training set of ``dataset_size``: lr, momentum,
        C, σ_DP, the run's length and the family settings (a two-phase optimizer's warm-up σ_1 defaults to σ_DP)."""
        from dpaudit.optim import Hyperparameters

        optimizer, privacy = self.optimizer, self.privacy
        settings = optimizer.settings
        if isinstance(settings, TwoPhaseSettings) and settings.warmup_sigma_dp is None:
            settings = replace(settings, warmup_sigma_dp=privacy.sigma_dp)
        return Hyperparameters(
            lr=optimizer.lr,
            expected_batch_size=optimizer.batch_size,
            dataset_size=dataset_size,
            epochs=optimizer.epochs,
            momentum=optimizer.momentum,
            clip_norm=privacy.clip_norm,
            sigma_dp=privacy.sigma_dp,
            settings=settings,
        )

    def make_split(self) -> MIASplit | HalvesSplit:
        data, audit = self.data, self.audit
        info = dataset_info(data.dataset)
        if audit.split_design == "halves":
            return make_halves_split(
                dataset=data.dataset,
                train_size=info.train_size,
                target_size=data.target_size,
                num_shadows=audit.num_shadows,
                trial=self.trial,
                seed=self.seed,
            )
        return make_mia_split(
            dataset=data.dataset,
            train_size=info.train_size,
            test_size=info.test_size,
            target_size=data.target_size,
            num_shadows=audit.num_shadows,
            shadow_size=audit.shadow_size,
            trial=self.trial,
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        """The flat form (:data:`FLAT_KEYS`, in order): every setting, those the optimizer does not read at their
        defaults (``warmup_sigma_dp``: at ``sigma_dp``, the σ of a run without a warm-up)."""
        located = dict(_located_values(self))
        settings = self.optimizer.settings
        family = {item.name: getattr(settings, item.name) for item in fields(settings)}
        payload: dict[str, Any] = {}
        for key in FLAT_KEYS:
            if key in located:
                payload[key] = located[key]
            elif key in family:
                payload[key] = family[key]
            elif key == "warmup_sigma_dp":
                payload[key] = self.privacy.sigma_dp
            else:
                payload[key] = SETTINGS[key].default
        payload["eval_epochs"] = list(self.audit.eval_epochs)
        return payload

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> TrainConfig:
        """The config of a flat mapping (keys of :data:`FLAT_KEYS`; those left out take their defaults).

        Loads the optimizer registry (and torch) where it must learn which family settings the optimizer reads.

        Raises:
            DPAuditError: an unknown key or optimizer, or a setting the optimizer's family does not read, given a
                value other than its default (``warmup_sigma_dp`` may also equal ``sigma_dp``, as a run's
                ``config.json`` has it).
        """
        return cls().replaced(**payload)

    def replaced(self, **values: Any) -> TrainConfig:
        """This config with the flat keys ``values`` (of :data:`FLAT_KEYS`) changed, e.g. ``replaced(epochs=2)``.

        Another ``optimizer`` keeps the settings both families have and takes the new family's defaults for the
        others.

        Raises:
            DPAuditError: as :meth:`from_dict`.
        """
        unknown = sorted(set(values) - set(FLAT_KEYS))
        if unknown:
            raise DPAuditError(f"unknown configuration keys: {', '.join(unknown)}")
        locations = _locations()
        changes: dict[str | None, dict[str, Any]] = {}
        for key, value in values.items():
            if key in locations:
                group, attribute = locations[key]
                changes.setdefault(group, {})[attribute] = tuple(value) if key == "eval_epochs" else value
        name = values.get("optimizer", self.optimizer.name)
        family = {key: value for key, value in values.items() if key not in locations}
        settings = self.optimizer.settings
        if family or name != self.optimizer.name:
            from dpaudit import optim

            optimizer_cls = optim.get_spec(name).cls
            wanted = {item.name for item in fields(optimizer_cls.settings_type)}
            kept = {item.name: getattr(settings, item.name) for item in fields(settings) if item.name in wanted}
            sigma_dp = values.get("sigma_dp", self.privacy.sigma_dp)
            for key, value in family.items():
                if key in wanted:
                    kept[key] = value
                elif value != SETTINGS[key].default and not (key == "warmup_sigma_dp" and value == sigma_dp):
                    canaries = values.get("canaries", self.audit.canaries)
                    raise _not_read(key, name, _read_settings(optimizer_cls, canaries=canaries))
            settings = optimizer_cls.settings_type(**kept)
        changes.setdefault("optimizer", {})["settings"] = settings
        return replace(
            self,
            **{group: replace(getattr(self, group), **inner) for group, inner in changes.items() if group is not None},
            **changes.get(None, {}),
        )


def _locations() -> dict[str, tuple[str | None, str]]:
    """Flat key → (group attribute of TrainConfig, or None for its own fields; field name), the family settings
    aside."""
    locations: dict[str, tuple[str | None, str]] = {}
    for item in fields(TrainConfig):
        if item.name in GROUPS:
            for inner in fields(GROUPS[item.name]):
                if inner.name != "settings":
                    locations[flat_key(inner)] = (item.name, inner.name)
        else:
            locations[flat_key(item)] = (None, item.name)
    return locations


def _located_values(config: TrainConfig) -> Iterator[tuple[str, Any]]:
    for key, (group, attribute) in _locations().items():
        yield key, getattr(config if group is None else getattr(config, group), attribute)


def _read_settings(optimizer_cls, *, canaries: int = 0) -> tuple[str, ...]:
    """The settings a run of ``optimizer_cls`` reads: the optimizer's (``setting_names``), ``delta`` and
    ``accountant`` (every run's, for its ε and audits), and ``clip_norm`` where canaries are on (their scale)."""
    names = (*optimizer_cls.setting_names(), "delta", "accountant")
    return names if not canaries or "clip_norm" in names else (*names, "clip_norm")


def _not_read(name: str, optimizer: str, read: tuple[str, ...]) -> DPAuditError:
    return DPAuditError(f"{name} is not a setting of {optimizer} (its settings: {', '.join(read)})")
