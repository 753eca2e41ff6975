"""Whole-run Dirac canaries (``dpaudit.attacks.canary_run``): Dirac records through the optimizer's own per-sample
weighting (known answers against the dense per-sample gradients), the real model untouched, sampling like a
record, the observation model, resume, the refused optimizers and the two registered attacks."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from support import assert_same_results, digit_members, engine_config, interrupt_at_save, train_into

from dpaudit import optim
from dpaudit._validation import DPAuditError
from dpaudit.attacks import ATTACKS, canary_run
from dpaudit.attacks.canary_run import RunCanaries, RunCanaryObservations
from dpaudit.cli import main
from dpaudit.config import TrainConfig
from dpaudit.estimate.roc import auc
from dpaudit.train import Member, train_configuration, train_models
from dpaudit.whole_run import family_lower_bound, final_model_scores, likelihood_ratio_scores, spread_scores

SUPPORTED = [
    "adadpigu",
    "adadpigu-code",
    "adadpigu-freeze",
    "auto-s",
    "auto-v",
    "d2p-sgd",
    "d2p2-sgd",
    "d2p2-sgd-as-published",
    "dp-psac",
    "dp-psac-batch-noise",
    "dp2-sgd",
    "dp2-sgd-as-published",
    "dpsgd-auto",
    "dpsgd-dc",
    "dpsgd-gc",
    "dpsgd-gc-reused-noise",
    "dpsgd-gc-skipped-noise",
    "dpsgd-gc-understated-q",
    "dpsgd-no-clip",
    "dpsgd-no-noise",
    "nsgd",
    "on-rand",
    "on-topk",
    "tp-rand",
    "tp-topk",
    "tp-topk-clean-support",
]
REFUSED = sorted(set(optim.available()) - set(SUPPORTED))
# the authors' order of the projection pair: a canary is a record on a tensor of its own, not a Dirac (test below)
DIRAC = [name for name in SUPPORTED if not name.endswith("-as-published")]
SHAPES = [(3, 4), (4,)]  # a small "model"; the audit block is a last parameter of M coordinates
M = 40


def test_the_supported_optimizers_weight_each_record_by_a_function_of_its_norm():
    assert sorted(name for name in optim.available() if optim.get_spec(name).cls.takes_dirac_records()) == SUPPORTED


def _optimizer(name: str) -> optim.Optimizer:
    params = [torch.zeros(shape) for shape in SHAPES] + [torch.zeros(M)]
    hyper = engine_config(name).hyperparameters(60)
    made = optim.get_spec(name).cls(params, hyper, generator=torch.Generator().manual_seed(0))
    if made.takes_dirac_records():
        made.set_audit_block(1)  # the last parameter (a projection optimizer holds it in its projected space)
    return made


def _records(count: int, *, seed: int) -> list[torch.Tensor]:
    """Per-sample gradients of real records (norms on both sides of C = 1), zero on the audit block."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-1.5, 1.5, count)
    grads = [torch.randn((count, *shape), generator=generator) for shape in SHAPES]
    grads = [g * scales.view(-1, *[1] * (g.dim() - 1)) / 3 for g in grads]
    return grads + [torch.zeros(count, M)]


def _diracs(coordinates: torch.Tensor, magnitude: float) -> list[torch.Tensor]:
    """The dense [k, *] per-sample gradients of Dirac records: ``magnitude`` at one block coordinate each."""
    block = torch.zeros(len(coordinates), M)
    block[torch.arange(len(coordinates)), coordinates] = magnitude
    return [torch.zeros((len(coordinates), *shape)) for shape in SHAPES] + [block]


@pytest.mark.parametrize("name", DIRAC)
@pytest.mark.parametrize("magnitude", [1e3, 0.3, 7.25])  # far above C, below it, a few times it
def test_accumulate_diracs_is_accumulate_of_the_dense_gradients(name, magnitude):
    coordinates = torch.tensor([3, 17, 0, 39, 22])
    dense, sparse = _optimizer(name), _optimizer(name)
    records = _records(6, seed=1)
    # separate chunks: the records (with the block's zeros), then the canaries
    dense.accumulate(records)
    dense.accumulate(_diracs(coordinates, magnitude))
    sparse.accumulate(records[:-1])  # the records as the engine gives them: no gradient for the block
    sparse.accumulate_diracs(coordinates=coordinates, magnitude=magnitude)
    assert all(torch.equal(a, b) for a, b in zip(dense._sum, sparse._sum))
    contribution = sparse.dirac_contribution(magnitude)
    assert torch.equal(sparse._sum[-1][coordinates], torch.full((5,), contribution))
    assert float(torch.count_nonzero(sparse._sum[-1])) == 5
    if name == "dp-psac-batch-noise":  # the canaries count as records: their clipped norm, the realised batch
        assert sparse._largest == dense._largest and sparse._dirac_records == 5
    # one chunk mixing records and canaries (the same step): as the two chunks, up to summation order
    mixed = _optimizer(name)
    mixed.accumulate([torch.cat([r, d]) for r, d in zip(records, _diracs(coordinates, magnitude))])
    for a, b in zip(mixed._sum, sparse._sum):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert torch.equal(mixed._sum[-1], sparse._sum[-1])


def test_an_adadpigu_canary_designed_against_the_public_statistics_is_a_dirac_after_standardisation():
    """AdaDPIGU's main phase: a canary record whose gradient is α on the model's coordinates (zero once standardised
    by the public α and √β + μ) and K at its block coordinate (the block's α = 0, √β + μ = 1) adds, through the dense
    standardisation, per-record top-k and clipping, exactly what ``accumulate_diracs`` adds; the real records' sums
    are those of an optimizer without the block."""
    dense, sparse = _optimizer("adadpigu"), _optimizer("adadpigu")
    plain = optim.get_spec("adadpigu").cls(
        [torch.zeros(shape) for shape in SHAPES], dense.hyper, generator=torch.Generator().manual_seed(0)
    )
    for optimizer in (dense, sparse, plain):
        optimizer._importance = [
            torch.rand(p.shape, generator=torch.Generator().manual_seed(p.numel())) for p in optimizer.params
        ]
        optimizer._choose_mask()
        for alpha, beta in zip(optimizer.alpha, optimizer.beta):
            alpha.copy_(torch.randn(alpha.shape, generator=torch.Generator().manual_seed(alpha.numel())))
            beta.copy_(torch.rand(beta.shape, generator=torch.Generator().manual_seed(beta.numel())) + 0.1)
    for optimizer in (dense, sparse):  # the block's statistics are not read
        optimizer.alpha[-1].fill_(7.0)
        optimizer.beta[-1].fill_(9.0)
    assert 0 < sum(float(m.sum()) for m in dense.mask[:-1]) < dense.dimension and float(dense.mask[-1].min()) == 1
    records = _records(12, seed=4)
    coordinates = torch.tensor([0, 7, 39])
    designed = [alpha.expand(3, *alpha.shape).clone() for alpha in dense.alpha[:-1]]
    block = torch.zeros(3, M)
    block[torch.arange(3), coordinates] = 1e3
    dense.accumulate(records)
    dense.accumulate(designed + [block])
    sparse.accumulate(records[:-1])
    sparse.accumulate_diracs(coordinates=coordinates, magnitude=1e3)
    plain.accumulate(records[:-1])
    for a, b in zip(dense._sum, sparse._sum):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(sparse._sum, plain._sum))
    contribution = sparse.dirac_contribution(1e3)
    assert contribution == pytest.approx(1.0, rel=1e-6)
    assert torch.equal(sparse._sum[-1][coordinates], torch.full((3,), contribution))


@pytest.mark.parametrize("name", ["dp2-sgd-as-published", "d2p2-sgd-as-published"])
def test_in_the_authors_order_a_canarys_own_tensor_stretches_it_by_its_matrix(name):
    """The authors' order on a tensor of AUDIT_TENSOR_SIZE entries (the variant's own accumulate and step): a record
    K·u, u the direction Aᵀ stretches most, is clipped to φ(K)·K·u and then projected, moving the release by
    φ(K)·K·s_max(A)/√p (first principles: ‖Aᵀu‖ = s_max for the top left singular vector). The block's gains are
    that factor for matrices of the same shape: their rms is at least √(d/p) (E s_max² ≥ E‖A‖²_F/p = d) and their
    mean at most (√d + √p)/√p (Gordon: E s_max ≤ √d + √p)."""
    from dpaudit.optim.projection import AUDIT_TENSOR_SIZE

    hyper = engine_config(name, sigma_dp=1e-12, lr=1.0).hyperparameters(60)
    alone = optim.get_spec(name).cls(
        [torch.zeros(AUDIT_TENSOR_SIZE, dtype=torch.float64)], hyper, generator=torch.Generator().manual_seed(0)
    )
    a = alone.matrices()[0]
    p = a.shape[1]
    left, singular, _ = torch.linalg.svd(a, full_matrices=False)
    magnitude = 1e3
    alone.accumulate([magnitude * left[:, 0][None]])
    alone.step(realized_batch_size=1)
    released = torch.linalg.lstsq(a, -alone.params[0][:, None] * hyper.expected_batch_size).solution.flatten()
    contribution = alone.dirac_contribution(magnitude)
    assert float(released.norm()) == pytest.approx(contribution * float(singular[0]) / math.sqrt(p), rel=1e-6)
    gains = _optimizer(name).audit_gains()
    assert gains.shape == (M,) and bool((gains > 1).all())
    assert float(gains.square().mean().sqrt()) >= math.sqrt(AUDIT_TENSOR_SIZE / p) * 0.9  # M = 40 draws
    assert float(gains.mean()) <= (math.sqrt(AUDIT_TENSOR_SIZE) + math.sqrt(p)) / math.sqrt(p)
    dense = _optimizer(name)
    dense.accumulate_diracs(coordinates=torch.tensor([3, 9]), magnitude=magnitude)
    expected = torch.zeros(M)
    expected[[3, 9]] = gains[[3, 9]] * contribution
    torch.testing.assert_close(dense._sum[-1], expected)


@pytest.mark.parametrize("name", REFUSED)
def test_other_optimizers_take_no_diracs_and_keep_no_audit_block(name):
    optimizer = _optimizer(name)
    with pytest.raises(DPAuditError, match="does not take Dirac records"):
        optimizer.accumulate_diracs(coordinates=torch.tensor([1]), magnitude=1e3)
    with pytest.raises(DPAuditError, match="cannot keep an audit block"):
        optimizer.set_audit_block(1)


@pytest.mark.parametrize("name", REFUSED)
def test_the_design_is_refused_for_other_optimizers_before_training(name):
    with pytest.raises(DPAuditError, match="canary_design 'whole-run' supports the optimizers that clip") as error:
        engine_config(name, canaries=100, canary_design="whole-run")
    message = str(error.value)
    assert "\n" not in message and f"; {name} " in message and "is not supported yet" in message
    assert f"({', '.join(SUPPORTED)})" in message


def test_too_few_whole_run_canaries_are_refused_before_training():
    with pytest.raises(DPAuditError, match=r"^canary_design 'whole-run' needs at least 10 canaries .*; got 3$"):
        engine_config("dpsgd-gc", canaries=3, canary_design="whole-run")


@pytest.mark.parametrize(
    "name, engine, changes",
    [
        ("dpsgd-gc", "ensemble", {}),
        ("dpsgd-gc", "sequential", {}),
        ("dpsgd-dc", "ensemble", {}),  # the domain's projection ignores the canary block
        ("d2p-sgd", "ensemble", {"momentum": 0.5}),  # dynamic noise, momentum
        ("auto-v", "sequential", {"sampling": "shuffle"}),
        ("d2p2-sgd", "ensemble", {}),  # the model's projections and noise as without the block
        ("dp2-sgd", "sequential", {"momentum": 0.5}),
        ("tp-topk", "ensemble", {}),  # the model's support (ranked without the block), noise and updates
        ("on-rand", "sequential", {"momentum": 0.5}),
        ("adadpigu", "ensemble", {}),  # the model's mask, standardisation, top-k, noise and updates
    ],
)
def test_the_models_train_bit_identically_with_or_without_whole_run_canaries(name, engine, changes, device):
    """With ``canary_randomness: derived`` the target (and a shadow trained beside it) get the same records, noise
    and updates: the canaries draw from generators derived from the model's, and the records' gradients are not
    touched. On CUDA (a generator's state is a seed and an offset there) the kernels need not sum in one order from
    run to run, so the parameters agree to rounding; another noise stream would move them by about lr·σ_DP per step,
    far outside the tolerance."""
    plain = train_models(
        config=engine_config(name, engine=engine, device=device, **changes),
        members=digit_members(2),
        test_data=None,
        progress=False,
    )
    config = engine_config(
        name,
        engine=engine,
        device=device,
        canaries=300,
        canary_design="whole-run",
        canary_randomness="derived",
        **changes,
    )
    audited = train_models(config=config, members=digit_members(2), test_data=None, progress=False)
    for a, b in zip(plain, audited):
        assert a.ledger.to_dict() == b.ledger.to_dict()
        if device == "cpu":
            assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
            assert a.metrics.train_loss == b.metrics.train_loss
        else:
            for p, q in zip(a.model.parameters(), b.model.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def _observed(tmp_path, name: str, **changes) -> RunCanaryObservations:
    config = engine_config(name, canaries=500, canary_design="whole-run", epochs=4, **changes)
    member = replace(digit_members(1)[0], out_dir=tmp_path / "target")
    train_models(config=config, members=[member], test_data=None, progress=False)
    return RunCanaryObservations.load(tmp_path / "target" / "canaries_run.npz")


def test_without_noise_the_observations_are_the_poisson_presences(tmp_path, device):
    observed = _observed(tmp_path, "dpsgd-no-noise", device=device)
    x = observed.observations
    assert x.shape == (16, 500) and x.dtype == np.float32 and observed.members.dtype == bool
    assert np.all(x[:, ~observed.members] == 0)  # a non-member never joins
    presences = x[:, observed.members]
    np.testing.assert_allclose(presences, np.round(presences), atol=1e-5)  # a present canary adds exactly 1
    assert set(np.round(presences).ravel().tolist()) == {0.0, 1.0}
    q = 15 / 60
    trials = presences.size
    assert abs(presences.mean() - q) < 4 * np.sqrt(q * (1 - q) / trials)
    assert np.all(observed.sample_rates == q) and np.all(observed.noise_multipliers == 0.02 * 15)
    assert observed.contribution == 1.0 and observed.magnitude == 1e3 and observed.batch_size == 15
    np.testing.assert_allclose(observed.noise_std, observed.noise_multipliers)  # σ_t = z_t·C/c with c = C
    assert abs(observed.members.mean() - 0.5) < 4 * np.sqrt(0.25 / 500)


def test_with_shuffled_batches_a_member_is_in_one_batch_per_epoch(tmp_path):
    observed = _observed(tmp_path, "dpsgd-no-noise", sampling="shuffle")
    per_epoch = observed.observations.reshape(4, 4, 500).sum(1)  # 4 epochs of ceil(60/15) = 4 steps
    np.testing.assert_allclose(per_epoch[:, observed.members], 1.0, atol=1e-5)
    assert np.all(per_epoch[:, ~observed.members] == 0)
    batches = np.argmax(observed.observations.reshape(4, 4, 500), axis=1)[:, observed.members]
    assert len(set(batches.ravel().tolist())) == 4  # every batch of the epoch gets members


def test_the_normalisation_follows_the_optimizers_weight(tmp_path):
    observed = _observed(tmp_path, "auto-s", r=0.5, sigma_dp=1e-6)
    c = 1e3 / (1e3 + 0.5)  # Auto-S: φ(K)·K = C·K/(K + r)
    assert observed.contribution == pytest.approx(c, rel=1e-6)
    np.testing.assert_allclose(observed.noise_std, observed.noise_multipliers / c)
    members = observed.observations[:, observed.members]
    np.testing.assert_allclose(members, np.round(members), atol=1e-3)  # a present canary still adds 1


@pytest.mark.parametrize("name", ["dp2-sgd", "d2p2-sgd"])
def test_projection_canaries_are_one_gaussian_trial_per_step_in_the_projected_space(tmp_path, name):
    """DP2-SGD and D2P2-SGD (the DP order): a present canary adds exactly 1 in the projected space (its weight
    φ(K)·K = C·K/(K + γ) normalised away), a non-member 0; with noise, the non-members' observations have the
    step's std σ_t = z_t·C/c, D2P2-SGD's z_t decaying as its ledger says."""
    quiet = _observed(tmp_path / "quiet", name, sigma_dp=1e-6)
    gamma = engine_config(name).hyperparameters(60).settings.gamma
    assert quiet.contribution == pytest.approx(1e3 / (1e3 + gamma), rel=1e-6)
    members = quiet.observations[:, quiet.members]
    np.testing.assert_allclose(members, np.round(members), atol=1e-3)
    assert np.abs(quiet.observations[:, ~quiet.members]).max() < 1e-3 and members.sum() > 0
    noisy = _observed(tmp_path / "noisy", name)
    standardised = noisy.observations[:, ~noisy.members] / noisy.noise_std[:, None]
    assert abs(float(np.mean(standardised**2)) - 1.0) < 0.1  # about 4,000 values: the variance's sd is 2 %
    if name == "d2p2-sgd":
        assert noisy.noise_multipliers[-1] < noisy.noise_multipliers[0]


def test_the_authors_order_shows_its_stretch_and_is_flagged_where_its_dp_order_twin_is_not(tmp_path):
    """DP2-SGD in the authors' order, its whole-run canaries on tensors of their own (one matrix each, fixed for the
    run): without noise a member's observation at each step it is in is its own κ_j > 1 (not the 1 of the DP
    order); with noise calibrated to ε = 2, the validation rule flags the run, and not its DP-order twin."""
    from dpaudit.audit import validation_flag

    quiet = _observed(tmp_path / "quiet", "dp2-sgd-as-published", sigma_dp=1e-6, projection_refresh="run")
    members = quiet.observations[:, quiet.members]
    present = np.abs(members) > 1e-3
    assert np.abs(quiet.observations[:, ~quiet.members]).max() < 1e-3 and present.any()
    assert members[present].min() > 1.0 and members[present].max() < 5.0
    gains = np.where(present, members, np.nan)  # each canary's one κ_j at every step it is in
    assert np.nanmax(np.abs(gains - np.nanmean(gains, 0)), initial=0.0) < 1e-3
    flags = {}
    for name in ("dp2-sgd-as-published", "dp2-sgd"):
        config = engine_config(
            name, canaries=4000, canary_design="whole-run", epochs=4, sigma_dp=None, target_epsilon=2.0, delta=1e-5
        )
        out = tmp_path / name
        train_models(config=config, members=[replace(digit_members(1)[0], out_dir=out)], test_data=None, progress=False)
        observed = RunCanaryObservations.load(out / "canaries_run.npz")
        flags[name] = validation_flag(canaries=observed, epsilon=None, delta=1e-5)
    assert flags["dp2-sgd-as-published"].flagged and not flags["dp2-sgd"].flagged


@pytest.mark.parametrize("bug, twin", [("tp-topk-clean-support", "tp-topk"), ("adadpigu-code", "adadpigu")])
def test_a_support_ranked_on_clean_gradients_is_flagged_by_ranked_canaries_and_its_twin_is_not(tmp_path, bug, twin):
    """``canary_support: ranked``: the canary block ranked by the optimizer's own score among itself. A support
    chosen from the warm-up's un-noised gradients keeps the canaries that were in its batches and freezes the others
    (their releases are exactly 0 after it), and the validation rule flags the run at ε = 2; the correct twin, whose
    support is a post-processing of released values, is not flagged."""
    from dpaudit.audit import validation_flag

    flags = {}
    for name in (bug, twin):
        extra = {"warmup_sigma_dp": None} if name.startswith("tp-") else {}
        config = engine_config(
            name,
            canaries=4000,
            canary_design="whole-run",
            canary_support="ranked",
            epochs=4,
            sigma_dp=None,
            target_epsilon=2.0,
            delta=1e-5,
            **extra,
        )
        out = tmp_path / name
        train_models(config=config, members=[replace(digit_members(1)[0], out_dir=out)], test_data=None, progress=False)
        observed = RunCanaryObservations.load(out / "canaries_run.npz")
        frozen = np.all(observed.observations[-4:] == 0, axis=0)  # the last epoch: after the support is chosen
        assert 0.3 < frozen.mean() < 0.8  # about 1 − ρ of the block (ρ = 0.5 / 0.6 of the defaults) is frozen
        flags[name] = validation_flag(canaries=observed, epsilon=None, delta=1e-5)
    assert flags[bug].flagged and not flags[twin].flagged


def test_a_ranked_support_keeps_the_top_share_of_the_block_by_the_models_score():
    """The block's part of the support under ``audit_ranked``: the ⌊ρ·M⌋ coordinates of the largest warm-up score,
    ranked among themselves; without it, the whole block."""
    for ranked in (False, True):
        optimizer = _optimizer("tp-topk")
        optimizer.audit_ranked = ranked
        score = torch.randperm(M).double()
        optimizer._squares[-1].copy_(score)
        optimizer._choose_support()
        kept = optimizer.mask[-1].bool()
        ratio = optimizer.hyper.settings.active_ratio
        if ranked:
            assert int(kept.sum()) == math.floor(ratio * M) and bool((score[kept].min() > score[~kept].max()))
        else:
            assert bool(kept.all())
        assert int(optimizer.support_mask().sum()) == math.floor(ratio * optimizer.dimension)


@pytest.mark.parametrize(
    "name, changes",
    [("on-topk", {"canary_design": "whole-run"}), ("dpsgd-gc", {"canary_design": "whole-run"}), ("tp-topk", {})],
)
def test_ranked_canaries_are_refused_where_no_support_is_learned_once_or_no_whole_run_canaries(name, changes):
    with pytest.raises(DPAuditError, match="canary_support 'ranked' is read by whole-run canaries") as error:
        engine_config(name, canaries=100, canary_support="ranked", **changes)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["tp-topk", "on-topk", "adadpigu"])
def test_support_canaries_are_released_at_every_step_with_each_phases_noise(tmp_path, name):
    """TP-TopK, ON-TopK and AdaDPIGU: the canary block stays in the support (left out of the ranking, and of
    AdaDPIGU's standardisation), so a present canary adds exactly 1 at every step, warm-up (pre-training) and sparse
    phase alike, a non-member 0; with noise, the non-members' observations have each step's std σ_t = z_t·C/c
    (TP-TopK: σ_1 in the warm-up, σ_2 after)."""
    quiet = _observed(tmp_path / "quiet", name, sigma_dp=1e-6, warmup_sigma_dp=1e-6)
    members = quiet.observations[:, quiet.members]
    np.testing.assert_allclose(members, np.round(members), atol=1e-3)
    assert np.abs(quiet.observations[:, ~quiet.members]).max() < 1e-3
    assert members[-4:].sum() > 0  # the last epoch, on a support of ρ·d of the model's coordinates
    noisy = _observed(tmp_path / "noisy", name, **({"warmup_sigma_dp": 0.04} if name == "tp-topk" else {}))
    standardised = noisy.observations[:, ~noisy.members] / noisy.noise_std[:, None]
    assert abs(float(np.mean(standardised**2)) - 1.0) < 0.1
    if name == "tp-topk":
        assert len(set(noisy.noise_multipliers.tolist())) == 2  # the warm-up's z and the sparse phase's


@pytest.fixture(scope="session")  # session: built at most once per xdist worker
def digits_run(tmp_path_factory):
    """DP-SGD on digits (n = 360, b = 36, 2 epochs, z = 0.8), with and without 2,000 whole-run canaries."""
    values = dict(
        dataset="digits",
        model="cnn-digits",
        optimizer="dpsgd-gc",
        epochs=2,
        batch_size=36,
        target_size=360,
        num_shadows=0,
        clip_norm=1.0,
        noise_multiplier=0.8,
        lr=0.2,
        diagnostics=False,
    )
    root = tmp_path_factory.mktemp("digits")
    train_configuration(TrainConfig.from_dict(values), out_dir=root / "plain", progress=False)
    for name, seed in (("canaries", 0), ("canaries_seed1", 1)):  # two independent runs of one configuration
        config = TrainConfig.from_dict(
            dict(**values, canaries=2000, canary_design="whole-run", canary_randomness="derived", seed=seed)
        )
        train_configuration(config, out_dir=root / name, progress=False)
    return root


def test_the_real_model_is_bit_identical_with_whole_run_canaries(digits_run):
    plain, audited = digits_run / "plain" / "target", digits_run / "canaries" / "target"
    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in (plain, audited)]
    for key in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "steps"):
        assert metrics[0][key] == metrics[1][key]
    assert (plain / "ledger.json").read_bytes() == (audited / "ledger.json").read_bytes()
    weights = [torch.load(folder / "epoch_0002.pt", weights_only=True) for folder in (plain, audited)]
    weights = [w.get("state_dict", w) for w in weights]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0] if torch.is_tensor(weights[0][key]))
    assert not (plain / "canaries_run.npz").exists() and (audited / "canaries_run.npz").is_file()


def test_member_canaries_score_higher_on_a_dpsgd_run(digits_run):
    observed = RunCanaryObservations.load(digits_run / "canaries" / "target" / "canaries_run.npz")
    assert observed.observations.shape == (20, 2000)
    assert np.allclose(observed.noise_multipliers, 0.8) and np.allclose(observed.sample_rates, 0.1)
    sidecar = json.loads((digits_run / "canaries" / "target" / "canaries_run.json").read_text())
    assert sidecar["design"] == "whole-run" and sidecar["canaries"] == 2000 and sidecar["sampling"] == "poisson"
    # the observation model: non-members are the noise alone, N(0, σ²) with σ = z = 0.8
    outside = observed.observations[:, ~observed.members]
    assert abs(outside.mean()) < 5 * 0.8 / np.sqrt(outside.size)
    assert outside.std() == pytest.approx(0.8, rel=0.03)
    members, nonmembers = observed.scores("all")
    # the statistics summed online during training are those of the kept observations, up to the float32 rounding
    # of each step's terms (dpaudit._online: ≲ 1e-7 of each term's size, here ≲ 10, over T = 20 steps)
    ours = likelihood_ratio_scores(
        observed.observations.T, noise_multipliers=observed.noise_std, sample_rates=observed.sample_rates
    )
    np.testing.assert_allclose(
        np.concatenate([members, nonmembers]),
        np.concatenate([ours[observed.members], ours[~observed.members]]),
        rtol=1e-6,
        atol=2e-5,
    )
    assert auc(members, nonmembers) > 0.65
    final = observed.scores("final")
    sums = final_model_scores(observed.observations.T)
    np.testing.assert_allclose(final[0], sums[observed.members], rtol=1e-6, atol=2e-5)
    np.testing.assert_allclose(final[1], sums[~observed.members], rtol=1e-6, atol=2e-5)
    assert auc(*final) > 0.6
    # the spread over the steps from the sums summed online: that of the kept observations; a non-member's is
    # χ² with T − 1 = 19 degrees of freedom (fresh noise at every step)
    spread = observed.scores("spread")
    ours = spread_scores(observations=observed.observations.T, noise_std=observed.noise_std)
    np.testing.assert_allclose(spread[0], ours[observed.members], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(spread[1], ours[~observed.members], rtol=1e-5, atol=2e-5)
    assert abs(spread[1].mean() - 19) < 5 * np.sqrt(2 * 19 / spread[1].size)


def test_the_parameter_checks_per_step_sums_are_those_of_the_kept_observations(digits_run):
    observed = RunCanaryObservations.load(digits_run / "canaries" / "target" / "canaries_run.npz")
    assert observed.step_sums is not None and observed.step_sums.shape == (20, 3)
    _assert_float32_sums_of_the_kept_observations(observed)


@pytest.mark.gpu
def test_on_cuda_the_parameter_checks_per_step_sums_are_those_of_the_kept_observations(tmp_path, cuda_without_tf32):
    # torch.mv and torch.dot into views of the block's buffers on the device
    observed = _observed(tmp_path, "dpsgd-gc", device="cuda", sigma_dp=0.05)
    assert observed.step_sums is not None and observed.step_sums.shape == (16, 3)
    _assert_float32_sums_of_the_kept_observations(observed)


def _assert_float32_sums_of_the_kept_observations(observed: RunCanaryObservations) -> None:
    """Per step, over the first CHECK_CANARIES canaries: the members' Σ x, the non-members' Σ x and Σ x², summed in the
    released values' float32 and scaled in float64: float64 sums of the kept observations up to float32 summation,
    whose error is at most a few ulps of the sum of the terms' magnitudes (n·2⁻²⁴·Σ|term| bounds it)."""
    exact, magnitudes = _kept_step_sums(observed), _kept_step_sums(observed, absolute=True)
    terms = min(observed.members.size, canary_run.CHECK_CANARIES)
    assert np.all(np.abs(observed.step_sums - exact) <= terms * 2.0**-24 * magnitudes)
    # at float64's precision they would be equal to 1e-12: float32's rounding shows, so the sums are float32's
    assert not np.allclose(observed.step_sums, exact, rtol=1e-12, atol=0)


def _kept_step_sums(observed: RunCanaryObservations, *, absolute: bool = False) -> np.ndarray:
    """[T, 3] float64 sums of the kept observations over the first CHECK_CANARIES canaries: the members' Σ x, the
    non-members' Σ x and Σ x² (of |x| where ``absolute``)."""
    x = observed.observations.astype(np.float64)[:, : canary_run.CHECK_CANARIES]
    x = np.abs(x) if absolute else x
    covered = observed.members[: canary_run.CHECK_CANARIES]
    return np.stack([x[:, covered].sum(1), x[:, ~covered].sum(1), (x[:, ~covered] ** 2).sum(1)], axis=1)


def test_a_large_run_keeps_only_the_statistics_and_old_files_still_load(tmp_path, monkeypatch):
    kept = _observed(tmp_path / "kept", "dpsgd-gc", sigma_dp=0.05)
    assert kept.observations.shape == (16, 500)  # T·M = 8,000 values: kept by default
    monkeypatch.setattr(canary_run, "KEEP_OBSERVATIONS_MAX_VALUES", 16 * 500 - 1)
    large = _observed(tmp_path / "large", "dpsgd-gc", sigma_dp=0.05)
    assert large.observations is None and large.steps == 16
    path = tmp_path / "large" / "target" / "canaries_run.npz"
    with np.load(path) as data:
        assert "observations" not in data.files and data["all_iterates_scores"].shape == (500,)
    assert json.loads(path.with_suffix(".json").read_text())["observations_kept"] is False
    # the same run: the same statistics, bit for bit, whether the observations were kept or not
    for statistic in ("all", "final", "spread"):
        for ours, theirs in zip(large.scores(statistic), kept.scores(statistic)):
            assert ours.dtype == np.float64
            np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(large.members, kept.members)
    np.testing.assert_array_equal(large.noise_std, kept.noise_std)
    # a file written before the statistics were stored: observations only, the statistics recomputed
    old = tmp_path / "old.npz"
    names = ("members", "observations", "noise_multipliers", "sample_rates", "noise_std")
    with np.load(tmp_path / "kept" / "target" / "canaries_run.npz") as data:
        np.savez(old, **{name: data[name] for name in names})
    old.with_suffix(".json").write_text((tmp_path / "kept" / "target" / "canaries_run.json").read_text())
    loaded = RunCanaryObservations.load(old)
    np.testing.assert_array_equal(loaded.observations, kept.observations)
    for statistic in ("all", "final", "spread"):  # recomputed in float64; online in float32 steps (dpaudit._online)
        for ours, theirs in zip(loaded.scores(statistic), kept.scores(statistic)):
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=2e-5)
    # a file written before the spread's sums were stored, without observations: Λ and Σ_t x_t, no spread
    names = ("members", "noise_multipliers", "sample_rates", "noise_std", "all_iterates_scores", "final_model_scores")
    with np.load(path) as data:
        np.savez(old, **{name: data[name] for name in names})
    loaded = RunCanaryObservations.load(old)
    assert loaded.standardised_sum is None and loaded.standardised_sum_of_squares is None
    np.testing.assert_array_equal(loaded.scores("all")[0], large.scores("all")[0])
    with pytest.raises(DPAuditError, match="no spread sums .*retrain"):
        loaded.scores("spread")


def test_without_noise_the_final_statistic_counts_the_presences_and_zero_noise_has_no_ratio(tmp_path, monkeypatch):
    monkeypatch.setattr(canary_run, "KEEP_OBSERVATIONS_MAX_VALUES", 0)
    observed = _observed(tmp_path, "dpsgd-no-noise")
    assert observed.observations is None
    members, nonmembers = observed.scores("final")  # Σ_t x_t: each member's number of presences
    np.testing.assert_allclose(members, np.round(members), atol=1e-4)
    assert np.all(nonmembers == 0) and 0.15 < members.mean() / 16 < 0.35  # q = 1/4
    silent = replace(observed, noise_std=np.zeros(16), all_iterates_scores=np.full(500, np.nan))
    with pytest.raises(DPAuditError):
        silent.scores("all")  # σ_t = 0: no likelihood ratio
    np.testing.assert_array_equal(silent.scores("final")[0], members)


def _family_of(found, **options):
    """The family bound the audit command computes on an attack's scores, against the observations' ledger."""
    ledger = {"noise_multipliers": found.ledger["noise_std"], "sample_rates": found.ledger["sample_rates"]}
    return family_lower_bound(found.members, found.nonmembers, **ledger, delta=1e-5, **options)


@pytest.mark.integration
def test_the_registered_attacks_audit_the_run(digits_run, capsys):
    run = digits_run / "canaries"
    planned = json.loads((run / "config.json").read_text())["derived"]["planned_epsilon"]
    for name in ("canary-run", "canary-final", "canary-spread"):
        assert ATTACKS[name].whole_run and ATTACKS[name].claim_key == "epsilon_run"
        found = ATTACKS[name].scores(run, epoch=None, delta=1e-5)
        assert found.epsilon_run == planned and found.epsilon_mechanism is None and found.audited_steps == 20
        assert len(found.members) + len(found.nonmembers) == 2000
    out = digits_run / "audits"
    assert (
        main(["audit", "--run", str(run), "--attack", "canary-run", "canary-final", "--out-dir", str(out), "--no-plot"])
        == 0
    )
    for name in ("canary-run", "canary-final"):
        report = json.loads((out / f"audit_{name}.json").read_text())
        assert report["attack"] == name and report["epoch"] is None and report["epsilon_run"] == planned
        assert report["report"]["n_members"] + report["report"]["n_nonmembers"] == 2000
        # beside the assumption-free bound: the family bound on the same scores and halves, and the ledger's claims
        family = _family_of(ATTACKS[name].scores(run, epoch=None, delta=1e-5))
        assert report["whole_run"]["family"]["epsilon"] == family.epsilon
        assert report["whole_run"]["family"]["threshold"] == family.threshold
        claims = report["whole_run"]
        assert claims["epsilon_pld"] <= claims["epsilon_rdp"] == pytest.approx(planned, rel=1e-3)
        assert (claims["epsilon_last_iterate"] is None) == (name == "canary-run")
    with pytest.raises(DPAuditError, match="no whole-run canary observations at .*canaries_run.npz"):
        ATTACKS["canary-run"].scores(digits_run / "plain", epoch=None, delta=1e-5)


def test_a_second_run_chooses_the_family_threshold_and_every_canary_certifies(digits_run, capsys):
    run, other, out = digits_run / "canaries", digits_run / "canaries_seed1", digits_run / "two_runs.json"
    command = ["audit", "--run", str(run), "--attack", "canary-run", "--no-plot", "--out", str(out)]
    assert main([*command, "--selection-run", str(other)]) == 0
    family = json.loads(out.read_text())["whole_run"]["family"]
    certified, chosen = (ATTACKS["canary-run"].scores(path, epoch=None, delta=1e-5) for path in (run, other))
    assert (family["n_members"], family["n_nonmembers"]) == (certified.members.size, certified.nonmembers.size)
    expected = _family_of(certified, selection=(chosen.members, chosen.nonmembers))
    assert family["epsilon"] == expected.epsilon and family["threshold"] == expected.threshold
    capsys.readouterr()
    assert main(["audit", "--run", str(run), "--attack", "loss", "--selection-run", str(other)]) == 2
    assert "canary-run and canary-final only, not loss" in capsys.readouterr().err
    assert main([*command, "--selection-run", str(run)]) == 2
    assert "runs other than --run" in capsys.readouterr().err
    record = run / "target" / "canaries_run.npz"
    assert main(["audit", "--canary-record", str(record), "--selection-run", str(other)]) == 2
    assert "--selection-run goes with --run" in capsys.readouterr().err


@pytest.mark.integration
def test_the_ledger_chooses_the_family_threshold_and_every_canary_certifies(digits_run, capsys):
    run, other, out = digits_run / "canaries", digits_run / "canaries_seed1", digits_run / "ledger.json"
    command = ["audit", "--run", str(run), "--attack", "canary-final", "--no-plot", "--out", str(out)]
    assert main([*command, "--family-selection", "ledger"]) == 0
    claims = json.loads(out.read_text())["whole_run"]
    certified = ATTACKS["canary-final"].scores(run, epoch=None, delta=1e-5)
    expected = _family_of(certified, selection="ledger", statistic="final-model")
    assert claims["family"]["epsilon"] == expected.epsilon and claims["family"]["threshold"] == expected.threshold
    assert claims["family"]["n_members"] == certified.members.size and "ledger claims" in claims["family_selection"]
    capsys.readouterr()
    for extra, message in (
        (["--selection-run", str(other)], "--selection-run or --family-selection ledger, not both"),
        (["--attack", "loss"], "canary-run and canary-final only, not loss"),
    ):
        assert main([*command, "--family-selection", "ledger", *extra]) == 2
        assert message in capsys.readouterr().err
    record = run / "target" / "canaries_run.npz"
    assert (
        main(["audit", "--canary-record", str(record), "--family-selection", "ledger", "--no-plot", "--out", str(out)])
        == 0
    )
    family = json.loads(out.read_text())["whole_run"]["final_model_family"]
    assert family["epsilon"] == expected.epsilon and family["n_members"] == certified.members.size
    # two runs of one configuration: both runs' canaries certify the threshold the ledger chose
    assert main(["audit", "--run", str(run), str(other), *command[3:], "--family-selection", "ledger"]) == 0
    pooled = json.loads(out.read_text())["whole_run"]["family"]
    second = ATTACKS["canary-final"].scores(other, epoch=None, delta=1e-5)
    both = _family_of(
        replace(
            certified,
            members=np.concatenate([certified.members, second.members]),
            nonmembers=np.concatenate([certified.nonmembers, second.nonmembers]),
        ),
        selection="ledger",
        statistic="final-model",
    )
    assert pooled["n_members"] == certified.members.size + second.members.size
    assert pooled["epsilon"] == both.epsilon and pooled["threshold"] == both.threshold


@pytest.mark.parametrize(
    ("name", "sampling", "keep", "changes"),
    [
        ("dpsgd-gc", "poisson", True, {}),
        ("dpsgd-gc", "shuffle", True, {}),
        ("dpsgd-gc", "poisson", False, {}),
        ("d2p2-sgd-as-published", "poisson", True, {}),  # the canaries' own matrices: redrawn from the seed
        ("adadpigu", "poisson", True, {"canary_support": "ranked"}),  # the block's part of the mask: in the state
    ],
)
def test_whole_run_canaries_resume_bit_identically(name, sampling, keep, changes, tmp_path, monkeypatch):
    if not keep:  # the statistics alone, summed online: in the training state
        monkeypatch.setattr(canary_run, "KEEP_OBSERVATIONS_MAX_VALUES", 0)
    config = engine_config(name, canaries=50, canary_design="whole-run", momentum=0.5, sampling=sampling, **changes)
    train_into(tmp_path / "whole", config)
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=2, model_index=0)
        with pytest.raises(KeyboardInterrupt):
            train_into(tmp_path / "cut", config)
    train_into(tmp_path / "cut", config)
    assert (tmp_path / "whole" / "m0" / "canaries_run.npz").is_file()
    assert (RunCanaryObservations.load(tmp_path / "whole" / "m0" / "canaries_run.npz").observations is None) != keep
    assert_same_results(tmp_path / "whole", tmp_path / "cut")


@pytest.mark.parametrize("name", ["dpsgd-gc", "tp-topk", "dp2-sgd"])
def test_steps_summed_together_give_the_files_of_steps_summed_one_by_one(name, tmp_path, monkeypatch):
    """The released blocks wait (an epoch of 4 steps, or 3 steps: a sum in the middle of an epoch) and are summed
    together: every file is the one of summing each step as it is released (``WAITING_BYTES`` = 0). DP-SGD's blocks
    wait in the buffers they were released in (``exchange_block_release``); TP-TopK's and DP2-SGD's, released from a
    masked or a projected space, as copies."""
    config = engine_config(name, canaries=50, canary_design="whole-run", momentum=0.5)
    for label, waiting in (("one_by_one", 0), ("three", 3 * 50 * 4), ("epoch", canary_run.WAITING_BYTES)):
        monkeypatch.setattr(canary_run, "WAITING_BYTES", waiting)
        train_into(tmp_path / label, config)
    observed = RunCanaryObservations.load(tmp_path / "epoch" / "m0" / "canaries_run.npz")
    assert observed.observations is not None and observed.observations.shape == (12, 50)
    assert len(np.unique(observed.observations, axis=0)) == 12  # each step's own release
    assert_same_results(tmp_path / "one_by_one", tmp_path / "three")
    assert_same_results(tmp_path / "one_by_one", tmp_path / "epoch")


def test_no_canaries_is_no_observer_and_the_cli_trains_the_design(tmp_path):
    member = Member(train_data=digit_members(1)[0].train_data, model_index=0, out_dir=tmp_path / "none")
    train_models(
        config=engine_config("dpsgd-gc", canary_design="whole-run"), members=[member], test_data=None, progress=False
    )
    assert not (tmp_path / "none" / "canaries_run.npz").exists()
    flags = "--dataset digits --model mlp --epochs 1 --batch-size 30 --target-size 120 --num-shadows 0"
    flags += " --sigma-dp 0.02 --clip-norm 1"
    out = tmp_path / "cli"
    assert (
        main(
            ["train", *flags.split(), "--canaries", "64", "--canary-design", "whole-run", "--out", str(out), "--quiet"]
        )
        == 0
    )
    assert RunCanaryObservations.load(out / "target" / "canaries_run.npz").observations.shape == (4, 64)
    assert (
        main(
            [
                "train",
                *flags.split(),
                "--optimizer",
                "on-topk",
                "--canaries",
                "64",
                "--canary-design",
                "whole-run",
                "--canary-support",
                "ranked",
                "--out",
                str(tmp_path / "refused"),
                "--quiet",
            ]
        )
        == 2
    )


def test_the_observer_needs_its_block_last():
    canaries = RunCanaries(count=4, clip_norm=1.0, seed=0, sampling="poisson", device="cpu", dtype=torch.float32)
    optimizer = optim.get_spec("dpsgd-gc").cls(
        [canaries.parameter, torch.zeros(3)], engine_config("dpsgd-gc").hyperparameters(60), generator=torch.Generator()
    )
    with pytest.raises(DPAuditError, match="last parameter"):
        canaries.attach(optimizer)


@pytest.mark.parametrize("q", [0.1, 0.999])
def test_step_terms_with_and_without_a_capped_exponent_agree_bit_for_bit(q):
    # step_log_ratio skips the exponent cap's correction where no (x − ½)/σ² exceeds the cap: the entries of a block
    # that needs it (one huge x) must equal, bit for bit, those of the same block without it; both near numpy's
    # logaddexp, and the huge entry's term is log q + (x − ½)/σ² (its log 1 − q part is e^-1000 smaller)
    from dpaudit.whole_run import step_log_ratio

    x = np.random.default_rng(5).normal(size=4099) * 30  # (x − ½)/σ² ≤ 700: the uncapped branch
    capped = x.copy()
    capped[0] = 0.5 + 1000 * 1.3**2
    ours = step_log_ratio(torch.from_numpy(x), 1.3, q)
    theirs = step_log_ratio(torch.from_numpy(capped), 1.3, q)
    assert torch.equal(ours[1:], theirs[1:])
    assert float(theirs[0]) == pytest.approx(np.log(q) + 1000, rel=1e-14)
    np.testing.assert_allclose(ours.numpy(), step_log_ratio(x, 1.3, q), rtol=1e-13, atol=1e-13)
