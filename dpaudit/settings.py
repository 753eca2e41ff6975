"""The optimizer and privacy settings, each declared once.

A :class:`Setting` names one knob of a run (its type, default, help text with units, the values it accepts, and
where it applies). From :data:`SETTINGS` follow:

- the fields of :class:`dpaudit.config.TrainConfig` (after ``batch_size``, in this order) and of
  :class:`dpaudit.optim.Hyperparameters` (the settings an optimizer is given), through :func:`declare_settings`;
- ``dpaudit train``'s flags and their help;
- the checks of each value (:meth:`Setting.check`, called by the optimizers' ``check`` and by ``TrainConfig``);
- the pipeline schema's ``optimizer_settings`` and ``paper_run_keys`` (``workflow/schemas/params.schema.yaml``),
  which ``tests/test_settings.py`` compares with :func:`schema_fragment`.

Adding a setting is one :class:`Setting` here; the optimizer that uses it reads ``hyper.<name>`` and calls
``SETTINGS["<name>"].check(hyper.<name>)`` in its ``check``; the schema test prints the schema lines to paste.
Importable without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
        name: the field name in ``TrainConfig`` and ``Hyperparameters`` (``--name-with-dashes`` on the CLI).
        annotation: its type as written in a dataclass (``"float"``, ``"float | None"``, ``"str"``).
        default: its default value.
        help: one sentence, with the symbol and units the papers use.
        label: how errors name it (default: ``name``), e.g. ``"clip_norm (C)"``.
        range: the accepted interval of a number: "positive" (> 0), "unit" ((0, 1]), "open-unit" ((0, 1)) or
            "from-zero-unit" ([0, 1)); None for no range (or for a choice).
        choices: the accepted strings of a choice.
        hyperparameter: whether optimizers are given it (a field of ``Hyperparameters``).
        pipeline: where the workflow's parameters may set it: "run" (every run's settings, hence also paper
            experiments), "paper" (paper experiments only) or None (not settable per run).
    """

    name: str
    annotation: str
    default: object
    help: str
    label: str | None = None
    range: str | None = None
    choices: tuple[str, ...] | None = None
    hyperparameter: bool = True
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
    Setting("lr", "float", 0.1, "learning rate η.", range="positive"),
    Setting(
        "clip_norm",
        "float | None",
        None,
        "per-sample ℓ2 clipping threshold C (DP optimizers).",
        label="clip_norm (C)",
        range="positive",
    ),
    Setting(
        "sigma_dp",
        "float | None",
        None,
        "std of the noise on the averaged clipped gradient, σ_DP (the DPSGD-GC/DC paper's convention).",
        label="sigma_dp (σ_DP)",
        range="positive",
        pipeline=None,
    ),
    Setting(
        "noise_multiplier",
        "float | None",
        None,
        "z = σ_DP · b / C; give this or ``sigma_dp``, not both.",
        hyperparameter=False,
        pipeline="paper",
    ),
    Setting(
        "domain_radius",
        "float | None",
        None,
        "D, radius of the ℓ2 ball of DPSGD-DC.",
        label="domain_radius (D)",
        range="positive",
    ),
    Setting(
        "domain_center",
        "str",
        "origin",
        '"origin" or "init" (ball centred at θ_0).',
        choices=("origin", "init"),
        pipeline=None,
    ),
    Setting(
        "target_epsilon",
        "float | None",
        None,
        "calibrate the noise so the run's theoretical ε at ``delta`` is this (instead of giving sigma_dp or "
        "noise_multiplier); dynamic schedules keep their shape.",
        label="target_epsilon (ε)",
        range="positive",
        hyperparameter=False,
        pipeline="paper",
    ),
    Setting("delta", "float", 1e-5, "δ of ``target_epsilon``.", hyperparameter=False, pipeline=None),
    Setting(
        "accountant",
        "str",
        "rdp",
        'accountant used for ``target_epsilon``: "rdp" or "prv".',
        choices=("rdp", "prv"),
        hyperparameter=False,
        pipeline=None,
    ),
    Setting(
        "momentum",
        "float",
        0.0,
        "heavy-ball momentum μ of the outer SGD update (0: plain SGD).",
        range="from-zero-unit",
    ),
    Setting("r", "float", 0.1, "regulariser r of the DP-PSAC / Auto-S weights.", range="positive"),
    Setting(
        "gamma",
        "float",
        0.01,
        "stability constant γ of automatic clipping (D2P2 family).",
        label="gamma (γ)",
        range="positive",
    ),
    Setting(
        "noise_decay_exponent",
        "float",
        0.25,
        "a in the dynamic noise schedule z·k^(−a) (0.25: authors' code; 0.5: paper text).",
        range="positive",
    ),
    Setting(
        "noise_decay_unit",
        "str",
        "epoch",
        'k counts "epoch"s or "step"s in the dynamic schedule.',
        choices=("epoch", "step"),
    ),
    Setting("reduction_rate", "float", 0.3, "random-projection rate in (0, 1] (D2P2 family).", range="unit"),
    Setting(
        "reduction_convention",
        "str",
        "code",
        '"code" (p = ⌊rate·d⌋, kept fraction) or "paper" (p = round((1 − rate)·d)).',
        choices=("code", "paper"),
    ),
    Setting(
        "projection_refresh",
        "str",
        "step",
        '"step" (new matrix each step) or "run" (one matrix per run).',
        choices=("step", "run"),
    ),
    Setting(
        "active_ratio",
        "float",
        0.4,
        "ρ, fraction of coordinates trained after the warm-up (TP-TopK family), in (0, 1].",
        label="active_ratio (ρ)",
        range="unit",
    ),
    Setting(
        "warmup_fraction",
        "float",
        0.3,
        "E1/E, share of the steps in the dense DP warm-up (TP-TopK family), in (0, 1).",
        label="warmup_fraction (E1/E)",
        range="open-unit",
    ),
    Setting(
        "warmup_budget_fraction",
        "float",
        0.3,
        "ε1/ε, share of target_epsilon given to the warm-up alone; the rest is calibrated so the composed ε "
        "equals target_epsilon (TP-TopK family), in (0, 1).",
        label="warmup_budget_fraction (ε1/ε)",
        range="open-unit",
        hyperparameter=False,
    ),
    Setting(
        "warmup_sigma_dp",
        "float | None",
        None,
        "σ_DP of the warm-up (default: sigma_dp) when the noise is given, not calibrated.",
        label="warmup_sigma_dp (σ_1)",
        range="positive",
        pipeline=None,
    ),
    Setting(
        "pretrain_fraction",
        "float",
        0.075,
        "T_pre/T, AdaDPIGU's DP pre-training share of the steps, in (0, 1).",
        range="open-unit",
    ),
    Setting(
        "retention_ratio",
        "float",
        0.6,
        "r, fraction of coordinates AdaDPIGU's importance mask keeps, in (0, 1].",
        label="retention_ratio (r)",
        range="unit",
    ),
    Setting(
        "example_topk_fraction",
        "float",
        0.4,
        "AdaDPIGU's per-record top-k as a fraction of d, in (0, 1] (1: off).",
        range="unit",
    ),
    Setting(
        "ema_mean_decay",
        "float",
        0.9,
        "γ1 of AdaDPIGU's running mean, in [0, 1).",
        label="ema_mean_decay (γ1)",
        range="from-zero-unit",
    ),
    Setting(
        "ema_variance_decay",
        "float",
        0.999,
        "γ2 of AdaDPIGU's running variance, in [0, 1).",
        label="ema_variance_decay (γ2)",
        range="from-zero-unit",
    ),
    Setting(
        "standardise_constant",
        "float",
        1e-6,
        "μ of AdaDPIGU's standardisation (g − α) / (√β + μ), > 0.",
        label="standardise_constant (μ)",
        range="positive",
    ),
)


def declare_settings(*, after: str | None = None, where: Callable[[Setting], bool] = lambda setting: True):
    """Class decorator, applied before ``@dataclass``: add the settings as fields, each with its default.

    Args:
        after: the class's own field after which the settings go (None: before the class's own fields).
        where: which settings to add.

    Each added field carries its :class:`Setting` as ``metadata["setting"]``.
    """

    def add(cls):
        chosen = {setting.name: setting.annotation for setting in SETTINGS.values() if where(setting)}
        own = dict(cls.__dict__.get("__annotations__", {}))
        if after is not None and after not in own:
            raise ValueError(f"{cls.__name__} has no field {after!r} to put the settings after")
        annotations = {} if after is not None else dict(chosen)
        for name, annotation in own.items():
            annotations[name] = annotation
            if name == after:
                annotations.update(chosen)
        for name in chosen:
            setting = SETTINGS[name]
            setattr(cls, name, field(default=setting.default, metadata={"setting": setting}))
        cls.__annotations__ = annotations
        return cls

    return add


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
