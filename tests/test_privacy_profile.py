"""The exact tails of the whole-run statistics, the assumption-free privacy profile, and the direct parameter checks.

Golden values from first principles: the hockey-stick divergence of the tails is the PLD accountant's δ(ε) (an
independent computation, dp_accounting's); one step's tails are Gaussian CDFs in closed form; the final model's are a
binomial mixture of Gaussians. The profile's coverage is measured on exact simulations of the game.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from support import run_canaries

from dpaudit._validation import DPAuditError
from dpaudit.attacks.canary_run import CHECK_CANARIES
from dpaudit.privacy_profile import assumption_free_profile, ledger_threshold, profile_deltas
from dpaudit.theory.score_tails import final_model_tails, likelihood_ratio_tails
from dpaudit.theory.tradeoff import sgm_delta, sgm_epsilon
from dpaudit.whole_run import likelihood_ratio_scores, simulate_observations, simulate_scores


@pytest.mark.parametrize(
    ("z", "q"),
    [
        (np.full(20, 1.0), np.full(20, 0.2)),
        (np.r_[np.full(10, 0.8), np.full(10, 1.5)], np.r_[np.full(10, 0.3), np.ones(10)]),
    ],
)
def test_the_tails_hockey_stick_is_the_pld_accountants_delta(z, q):
    tails = likelihood_ratio_tails(noise_multipliers=z, sample_rates=q)
    for epsilon in (0.5, 1.0, 2.0, 4.0):
        member_side = np.max(tails.member_tail - math.exp(epsilon) * tails.nonmember_tail)
        nonmember_side = np.max((1 - tails.nonmember_tail) - math.exp(epsilon) * (1 - tails.member_tail))
        pld = float(sgm_delta(noise_multipliers=z, sample_rates=q, epsilons=epsilon))
        assert max(member_side, nonmember_side) == pytest.approx(pld, rel=0.01, abs=1e-9)


def test_one_steps_tails_are_gaussian_cdfs():
    z, q = 0.7, 0.3
    tails = likelihood_ratio_tails(noise_multipliers=[z], sample_rates=[q], resolution=1e-4)
    for index in np.linspace(0, tails.thresholds.size - 1, 50).astype(int)[5:-5]:
        tau = tails.thresholds[index]
        if tau <= math.log1p(-q):
            continue
        # ℓ(x) ≥ τ ⇔ x ≥ z²·log((e^τ − (1 − q))/q) + ½ (the bin of τ starts half a bin below it)
        x = z**2 * math.log((math.exp(tau - 5e-5) - (1 - q)) / q) + 0.5
        nonmember = stats.norm.sf(x / z)
        member = (1 - q) * nonmember + q * stats.norm.sf((x - 1) / z)
        assert tails.nonmember_tail[index] == pytest.approx(nonmember, rel=1e-6, abs=1e-12)
        assert tails.member_tail[index] == pytest.approx(member, rel=1e-6, abs=1e-12)


def test_the_final_models_tails_are_a_binomial_mixture_of_gaussians():
    z, q = np.array([0.5, 1.0, 2.0]), np.array([0.1, 0.5, 0.9])
    tails = final_model_tails(noise_multipliers=z, sample_rates=q, points=101)
    std = math.sqrt(np.sum(z**2))
    presences = {  # P(Σ B_t = k), by hand
        0: 0.9 * 0.5 * 0.1,
        1: 0.1 * 0.5 * 0.1 + 0.9 * 0.5 * 0.1 + 0.9 * 0.5 * 0.9,
        2: 0.1 * 0.5 * 0.1 + 0.1 * 0.5 * 0.9 + 0.9 * 0.5 * 0.9,
        3: 0.1 * 0.5 * 0.9,
    }
    for tau, member, nonmember in zip(tails.thresholds, tails.member_tail, tails.nonmember_tail):
        assert nonmember == pytest.approx(stats.norm.sf(tau / std), abs=1e-14)
        assert member == pytest.approx(sum(p * stats.norm.sf((tau - k) / std) for k, p in presences.items()), abs=1e-14)


def test_the_default_deltas_run_from_the_runs_delta_to_one_in_a_hundred():
    assert profile_deltas(1e-5) == pytest.approx([1e-5, 3.16228e-5, 1e-4, 3.16228e-4, 1e-3, 3.16228e-3, 1e-2])
    assert profile_deltas(1e-2) == (1e-2,)
    with pytest.raises(DPAuditError):
        profile_deltas(0.0)


def test_the_threshold_is_fixed_by_the_ledger_and_predicts_what_a_perfect_size_allows():
    ledger = {"noise_multipliers": np.full(20, 1.0), "sample_rates": np.full(20, 0.2)}
    chosen = [
        ledger_threshold(statistic="all-iterates", **ledger, n_members=size, n_nonmembers=size, delta=1e-5)
        for size in (10**3, 10**5, 10**7)
    ]
    # more canaries: a threshold deeper in the tail, and a larger predicted bound, never above the claim
    thresholds, predicted = zip(*chosen)
    assert thresholds[0] < thresholds[2] and predicted[0] < predicted[1] < predicted[2]
    assert predicted[2] < sgm_epsilon(**ledger, delta=1e-5)
    with pytest.raises(DPAuditError, match="statistic"):
        ledger_threshold(statistic="spread", **ledger, n_members=10, n_nonmembers=10, delta=1e-5)


def test_each_profile_points_bound_covers_the_true_epsilon():
    """Exact simulations of the claimed mechanism: each δ' point's 95 % bound lies above the true ε(δ') (the PLD's
    lower estimate, below the truth: a stricter test) in at most 5 % of the repetitions, and the bounds have power."""
    z, q = np.full(20, 1.0), np.full(20, 0.2)
    deltas = (1e-3, 1e-2, 1e-1)
    truth = [sgm_epsilon(noise_multipliers=z, sample_rates=q, delta=d, estimate="lower") for d in deltas]
    above = np.zeros(len(deltas), dtype=int)
    bounds = []
    repetitions = 100
    for seed in range(repetitions):
        scores = simulate_scores(members=2000, nonmembers=2000, noise_multipliers=z, sample_rates=q, seed=seed)
        profile = assumption_free_profile(
            scores.member_lr,
            scores.nonmember_lr,
            statistic="all-iterates",
            noise_multipliers=z,
            sample_rates=q,
            deltas=deltas,
        )
        values = [point.epsilon_lower for point in profile.points]
        above += np.asarray(values) > np.asarray(truth)
        bounds.append(values)
    assert np.all(above <= 0.05 * repetitions), above
    assert np.all(np.mean(bounds, axis=0) > 0.3 * np.asarray(truth))  # not vacuous


def test_the_profile_of_a_run_that_samples_more_than_its_ledger_exceeds_the_claim():
    # the ledger claims q = 0.05 (ε ≈ 0.51); the run samples at 0.4: the ledger's thresholds still certify, above the
    # claim. (A run that departs otherwise, e.g. with a third of the noise, can leave every score below a threshold
    # fixed for the claim: a fixed threshold is valid for any run, but powerful only near the claim.)
    z, q = np.full(20, 2.0), np.full(20, 0.05)
    members, nonmembers = simulate_observations(
        members=20_000, nonmembers=20_000, noise_multipliers=z, sample_rates=8 * q, seed=0
    )
    profile = assumption_free_profile(
        likelihood_ratio_scores(members, noise_multipliers=z, sample_rates=q),
        likelihood_ratio_scores(nonmembers, noise_multipliers=z, sample_rates=q),
        statistic="all-iterates",
        noise_multipliers=z,
        sample_rates=q,
        delta=1e-5,
    )
    assert profile.headline.delta == 1e-5
    assert profile.headline.epsilon_lower > 2 * profile.headline.epsilon_pld
    assert profile.to_dict()["epsilon_lower"][0] == profile.headline.epsilon_lower


def _with_step_sums(members: np.ndarray, nonmembers: np.ndarray, *, z: np.ndarray, q: np.ndarray):
    """``run_canaries`` with the step sums a run records over its first canaries (members first)."""
    observed = run_canaries(members, nonmembers, z=z, q=q)
    x = np.concatenate([members, nonmembers])[:CHECK_CANARIES]  # [covered, T]
    covered = observed.members[:CHECK_CANARIES]
    sums = np.stack([x[covered].sum(0), x[~covered].sum(0), (x[~covered] ** 2).sum(0)], axis=1)
    observed.step_sums = sums
    return observed


def _draw(*, per_side: int, z: np.ndarray, q: np.ndarray, seed: int, noise=1.0, rate=1.0, contribution=1.0):
    rng = np.random.default_rng(seed)
    steps = z.size
    noise = np.broadcast_to(noise, steps)
    present = rng.random((per_side, steps)) < q * rate
    members = contribution * present + rng.normal(size=(per_side, steps)) * z * noise
    nonmembers = rng.normal(size=(per_side, steps)) * z * noise
    return _with_step_sums(members, nonmembers, z=z, q=q)


def test_the_parameter_checks_catch_less_noise_a_skipped_step_more_sampling_and_sensitivity():
    z, q = np.full(200, 1.76), np.full(200, 0.1)
    # a correct run: neither check fires (over seeds, at the level 0.05 / 2 for each)
    for seed in range(10):
        correct = _draw(per_side=300, z=z, q=q, seed=seed)
        assert correct.noise_check().p_value > 0.025 and correct.contribution_check().p_value > 0.025
    # a few hundred canaries catch 15 % less noise, and a step without noise (5 % of the steps)
    less = _draw(per_side=300, z=z, q=q, seed=0, noise=0.85)
    assert less.noise_check().p_value < 1e-6 and less.noise_check().interval[1] < 0.9
    skipped = np.ones(200)
    skipped[19::20] = 0.0
    check = _draw(per_side=300, z=z, q=q, seed=0, noise=skipped).noise_check()
    assert check.p_value == 0.0 and check.worst == 0.0 and check.worst_step == 19
    # 1.5× the sample rate and 1.3× the sensitivity (q·c against q), with more canaries
    for change in ({"rate": 1.5}, {"contribution": 1.3}):
        check = _draw(per_side=20_000, z=z, q=q, seed=0, **change).contribution_check()
        assert check.p_value < 1e-4 and check.interval[0] > 1.1, change
    # more noise and a smaller contribution cost no privacy: not flagged
    assert _draw(per_side=300, z=z, q=q, seed=0, noise=1.2).noise_check().p_value == pytest.approx(1.0)
    assert _draw(per_side=20_000, z=z, q=q, seed=0, contribution=0.5).contribution_check().p_value > 0.99


def test_observations_without_step_sums_have_no_parameter_checks():
    members, nonmembers = simulate_observations(
        members=5, nonmembers=5, noise_multipliers=np.ones(4), sample_rates=np.full(4, 0.5), seed=0
    )
    observed = run_canaries(members, nonmembers, z=np.ones(4), q=np.full(4, 0.5))
    assert observed.noise_check() is None and observed.contribution_check() is None
