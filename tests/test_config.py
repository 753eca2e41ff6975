"""The typed configuration: nested groups, each optimizer family's own settings, the flat serialized form of every
run's config.json, and the one-line refusal of a setting the optimizer does not read."""

from __future__ import annotations

import json

import pytest

from dpaudit import optim
from dpaudit._validation import DPAuditError
from dpaudit.config import FLAT_KEYS, OptimizerConfig, PrivacyConfig, TrainConfig
from dpaudit.settings import (
    AdaDPIGUSettings,
    DomainSettings,
    DynamicNoiseSettings,
    ImportanceMaskSettings,
    OptimizerSettings,
    PSACSettings,
    TwoPhaseSettings,
)

# The keys of a run's config.json "config" before the settings were typed, in their order (dpaudit 0.x, every run
# folder and run manifest written so far): the flat form must keep them.
CONFIG_JSON_KEYS = [
    "dataset",
    "model",
    "optimizer",
    "epochs",
    "batch_size",
    "lr",
    "clip_norm",
    "sigma_dp",
    "noise_multiplier",
    "domain_radius",
    "domain_center",
    "target_epsilon",
    "delta",
    "accountant",
    "momentum",
    "r",
    "gamma",
    "noise_decay_exponent",
    "noise_decay_unit",
    "reduction_rate",
    "reduction_convention",
    "projection_refresh",
    "active_ratio",
    "warmup_fraction",
    "warmup_budget_fraction",
    "warmup_sigma_dp",
    "pretrain_fraction",
    "retention_ratio",
    "example_topk_fraction",
    "ema_mean_decay",
    "ema_variance_decay",
    "standardise_constant",
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
]
DEFAULTS = dict(
    zip(
        CONFIG_JSON_KEYS[5:32],
        [0.1, None, None, None, None, "origin", None, 1e-05, "rdp", 0.0, 0.1, 0.01, 0.25, "epoch", 0.3, "code"]
        + ["step", 0.4, 0.3, 0.3, None, 0.075, 0.6, 0.4, 0.9, 0.999, 1e-06],
    )
)
# A validated two-phase run as its config.json holds it: the warm-up σ_1 given, the shadow size and the checkpoint
# filled in by validation, every other family's settings at their defaults.
TP_TOPK_RUN = {
    "dataset": "digits",
    "model": "cnn-digits",
    "optimizer": "tp-topk",
    "epochs": 3,
    "batch_size": 15,
    **DEFAULTS,
    "lr": 0.2,
    "clip_norm": 1.0,
    "sigma_dp": 0.02,
    "active_ratio": 0.2,
    "warmup_fraction": 0.34,
    "warmup_sigma_dp": 0.05,
    "diagnostics": False,
    "histogram_epoch": None,
    "canaries": 0,
    "canary_design": "dirac",
    "canary_randomness": "derived",
    "canary_support": "kept",
    "sampling": "poisson",
    "eval_epochs": [3],
    "target_size": 60,
    "num_shadows": 0,
    "shadow_size": 60,
    "split_design": "disjoint",
    "trial": 0,
    "seed": 5,
    "data_root": "data",
    "download": False,
    "microbatch_size": 256,
    "grad_sample": "auto",
    "engine": "ensemble",
    "memory_budget_mb": 2048,
    "device": "auto",
}
SMALL = dict(epochs=3, batch_size=15, target_size=60, num_shadows=0, diagnostics=False, seed=5)


def test_the_flat_form_keeps_the_keys_of_every_config_json():
    assert list(FLAT_KEYS) == CONFIG_JSON_KEYS
    assert list(TrainConfig().to_dict()) == CONFIG_JSON_KEYS
    assert TrainConfig().to_dict() == {
        **dict.fromkeys(CONFIG_JSON_KEYS),
        **DEFAULTS,
        "dataset": "digits",
        "model": "cnn-digits",
        "optimizer": "dpsgd-gc",
        "epochs": 10,
        "batch_size": 50,
        "diagnostics": True,
        "canaries": 0,
        "canary_design": "dirac",
        "canary_randomness": "derived",
        "canary_support": "kept",
        "sampling": "poisson",
        "eval_epochs": [],
        "target_size": 300,
        "num_shadows": 3,
        "split_design": "disjoint",
        "trial": 0,
        "seed": 0,
        "data_root": "data",
        "download": False,
        "microbatch_size": 256,
        "grad_sample": "auto",
        "engine": "ensemble",
        "memory_budget_mb": 2048,
        "device": "auto",
    }


def test_a_config_json_reads_into_the_groups_and_writes_back_key_for_key():
    config = TrainConfig.from_dict(json.loads(json.dumps(TP_TOPK_RUN)))
    assert config.optimizer == OptimizerConfig(
        name="tp-topk",
        epochs=3,
        batch_size=15,
        lr=0.2,
        settings=TwoPhaseSettings(active_ratio=0.2, warmup_fraction=0.34, warmup_sigma_dp=0.05),
    )
    assert config.privacy == PrivacyConfig(clip_norm=1.0, sigma_dp=0.02)
    assert (config.data.target_size, config.audit.shadow_size, config.audit.eval_epochs) == (60, 60, (3,))
    assert (config.model.name, config.engine.name, config.seed) == ("cnn-digits", "ensemble", 5)
    written = config.to_dict()
    assert written == TP_TOPK_RUN and list(written) == CONFIG_JSON_KEYS
    # validating the flags that made it gives the same file
    flags = {key: TP_TOPK_RUN[key] for key in ("optimizer", "lr", "clip_norm", "sigma_dp", "active_ratio")}
    flags.update(SMALL, warmup_fraction=0.34, warmup_sigma_dp=0.05)
    assert TrainConfig.from_dict(flags).validated().to_dict() == TP_TOPK_RUN


def test_a_run_without_a_warm_up_writes_sigma_dp_as_its_warm_up_noise():
    # every config.json so far holds warmup_sigma_dp = sigma_dp for the optimizers without a warm-up
    config = TrainConfig.from_dict({"optimizer": "dpsgd-gc", "clip_norm": 1.0, "sigma_dp": 0.02, **SMALL}).validated()
    assert config.optimizer.settings == OptimizerSettings()
    written = config.to_dict()
    assert written["warmup_sigma_dp"] == 0.02 and TrainConfig.from_dict(written) == config
    with pytest.raises(DPAuditError, match=r"^warmup_sigma_dp is not a setting of dpsgd-gc \("):
        TrainConfig.from_dict({**written, "warmup_sigma_dp": 0.03})


@pytest.mark.parametrize(
    ("optimizer", "key", "value", "read"),
    [
        ("dpsgd-gc", "active_ratio", 0.1, "lr, momentum, clip_norm, sigma_dp, noise_multiplier, target_epsilon"),
        ("sgd", "r", 0.5, "lr, momentum"),
        (
            "dpsgd-auto",
            "noise_decay_exponent",
            0.5,
            "lr, momentum, clip_norm, sigma_dp, noise_multiplier, target_epsilon, gamma",
        ),
        (
            "d2p-sgd",
            "reduction_rate",
            0.5,
            "lr, momentum, clip_norm, sigma_dp, noise_multiplier, target_epsilon, gamma, noise_decay_exponent, "
            "noise_decay_unit",
        ),
        (
            "adadpigu-code",
            "ema_mean_decay",
            0.5,
            "lr, momentum, clip_norm, sigma_dp, noise_multiplier, target_epsilon, pretrain_fraction, "
            "retention_ratio, example_topk_fraction, standardise_constant",
        ),
        (
            "on-topk",
            "warmup_fraction",
            0.5,
            "lr, momentum, clip_norm, sigma_dp, noise_multiplier, target_epsilon, active_ratio",
        ),
    ],
)
def test_a_setting_the_optimizer_does_not_read_is_one_line(optimizer, key, value, read):
    with pytest.raises(DPAuditError) as caught:
        TrainConfig.from_dict({"optimizer": optimizer, key: value})
    assert str(caught.value) == f"{key} is not a setting of {optimizer} (its settings: {read}, delta, accountant)"


def test_the_reviews_silent_example_is_refused_and_defaults_of_unread_settings_pass():
    with pytest.raises(DPAuditError, match="^active_ratio is not a setting of dpsgd-gc"):
        TrainConfig.from_dict({"optimizer": "dpsgd-gc", "active_ratio": 0.1, "retention_ratio": 0.2})
    # an old config.json carries every setting at its default
    config = TrainConfig.from_dict({**DEFAULTS, "optimizer": "dpsgd-gc", "clip_norm": 1.0, "sigma_dp": 0.02})
    assert config.optimizer.settings == OptimizerSettings() and config.privacy.sigma_dp == 0.02


def test_privacy_settings_of_a_non_private_optimizer_are_refused_when_validated():
    with pytest.raises(DPAuditError) as caught:
        TrainConfig.from_dict({"optimizer": "sgd", "clip_norm": 1.0, **SMALL}).validated()
    assert str(caught.value) == "clip_norm is not a setting of sgd (its settings: lr, momentum, delta, accountant)"
    with pytest.raises(DPAuditError, match="^sigma_dp is not a setting of sgd"):
        TrainConfig.from_dict({"optimizer": "sgd", "sigma_dp": 0.1, **SMALL}).validated()
    # white-box canaries read C (their gradients' norm is 1000·C), whatever the optimizer
    config = TrainConfig.from_dict({"optimizer": "sgd", "clip_norm": 2.0, "canaries": 10, **SMALL}).validated()
    assert config.privacy.clip_norm == 2.0


def test_a_nested_config_takes_its_familys_settings_or_their_defaults():
    privacy = PrivacyConfig(clip_norm=1.0, sigma_dp=0.02)
    plain = TrainConfig(optimizer=OptimizerConfig(name="dpsgd-dc", epochs=3, batch_size=15), privacy=privacy)
    assert plain.optimizer.settings == OptimizerSettings()
    with pytest.raises(DPAuditError, match=r"^dpsgd-dc needs domain_radius \(D\)$"):
        plain.replaced(**SMALL).validated()  # the family's defaults: no radius
    domain = plain.replaced(**SMALL, domain_radius=3.0).validated()
    assert domain.optimizer.settings == DomainSettings(domain_radius=3.0)
    wrong = OptimizerConfig(name="dpsgd-dc", settings=PSACSettings(r=0.2))
    with pytest.raises(DPAuditError) as caught:
        TrainConfig(optimizer=wrong, privacy=privacy).validated()
    assert str(caught.value) == "dpsgd-dc reads DomainSettings (domain_radius, domain_center), not PSACSettings"
    two_phase = TrainConfig(optimizer=OptimizerConfig(name="tp-rand"), privacy=privacy).replaced(**SMALL).validated()
    assert two_phase.optimizer.settings == TwoPhaseSettings(warmup_sigma_dp=0.02)  # σ_1 = σ_DP when not given


def test_replacing_the_optimizer_keeps_the_settings_both_families_read():
    config = TrainConfig.from_dict({"optimizer": "tp-topk", "active_ratio": 0.2, "warmup_fraction": 0.5})
    assert config.replaced(optimizer="on-topk").optimizer.settings.active_ratio == 0.2
    assert config.replaced(optimizer="dpsgd-gc").optimizer.settings == OptimizerSettings()
    with pytest.raises(DPAuditError, match="^unknown configuration keys: learning_rate$"):
        config.replaced(learning_rate=0.1)


def test_each_optimizer_names_the_settings_it_reads_and_its_flags_agree():
    # the settings classes follow what the classes read: the dynamic schedule, the EMA statistics
    for name in optim.available():
        cls = optim.get_spec(name).cls
        if issubclass(cls, optim.AutomaticClipping):
            assert cls.dynamic == issubclass(cls.settings_type, DynamicNoiseSettings), name
        if issubclass(cls, optim.AdaDPIGU):
            assert cls.adaptive_statistics == (cls.settings_type is AdaDPIGUSettings), name
            assert issubclass(cls.settings_type, ImportanceMaskSettings)
        if cls.settings_type is not OptimizerSettings:  # its --help section names it
            assert name in " ".join(cls.settings_type.__doc__.split("\n\n")[0].split()), name
    assert optim.get_spec("sgd").cls.setting_names() == ("lr", "momentum")
    assert optim.get_spec("dp-psac").cls.setting_names()[-1] == "r"
