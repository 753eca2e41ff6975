"""One optimizer step against a hand computation; clipping and projection invariants."""

import functools
import math

import pytest
import torch
from support import engine_config, hyperparameters_for
from torch import nn

from dpaudit import optim
from dpaudit._validation import DPAuditError
from dpaudit.optim import sparse, stacked
from dpaudit.optim.stacked import _stacked_rows


def _tiny_params():
    return [torch.tensor([1.0, -2.0]), torch.tensor([0.5])]


def _hyper(cls: type[optim.Optimizer] = optim.DPSGD, **overrides):
    values = dict(lr=0.1, expected_batch_size=2, dataset_size=10, clip_norm=1.0, sigma_dp=0.3)
    values.update(overrides)
    return hyperparameters_for(cls, **values)


def test_registry_lists_dpsgd_gc_dc_optimizers():
    names = optim.available()
    assert {"sgd", "dpsgd-gc", "dpsgd-dc"} <= set(names)
    assert optim.get_spec("sgd").dp_claim is False
    assert optim.get_spec("dpsgd-gc").dp_claim and optim.get_spec("dpsgd-dc").dp_claim
    with pytest.raises(DPAuditError, match="unknown optimizer 'adam'"):
        optim.get_spec("adam")


def test_noise_convention_maps_onto_noise_multiplier():
    # z = σ_DP·b/C (the DPSGD-GC/DC authors' code) with the paper's σ_DP = 0.002, C = 20.
    for b, z in [(100, 0.01), (200, 0.02), (300, 0.03), (400, 0.04), (600, 0.06), (1000, 0.1)]:
        assert optim.sigma_dp_to_noise_multiplier(sigma_dp=0.002, batch_size=b, clip_norm=20) == pytest.approx(z)
        assert optim.noise_multiplier_to_sigma_dp(noise_multiplier=z, batch_size=b, clip_norm=20) == pytest.approx(
            0.002
        )


def test_dpsgd_gc_step_matches_hand_computation():
    params = _tiny_params()
    opt = optim.DPSGD(params, _hyper(), generator=torch.Generator().manual_seed(7))
    # two samples; sample 0 has norm 5 (clipped to 1), sample 1 has norm 0.5 (kept)
    grads = [torch.tensor([[3.0, 0.0], [0.3, 0.0]]), torch.tensor([[4.0], [0.4]])]
    opt.accumulate(grads)
    cost = opt.step(realized_batch_size=2)
    reference = torch.Generator().manual_seed(7)
    noise = [torch.randn(2, generator=reference), torch.randn(1, generator=reference)]
    scale0 = 1.0 / (5.0 + 1e-6)
    summed = [torch.tensor([3.0 * scale0 + 0.3, 0.0]), torch.tensor([4.0 * scale0 + 0.4])]
    expected = [p - 0.1 * (s / 2 + 0.3 * n) for p, s, n in zip(_tiny_params(), summed, noise)]
    for got, want in zip(params, expected):
        torch.testing.assert_close(got, want)
    assert cost.noise_multiplier == pytest.approx(0.3 * 2 / 1.0) and cost.sample_rate == pytest.approx(0.2)
    assert cost.phase == "train"


@pytest.mark.parametrize("name, clipped, noisy", [("dpsgd-no-noise", True, False), ("dpsgd-no-clip", False, True)])
def test_broken_dpsgd_variants_depart_in_exactly_one_way_and_claim_nothing(name, clipped, noisy):
    spec = optim.get_spec(name)
    assert spec.dp_claim is False
    params = _tiny_params()
    opt = spec.cls(params, _hyper(), generator=torch.Generator().manual_seed(7))
    grads = [torch.tensor([[3.0, 0.0], [0.3, 0.0]]), torch.tensor([[4.0], [0.4]])]  # norms 5 and 0.5
    opt.accumulate(grads)
    cost = opt.step(realized_batch_size=2)
    scale0 = 1.0 / (5.0 + 1e-6) if clipped else 1.0
    summed = [torch.tensor([3.0 * scale0 + 0.3, 0.0]), torch.tensor([4.0 * scale0 + 0.4])]
    reference = torch.Generator().manual_seed(7)
    noise = [torch.randn(2, generator=reference), torch.randn(1, generator=reference)] if noisy else [0.0, 0.0]
    for got, start, total, n in zip(params, _tiny_params(), summed, noise):
        torch.testing.assert_close(got, start - 0.1 * (total / 2 + 0.3 * n))
    # the ledger records what DP-SGD would claim
    assert cost.noise_multiplier == pytest.approx(0.6) and cost.sample_rate == pytest.approx(0.2)


def test_every_clipped_per_sample_gradient_has_norm_at_most_c():
    torch.manual_seed(0)
    grads = [torch.randn(64, 5, 3) * 10, torch.randn(64, 7)]
    captured = []

    class Recording(optim.DPSGD):
        def accumulate(self, per_sample):
            norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample))
            factors = (self.hyper.clip_norm / (norms + optim.CLIP_EPSILON)).clamp(max=1.0)
            captured.append(
                torch.sqrt(
                    sum((g * factors.view(-1, *[1] * (g.dim() - 1))).flatten(1).pow(2).sum(1) for g in per_sample)
                )
            )
            super().accumulate(per_sample)

    params = [torch.zeros(5, 3), torch.zeros(7)]
    opt = Recording(params, _hyper(clip_norm=2.0, sigma_dp=0.0), generator=torch.Generator())
    opt.accumulate(grads)
    assert captured[0].max() <= 2.0 + 1e-5
    # the sum of 64 clipped gradients therefore has norm ≤ 64 C
    opt.step(realized_batch_size=64)
    step_norm = math.sqrt(sum(float(p.pow(2).sum()) for p in params))
    assert step_norm <= 0.1 * 2.0 * 64 / 2 + 1e-4


@pytest.mark.parametrize("center", ["origin", "init"])
def test_dpsgd_dc_keeps_parameters_in_the_ball(center):
    torch.manual_seed(1)
    params = [torch.randn(10) * 5, torch.randn(3, 3) * 5]
    initial = [p.clone() for p in params]
    radius = 2.0
    opt = optim.DPSGDDomainConstrained(
        params,
        _hyper(optim.DPSGDDomainConstrained, sigma_dp=5.0, domain_radius=radius, domain_center=center, clip_norm=3.0),
        generator=torch.Generator().manual_seed(0),
    )
    centre = initial if center == "init" else [torch.zeros_like(p) for p in params]

    def distance():
        return math.sqrt(sum(float((p - c).pow(2).sum()) for p, c in zip(params, centre)))

    if center == "origin":
        assert distance() == pytest.approx(radius)  # θ_0 projected into K
    for _ in range(20):
        opt.accumulate([torch.randn(4, 10) * 10, torch.randn(4, 3, 3) * 10])
        opt.step(realized_batch_size=4)
        assert distance() <= radius * (1 + 1e-6)


def test_projection_is_exact_rescaling():
    params = [torch.tensor([3.0, 4.0])]
    optim.DPSGDDomainConstrained(
        params, _hyper(optim.DPSGDDomainConstrained, domain_radius=1.0, sigma_dp=0.0), generator=torch.Generator()
    )
    torch.testing.assert_close(params[0], torch.tensor([0.6, 0.8]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"clip_norm": -1.0}, "clip_norm"),
        ({"sigma_dp": -0.1}, "sigma_dp"),
        ({"lr": 0.0}, "lr"),
        ({"clip_norm": None}, "clip_norm"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(overrides, message):
    with pytest.raises(DPAuditError, match=message) as info:
        optim.DPSGD.check(_hyper(**overrides))
    assert "\n" not in str(info.value)


def test_dc_needs_positive_radius():
    for radius in (None, 0.0, -3.0):
        with pytest.raises(DPAuditError, match="domain_radius"):
            optim.DPSGDDomainConstrained.check(_hyper(optim.DPSGDDomainConstrained, domain_radius=radius))


def test_sgd_is_plain_gradient_step():
    model = nn.Linear(2, 1)
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    opt = optim.SGD(params, _hyper(optim.SGD), generator=torch.Generator())
    grads = [torch.ones_like(p) for p in params]
    opt.accumulate(grads)
    assert opt.step(realized_batch_size=2) is None
    for p, b in zip(params, before):
        torch.testing.assert_close(p.detach(), b - 0.1)


STEP_SHAPES, STEP_MODELS = [(3, 4), (2,), (5,)], 4  # 19 coordinates: CPU draws of 16 or more take the vectorised path


def _stacked_and_alone(cls, hyper, *, target_tensor: bool = False):
    """STEP_MODELS optimizers of ``cls`` on stacked rows and their parameters, the models (optimizer k) that took
    their own ``step`` (a list the steps append to), and the same models apart with their parameters. Model 0
    records its release, as the canary target does, and with ``target_tensor`` holds a tensor beside its row."""

    def optimizers(stacked: bool):
        stacks = [torch.stack([torch.full(shape, 0.1 * k) for k in range(STEP_MODELS)]) for shape in STEP_SHAPES]
        params = [[values[k] if stacked else values[k].clone() for values in stacks] for k in range(STEP_MODELS)]
        if target_tensor:
            params[0].append(torch.zeros(7))
        made = [cls(p, hyper, generator=torch.Generator().manual_seed(k)) for k, p in enumerate(params)]
        made[0].record_updates = True
        if stacked:
            cls.stack_rows(made, stacks)
        return made, params

    (together, together_params), (alone, alone_params) = optimizers(stacked=True), optimizers(stacked=False)
    own_steps = []
    for k, optimizer in enumerate(together):

        def counted(*, realized_batch_size, optimizer=optimizer, k=k):
            own_steps.append(k)
            return type(optimizer).step(optimizer, realized_batch_size=realized_batch_size)

        optimizer.step = counted
    return together, together_params, alone, alone_params, own_steps


@pytest.mark.parametrize(
    "name, momentum",
    [
        ("dpsgd-gc", 0.0),
        ("auto-s", 0.0),
        ("nsgd", 0.0),
        ("d2p-sgd", 0.0),
        ("dpsgd-no-noise", 0.0),
        ("dpsgd-gc", 0.9),
        ("dpsgd-dc", 0.0),
    ],
)
@pytest.mark.parametrize("concurrent", [False, True])
def test_step_together_is_step_model_by_model(name, momentum, concurrent, monkeypatch, request):
    """The ensemble's one-pass update on stacked rows gives each model exactly its own ``step`` (own noise
    stream), also when one model records its release (the canary target, row 0) and so takes its own ``step``;
    also where the rows' noise is drawn by threads side by side (``concurrent``)."""
    if concurrent:
        monkeypatch.setattr(stacked, "CONCURRENT_DRAW_VALUES", 1)
        request.addfinalizer(functools.partial(torch.set_num_threads, torch.get_num_threads()))
        torch.set_num_threads(2)
        stacked._threads.cache_clear()
    cls = optim.get_spec(name).cls
    hyper = _hyper(cls, momentum=momentum, domain_radius=10.0, noise_decay_unit="step")  # d2p-sgd: z falls every step
    together, together_params, alone, alone_params, own_steps = _stacked_and_alone(cls, hyper)
    grads = [torch.randn(5, *shape, generator=torch.Generator().manual_seed(9)) for shape in STEP_SHAPES]
    sizes = [5, 4, 6, 3]
    for step in range(3):
        for optimizer in together + alone:
            optimizer.accumulate([g * (step + 1) for g in grads])
        costs = cls.step_together(together, sizes)
        assert costs == [optimizer.step(realized_batch_size=n) for optimizer, n in zip(alone, sizes)]
    one_pass = momentum == 0 and name != "dpsgd-dc"  # momentum and DPSGD-DC's projection step model by model
    assert own_steps == ([0] if one_pass else list(range(STEP_MODELS))) * 3
    for mine, theirs in zip(together_params, alone_params):
        for a, b in zip(mine, theirs):
            assert torch.equal(a, b)
    assert not torch.equal(together_params[1][0], together_params[2][0])
    if concurrent:
        assert stacked._threads.cache_info().currsize == (1 if one_pass else 0)  # the threads drew the noise


SPARSE_SETTINGS = {
    "tp-": {"warmup_fraction": 0.34, "warmup_sigma_dp": 0.5},
    "on-": {},
    "adadpigu": {"pretrain_fraction": 0.34, "retention_ratio": 0.6, "example_topk_fraction": 0.5},
}


@pytest.mark.parametrize(
    "name",
    ["tp-topk", "tp-rand", "tp-topk-clean-support", "on-topk", "on-rand", "adadpigu", "adadpigu-freeze"],
)
def test_sparse_step_together_is_step_model_by_model(name, monkeypatch):
    monkeypatch.setattr(sparse, "SUPPORT_ROW_VALUES", 2 * 19)
    """The coordinate-sparse optimizers' one-pass update on stacked rows (stacked supports and state, each model's own
    noise draws parameter after parameter) and their supports chosen for all rows at once (``begin_epoch_together``,
    rows of two models at a time) give each model exactly its own ``step`` and ``begin_epoch``: parameters, scores,
    statistics and supports, over a dense phase, the support's choice and the sparse phase; the model that records
    its release steps alone."""
    cls = optim.get_spec(name).cls
    hyper = hyperparameters_for(
        cls,
        lr=0.1,
        expected_batch_size=2,
        dataset_size=10,
        clip_norm=1.0,
        sigma_dp=0.3,
        epochs=3,
        **next(settings for prefix, settings in SPARSE_SETTINGS.items() if name.startswith(prefix)),
        **({} if name.startswith("adadpigu") else {"active_ratio": 0.4}),
    )  # 5 steps per epoch
    together, together_params, alone, alone_params, own_steps = _stacked_and_alone(cls, hyper, target_tensor=True)
    grads = [torch.randn(5, *shape, generator=torch.Generator().manual_seed(9)) for shape in STEP_SHAPES]
    sizes = [5, 4, 6, 3]
    for epoch in range(1, 4):
        cls.begin_epoch_together(together, epoch)
        for optimizer in alone:
            optimizer.begin_epoch(epoch)
        for step in range(5):
            for k, optimizer in enumerate(together + alone):
                optimizer.accumulate([g * (step + 1 + k % STEP_MODELS) for g in grads])
            costs = cls.step_together(together, sizes)
            assert costs == [optimizer.step(realized_batch_size=n) for optimizer, n in zip(alone, sizes)]
    for mine, theirs in zip(together, alone):
        assert mine.support_version == theirs.support_version > 0
        assert mine.score is theirs.score is None or torch.equal(mine.score, theirs.score)
        assert all(torch.equal(a, b) for a, b in zip(mine.mask, theirs.mask))
        for state in ("_squares", "_importance", "alpha", "beta"):
            assert all(torch.equal(a, b) for a, b in zip(getattr(mine, state, []), getattr(theirs, state, [])))
    for mine, theirs in zip(together_params, alone_params):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    assert own_steps == [0] * 15  # the others in one pass
    assert not torch.equal(together_params[1][0], together_params[2][0])


@pytest.mark.parametrize("model_updates", [True, False])
def test_a_stacked_row_with_an_audit_block_accumulates_on_the_stack_and_records_what_is_read(model_updates):
    # the target of an ensemble holds the canary block beside its stacked row: the shared accumulation still adds into
    # the stack (one call for all rows) what it adds to each optimizer apart, the block's sums are left alone, and an
    # observer of the block alone gets no copies of the model's releases (``record_model_updates``)
    cls = optim.DPSGD
    hyper = engine_config("dpsgd-gc", sigma_dp=0.5).hyperparameters(20)
    shapes = [(3, 4), (5,)]

    def optimizers(stacked: bool):
        stacks = [torch.zeros((2, *shape)) for shape in shapes]
        blocks = [[torch.zeros(7)], []]  # the target's canary block
        made = [cls([values[k] for values in stacks] + blocks[k], hyper, generator=torch.Generator()) for k in range(2)]
        made[0].set_audit_block(1)
        if stacked:
            cls.stack_rows(made, stacks)
        return made

    together, apart = optimizers(stacked=True), optimizers(stacked=False)
    assert _stacked_rows(together) is not None and _stacked_rows(apart) is None
    grads = [torch.randn(2, 3, *shape, generator=torch.Generator().manual_seed(3)) for shape in shapes]
    for made in (together, apart):
        cls.accumulate_together(made, grads, [3, 2])
    for mine, theirs in zip(together, apart):
        assert all(torch.equal(a, b) for a, b in zip(mine._sum, theirs._sum))
    assert torch.equal(together[0]._sum[-1], torch.zeros(7))
    target = together[0]
    target.record_updates, target.record_model_updates = True, model_updates
    target.step(realized_batch_size=3)
    assert len(target.last_update) == (3 if model_updates else 1) and target.last_update[-1].shape == (7,)


@pytest.mark.parametrize("name", ["dpsgd-gc", "dp2-sgd", "tp-topk"])
def test_an_audit_blocks_release_is_kept_its_sums_cleared_and_its_parameters_left_alone(name):
    # two steps with a Dirac record at block coordinate 1 in the first: the released value there is c/b + σ_DP·n, the
    # block's parameters stay zero (no loss reads them), and the second step's release has no record left in it
    torch.manual_seed(0)
    block = torch.zeros(5)
    params = [torch.zeros(3, 4), block]
    hyper = engine_config(name, sigma_dp=1e-6, momentum=0.9).hyperparameters(20)
    optimizer = optim.get_spec(name).cls(params, hyper, generator=torch.Generator().manual_seed(1))
    optimizer.set_audit_block(1)
    optimizer.record_updates = True
    releases = []
    for coordinates in ([1], []):
        optimizer.accumulate_diracs(coordinates=torch.tensor(coordinates, dtype=torch.long), magnitude=10.0)
        optimizer.step(realized_batch_size=hyper.expected_batch_size)
        releases.append(optimizer.last_update[-1].clone())
    contribution = optimizer.dirac_contribution(10.0) / hyper.expected_batch_size
    assert float(releases[0][1]) == pytest.approx(contribution, abs=1e-4)
    assert float(releases[1].abs().max()) < 1e-4  # the noise alone
    assert torch.equal(block, torch.zeros(5))


@pytest.mark.parametrize(
    ("name", "in_place"), [("dpsgd-gc", True), ("dp-psac", True), ("tp-topk", False), ("dp2-sgd", False)]
)
def test_a_block_released_in_its_own_buffer_is_handed_over_and_a_spare_takes_its_place(name, in_place):
    # whole-run canaries keep the release of a block released in place in its sums, with no copy: the optimizer
    # hands it over, a given spare becomes a buffer of its sums (zeroed when its turn comes), and the releases that
    # follow are those of an optimizer that kept its own buffers; a release computed elsewhere is not handed over
    hyper = engine_config(name, sigma_dp=0.5).hyperparameters(20)

    def releases(exchange: bool) -> list[torch.Tensor]:
        made = optim.get_spec(name).cls([torch.zeros(3, 4), torch.zeros(6)], hyper, generator=torch.Generator())
        made.set_audit_block(1)
        made.record_updates = True
        kept = []
        for step in range(4):
            made.accumulate_diracs(coordinates=torch.tensor([step, 5]), magnitude=10.0)
            made.step(realized_batch_size=hyper.expected_batch_size)
            if not exchange:
                kept.append(made.last_update[-1].clone())
                continue
            if in_place and step == 0:
                with pytest.raises(DPAuditError, match="spare buffer"):
                    made.exchange_block_release(torch.zeros(5))
            spare = torch.full((6,), math.nan)  # any contents
            taken = made.exchange_block_release(spare)
            assert (taken is not None) == in_place
            if taken is not None:
                assert taken.data_ptr() == made.last_update[-1].data_ptr()
                assert all(spare.data_ptr() != total.data_ptr() for total in made._sum)  # not the next step's sums
            kept.append(made.last_update[-1].clone() if taken is None else taken)
        return kept

    for mine, theirs in zip(releases(exchange=True), releases(exchange=False)):
        assert torch.equal(mine, theirs)
