"""The optimizer and privacy settings, each declared once, and the families of settings the optimizers read.

A :class:`Setting` names one knob of a run: its default, help text with units, the values it accepts, and where
the pipeline may set it. :data:`SETTINGS` holds them all. Each is held by exactly one dataclass field, declared with
:func:`setting_field` (which takes the default and the metadata from here; the field gives the type):

- ``lr`` and ``momentum`` in :class:`dpaudit.config.OptimizerConfig`; ``clip_norm``, ``sigma_dp``,
  ``noise_multiplier``, ``target_epsilon``, ``delta`` and ``accountant`` in :class:`dpaudit.config.PrivacyConfig`;
- every other one in an optimizer family's settings, a small frozen dataclass below (:class:`OptimizerSettings`
  and its subclasses, listed in :data:`FAMILIES`). An optimizer class names the one it reads as its
  ``settings_type`` and finds it as ``hyper.settings``.

From the declarations follow ``dpaudit train``'s flags and their help (one group per family), the checks of each
value (:meth:`Setting.check`, called by the optimizers' ``check`` and by ``TrainConfig``), and the pipeline
schema's ``optimizer_settings`` and ``paper_run_keys`` (``workflow/schemas/params.schema.yaml``), which
``tests/test_settings.py`` compares with :func:`schema_fragment`. Importable without torch.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any

from dpaudit._validation import DPAuditError, check_choice, check_positive, check_ratio

# value ranges: name → (JSON-schema constraint, human-readable interval)
_RANGES = {
    "positive": ({"type": "number", "exclusiveMinimum": 0}, "> 0"),
    "unit": ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "(0, 1]"),
    "open-unit": ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, "(0, 1)"),
    "from-zero-unit": ({"type": "number", "minimum": 0, "exclusiveMaximum": 1}, "[0, 1)"),
}
PIPELINE_SCOPES = ("run", "paper")  # per run (optimizers/audit runs and paper experiments) or paper experiments only


@dataclass(frozen=True)
class Setting:
    """One optimizer or privacy setting.

    Attributes:
        name: the name of the field that holds it, and its key in ``TrainConfig.to_dict()`` (``--name-with-dashes``
            on the CLI).
        default: its default value.
        help: one sentence, with the symbol and units the papers use.
        label: how errors name it (default: ``name``), e.g. ``"clip_norm (C)"``.
        range: the accepted interval of a number: "positive" (> 0), "unit" ((0, 1]), "open-unit" ((0, 1)) or
            "from-zero-unit" ([0, 1)); None for no range (or for a choice).
        choices: the accepted strings of a choice.
        pipeline: where the workflow's parameters may set it: "run" (every run's settings, hence also paper
            experiments), "paper" (paper experiments only) or None (not settable per run).
    """

    name: str
    default: object
    help: str
    label: str | None = None
    range: str | None = None
    choices: tuple[str, ...] | None = None
    pipeline: str | None = "run"

    def __post_init__(self) -> None:
        if self.range is not None and self.range not in _RANGES:
            raise ValueError(f"setting {self.name}: unknown range {self.range!r}")
        if self.pipeline is not None and self.pipeline not in PIPELINE_SCOPES:
            raise ValueError(f"setting {self.name}: unknown pipeline scope {self.pipeline!r}")

    def check(self, value):
        """Return ``value`` if this setting accepts it.

        Raises:
            DPAuditError: one line naming the setting and the accepted values.
        """
        label = self.label or self.name
        if self.choices is not None:
            return check_choice(self.name, value, self.choices)
        if self.range == "positive":
            return check_positive(label, value)
        if self.range == "unit":
            return check_ratio(label, value)
        if self.range is not None:
            number = check_positive(label, value, allow_zero=True)
            low_ok = number > 0 if self.range == "open-unit" else number >= 0
            if not (low_ok and number < 1):
                raise DPAuditError(f"{label} must be in {_RANGES[self.range][1]}; got {value}")
        return value

    def schema(self) -> dict:
        """The JSON-schema constraint of a pipeline value of this setting."""
        if self.choices is not None:
            return {"enum": list(self.choices)}
        return dict(_RANGES[self.range][0]) if self.range else {}


def _settings(*items: Setting) -> dict[str, Setting]:
    return {item.name: item for item in items}


SETTINGS: dict[str, Setting] = _settings(
    Setting("lr", 0.1, "learning rate η.", range="positive"),
    Setting(
        "clip_norm",
        None,
        "per-sample ℓ2 clipping threshold C (DP optimizers).",
        label="clip_norm (C)",
        range="positive",
    ),
    Setting(
        "sigma_dp",
        None,
        "std of the noise on the averaged clipped gradient, σ_DP (the DPSGD-GC/DC paper's convention).",
        label="sigma_dp (σ_DP)",
        range="positive",
        pipeline=None,
    ),
    Setting(
        "noise_multiplier",
        None,
        "z = σ_DP · b / C; give this or sigma_dp, not both.",
        pipeline="paper",
    ),
    Setting(
        "domain_radius",
        None,
        "D, radius of the ℓ2 ball of DPSGD-DC.",
        label="domain_radius (D)",
        range="positive",
    ),
    Setting(
        "domain_center",
        "origin",
        '"origin" or "init" (ball centred at θ_0).',
        choices=("origin", "init"),
        pipeline=None,
    ),
    Setting(
        "target_epsilon",
        None,
        "calibrate the noise so the run's theoretical ε at delta is this (instead of giving sigma_dp or "
        "noise_multiplier); dynamic schedules keep their shape.",
        label="target_epsilon (ε)",
        range="positive",
        pipeline="paper",
    ),
    Setting("delta", 1e-5, "δ of target_epsilon, of the planned ε and of the audits.", pipeline=None),
    Setting(
        "accountant",
        "rdp",
        'accountant of target_epsilon and of the planned ε: "rdp" or "prv".',
        choices=("rdp", "prv"),
        pipeline=None,
    ),
    Setting(
        "momentum",
        0.0,
        "heavy-ball momentum μ of the outer SGD update (0: plain SGD).",
        range="from-zero-unit",
    ),
    Setting("r", 0.1, "regulariser r of the DP-PSAC / Auto-S weights.", range="positive"),
    Setting(
        "gamma",
        0.01,
        "stability constant γ of automatic clipping (D2P2 family).",
        label="gamma (γ)",
        range="positive",
    ),
    Setting(
        "noise_decay_exponent",
        0.25,
        "a in the dynamic noise schedule z·k^(−a) (0.25: authors' code; 0.5: paper text).",
        range="positive",
    ),
    Setting(
        "noise_decay_unit",
        "epoch",
        'k counts "epoch"s or "step"s in the dynamic schedule.',
        choices=("epoch", "step"),
    ),
    Setting("reduction_rate", 0.3, "random-projection rate in (0, 1] (D2P2 family).", range="unit"),
    Setting(
        "reduction_convention",
        "code",
        '"code" (p = ⌊rate·d⌋, kept fraction) or "paper" (p = round((1 − rate)·d)).',
        choices=("code", "paper"),
    ),
    Setting(
        "projection_refresh",
        "step",
        '"step" (new matrix each step) or "run" (one matrix per run).',
        choices=("step", "run"),
    ),
    Setting(
        "active_ratio",
        0.4,
        "ρ, fraction of coordinates trained after the warm-up (TP-TopK family), in (0, 1].",
        label="active_ratio (ρ)",
        range="unit",
    ),
    Setting(
        "warmup_fraction",
        0.3,
        "E1/E, share of the steps in the dense DP warm-up (TP-TopK family), in (0, 1).",
        label="warmup_fraction (E1/E)",
        range="open-unit",
    ),
    Setting(
        "warmup_budget_fraction",
        0.3,
        "ε1/ε, share of target_epsilon given to the warm-up alone; the rest is calibrated so the composed ε "
        "equals target_epsilon (TP-TopK family), in (0, 1).",
        label="warmup_budget_fraction (ε1/ε)",
        range="open-unit",
    ),
    Setting(
        "warmup_sigma_dp",
        None,
        "σ_DP of the warm-up (default: sigma_dp) when the noise is given, not calibrated.",
        label="warmup_sigma_dp (σ_1)",
        range="positive",
        pipeline=None,
    ),
    Setting(
        "pretrain_fraction",
        0.075,
        "T_pre/T, AdaDPIGU's DP pre-training share of the steps, in (0, 1).",
        range="open-unit",
    ),
    Setting(
        "retention_ratio",
        0.6,
        "r, fraction of coordinates AdaDPIGU's importance mask keeps, in (0, 1].",
        label="retention_ratio (r)",
        range="unit",
    ),
    Setting(
        "example_topk_fraction",
        0.4,
        "AdaDPIGU's per-record top-k as a fraction of d, in (0, 1] (1: off).",
        range="unit",
    ),
    Setting(
        "ema_mean_decay",
        0.9,
        "γ1 of AdaDPIGU's running mean, in [0, 1).",
        label="ema_mean_decay (γ1)",
        range="from-zero-unit",
    ),
    Setting(
        "ema_variance_decay",
        0.999,
        "γ2 of AdaDPIGU's running variance, in [0, 1).",
        label="ema_variance_decay (γ2)",
        range="from-zero-unit",
    ),
    Setting(
        "standardise_constant",
        1e-6,
        "μ of AdaDPIGU's standardisation (g − α) / (√β + μ), > 0.",
        label="standardise_constant (μ)",
        range="positive",
    ),
)


def setting_field(name: str) -> Any:
    """The dataclass field that holds setting ``name``: its declared default, and the :class:`Setting` as
    ``metadata["setting"]`` (a field's type is written where it is declared)."""
    setting = SETTINGS[name]
    return field(default=setting.default, metadata={"setting": setting})


def own_fields(cls: type) -> list[Field]:
    """The fields a dataclass declares itself (not those of its bases), in order."""
    own = cls.__dict__.get("__annotations__", {})
    return [item for item in fields(cls) if item.name in own]


@dataclass(frozen=True, kw_only=True)
class OptimizerSettings:
    """The settings an optimizer family reads besides ``lr``, ``momentum`` and the privacy settings: none here.

    The base of every family's settings, and the settings of the optimizers without any (``sgd``, ``dpsgd-gc`` and
    its controls, ``auto-v``). An optimizer class names its family's as ``settings_type`` (and, for a type checker,
    declares ``hyper: Hyperparameters[ItsSettings]``). The settings are keyword-only: a family with two bases
    orders its fields as neither does.
    """


@dataclass(frozen=True, kw_only=True)
class DomainSettings(OptimizerSettings):
    """DPSGD-DC's ℓ2 ball K = {θ : ‖θ − c‖ ≤ D} (dpsgd-dc).

    Attributes:
        domain_radius: D, the ball's radius (required).
        domain_center: c: "origin" (0) or "init" (θ_0).
    """

    domain_radius: float | None = setting_field("domain_radius")
    domain_center: str = setting_field("domain_center")


@dataclass(frozen=True, kw_only=True)
class PSACSettings(OptimizerSettings):
    """The regulariser of the DP-PSAC paper's per-sample weights (auto-s, nsgd, dp-psac, dp-psac-batch-noise).

    Attributes:
        r: r in Auto-S's C/(‖g‖ + r) and DP-PSAC's C/(‖g‖ + r/(‖g‖ + r)).
    """

    r: float = setting_field("r")


@dataclass(frozen=True, kw_only=True)
class AutomaticClippingSettings(OptimizerSettings):
    """Automatic clipping C/(‖g‖ + γ) of the D2P2-SGD paper (dpsgd-auto; the family's other optimizers add to it).

    Attributes:
        gamma: γ, the stability constant.
    """

    gamma: float = setting_field("gamma")


@dataclass(frozen=True, kw_only=True)
class DynamicNoiseSettings(AutomaticClippingSettings):
    """Automatic clipping and the dynamic noise schedule z·k^(−a) (d2p-sgd; with a projection: d2p2-sgd).

    Attributes:
        noise_decay_exponent: a.
        noise_decay_unit: whether k counts "epoch"s or "step"s.
    """

    noise_decay_exponent: float = setting_field("noise_decay_exponent")
    noise_decay_unit: str = setting_field("noise_decay_unit")


@dataclass(frozen=True, kw_only=True)
class ProjectionSettings(AutomaticClippingSettings):
    """Automatic clipping and the random projection onto R^p (dp2-sgd, dp2-sgd-as-published; with dynamic noise:
    d2p2-sgd).

    Attributes:
        reduction_rate: the projection's rate (how it gives p: ``reduction_convention``).
        reduction_convention: "code" (p = ⌊rate·d⌋) or "paper" (p = round((1 − rate)·d)).
        projection_refresh: "step" (a new matrix each step) or "run" (one for the run).
    """

    reduction_rate: float = setting_field("reduction_rate")
    reduction_convention: str = setting_field("reduction_convention")
    projection_refresh: str = setting_field("projection_refresh")


@dataclass(frozen=True, kw_only=True)
class DynamicProjectionSettings(ProjectionSettings, DynamicNoiseSettings):
    """Automatic clipping, the dynamic noise schedule and the random projection (d2p2-sgd, d2p2-sgd-as-published)."""


@dataclass(frozen=True, kw_only=True)
class SparseSettings(OptimizerSettings):
    """The active ratio of the TP-TopK paper's coordinate-sparse optimizers (on-topk, on-rand, and the two-phase
    tp-topk, tp-rand).

    Attributes:
        active_ratio: ρ, the fraction of coordinates trained (after the warm-up; at the last epoch for on-*).
    """

    active_ratio: float = setting_field("active_ratio")


@dataclass(frozen=True, kw_only=True)
class TwoPhaseSettings(SparseSettings):
    """The dense DP warm-up of the two-phase sparse optimizers (tp-topk, tp-rand, tp-topk-clean-support).

    Attributes:
        warmup_fraction: E1/E, the warm-up's share of the steps.
        warmup_budget_fraction: ε1/ε, the warm-up's share of ``target_epsilon`` when the noise is calibrated.
        warmup_sigma_dp: σ_1, the warm-up's σ_DP when the noise is given (None: ``sigma_dp``).
    """

    warmup_fraction: float = setting_field("warmup_fraction")
    warmup_budget_fraction: float = setting_field("warmup_budget_fraction")
    warmup_sigma_dp: float | None = setting_field("warmup_sigma_dp")


@dataclass(frozen=True, kw_only=True)
class ImportanceMaskSettings(OptimizerSettings):
    """AdaDPIGU's importance mask and per-record sparsification (adadpigu-code, and adadpigu).

    Attributes:
        pretrain_fraction: T_pre/T, the DP pre-training's share of the steps.
        retention_ratio: r, the fraction of coordinates the mask keeps.
        example_topk_fraction: the per-record top-k as a fraction of d (1: off).
        standardise_constant: μ of the standardisation (g − α) / (√β + μ).
    """

    pretrain_fraction: float = setting_field("pretrain_fraction")
    retention_ratio: float = setting_field("retention_ratio")
    example_topk_fraction: float = setting_field("example_topk_fraction")
    standardise_constant: float = setting_field("standardise_constant")


@dataclass(frozen=True, kw_only=True)
class AdaDPIGUSettings(ImportanceMaskSettings):
    """AdaDPIGU's importance mask and its running statistics α, β of the released updates (adadpigu, adadpigu-freeze).

    Attributes:
        ema_mean_decay: γ1 of the running mean α.
        ema_variance_decay: γ2 of the running variance β.
    """

    ema_mean_decay: float = setting_field("ema_mean_decay")
    ema_variance_decay: float = setting_field("ema_variance_decay")


#: Every family's settings class, base first: ``dpaudit train --help`` has a group for each that declares settings of
#: its own, and :class:`dpaudit.config.TrainConfig` reads a flat dict's family settings through them.
FAMILIES: tuple[type[OptimizerSettings], ...] = (
    OptimizerSettings,
    DomainSettings,
    PSACSettings,
    AutomaticClippingSettings,
    DynamicNoiseSettings,
    ProjectionSettings,
    DynamicProjectionSettings,
    SparseSettings,
    TwoPhaseSettings,
    ImportanceMaskSettings,
    AdaDPIGUSettings,
)


def schema_fragment() -> dict[str, object]:
    """What ``workflow/schemas/params.schema.yaml`` must say of the settings.

    Returns:
        ``{"optimizer_settings": {name: constraint}, "paper_run_keys": [names]}``: the per-run settings' schema
        constraints, and every setting a paper experiment may set.
    """
    return {
        "optimizer_settings": {s.name: s.schema() for s in SETTINGS.values() if s.pipeline == "run"},
        "paper_run_keys": [s.name for s in SETTINGS.values() if s.pipeline is not None],
    }
