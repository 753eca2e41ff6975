"""The training loop's observers (``dpaudit.observers``): built from the configuration, called hook by hook in a
fixed order, and without effect on training unless they rewrite gradients."""

import re

import pytest
import torch
from support import digit_members, engine_config

from dpaudit import train
from dpaudit.attacks.canary import GradientCanaries
from dpaudit.diagnostics import TrainingDiagnostics
from dpaudit.observers import TrainingObserver


class Recorder(TrainingObserver):
    """Writes down every hook call; changes nothing."""

    name = "recorder"
    sees_gradients = True

    def __init__(self):
        self.events: list[str] = []
        self.widths: list[int] = []  # how many gradient tensors each ``accumulate`` received
        self.noise_multipliers: list[float] = []

    def begin_epoch(self, optimizer, *, epoch):
        self.events.append(f"begin_epoch {epoch}")

    def accumulate(self, optimizer, grads, *, records):
        self.events.append("accumulate")
        self.widths.append(len(grads))
        return grads

    def before_update(self, optimizer, *, epoch):
        self.events.append("before_update")

    def after_update(self, optimizer, cost, *, epoch):
        self.events.append("after_update")
        self.noise_multipliers.append(cost.noise_multiplier)

    def end_epoch(self, *, epoch):
        self.events.append(f"end_epoch {epoch}")


def _train(config, members):
    return train.train_models(config=config, members=members, test_data=None, progress=False)


def test_the_target_observes_canaries_then_diagnostics_and_shadows_nothing():
    config = engine_config("dpsgd-gc", canaries=20, diagnostics=True)
    target, shadow = digit_members(2)
    seeds = dict(noise_seed=1, sampling_seed=2, device=torch.device("cpu"), dtype=torch.float32, out=None)
    model = torch.nn.Linear(2, 2)
    observers = train._observers(config, target, model=model, held_out=None, **seeds)
    assert [type(observer) for observer in observers] == [GradientCanaries, TrainingDiagnostics]
    assert all(isinstance(observer, TrainingObserver) for observer in observers)
    assert train._observers(config, shadow, model=model, held_out=None, **seeds) == []
    assert train._observers(engine_config("dpsgd-gc"), target, model=model, held_out=None, **seeds) == []


@pytest.mark.parametrize("engine", ["ensemble", "sequential"])
def test_an_observer_sees_every_hook_in_order_and_changes_nothing(engine, monkeypatch):
    config = engine_config("dpsgd-gc", engine=engine, canaries=20, diagnostics=True, epochs=2)
    plain = _train(config, digit_members(2))
    recorder = Recorder()
    built = train._observers

    def with_recorder(config, member, **kwargs):
        return built(config, member, **kwargs) + ([recorder] if member.model_index == 0 else [])

    monkeypatch.setattr(train, "_observers", with_recorder)
    observed = _train(config, digit_members(2))
    for a, b in zip(plain, observed):
        assert a.ledger.to_dict() == b.ledger.to_dict()
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    step = "(accumulate;)*before_update;after_update;"
    assert re.fullmatch(
        f"begin_epoch 1;({step}){{4}}end_epoch 1;begin_epoch 2;({step}){{4}}end_epoch 2;",
        "".join(event + ";" for event in recorder.events),
    )
    assert recorder.noise_multipliers == plain[0].ledger.per_step()[0].tolist()
    # the recorder comes after the canaries: it receives the canary tensor's gradients too
    assert set(recorder.widths) == {len(list(plain[0].model.parameters())) + 1}


def _dirac_shortcut_optimizers():
    """The optimizers whose per-step Dirac canaries go through ``accumulate_diracs`` (``canary._weights_each_record``),
    and DP-PSAC's batch-noise control, whose own ``accumulate_diracs`` counts canaries as batch records: it must not."""
    from dpaudit import optim
    from dpaudit.optim import PrivateOptimizer

    names = []
    for name in optim.available():
        cls = optim.get_spec(name).cls
        if issubclass(cls, PrivateOptimizer) and cls.accumulate is PrivateOptimizer.accumulate:
            names.append(name)
    assert {"dpsgd-gc", "auto-s", "dp-psac", "dp-psac-batch-noise"} <= set(names)
    return names


@pytest.mark.parametrize("optimizer", _dirac_shortcut_optimizers())
def test_dirac_canaries_without_their_rows_of_zeros_train_and_score_as_with_them(optimizer, monkeypatch, tmp_path):
    """Per-step Dirac canaries added as φ(‖c‖)·‖c‖ at their coordinates leave every file of the run (the canaries'
    scores, the models, losses and ledger) bit for bit as the [k, d] rows of zeros and ‖c‖ through ``accumulate``."""
    from support import assert_same_results, train_into

    from dpaudit.attacks import canary
    from dpaudit.optim import PrivateOptimizer

    config = engine_config(optimizer, canaries=20)
    calls = []
    original = PrivateOptimizer.accumulate_diracs

    def counted(self, **kwargs):
        calls.append(len(kwargs["coordinates"]))
        return original(self, **kwargs)

    monkeypatch.setattr(PrivateOptimizer, "accumulate_diracs", counted)
    train_into(tmp_path / "shortcut", config)
    took = bool(calls)
    monkeypatch.setattr(canary, "_weights_each_record", lambda optimizer: False)
    train_into(tmp_path / "rows", config)
    assert took == (optimizer != "dp-psac-batch-noise")
    assert_same_results(tmp_path / "shortcut", tmp_path / "rows")


def test_diagnostics_are_written_when_they_change_and_hold_the_whole_record_at_the_end(tmp_path, monkeypatch):
    """A dense run's diagnostics change at the histogram's epoch only: its file is written at the first epoch and then
    at that one (not once an epoch), and ends holding what the recorder holds."""
    import json

    from support import train_into

    from dpaudit import diagnostics

    writes = []
    original = diagnostics.write_json

    def counted(path, payload):
        writes.append(json.loads(json.dumps(payload)))
        return original(path, payload)

    monkeypatch.setattr(diagnostics, "write_json", counted)
    config = engine_config("dpsgd-gc", diagnostics=True, histogram_epoch=2, epochs=4)
    (target, _shadow) = train_into(tmp_path, config)
    assert [write["gradient_histogram"]["steps"] for write in writes] == [0, 4]
    assert json.loads((tmp_path / "m0" / "diagnostics.json").read_text()) == json.loads(
        json.dumps(target.diagnostics.to_dict())
    )
