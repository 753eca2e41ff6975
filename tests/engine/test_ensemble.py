"""The ensemble engine: same algorithm as one model at a time, chunking under a memory budget."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from support import digit_members, engine_config
from torch import nn

from dpaudit import optim
from dpaudit._state import capture
from dpaudit._validation import DPAuditError
from dpaudit.data import load_dataset
from dpaudit.ensemble import (
    CPU_CALL_ACTIVATION_BYTES,
    TRIAL_CALLS,
    ChunkPlan,
    EnsembleGradients,
    OpacusGradients,
    RecordPool,
    bytes_per_model_sample,
    candidate_methods,
    plan_chunks,
)
from dpaudit.layerwise import dense
from dpaudit.models import build_model
from dpaudit.train import Member, train_models


def _train(config, members):
    return train_models(config=config, members=members, test_data=None, progress=False)


def _assert_same_models(together, alone):
    """Each model trained together has the ledger of, and parameters within 1e-4 of, the one trained alone."""
    for ensemble_model, single_model in zip(together, alone):
        assert ensemble_model.ledger.to_dict() == single_model.ledger.to_dict()
        for a, b in zip(ensemble_model.model.parameters(), single_model.model.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.integration
@pytest.mark.parametrize("optimizer", optim.available())
def test_ensemble_trains_the_same_models_as_one_at_a_time(optimizer):
    """Poisson batches of unequal sizes (padding), microbatch chunks, the target's canaries: 12 steps, 3 models."""
    members = digit_members(3)
    together = _train(engine_config(optimizer, engine="ensemble", canaries=20), members)
    alone = [_train(engine_config(optimizer, engine="sequential", canaries=20), [member])[0] for member in members]
    _assert_same_models(together, alone)
    for ensemble_model, single_model in zip(together, alone):
        np.testing.assert_allclose(ensemble_model.metrics.train_loss, single_model.metrics.train_loss, rtol=1e-4)
    assert not torch.equal(next(together[0].model.parameters()), next(together[1].model.parameters()))


@pytest.mark.parametrize("optimizer", ["dpsgd-gc", "tp-topk"])  # a norm-only factor; per-sample tensors masked
def test_ensemble_by_opacus_hooks_trains_the_same_models_as_one_at_a_time(optimizer):
    members = digit_members(3)
    together = _train(engine_config(optimizer, grad_sample="opacus", canaries=20), members)
    alone = [_train(engine_config(optimizer, engine="sequential", canaries=20), [member])[0] for member in members]
    _assert_same_models(together, alone)


class _Wrapped(nn.Module):
    """A CNN the layer-wise method cannot take (not an nn.Sequential)."""

    def __init__(self, seed):
        super().__init__()
        self.body = build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10, seed=seed)

    def forward(self, images):
        return self.body(images)


def _ticks(*seconds):
    """A clock for ``EnsembleGradients.clock`` whose successive calls' differences are ``seconds``, in pairs
    (start, end) of the trial steps."""
    now, readings = 0.0, []
    for step in seconds:
        readings += [now, now + step]
        now += step
    return iter(readings).__next__


@pytest.mark.parametrize(
    "opacus_seconds, ghost_seconds, kept", [(1.0, 2.0, "opacus"), (2.0, 1.0, "ghost"), (11.0, 12.0, "functorch")]
)
def test_auto_times_functorch_opacus_and_ghost_on_shares_of_the_first_step_and_keeps_the_fastest(
    opacus_seconds, ghost_seconds, kept, capsys
):
    models = [_Wrapped(seed) for seed in range(2)]
    example = torch.zeros(1, 8, 8)
    assert candidate_methods(models[0], "auto", per_sample=True, example=example) == ("functorch", "opacus", "ghost")
    assert candidate_methods(models[0], "auto", per_sample=False) == ("functorch",)
    assert candidate_methods(models[0], "functorch", per_sample=True) == ("functorch",)
    for hooks in ("opacus", "ghost"):  # a batch mean: no hooks
        assert candidate_methods(models[0], hooks, per_sample=False) == ("functorch",)
    assert TRIAL_CALLS == 1  # the shares below are those of one timed share per method
    ensemble = EnsembleGradients(models, per_sample=True, example=example, max_samples=16, memory_budget_mb=64)
    # a share's time counts per record: each method's share is 2 models × 3 records
    ensemble.clock = _ticks(5.0, opacus_seconds, ghost_seconds)
    digits = load_dataset("digits")
    pool = RecordPool([(torch.from_numpy(digits.images[:40]), torch.from_numpy(digits.labels[:40]))] * 2)
    received, calls = [], []

    def sink(active, counts, grads, losses, padding):
        received.append((ensemble.method, [dense(g)[:, : counts[0]].clone() for g in grads]))

    def gradients(call, active, images, *rest):
        calls.append(tuple(images.shape[:2]))  # (models, samples) of each gradient call
        return EnsembleGradients._gradients(ensemble, call, active, images, *rest)

    ensemble._gradients = gradients
    # records 0-2 by functorch, 3-5 by opacus, 6-8 by ghost, 9-11 by the fastest; then a step by the fastest
    ensemble.accumulate(pool, [np.arange(12)] * 2, sink)
    ensemble.accumulate(pool, [np.arange(10)] * 2, sink)
    # functorch: one call of both models; opacus and ghost: one call per model
    by_kept = ["functorch"] if kept == "functorch" else [kept] * 2
    assert [method for method, _ in received] == ["functorch", *["opacus"] * 2, *["ghost"] * 2, *by_kept, *by_kept]
    # before its timed share, each method's warm-up call on one record per model, whose gradients reach no sink
    one_model_calls = [(1, 1)] * 2 + [(1, 3)] * 2
    rest, step_2 = ([(2, 3)], [(2, 10)]) if kept == "functorch" else ([(1, 3)] * 2, [(1, 10)] * 2)
    assert calls == [(2, 1), (2, 3), *one_model_calls, *one_model_calls, *rest, *step_2]
    assert ensemble.method == kept and ensemble.candidates == (kept,)
    assert ensemble.trials == {"functorch": [5.0 / 6], "opacus": [opacus_seconds / 6], "ghost": [ghost_seconds / 6]}
    assert f"gradients of 2 models by {kept}" in capsys.readouterr().err
    assert hasattr(models[0], "autograd_grad_sample_hooks") == (kept == "opacus")  # the losers' hooks are gone
    assert len(models[0].body[0]._forward_hooks) == (kept in ("opacus", "ghost"))

    # the losers' per-sample gradients equal the kept method's of the same records in step 2 (no update between)
    def share(method, m, j):  # parameter j's gradients of model m in the method's share
        return (
            received[0][1][j][m] if method == "functorch" else received[{"opacus": 1, "ghost": 3}[method] + m][1][j][0]
        )

    def step_2_records(m, j, records):
        return received[-1][1][j][m, records] if kept == "functorch" else received[-2 + m][1][j][0, records]

    records = {"functorch": slice(0, 3), "opacus": slice(3, 6), "ghost": slice(6, 9)}
    for method in set(records) - {kept}:
        for m in range(2):
            for j in range(len(received[0][1])):
                torch.testing.assert_close(
                    share(method, m, j), step_2_records(m, j, records[method]), rtol=1e-4, atol=1e-6
                )


class _OffThePath(nn.Module):
    """A model with a parameter the images do not reach: a Linear layer of constants, added to the logits."""

    def __init__(self):
        super().__init__()
        self.body = build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10, seed=0)
        self.offset = nn.Linear(1, 10)

    def forward(self, images):
        return self.body(images) + self.offset(images.new_ones(len(images), 1))


@pytest.mark.parametrize("model, through_images", [(_Wrapped(0), True), (_OffThePath(), False)])
def test_opacus_hooks_backpropagate_to_the_images_alone_where_that_reaches_every_parameter(model, through_images):
    """Where every module with parameters computes on the images, the backward pass goes to the images alone (no
    batch gradient of the parameters) and gives the per-sample gradients of the full backward pass bit for bit;
    a model with a parameter off the images' path keeps the full pass, and every parameter gets its gradients."""
    digits = load_dataset("digits")
    images, labels = torch.from_numpy(digits.images[None, :6]), torch.from_numpy(digits.labels[None, :6])
    hooks = OpacusGradients([model])
    grads, losses = hooks([0], images, labels)
    assert hooks.through_images is through_images
    assert all(p.grad is None for p in model.parameters()) and model.training
    assert [tuple(g.shape) for g in grads] == [(1, 6, *p.shape) for p in model.parameters()]
    hooks.through_images = False  # the full backward pass, which every model takes
    full, full_losses = hooks([0], images, labels)
    assert all(torch.equal(a, b) for a, b in zip(grads, full)) and torch.equal(losses, full_losses)
    hooks.close()


def test_chunking_under_a_tiny_budget_gives_the_same_models():
    members = digit_members(3)
    whole = _train(engine_config("dpsgd-gc", memory_budget_mb=2048), members)
    pieces = _train(engine_config("dpsgd-gc", memory_budget_mb=1e-6), members)  # one model × one sample per call
    for a_model, b_model in zip(whole, pieces):
        for a, b in zip(a_model.model.parameters(), b_model.model.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_plan_chunks_fits_the_budget():
    mib = 2**20
    assert plan_chunks(models=11, samples=256, bytes_per_model_sample=mib, memory_budget_mb=1100) == ChunkPlan(
        11, 100, mib
    )
    assert plan_chunks(models=11, samples=64, bytes_per_model_sample=mib, memory_budget_mb=1e6) == ChunkPlan(
        11, 64, mib
    )
    assert plan_chunks(models=11, samples=64, bytes_per_model_sample=mib, memory_budget_mb=5) == ChunkPlan(5, 1, mib)
    assert plan_chunks(models=11, samples=64, bytes_per_model_sample=10 * mib, memory_budget_mb=1) == ChunkPlan(
        1, 1, 10 * mib
    )
    with pytest.raises(DPAuditError, match="memory_budget_mb"):
        plan_chunks(models=1, samples=1, bytes_per_model_sample=1, memory_budget_mb=0)


def test_resnet18_ensemble_plan_stays_under_the_budget():
    model = build_model("resnet18-gn-cifar", input_shape=(3, 32, 32), num_classes=10, seed=0)
    per_pair = bytes_per_model_sample(model, example=torch.zeros(3, 32, 32))
    assert per_pair > 4 * 2 * 11_000_000  # at least the two copies of 11 M per-sample gradient values
    ensemble = EnsembleGradients(
        [model], per_sample=True, example=torch.zeros(3, 32, 32), max_samples=256, memory_budget_mb=2048
    )
    plan = ensemble.plan
    assert plan.models_per_call * plan.samples_per_call * per_pair <= 2048 * 2**20
    assert plan.samples_per_call >= 1


@pytest.mark.parametrize(
    "architecture, shape, method, samples",
    [
        ("cnn", (3, 32, 32), "layers", 17),  # largest activation 32 × 32 × 32 values: 11 × 17 × 128 KiB = 23.4 MiB
        ("cnn", (3, 32, 32), "functorch", 256),  # measured for the layer-wise method only
        ("cnn-digits", (1, 8, 8), "layers", 256),  # 32 × 8 × 8 values: 256 samples are 22 MiB
    ],
)
def test_cpu_layerwise_calls_keep_their_largest_activation_about_cache_sized(architecture, shape, method, samples):
    models = [build_model(architecture, input_shape=shape, num_classes=10, seed=k) for k in range(11)]
    plan = EnsembleGradients(
        models, per_sample=True, example=torch.zeros(shape), max_samples=256, memory_budget_mb=1e6, method=method
    ).plan
    assert CPU_CALL_ACTIVATION_BYTES == 24 * 2**20  # what the sample counts above follow from
    assert plan == ChunkPlan(11, samples, plan.bytes_per_model_sample)


def test_record_pool_reads_every_models_batch_padded_with_a_zero_record():
    images = [torch.arange(1.0, 1.0 + 2 * n * 3).reshape(n, 2, 3) + 100 * k for k, n in enumerate((4, 2, 5))]
    labels = [torch.arange(n) + 10 * k for k, n in enumerate((4, 2, 5))]
    pool = RecordPool(list(zip(images, labels)))
    for k in range(3):
        assert torch.equal(pool.records(k)[0], images[k]) and torch.equal(pool.records(k)[1], labels[k])
    positions = [np.array([3, 0]), np.array([], dtype=np.int64), np.array([4, 1, 2])]
    read_images, read_labels, padding = pool.read(positions, models=[0, 1, 2], width=3)
    assert padding.tolist() == [[False, False, True], [True, True, True], [False, False, False]]
    for m, part in enumerate(positions):
        assert torch.equal(read_images[m, : len(part)], images[m][part])
        assert torch.equal(read_labels[m, : len(part)], labels[m][part])
    assert not read_images[padding].any() and not read_labels[padding].any()  # the zero record, label 0
    _, only_last, _ = pool.read([np.array([0])], models=[2], width=1)
    assert torch.equal(only_last[0, 0], labels[2][0])


def test_stacked_sums_are_rows_saved_alone_and_checked():
    hyper = optim.Hyperparameters(lr=0.1, expected_batch_size=4, dataset_size=40, clip_norm=1.0, sigma_dp=0.25)
    stacks = [torch.zeros(3, 5, 2), torch.zeros(3, 7)]
    own = torch.zeros(4)  # optimizer 0 also updates a tensor of its own (the canary target's)
    made = [
        optim.DPSGD([values[k] for values in stacks] + ([own] if k == 0 else []), hyper, generator=torch.Generator())
        for k in range(3)
    ]
    made[1].accumulate([torch.ones(2, 5, 2), torch.ones(2, 7)])
    optim.DPSGD.stack_rows(made, stacks)
    assert made[1]._sum[0].data_ptr() == made[0]._sum[0].data_ptr() + 10 * 4  # row 1 of one [3, 5, 2] tensor
    assert made[1]._sum[1].abs().max() > 0 and not made[0]._sum[1].any()  # what was accumulated is kept
    assert len(made[0]._sum) == 3 and made[0]._sum[2].shape == own.shape
    alone = [torch.zeros(1, 7)]  # the canary target trained by itself: every optimizer has a tensor of its own
    target = optim.DPSGD([alone[0][0], own], hyper, generator=torch.Generator())
    optim.DPSGD.stack_rows([target], alone)
    assert [total.shape for total in target._sum] == [(7,), (4,)]
    saved = capture(made[1])["_sum"][0]
    assert saved.untyped_storage().nbytes() == saved.nbytes  # a state file holds this model's sums, not the stack
    strangers = [optim.DPSGD([torch.zeros(5, 2), torch.zeros(7)], hyper, generator=torch.Generator()) for _ in range(3)]
    with pytest.raises(DPAuditError, match="not row 0 of the stacked parameters"):
        optim.DPSGD.stack_rows(strangers, stacks)


def test_ensemble_checkpoints_hold_one_model(tmp_path):
    members = [replace(member, out_dir=tmp_path / member.label) for member in digit_members(3)]
    _train(engine_config("dpsgd-gc"), members)
    sizes = {member.label: (tmp_path / member.label / "epoch_0003.pt").stat().st_size for member in members}
    parameters = sum(p.numel() for p in build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10).parameters())
    assert max(sizes.values()) < 4 * parameters * 1.5  # one model's float32 values, not the stacked three


def test_engine_choices_are_validated():
    with pytest.raises(DPAuditError, match="engine"):
        engine_config("dpsgd-gc", engine="parallel")
    with pytest.raises(DPAuditError, match="equal training-set sizes"):
        data = load_dataset("digits")
        train_models(
            config=engine_config("dpsgd-gc"),
            test_data=None,
            progress=False,
            members=[
                Member(train_data=data.subset(np.arange(60)), model_index=0),
                Member(train_data=data.subset(np.arange(50)), model_index=1),
            ],
        )


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", optim.available())
def test_ensemble_trains_the_same_models_as_one_at_a_time_on_cuda(optimizer, cuda_without_tf32):
    members = digit_members(3)
    together = _train(engine_config(optimizer, device="cuda", canaries=20), members)
    alone = [
        _train(engine_config(optimizer, device="cuda", engine="sequential", canaries=20), [member])[0]
        for member in members
    ]
    _assert_same_models(together, alone)
    assert all(p.device.type == "cuda" for model in together for p in model.model.parameters())


@pytest.mark.gpu
def test_two_cuda_runs_keep_the_ledger_and_close_parameters():
    """What README "Reproduction" says of GPUs: batches and ledger are device-independent; parameters of two CUDA
    runs agree to within floating-point nondeterminism (not necessarily bit for bit)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    config = engine_config("dpsgd-gc", device="cuda", epochs=5)
    first, second = _train(config, digit_members(3)), _train(config, digit_members(3))
    on_cpu = _train(engine_config("dpsgd-gc", device="cpu", epochs=5), digit_members(3))
    for a_model, b_model, cpu_model in zip(first, second, on_cpu):
        assert a_model.ledger.to_dict() == b_model.ledger.to_dict() == cpu_model.ledger.to_dict()
        for a, b in zip(a_model.model.parameters(), b_model.model.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
