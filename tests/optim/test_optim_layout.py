"""The dpaudit.optim package: one module per family, every public name at dpaudit.optim, a typed step cost, and
Hyperparameters of explicit fields and the optimizer family's settings."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
import torch
from support import hyperparameters_for

from dpaudit import optim
from dpaudit._validation import DPAuditError
from dpaudit.optim import Hyperparameters, StepCost
from dpaudit.settings import SETTINGS, OptimizerSettings

FAMILIES = {"base", "clipping", "projection", "sparse", "adadpigu"}


def test_every_public_name_is_importable_from_the_package():
    assert len(optim.__all__) == len(set(optim.__all__))
    for name in optim.__all__:
        assert getattr(optim, name) is not None, name


@pytest.mark.parametrize("name", optim.available())
def test_every_registered_optimizer_lives_in_a_family_module_and_is_a_public_name(name):
    cls = optim.get_spec(name).cls
    module, _, family = cls.__module__.rpartition(".")
    assert module == "dpaudit.optim" and family in FAMILIES
    assert cls.__name__ in optim.__all__ and getattr(optim, cls.__name__) is cls


def test_hyperparameters_are_the_run_facts_and_the_familys_settings():
    own = {item.name: item.default for item in fields(Hyperparameters) if item.name != "settings"}
    assert own == {
        "lr": MISSING,
        "expected_batch_size": MISSING,
        "dataset_size": MISSING,
        "epochs": 1,
        "momentum": SETTINGS["momentum"].default,
        "clip_norm": None,
        "sigma_dp": None,
    }
    assert Hyperparameters(lr=0.1, expected_batch_size=2, dataset_size=4).settings == OptimizerSettings()
    for name in optim.available():  # each class reads one family's settings, checked before it trains
        cls = optim.get_spec(name).cls
        assert issubclass(cls.settings_type, OptimizerSettings), name
    with pytest.raises(DPAuditError, match="^DPSGDDomainConstrained reads DomainSettings, not OptimizerSettings$"):
        optim.DPSGDDomainConstrained.check(_hyper(optim.DPSGD))


def _hyper(cls: type[optim.Optimizer]) -> Hyperparameters:
    # 2 steps per epoch, 4 epochs: every phase of the two-phase optimizers and AdaDPIGU is reached in 8 steps
    return hyperparameters_for(
        cls,
        lr=0.1,
        expected_batch_size=2,
        dataset_size=4,
        epochs=4,
        clip_norm=1.0,
        sigma_dp=0.5,
        warmup_sigma_dp=0.25,
        domain_radius=10.0,
        pretrain_fraction=0.25,
        warmup_fraction=0.25,
    )


@pytest.mark.parametrize("name", optim.available())
def test_a_private_step_returns_its_typed_cost_and_a_non_private_one_none(name):
    cls = optim.get_spec(name).cls
    hyper = _hyper(cls)
    cls.check(hyper)
    params = [torch.zeros(3, 2), torch.zeros(2)]
    opt = cls(params, hyper, generator=torch.Generator().manual_seed(1))
    phases = set()
    for epoch in range(1, hyper.epochs + 1):
        opt.begin_epoch(epoch)
        for _ in range(hyper.steps_per_epoch):
            grads = [torch.ones(2, 3, 2), torch.ones(2, 2)]
            opt.accumulate(grads if opt.per_sample else [g.mean(0) for g in grads])
            cost = opt.step(realized_batch_size=2)
            if not issubclass(cls, optim.PrivateOptimizer):
                assert cost is None
                continue
            assert type(cost) is StepCost
            # dpsgd-gc-understated-q's ledger under-states q on purpose (a broken control of the auditor validation)
            claimed = hyper.sample_rate / (
                optim.UNDERSTATED_SAMPLE_RATE_FACTOR if cls is optim.DPSGDUnderstatedSampleRate else 1
            )
            assert cost.sample_rate == pytest.approx(claimed) and cost.noise_multiplier > 0
            phases.add(cost.phase)
    if issubclass(cls, optim.TwoPhaseSparse):
        assert phases == {"warmup", "train"}
    elif issubclass(cls, optim.AdaDPIGU):
        assert phases == {"pretrain", "train"}
    elif issubclass(cls, optim.PrivateOptimizer):
        assert phases == {"train"}
