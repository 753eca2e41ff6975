"""AdaDPIGU and TP-TopK online/importance optimizers: ON-TopK, ON-Rand, AdaDPIGU (+ the code variant),
one step against a hand computation, supports from released quantities only, frozen coordinates,
accounting, bad input, and the training diagnostics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from support import hyperparameters_for

from dpaudit import optim
from dpaudit._validation import DPAuditError
from dpaudit.config import TrainConfig
from dpaudit.layerwise import OuterProducts
from dpaudit.optim import Hyperparameters, adadpigu
from dpaudit.optim.adadpigu import AdaDPIGU
from dpaudit.optim.sparse import top_k_rows

LR, SIGMA, B = 0.1, 0.05, 2


def _hyper(cls: type[optim.Optimizer] = optim.OnlineSparse, **overrides) -> Hyperparameters:
    values = dict(
        lr=LR, expected_batch_size=B, dataset_size=4, clip_norm=1.0, sigma_dp=SIGMA, epochs=3, active_ratio=0.4
    )  # 2 steps per epoch
    values.update(overrides)
    return hyperparameters_for(cls, **values)


def _params():
    return [torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.25, 3.0])]


# two records; per-record norms 0.5 and 0.3 (≤ C = 1: no clipping unless scaled)
GRADS = [torch.tensor([[0.3, 0.0, 0.1], [0.0, 0.2, 0.0]]), torch.tensor([[0.0, 0.387], [0.224, 0.0]])]


def _flat(tensors):
    return torch.cat([t.flatten() for t in tensors])


def _released(before, after):
    """The private gradient a step released, read back from the public parameters: (θ_t − θ_{t+1}) / η."""
    return (_flat(before) - _flat(after)) / LR


def _run_steps(opt, params, grads, steps):
    released = []
    for _ in range(steps):
        before = [p.clone() for p in params]
        opt.accumulate(grads)
        opt.step(realized_batch_size=B)
        released.append(_released(before, params))
    return released


def _top(values, k):
    return set(torch.argsort(-values, stable=True)[:k].tolist())


def _support(opt):
    mask = opt.support_mask()
    return None if mask is None else set(torch.nonzero(mask).flatten().tolist())


@pytest.mark.parametrize(
    ("score", "k", "expected"),
    [
        ([0.5, 2.0, -1.0, 2.0, 0.5, 0.5], 3, [1, 3, 0]),  # ties at the k-th value: the smaller indices
        ([0.5, 2.0, -1.0, 2.0, 0.5, 0.5], 1, [1]),
        ([1.0, 1.0, 1.0], 2, [0, 1]),
        ([-0.0, 0.0, -1.0], 1, [0]),  # −0 = +0: the smaller index
        ([math.nan, 1.0, -math.inf, 3.0], 3, [3, 1, 2]),  # NaN ranks last
        ([math.inf, 1.0, 2.0], 0, []),
        ([math.inf, 1.0, 2.0], 3, [0, 2, 1]),
    ],
)
def test_top_k_support_is_the_set_of_the_ranked_top_k(score, k, expected):
    score = torch.tensor(score)
    assert optim.top_k_indices(score, k).tolist() == expected
    assert optim.top_k_support(score, k).tolist() == sorted(expected)


def test_top_k_support_equals_the_ranked_top_k_on_random_scores_with_ties():
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        score = torch.randint(-3, 4, (int(torch.randint(2, 30, (1,), generator=generator)),), generator=generator)
        score = score.float()
        for k in range(len(score) + 1):
            assert optim.top_k_support(score, k).tolist() == sorted(optim.top_k_indices(score, k).tolist())


def test_top_k_rows_is_top_k_support_of_each_row():
    # many rows in one selection (the ensemble's supports): per row the set of the ranked top k, rows with NaN too
    generator = torch.Generator().manual_seed(1)
    scores = torch.randint(-3, 4, (40, 17), generator=generator).float()
    scores[3, 5], scores[7] = math.nan, math.nan
    for k in range(scores.shape[1] + 1):
        chosen = top_k_rows(scores, k)
        assert chosen.dtype == torch.bool and chosen.shape == scores.shape
        for row, score in zip(chosen, scores):
            assert torch.nonzero(row).flatten().tolist() == sorted(optim.top_k_indices(score, k).tolist())


def test_online_topk_schedule_and_scores_come_from_released_gradients():
    params = _params()
    opt = optim.get_spec("on-topk").cls(params, _hyper(), generator=torch.Generator().manual_seed(3))
    assert [opt.active_ratio(e) for e in (1, 2, 3)] == pytest.approx([1.0, 0.7, 0.4])
    opt.begin_epoch(1)
    assert opt.mask is None  # ρ_0 = 1: the first epoch is dense DP-SGD
    first = _run_steps(opt, params, GRADS, 2)
    opt.begin_epoch(2)
    score = torch.stack(first).pow(2).mean(0) - SIGMA**2
    torch.testing.assert_close(opt.score, score)
    assert _support(opt) == _top(score, math.floor(0.7 * 5))
    frozen_before = [p.clone() for p in params]
    active = opt.support_mask().bool()
    second = _run_steps(opt, params, [g * 50 for g in GRADS], 2)
    assert torch.equal(_flat(params)[~active], _flat(frozen_before)[~active])  # frozen: neither update nor noise
    opt.begin_epoch(3)
    fresh = torch.stack(second).pow(2).mean(0) - SIGMA**2
    expected = torch.where(active, fresh, score)  # frozen all epoch 2: keep the epoch-1 score
    torch.testing.assert_close(opt.score, expected)
    assert _support(opt) == _top(expected, math.floor(0.4 * 5))


def test_online_masked_step_matches_hand_computation():
    params = _params()
    opt = optim.get_spec("on-topk").cls(params, _hyper(), generator=torch.Generator().manual_seed(9))
    opt.begin_epoch(1)
    opt._set_support(torch.tensor([0, 4]))  # active: coordinate 0 of the first tensor, 1 of the second
    big = [g * 10 for g in GRADS]  # record 1: m⊙g = (3, 0 | 0, 3.87), norm 3.997 → clipped to 1
    opt.accumulate(big)
    cost = opt.step(realized_batch_size=B)
    reference = torch.Generator().manual_seed(9)
    noise = [torch.randn(3, generator=reference), torch.randn(2, generator=reference)]
    masked = [torch.tensor([[3.0, 0, 0], [0, 0, 0]]), torch.tensor([[0, 3.87], [0, 0]])]
    factors = torch.tensor([1 / (math.hypot(3.0, 3.87) + 1e-6), 1.0])
    masks = [torch.tensor([1.0, 0, 0]), torch.tensor([0, 1.0])]
    for got, start, g, n, m in zip(params, _params(), masked, noise, masks):
        summed = torch.einsum("i,i...->...", factors, g)
        torch.testing.assert_close(got, start - LR * m * (summed / B + SIGMA * n))
    assert cost == (pytest.approx(SIGMA * B / 1.0), pytest.approx(0.5), "train")


@pytest.mark.parametrize("name", ["on-topk", "tp-topk"])
def test_masked_models_accumulate_together_as_one_at_a_time(name):
    """An ensemble's masked optimizers (one still dense) sum what each one's ``accumulate`` sums (to float rounding:
    the weight's masked norms and sums come from its factors, ``layerwise.OuterProducts``), with padding rows."""
    from dpaudit.layerwise import OuterProducts

    generator = torch.Generator().manual_seed(0)
    cls = optim.get_spec(name).cls
    extra = {"warmup_fraction": 0.34} if name == "tp-topk" else {}
    optimizers = [
        cls([torch.zeros(4, 3), torch.zeros(4)], _hyper(cls, **extra), generator=torch.Generator().manual_seed(k))
        for k in range(3)
    ]
    for k, opt in enumerate(optimizers[1:]):  # the first stays dense
        opt._set_support(torch.tensor([0, 5, 7, 13 + k]))
    outer, inner = torch.randn(3, 5, 4, generator=generator), torch.randn(3, 5, 3, generator=generator)
    bias = torch.randn(3, 5, 4, generator=generator)
    counts = [5, 3, 4]  # the rows after each count are padding
    cls.accumulate_together(optimizers, [OuterProducts(outer, inner), bias], counts)
    for row, (opt, count) in enumerate(zip(optimizers, counts)):
        alone = cls([torch.zeros(4, 3), torch.zeros(4)], _hyper(cls, **extra), generator=torch.Generator())
        alone.mask = opt.mask
        alone.accumulate([outer[row, :count, :, None] * inner[row, :count, None, :], bias[row, :count]])
        for a, b in zip(opt._sum, alone._sum):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    for opt in optimizers[1:]:  # the masks acted: nothing outside the support, something in it
        outside = [total[mask == 0] for total, mask in zip(opt._sum, opt.mask)]
        assert all(not part.any() for part in outside) and all(total.any() for total in opt._sum)


def test_online_random_support_sizes_follow_the_schedule_and_ignore_the_data():
    supports = {}
    for scale in (1.0, 1000.0):
        params = _params()
        opt = optim.get_spec("on-rand").cls(params, _hyper(epochs=4), generator=torch.Generator().manual_seed(5))
        for epoch in (1, 2, 3, 4):
            opt.begin_epoch(epoch)
            supports.setdefault(scale, []).append(_support(opt))
            _run_steps(opt, params, [g * scale for g in GRADS], 2)
    assert supports[1.0] == supports[1000.0]
    assert supports[1.0][0] is None
    assert [len(s) for s in supports[1.0][1:]] == [math.floor((1 - 0.6 * e / 3) * 5) for e in (1, 2, 3)]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_online_frozen_coordinates_do_not_move_with_momentum(momentum):
    params = _params()
    opt = optim.get_spec("on-topk").cls(params, _hyper(momentum=momentum), generator=torch.Generator().manual_seed(1))
    opt.begin_epoch(1)
    _run_steps(opt, params, GRADS, 2)
    opt.begin_epoch(2)
    active = opt.support_mask().bool()
    before = _flat(params).clone()
    _run_steps(opt, params, GRADS, 2)
    assert torch.equal(_flat(params)[~active], before[~active])


# AdaDPIGU


def _adadpigu(name="adadpigu", **overrides):
    params = _params()
    cls = optim.get_spec(name).cls
    hyper = _hyper(cls, epochs=2, pretrain_fraction=0.5, retention_ratio=0.6, example_topk_fraction=0.4, **overrides)
    return params, cls(params, hyper, generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("name", ["adadpigu", "adadpigu-code"])
def test_adadpigu_accumulate_together_is_accumulate_model_by_model(name, monkeypatch):
    """An ensemble's main-phase statistics formed for all models at once (a Linear weight's per-record gradients as
    factors, unequal batches with padding, two models per pass) add to each model's sums exactly what its own
    ``accumulate`` adds; in pre-training (no mask) the models accumulate one by one."""
    monkeypatch.setattr(adadpigu, "RECORD_ROW_VALUES", 2 * 6 * 15)
    cls, models, width, counts = optim.get_spec(name).cls, 5, 6, [6, 3, 0, 5, 1]
    hyper = _hyper(cls, epochs=2, pretrain_fraction=0.5, retention_ratio=0.6, example_topk_fraction=0.4)
    generator = torch.Generator().manual_seed(2)
    outer, inner, bias = (torch.randn(models, width, size, generator=generator) for size in (3, 4, 3))
    for m, count in enumerate(counts):  # the padding rows are zero (as the ensemble's)
        outer[m, count:], inner[m, count:], bias[m, count:] = 0, 0, 0

    def optimizers(stacked: bool):
        stacks = [torch.zeros(models, 3, 4), torch.zeros(models, 3)]
        made = [
            cls([values[m] if stacked else values[m].clone() for values in stacks], hyper, generator=torch.Generator())
            for m in range(models)
        ]
        if stacked:
            cls.stack_rows(made, stacks)
        for m, optimizer in enumerate(made):
            chosen = torch.randperm(15, generator=torch.Generator().manual_seed(m))[:9]
            optimizer._set_support(chosen)
            for alpha, beta in zip(optimizer.alpha, optimizer.beta):
                alpha.copy_(torch.randn(alpha.shape, generator=torch.Generator().manual_seed(10 + m)) / 3)
                beta.copy_(torch.rand(beta.shape, generator=torch.Generator().manual_seed(20 + m)) + 0.1)
        return made

    together, alone = optimizers(stacked=True), optimizers(stacked=False)
    calls, own = [], AdaDPIGU.accumulate
    monkeypatch.setattr(AdaDPIGU, "accumulate", lambda self, grads: calls.append(self) or own(self, grads))
    cls.accumulate_together(together, [OuterProducts(outer, inner), bias], counts)
    assert not calls  # no model by model
    for optimizer, m in zip(alone, range(models)):
        optimizer.accumulate([(outer[m, : counts[m], :, None] * inner[m, : counts[m], None, :]), bias[m, : counts[m]]])
    for mine, theirs in zip(together, alone):
        assert all(torch.equal(a, b) for a, b in zip(mine._sum, theirs._sum))
    assert together[2]._sum[1].abs().sum() == 0 and together[0]._sum[1].abs().sum() > 0
    calls.clear()
    for optimizer in together:
        optimizer.mask = None  # pre-training: one by one
    cls.accumulate_together(together, [OuterProducts(outer, inner), bias], counts)
    assert calls == together


def test_adadpigu_pretraining_mask_comes_from_released_gradients_and_prunes_weights():
    params, opt = _adadpigu()
    released, apply = [], opt._apply
    opt._apply = lambda updates: (released.append(_flat(updates).clone()), apply(updates))  # what θ moves by / η
    _run_steps(opt, params, GRADS, 2)  # T_pre = 0.5 · 4 = 2 steps of DP-SGD
    importance = torch.stack(released).abs().mean(0)
    torch.testing.assert_close(opt.score, importance)
    chosen = _support(opt)
    assert chosen == _top(importance, math.floor(0.6 * 5))
    flat = _flat(params)
    assert torch.all(flat[[p for p in range(5) if p not in chosen]] == 0)  # forward pass at m ⊙ θ


def test_adadpigu_main_step_matches_hand_computation():
    params, opt = _adadpigu(ema_mean_decay=0.9, ema_variance_decay=0.999, standardise_constant=1e-6)
    opt.steps_taken = opt.hyper.pretrain_steps  # skip pre-training: set the mask by hand
    opt._set_support(torch.tensor([0, 1, 4]))
    reference = torch.Generator().manual_seed(7)
    big = [g * 10 for g in GRADS]
    opt.accumulate(big)
    start = [p.clone() for p in params]
    opt.step(realized_batch_size=B)
    # α = 0, β = 1: z_i = m ⊙ g_i / (1 + μ); keep the ⌊0.4·5⌋ = 2 largest |z_i|; clip to C = 1
    mu, m = 1e-6, torch.tensor([1.0, 1, 0, 0, 1])
    z = torch.cat([big[0].flatten(1), big[1].flatten(1)], 1) * m / (1 + mu)
    keep = torch.zeros_like(z).scatter_(1, torch.topk(z.abs(), 2, dim=1).indices, 1.0)
    z = z * keep
    z = z * torch.clamp(1.0 / (z.norm(dim=1) + 1e-6), max=1.0)[:, None]
    noise = torch.cat([torch.randn(3, generator=reference), torch.randn(2, generator=reference)])
    update = m * ((z.sum(0) / B + SIGMA * noise) * (1 + mu) + 0)
    torch.testing.assert_close(_flat(params), _flat(start) - LR * update)
    torch.testing.assert_close(_flat(opt.alpha), 0.1 * update)
    torch.testing.assert_close(_flat(opt.beta), 0.999 + 0.001 * update.pow(2).clamp(1e-6, 1e6))


def test_adadpigu_clips_a_long_gradient_to_c_to_float32_precision():
    """A record's statistic of 2.4·10⁶ values is clipped to norm C = 1 (within 10⁻⁶), not to C·(1 ± 10⁻⁴) as
    torch's float32 vector_norm of so many values gives."""
    cls = optim.get_spec("adadpigu").cls
    hyper = _hyper(cls, epochs=2, pretrain_fraction=0.5, retention_ratio=1.0, example_topk_fraction=1.0)
    params = [torch.zeros(2_400_000)]
    opt = cls(params, hyper, generator=torch.Generator().manual_seed(7))
    opt.steps_taken = opt.hyper.pretrain_steps
    opt._set_support(torch.arange(2_400_000))
    opt.accumulate([torch.randn(1, 2_400_000, generator=torch.Generator().manual_seed(0))])
    assert abs(torch.linalg.vector_norm(opt._sum[0].double()).item() - 1.0) < 1e-6


def test_adadpigu_pruned_weights_stay_zero_and_every_step_is_one_gaussian_step():
    params, opt = _adadpigu(momentum=0.9)
    costs = []
    for _ in range(4):
        opt.accumulate([g * 30 for g in GRADS])
        costs.append(opt.step(realized_batch_size=B))
    pruned = ~opt.support_mask().bool()
    assert torch.all(_flat(params)[pruned] == 0)
    assert [c.phase for c in costs] == ["pretrain", "pretrain", "train", "train"]
    assert len({(c.noise_multiplier, c.sample_rate) for c in costs}) == 1  # one (z, q) for the whole run


def test_freeze_variant_keeps_the_pruned_weights_at_their_pretrained_values():
    """adadpigu-freeze: at the switch the pruned weights keep the pre-trained (released) values and never move after;
    the kept ones train as adadpigu's, with the same single (z, q) ledger and the same mask."""
    assert optim.get_spec("adadpigu-freeze").dp_claim
    params, opt = _adadpigu("adadpigu-freeze", momentum=0.9)
    reference_params, reference = _adadpigu(momentum=0.9)
    for step in range(4):
        for o in (opt, reference):
            o.accumulate([g * 30 for g in GRADS])
        costs = opt.step(realized_batch_size=B), reference.step(realized_batch_size=B)
        if step == 1:
            switched = _flat(params).clone()  # the iterate right after the mask is chosen
    assert [c.phase for c in costs] == ["train", "train"]
    pruned = ~opt.support_mask().bool()
    assert torch.equal(opt.support_mask(), reference.support_mask())  # the same noisy importance, the same mask
    assert torch.all(_flat(params)[pruned] == switched[pruned]) and torch.any(switched[pruned] != 0)
    assert torch.all(_flat(reference_params)[pruned] == 0)  # the paper's variant zeroes them


def test_code_variant_ranks_by_unnoised_gradients_and_makes_no_claim():
    assert not optim.get_spec("adadpigu-code").dp_claim and optim.get_spec("adadpigu").dp_claim
    params, opt = _adadpigu("adadpigu-code")
    _run_steps(opt, params, GRADS, 2)
    clean = GRADS[0].sum(0).tolist() + GRADS[1].sum(0).tolist()
    assert _support(opt) == _top(torch.tensor(clean).abs(), 3)  # the data's own gradients leak into the mask
    _run_steps(opt, params, GRADS, 2)
    assert all(torch.all(a == 0) for a in opt.alpha) and all(torch.all(b == 1) for b in opt.beta)


@pytest.mark.parametrize("name", ["adadpigu", "on-topk", "on-rand"])
def test_single_sigma_run_is_calibrated_to_the_target(name):
    from dpaudit.train import planned_epsilon

    config = TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="mlp",
            optimizer=name,
            clip_norm=1.0,
            target_epsilon=2.0,
            batch_size=20,
            epochs=10,
            target_size=100,
            num_shadows=0,
        )
    ).validated()
    dpsgd = TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="mlp",
            optimizer="dpsgd-gc",
            clip_norm=1.0,
            target_epsilon=2.0,
            batch_size=20,
            epochs=10,
            target_size=100,
            num_shadows=0,
        )
    ).validated()
    assert config.privacy.sigma_dp == pytest.approx(
        dpsgd.privacy.sigma_dp
    )  # supports and masks are free: same σ as DP-SGD
    assert planned_epsilon(config) == pytest.approx(2.0, abs=0.01)


@pytest.mark.parametrize("name", ["adadpigu", "on-topk"])
def test_ledger_of_a_trained_run_gives_the_target_per_epoch(tmp_path, name):
    from dpaudit.ledger import PrivacyLedger
    from dpaudit.theory import ledger_epsilons
    from dpaudit.train import train_configuration

    config = TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="mlp",
            optimizer=name,
            clip_norm=1.0,
            target_epsilon=3.0,
            batch_size=30,
            epochs=4,
            target_size=120,
            num_shadows=0,
            lr=0.2,
        )
    )
    train_configuration(config, out_dir=tmp_path, progress=False)
    ledger = PrivacyLedger.from_dict(json.loads((tmp_path / "target" / "ledger.json").read_text()))
    per_epoch = ledger_epsilons(ledger, delta=1e-5, accountant="rdp")
    assert len(per_epoch) == 4 and list(per_epoch) == sorted(per_epoch)
    assert per_epoch[-1] == pytest.approx(3.0, abs=0.01)
    if name == "adadpigu":
        assert [run.phase for run in ledger.runs] == ["pretrain", "train"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"optimizer": "adadpigu", "retention_ratio": 0.0}, "retention_ratio"),
        ({"optimizer": "adadpigu", "retention_ratio": 1.2}, "retention_ratio"),
        ({"optimizer": "adadpigu", "example_topk_fraction": 0.0}, "example_topk_fraction"),
        ({"optimizer": "adadpigu", "pretrain_fraction": 1.0}, "pretrain_fraction"),
        ({"optimizer": "adadpigu", "pretrain_fraction": 0.01}, "pre-training must leave steps"),
        ({"optimizer": "adadpigu", "ema_mean_decay": 1.0}, "γ1"),
        ({"optimizer": "adadpigu", "ema_variance_decay": -0.1}, "γ2"),
        ({"optimizer": "adadpigu", "standardise_constant": 0.0}, "μ"),
        ({"optimizer": "on-topk", "active_ratio": 0.0}, "active_ratio"),
        ({"optimizer": "on-rand", "active_ratio": 1.01}, "active_ratio"),
        ({"optimizer": "on-topk", "epochs": 1}, "epochs ≥ 2"),
        ({"optimizer": "dpsgd-gc", "histogram_epoch": 9}, "histogram_epoch"),
    ],
)
def test_bad_sparse_input_is_a_one_line_error(overrides, message):
    values = {
        "dataset": "digits",
        "model": "mlp",
        "clip_norm": 1.0,
        "target_epsilon": 2.0,
        "batch_size": 20,
        "epochs": 5,
        "target_size": 60,
        "num_shadows": 0,
        **overrides,
    }
    with pytest.raises(DPAuditError, match=message) as caught:
        TrainConfig.from_dict(values).validated()
    assert "\n" not in str(caught.value)


# diagnostics


def test_gradient_histogram_counts_known_values():
    from dpaudit.diagnostics import GradientHistogram

    histogram = GradientHistogram(epoch=5)
    histogram.add([torch.tensor([0.0, 0.005, -0.009]), torch.tensor([0.02, -0.2])])
    histogram.add([torch.tensor([0.0101, 0.001, 0.0]), torch.tensor([1.0, 0.0])])
    result = histogram.to_dict()
    assert result["values"] == 10 and result["steps"] == 2
    assert result["fraction_within_0.01"] == pytest.approx(6 / 10)
    assert (result["below_range"], result["above_range"]) == (1, 1)
    assert sum(result["counts"]) == 8 and result["largest_magnitude"] == 1.0


def test_gradient_histogram_says_what_it_counted():
    """AdaDPIGU's main phase accumulates its standardised, masked statistic, not gradients: the histogram says so
    (the AdaDPIGU paper's Fig 2 is drawn from DP-SGD's record instead)."""
    from dpaudit.diagnostics import DEFAULT_SOURCE, GradientHistogram

    params, opt = _adadpigu()
    histogram = GradientHistogram(epoch=1)
    histogram.add([torch.zeros(2)], source=getattr(opt, "accumulated_statistic", DEFAULT_SOURCE))
    _run_steps(opt, params, GRADS, 2)  # the pre-training's T_pre = 2 steps: the mask is set
    histogram.add([torch.zeros(2)], source=opt.accumulated_statistic)
    source = histogram.to_dict()["source"]
    assert source.startswith("clipped mean gradient before noise (pre-training); then standardised, masked")
    assert GradientHistogram(epoch=1).to_dict()["source"].startswith(DEFAULT_SOURCE)


def test_support_quality_against_an_independent_oracle():
    from dpaudit.data import load_dataset
    from dpaudit.diagnostics import TrainingDiagnostics
    from dpaudit.models import build_model

    data = load_dataset("digits", split="train")
    train, held_out = data.subset(np.arange(40)), data.subset(np.arange(40, 100))
    model = build_model("mlp", input_shape=data.images.shape[1:], num_classes=10, seed=0)
    recorder = TrainingDiagnostics(
        model=model, train_data=train, held_out=held_out, histogram_epoch=1, batch_size=10, seed=0, path=None
    )
    d = sum(p.numel() for p in model.parameters())
    mask = torch.zeros(d)
    mask[: d // 4] = 1
    score = torch.arange(d, dtype=torch.float64)  # ranks the last coordinates first
    record = recorder._support_quality(mask, score, epoch=1, step=0)
    model.zero_grad()
    torch.nn.functional.cross_entropy(
        model(torch.from_numpy(held_out.images)), torch.from_numpy(held_out.labels)
    ).backward()
    oracle = _flat([p.grad for p in model.parameters()]).double() ** 2
    assert record["oracle_capture"] == pytest.approx(float(oracle[: d // 4].sum() / oracle.sum()), rel=1e-6)
    assert record["random_baseline"] == pytest.approx((d // 4) / d)
    curves = record["curves"]
    topk = sorted(oracle.tolist(), reverse=True)
    k10 = math.floor(0.1 * d)
    assert curves["oracle_capture_score_topk"][3] == pytest.approx(float(oracle[-k10:].sum() / oracle.sum()), rel=1e-6)
    assert curves["energy_oracle_topk"][-1] == pytest.approx(1.0)
    assert curves["energy_oracle_topk"] == sorted(curves["energy_oracle_topk"])
    assert all(
        r <= sum(topk[: max(1, math.floor(x * d))]) / sum(topk) + 1e-9
        for r, x in zip(curves["oracle_capture_random_mean"], curves["active_ratio"])
    )


def test_diagnostics_are_written_and_never_change_training(tmp_path):
    from dpaudit.train import train_configuration

    outputs = []
    for diagnostics in (True, False):
        config = TrainConfig.from_dict(
            dict(
                dataset="digits",
                model="mlp",
                optimizer="tp-topk",
                clip_norm=1.0,
                target_epsilon=4.0,
                batch_size=30,
                epochs=3,
                target_size=120,
                num_shadows=0,
                lr=0.3,
                diagnostics=diagnostics,
            )
        )
        out = tmp_path / str(diagnostics)
        train_configuration(config, out_dir=out, progress=False)
        outputs.append(torch.load(out / "target" / "epoch_0003.pt", weights_only=True))
    assert all(torch.equal(outputs[0][key], outputs[1][key]) for key in outputs[0])
    record = json.loads((tmp_path / "True" / "target" / "diagnostics.json").read_text())
    assert record["gradient_histogram"]["epoch"] == 3 and record["gradient_histogram"]["steps"] == 4 * 1
    (support,) = record["supports"]
    assert support["active"] == math.floor(0.4 * support["dimension"]) and support["proxy_concentration"] is not None
    assert not (tmp_path / "False" / "target" / "diagnostics.json").exists()
    from reproduce.results import diagnostics_summary

    summary = diagnostics_summary(tmp_path / "True")
    assert (
        summary["support_oracle_capture"] == support["oracle_capture"] and diagnostics_summary(tmp_path / "False") == {}
    )
