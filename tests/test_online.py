"""The online sums of the whole-run statistics (``dpaudit._online``) against their float64 definitions."""

import math

import numpy as np
import pytest
import torch

from dpaudit._online import PARTIAL_STEPS, OnlineSums
from dpaudit.whole_run import final_model_scores, likelihood_ratio_scores


def _run(noised: np.ndarray, *, contributions, noise_stds, rates, dtype=torch.float32) -> np.ndarray:
    sums = OnlineSums(noised.shape[1], device="cpu", dtype=dtype)
    for step, values in enumerate(noised):
        sums.add(
            torch.from_numpy(values).to(dtype),
            contribution=contributions[step],
            noise_std=noise_stds[step],
            rate=rates[step],
        )
    return sums.result()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_online_sums_are_the_statistics_of_the_observations(dtype):
    # 40 steps (more than two partial sums), σ changing at step 25 and q = 1 at step 30 (the torch branch); x = B + N
    rng = np.random.default_rng(0)
    steps, count = 40, 3000
    sigma = np.where(np.arange(steps) < 25, 1.3, 0.7)
    rates = np.where(np.arange(steps) == 30, 1.0, 0.1)
    members = rng.random(count) < 0.5
    x = (rng.random((steps, count)) < rates[:, None]) * members + rng.normal(size=(steps, count)) * sigma[:, None]
    contribution = 0.25  # noised = c·x, its noise std c·σ
    x = (contribution * x).astype(np.float32 if dtype == torch.float32 else np.float64) / contribution
    stds = contribution * sigma
    totals = _run(contribution * x, contributions=[contribution] * steps, noise_stds=stds, rates=rates, dtype=dtype)
    observations = x.astype(np.float64).T
    expected = [
        likelihood_ratio_scores(observations, noise_multipliers=sigma, sample_rates=rates),
        final_model_scores(observations),
        (observations / sigma).sum(axis=1),
        (observations**2 / sigma**2).sum(axis=1),
    ]
    # float32 steps: each term within ~1e-7 of its size (≲ 30 here), over 40 steps; float64: to rounding
    tolerance = 1e-4 if dtype == torch.float32 else 1e-10
    for ours, theirs in zip(totals, expected):
        np.testing.assert_allclose(ours, theirs, rtol=tolerance, atol=tolerance)


def test_an_exponent_beyond_float32_falls_back_to_float64_and_without_noise_only_the_sum_is_defined():
    # a value whose (x − ½)/σ² is 200: e^200 overflows float32, so that step's terms are float64 (log q + 199.5…)
    values = np.array([[0.5 + 200 * 0.01, 0.0]])
    totals = _run(values, contributions=[1.0], noise_stds=[0.1], rates=[0.3])
    assert totals[0][0] == pytest.approx(math.log(0.3) + 200, rel=1e-9)
    assert totals[0][1] == pytest.approx(math.log(0.7 + 0.3 * math.exp(-50)), rel=1e-6)
    # the torch branch (here q = 1) caps the exponent in place of a fallback: log(e^min(u, 80)) + max(u − 80, 0) = u
    full = _run(values, contributions=[1.0], noise_stds=[0.1], rates=[1.0])
    np.testing.assert_allclose(full[0], [200.0, -50.0], rtol=1e-6)
    without_noise = _run(values, contributions=[1.0], noise_stds=[0.0], rates=[0.3])
    assert np.isnan(without_noise[[0, 2, 3]]).all()
    np.testing.assert_allclose(without_noise[1], values[0], rtol=1e-7)


def test_a_partial_sum_ends_where_its_contribution_or_noise_changes():
    # steps alternating between two contributions with the same noised std: each step's x = noised/c, σ = std/c
    steps = PARTIAL_STEPS + 3
    contributions = [1.0 if step % 2 else 2.0 for step in range(steps)]
    noised = np.full((steps, 1), 0.5, dtype=np.float32)
    totals = _run(noised, contributions=contributions, noise_stds=[0.5] * steps, rates=[0.2] * steps)
    x = 0.5 / np.array(contributions)
    sigma = 0.5 / np.array(contributions)
    assert totals[1][0] == pytest.approx(x.sum(), rel=1e-6)
    assert totals[2][0] == pytest.approx((x / sigma).sum(), rel=1e-6)
    assert totals[3][0] == pytest.approx((x**2 / sigma**2).sum(), rel=1e-6)


def test_reading_the_sums_midway_changes_nothing():
    # a result read after any step (the engine's periodic writes) leaves the partial sums as they were: the final sums
    # are bit for bit those of a run read only at its end
    rng = np.random.default_rng(1)
    noised = rng.normal(size=(40, 500)).astype(np.float32)
    once, often = (OnlineSums(500, device="cpu", dtype=torch.float32) for _ in range(2))
    for values in noised:
        for sums in (once, often):
            sums.add(torch.from_numpy(values), contribution=0.5, noise_std=0.4, rate=0.1)
        often.result()
    np.testing.assert_array_equal(once.result(), often.result())


def test_a_contribution_that_moves_by_rounding_keeps_its_partial_sum():
    # Opacus's c of a canary row is recomputed at every step and moves by an ulp: the partial sum goes on (a flush at
    # every step would cost four float64 passes), and Σx still divides each step by its own c
    c = [-1.0, float(np.nextafter(-1.0, 0.0))] * 5
    noised = np.full((10, 3), 0.25, dtype=np.float32)
    sums = OnlineSums(3, device="cpu", dtype=torch.float32)
    for step, values in enumerate(noised):
        sums.add(torch.from_numpy(values), contribution=c[step], noise_std=0.5, rate=0.1)
    assert sums._steps == 10
    np.testing.assert_allclose(sums.result()[1], (0.25 / np.array(c)).sum(), rtol=1e-7)
