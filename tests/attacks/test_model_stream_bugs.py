"""Whole-run canaries share the run's own sampler and noise generator (``dpaudit.sampling.sample_batches``,
``Optimizer.set_audit_block``): known answers for the shared draws, the presence test against the ledger, and the
planted bugs of ``dpaudit.planted_bugs`` — each touching only the model's stream — flagged, their twin never."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats
from support import run_canaries

from dpaudit import optim
from dpaudit._validation import DPAuditError
from dpaudit.attacks.canary_run import load_run_canaries
from dpaudit.audit import validation_flag
from dpaudit.config import TrainConfig
from dpaudit.planted_bugs import PLANTED_BUGS, planted
from dpaudit.sampling import batch_indices, bernoulli_positions, sample_batches
from dpaudit.train import train_configuration


def _epoch(sampling: str, *, extra: int, joint: bool, seed: int = 3, n: int = 50, b: int = 10):
    rng = np.random.default_rng(seed)
    batches = list(sample_batches(dataset_size=n, batch_size=b, sampling=sampling, rng=rng, extra=extra, joint=joint))
    return batches, rng


def test_poisson_joint_is_one_uniform_per_record_and_canary_in_one_call():
    (batches, _) = _epoch("poisson", extra=7, joint=True)
    uniforms = np.random.default_rng(3).random((5, 57))  # 5 steps of one call over 50 records and 7 canaries
    for (records, extra), row in zip(batches, uniforms):
        np.testing.assert_array_equal(records, np.flatnonzero(row[:50] < 0.2))
        np.testing.assert_array_equal(extra, np.flatnonzero(row[50:] < 0.2))


def _derived(state) -> np.random.Generator:
    """The stream a derived draw uses, by its definition: seeded by BLAKE2b-64 of the state's repr."""
    digest = hashlib.blake2b(repr(state).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def test_derived_leaves_the_records_batches_and_the_stream_as_without_canaries():
    for sampling in ("poisson", "shuffle"):
        with_extra, rng = _epoch(sampling, extra=7, joint=False)
        plain_rng = np.random.default_rng(3)
        plain = list(batch_indices(dataset_size=50, batch_size=10, sampling=sampling, rng=plain_rng))
        for (records, _), want in zip(with_extra, plain, strict=True):
            np.testing.assert_array_equal(records, want)
        assert rng.random() == plain_rng.random()  # untouched: the next epoch's draws are the plain run's too
    # each step's canaries: a stream seeded by the state the records' draw left
    batches, _ = _epoch("poisson", extra=7, joint=False)
    stream = np.random.default_rng(3)
    for records, extra in batches:
        stream.random(50)
        want = bernoulli_positions(_derived(stream.bit_generator.state), count=7, rate=0.2)
        np.testing.assert_array_equal(extra, want)


def test_bernoulli_positions_are_independent_bernoulli_trials():
    """The gaps' draw is the law of one uniform per index compared with q: each index selected with probability q,
    the count Binomial(n, q) (mean n·q, variance n·q(1 − q)), neighbours uncorrelated; q = 1 selects all."""
    rng = np.random.default_rng(0)
    draws = np.zeros((20_000, 40), dtype=bool)
    for row in draws:
        row[bernoulli_positions(rng, count=40, rate=0.3)] = True
    assert np.abs(draws.mean(0) - 0.3).max() < 4 * math.sqrt(0.3 * 0.7 / 20_000)
    counts = draws.sum(1)
    assert abs(counts.mean() - 12) < 0.05 and abs(counts.var() / (40 * 0.3 * 0.7) - 1) < 0.05
    assert abs(np.corrcoef(draws[:, :-1].ravel(), draws[:, 1:].ravel())[0, 1]) < 0.01
    np.testing.assert_array_equal(bernoulli_positions(rng, count=5, rate=1.0), np.arange(5))
    assert bernoulli_positions(rng, count=0, rate=0.5).size == 0


def test_derived_canaries_are_independent_across_canaries_and_steps():
    """No value a derived stream gives is ever drawn again (continuing the records' stream and rewinding it would
    hand each step's canaries the next step's records' uniforms, and canary j + n the value canary j had): the
    presences of 400 canaries over 400 steps at q = 0.2 are independent Bernoulli(q) draws."""
    rng = np.random.default_rng(5)
    presences = np.zeros((400, 400), dtype=bool)
    step = 0
    while step < 400:
        for _, extra in sample_batches(
            dataset_size=50, batch_size=10, sampling="poisson", rng=rng, extra=400, joint=False
        ):
            presences[step, extra] = True
            step += 1
    per_canary = presences.sum(0)  # Binomial(400, 0.2) each, independent
    shifted = np.corrcoef(presences[1:, :-50].ravel(), presences[:-1, 50:].ravel())[0, 1]
    assert abs(shifted) < 0.01  # canary j at step t + 1 against canary j + n at step t: unrelated
    assert stats.binomtest(int(presences.sum()), presences.size, 0.2).pvalue > 1e-3
    assert abs(per_canary.var() / (400 * 0.2 * 0.8) - 1) < 0.25  # no excess variance across canaries


@pytest.mark.parametrize("joint", [True, False])
def test_shuffled_canaries_sit_in_one_batch_per_epoch_with_the_batches_sizes(joint):
    counts = np.zeros(5)
    for seed in range(200):
        batches, _ = _epoch("shuffle", extra=40, joint=joint, seed=seed, n=45, b=10)  # batches 10, 10, 10, 10, 5
        slots = np.concatenate([np.full(len(extra), step) for step, (_, extra) in enumerate(batches)])
        assert sorted(np.concatenate([extra for _, extra in batches]).tolist()) == list(range(40))
        counts += np.bincount(slots, minlength=5)
    expected = 200 * 40 * np.array([10, 10, 10, 10, 5]) / 45
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def _block_release(*, joint: bool, seed: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's release of dpsgd-gc without gradients (the noise alone, σ_DP = 1) on a 6-coordinate model and a
    4-coordinate audit block; and the generator after it."""
    params = [torch.zeros(2, 3), torch.zeros(4)]
    hyper = optim.Hyperparameters(lr=1.0, expected_batch_size=2, dataset_size=10, clip_norm=1.0, sigma_dp=1.0)
    generator = torch.Generator().manual_seed(seed)
    optimizer = optim.get_spec("dpsgd-gc").cls(params, hyper, generator=generator)
    optimizer.set_audit_block(1, joint=joint)
    optimizer.record_updates = True
    optimizer.step(realized_batch_size=2)
    return torch.cat([u.flatten() for u in optimizer.last_update]), generator


def test_the_audit_blocks_noise_is_the_models_generators_draw():
    joint, after_joint = _block_release(joint=True)
    reference = torch.Generator().manual_seed(11)
    torch.testing.assert_close(joint, torch.randn(10, generator=reference), rtol=0, atol=0)  # one call, 10 values
    assert torch.equal(after_joint.get_state(), reference.get_state())
    derived, after = _block_release(joint=False)
    reference = torch.Generator().manual_seed(11)
    model = torch.randn(6, generator=reference)
    digest = hashlib.blake2b(reference.get_state().numpy().tobytes(), digest_size=8).digest()
    block = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
    torch.testing.assert_close(derived, torch.cat([model, torch.randn(4, generator=block)]), rtol=0, atol=0)
    assert torch.equal(after.get_state(), reference.get_state())  # as after the model's draw alone


def test_every_steps_derived_block_noise_is_seeded_by_the_state_the_models_draw_of_that_step_left():
    # the generator the block draws from is reseeded at every step (one generator kept, not one made per step): each
    # step's block noise is still that of a new generator seeded by BLAKE2b-64 of the state after the model's draw
    params = [torch.zeros(2, 3), torch.zeros(4)]
    hyper = optim.Hyperparameters(lr=1.0, expected_batch_size=2, dataset_size=10, clip_norm=1.0, sigma_dp=1.0)
    optimizer = optim.get_spec("dpsgd-gc").cls(params, hyper, generator=torch.Generator().manual_seed(11))
    optimizer.set_audit_block(1)
    optimizer.record_updates = True
    reference = torch.Generator().manual_seed(11)
    for _ in range(3):
        optimizer.step(realized_batch_size=2)
        model = torch.randn(6, generator=reference)
        digest = hashlib.blake2b(reference.get_state().numpy().tobytes(), digest_size=8).digest()
        block = torch.randn(4, generator=torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1))
        released = torch.cat([u.flatten() for u in optimizer.last_update])
        torch.testing.assert_close(released, torch.cat([model, block]), rtol=0, atol=0)


def _observations(sampled: list[int], *, rates: list[float], sampling: str = "poisson", canaries: int = 100):
    """Whole-run canary observations (all zero, half of them members) whose sampler drew ``sampled`` members at the
    steps of ``rates``."""
    zeros = np.zeros((canaries // 2, len(sampled)))
    steps = run_canaries(zeros, zeros, z=np.ones(len(sampled)), q=np.asarray(rates, dtype=float))
    return replace(steps, sampled=np.asarray(sampled), sampling=sampling)


def test_the_presence_test_against_the_ledgers_sample_rates():
    # Poisson, one q: the exact binomial test of Σ_t N_t ~ Binomial(M₁·T, q) over the M₁ = 50 members; 20 of 50·4
    # at q = 0.1 is its mean
    assert _observations([5, 5, 5, 5], rates=[0.1] * 4).presence_p_value() == pytest.approx(1.0)
    low = _observations([2, 3, 2, 3], rates=[0.1] * 4).presence_p_value()  # 10 of 200: half the rate
    assert low == pytest.approx(stats.binomtest(10, 200, 0.1).pvalue) and low < 0.05
    # rates that differ: the normal approximation, mean Σ M₁·q_t = 5 + 10, variance 4.5 + 8
    varying = _observations([5, 10], rates=[0.1, 0.2]).presence_p_value()
    assert varying == pytest.approx(1.0)
    off = _observations([0, 10], rates=[0.1, 0.2]).presence_p_value()
    assert off == pytest.approx(2 * stats.norm.sf(5 / math.sqrt(4.5 + 8)))
    # shuffled batches of b = 10 of n = 45 (q = 2/9): ceil(4.5) = 5 steps per epoch, each member once an epoch
    shuffled = dict(rates=[10 / 45] * 10, sampling="shuffle")
    assert _observations([10, 10, 10, 10, 10] * 2, **shuffled).presence_p_value() == 1.0
    assert _observations([10, 10, 10, 10, 5] * 2, **shuffled).presence_p_value() == 0.0
    assert _observations([10] * 3, rates=[10 / 45] * 3, sampling="shuffle").presence_p_value() is None  # mid-epoch


def _config(randomness: str, *, epsilon: float = 2.0, per_side: int = 2000, **changes) -> TrainConfig:
    return TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="cnn-digits",
            optimizer="dpsgd-gc",
            lr=0.2,
            batch_size=36,
            epochs=3,
            clip_norm=1.0,
            target_epsilon=epsilon,
            delta=1e-5,
            target_size=360,
            num_shadows=0,
            diagnostics=False,
            canaries=2 * per_side,
            canary_design="whole-run",
            canary_randomness=randomness,
            device="cpu",
        )
        | changes
    )


def _flag(config: TrainConfig, out: Path):
    train_configuration(config, out_dir=out, progress=False)
    return validation_flag(canaries=load_run_canaries(out), epsilon=None, delta=1e-5)


# which check must see each bug: re-seeded noise repeats every canary's noise (the spread), noise over b leaks
# (every bound), the half-rate sampler is more private than claimed but draws the canaries at q/2 (the presence)
SEEN_BY = {"reseeded-noise": "spread", "noise-over-batch": "all_iterates", "half-rate-sampler": "presence"}


@pytest.mark.parametrize("randomness", ["joint", "derived"])
def test_every_planted_bug_in_the_models_stream_is_flagged_and_its_twin_never(randomness, tmp_path):
    assert set(SEEN_BY) == set(PLANTED_BUGS)
    config = _config(randomness)
    twin = _flag(config, tmp_path / "twin")
    assert not twin.flagged, twin.summary()
    assert twin.presence_p_value is not None and twin.presence_p_value > 0.01
    for bug, check in SEEN_BY.items():
        with planted(bug):
            flag = _flag(config, tmp_path / bug)
        assert flag.flagged and check in flag.flagged_by, f"{bug}: {flag.summary()}"


PAPERS_SETTINGS = {  # the papers' methods, each with its own whole-run canary design (the default preset's settings)
    "tp-topk": {"lr": 0.2, "active_ratio": 0.4, "warmup_fraction": 0.3, "warmup_budget_fraction": 0.3},
    "adadpigu": {"lr": 0.1, "retention_ratio": 0.6},
    "d2p2-sgd": {"lr": 0.005, "gamma": 0.01, "reduction_rate": 0.3, "projection_refresh": "run"},
}


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(PAPERS_SETTINGS))
def test_the_planted_bugs_reach_the_papers_own_noise_code_and_are_flagged(name, tmp_path):
    """The planted bugs in the noise code every private optimizer draws from, and the sampler, on TP-TopK (per-tensor
    draws on a support), AdaDPIGU (a mask and standardisation) and D2P2-SGD (projected draws, dynamic noise): each
    flagged by the check that sees it, the correct twin not."""
    config = _config("derived", optimizer=name, **PAPERS_SETTINGS[name])
    twin = _flag(config, tmp_path / "twin")
    assert not twin.flagged, twin.summary()
    for bug, check in SEEN_BY.items():
        with planted(bug):
            flag = _flag(config, tmp_path / bug)
        assert flag.flagged and check in flag.flagged_by, f"{name}, {bug}: {flag.summary()}"


def test_a_planted_bug_is_gone_after_its_block_and_names_are_checked():
    from dpaudit import sampling
    from dpaudit.optim import PrivateOptimizer

    before = (PrivateOptimizer._draw_noise, sampling.poisson_rate)
    for bug in PLANTED_BUGS:
        with planted(bug):
            assert (PrivateOptimizer._draw_noise, sampling.poisson_rate) != before
    assert (PrivateOptimizer._draw_noise, sampling.poisson_rate) == before
    with pytest.raises(DPAuditError, match="planted bug"), planted("no-such-bug"):
        pass


def test_canary_randomness_is_checked_before_training():
    with pytest.raises(
        DPAuditError, match=r"^canary_randomness 'joint' is read by whole-run canaries only .*'derived'$"
    ):
        _config("joint", canary_design="dirac", canaries=10).validated()
    with pytest.raises(DPAuditError, match="canary_randomness"):
        _config("sometimes").validated()
