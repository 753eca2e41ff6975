"""No lost work: an interrupted training run resumes after its last saved epoch and ends bit-identical."""

import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from support import assert_same_results, engine_config, interrupt_at_save, train_into, wait_for_saved_epoch

from dpaudit import optim
from dpaudit._state import capture, decode, encode, restore
from dpaudit._validation import DPAuditError


@pytest.mark.integration
@pytest.mark.parametrize("optimizer", optim.available())
def test_every_optimizer_resumes_bit_identically(optimizer, tmp_path, monkeypatch, capsys):
    """Interrupted between the two models' saves of epoch 2: both resume after epoch 1 (the last epoch both saved),
    with momentum, canaries, diagnostics and a checkpoint before the interruption."""
    config = engine_config(
        optimizer, momentum=0.5, canaries=20, diagnostics=True, histogram_epoch=1, eval_epochs=(1, 3)
    )
    train_into(tmp_path / "whole", config)
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=2, model_index=1)
        with pytest.raises(KeyboardInterrupt):
            train_into(tmp_path / "cut", config)
    states = sorted(str(path.relative_to(tmp_path / "cut")) for path in (tmp_path / "cut").rglob("state_*.pt"))
    assert states == ["m0/state_0001.pt", "m0/state_0002.pt", "m1/state_0001.pt"]
    capsys.readouterr()
    train_into(tmp_path / "cut", config)
    assert "resuming m0+m1 after epoch 1 of 3" in capsys.readouterr().err
    assert_same_results(tmp_path / "whole", tmp_path / "cut")  # the state files are gone from both


@pytest.mark.integration
@pytest.mark.parametrize(
    "optimizer, changes",
    [
        ("tp-topk", {"engine": "sequential", "canaries": 20}),
        # projection-aligned canaries: their directions (an SVD of the optimizer's projection) are not saved but
        # recomputed after the resume, from one matrix for the run or this step's
        ("d2p2-sgd-as-published", {"canaries": 10, "canary_design": "projection-aligned", "projection_refresh": "run"}),
        (
            "d2p2-sgd-as-published",
            {"canaries": 10, "canary_design": "projection-aligned", "projection_refresh": "step"},
        ),
        # support canaries: the bits drawn for the whole pre-training (6 steps) must survive the cut after 4
        ("adadpigu-code", {"canaries": 10, "canary_design": "support", "pretrain_fraction": 0.5}),
    ],
    ids=["sequential-engine", "aligned-canaries-run", "aligned-canaries-step", "support-canaries"],
)
def test_other_settings_resume_bit_identically(optimizer, changes, tmp_path, monkeypatch):
    config = engine_config(optimizer, **changes)
    train_into(tmp_path / "whole", config)
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=2, model_index=0)
        with pytest.raises(KeyboardInterrupt):
            train_into(tmp_path / "cut", config)
    train_into(tmp_path / "cut", config)
    assert_same_results(tmp_path / "whole", tmp_path / "cut")


def test_state_of_another_configuration_or_restart_trains_from_the_start(tmp_path, monkeypatch, capsys):
    config = engine_config("dpsgd-gc")
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=2, model_index=0)
        with pytest.raises(KeyboardInterrupt):
            train_into(tmp_path / "cut", config)
    changed = config.replaced(lr=0.1)
    train_into(tmp_path / "fresh", changed)
    capsys.readouterr()
    train_into(tmp_path / "cut", changed)
    assert "resuming" not in capsys.readouterr().err
    assert_same_results(tmp_path / "fresh", tmp_path / "cut")
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=2, model_index=0)
        with pytest.raises(KeyboardInterrupt):
            train_into(tmp_path / "again", changed)
    train_into(tmp_path / "again", changed, resume=False)
    assert "resuming" not in capsys.readouterr().err
    assert_same_results(tmp_path / "fresh", tmp_path / "again")


def test_a_corrupted_state_is_a_one_line_error_naming_it(tmp_path, monkeypatch):
    config = engine_config("dpsgd-gc")
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=2, model_index=0)
        with pytest.raises(KeyboardInterrupt):
            train_into(tmp_path, config)
    state = tmp_path / "m1" / "state_0001.pt"
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(DPAuditError, match=r"cannot load training state .*m1/state_0001\.pt: .*delete it") as error:
        train_into(tmp_path, config)
    assert "\n" not in str(error.value)


class _Recorder:
    def __init__(self):
        self.weights = torch.zeros(3)
        self.rng = np.random.default_rng(1)
        self.generator = torch.Generator().manual_seed(2)
        self.history = [np.arange(3), 2.5, None, {"k": [1, "a"]}]
        self.count = np.int64(4)


def test_state_round_trip_restores_values_and_generators_in_place():
    source, target = _Recorder(), _Recorder()
    source.weights += 1
    source.rng.random(5)
    torch.randn(4, generator=source.generator)
    source.history.append(np.ones((2, 2), dtype=bool))
    weights, rng, generator = target.weights, target.rng, target.generator
    restore(target, capture(source))
    assert target.weights is weights and torch.equal(weights, source.weights)
    assert target.rng is rng and rng.random() == source.rng.random()
    assert target.generator is generator and torch.equal(
        torch.randn(3, generator=generator), torch.randn(3, generator=source.generator)
    )
    assert target.count == 4 and type(target.count) is np.int64
    np.testing.assert_array_equal(target.history[0], np.arange(3))
    assert target.history[1:4] == [2.5, None, {"k": [1, "a"]}] and target.history[4].dtype == bool
    assert decode(encode({"a": [1.5]})) == {"a": [1.5]}


def test_unsupported_state_is_named():
    recorder = _Recorder()
    recorder.handle = open  # noqa: SIM115 - a function is no state
    with pytest.raises(TypeError, match="_Recorder.handle: cannot save training state of type builtin_function"):
        capture(recorder)


TRAIN = [
    "--dataset",
    "digits",
    "--optimizer",
    "dpsgd-gc",
    "--sigma-dp",
    "0.01",
    "--clip-norm",
    "1",
    "--batch-size",
    "50",
    "--lr",
    "0.1",
    "--epochs",
    "30",
    "--eval-epochs",
    "15,30",
    "--target-size",
    "300",
    "--num-shadows",
    "2",
    "--canaries",
    "50",
    "--device",
    "cpu",
    "--quiet",
    "--state-every",
    "0",
]


@pytest.mark.integration
def test_a_killed_dpaudit_train_resumes_where_it_stopped(tmp_path):
    """SIGKILL a real `dpaudit train` once epoch 3 or later is saved; the same command again resumes and ends as the
    uninterrupted run did."""
    command = [sys.executable, "-m", "dpaudit.cli", "train", *TRAIN]
    subprocess.run([*command, "--out", str(tmp_path / "whole")], check=True, capture_output=True, timeout=300)
    cut = tmp_path / "cut"
    process = subprocess.Popen([*command, "--out", str(cut)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_saved_epoch(process, cut / "shadow_01", 3)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL, "the run ended before it could be interrupted"
    assert not (cut / "target" / "epoch_0030.pt").exists()
    resumed = subprocess.run([*command, "--out", str(cut)], check=True, capture_output=True, text=True, timeout=300)
    assert "dpaudit: resuming target+2 after epoch" in resumed.stderr
    assert_same_results(tmp_path / "whole", cut)
