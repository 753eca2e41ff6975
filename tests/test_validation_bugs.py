"""Auditor validation with whole-run canaries: four bugs that no one-step audit sees, each against its correct twin.

Each bug is a DP-SGD run on digits whose claimed ε (its own ledger's, replayed by the PLD accountant) is false;
its twin is the correct run of the same configuration, ``dpsgd-gc`` with Poisson batches calibrated to the same
ε. A run is *flagged* (``dpaudit.audit.validation_flag``) when one of three lower bounds exceeds the ε it claims:
on Λ, the log likelihood ratio of all iterates, the family bound and the assumption-free one; on the spread of each
canary over the steps, the assumption-free one; and a fourth check, the canaries' presence (as the run's sampler
drew them) against the ledger's sample rates; each at level 0.05/4, so a correct run is flagged with probability
≤ 5 %. For a run that is not the mechanism its ledger describes, a family bound above the claim rejects "at least
as private as the ledger's Poisson-subsampled Gaussian" (what the claim rests on), not the run's own (ε, δ):

* shuffled fixed-size batches accounted as Poisson sampling (what dpaudit's accountants do for every
  ``sampling: shuffle`` run; Chua et al., ICML 2024; Annamalai et al. 2024). The gap is that of the
  amplification by subsampling that Poisson sampling gets and shuffling does not: small at small ε (large
  noise), where both are close to the Gaussian mechanism's composition, and largest at large ε, so it is tested
  at a claimed ε = 32 (z ≈ 0.58, T = 200 steps of q = 0.1), where three seeds are flagged (family bound ≈ 33.5–
  34.8) and their twins are not (≈ 28.3–29.3). At ε ≤ 8 it is not flagged with 10⁴ canaries per side (the bug's
  family bound is 0.5–0.9 of the claim, its twin's 0.5–0.85), at ε = 16 only with 2·10⁴ (16.2 against 16.0);
* ``dpsgd-gc-understated-q``, a ledger that records q/4: flagged at a claimed ε = 4 (the family bound hits its
  grid's cap, the assumption-free bound exceeds 4), the twin not;
* ``dpsgd-gc-reused-noise``, one noise vector added at every step: flagged at a claimed ε = 4 by the spread over
  the steps alone (``dpaudit.whole_run.spread_scores``: 0 for every non-member when the noise is reused, so members
  and non-members separate perfectly), the twin not. Λ and Σ_t x_t are blind to it: they see the reused noise n_j
  of a canary as T copies of one draw, a spread T·z instead of √T·z around the members' shift, so the bug looks
  *more* private to them (their bounds stay below the claim). The spread's bound is capped by the number of
  canaries (perfect separation certifies at most the sample-size ceiling), so at large claimed ε it takes more;
* ``dpsgd-gc-skipped-noise``, no noise at every 20th step (5 % of the steps; the true ε is infinite): the bounds
  stay near the twin's, and the direct check of σ_t at every step (the non-members' sample variance,
  ``RunCanaryObservations.noise_check``) flags it at every claimed ε ∈ {1, 2, 4, 8}, the twin never.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pytest
import torch

from dpaudit import optim
from dpaudit.attacks import canary_run
from dpaudit.attacks.canary_run import load_run_canaries
from dpaudit.audit import validation_flag
from dpaudit.config import TrainConfig
from dpaudit.theory import calibrate_noise
from dpaudit.train import train_configuration

DELTA = 1e-5
PER_SIDE = 10_000
EPOCHS = 20
N, B = 360, 36
STEPS = math.ceil(N / B) * EPOCHS


@lru_cache
def _noise_multiplier(epsilon: float, sample_rate: float) -> float:
    """z of a run of ``STEPS`` steps of ``sample_rate`` whose PRV ε is ``epsilon`` (as ``target_epsilon`` gives it;
    computed once per ε here, since a calibration takes seconds)."""
    return calibrate_noise(target_epsilon=epsilon, delta=DELTA, sample_rate=sample_rate, steps=STEPS, accountant="prv")


def _twin(epsilon: float, *, seed: int = 0) -> TrainConfig:
    """dpsgd-gc, Poisson batches, PRV-calibrated to ``epsilon``: n = 360, b = 36 (q = 0.1), T = 200."""
    return TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="cnn-digits",
            optimizer="dpsgd-gc",
            lr=0.2,
            sampling="poisson",
            batch_size=B,
            epochs=EPOCHS,
            clip_norm=1.0,
            noise_multiplier=_noise_multiplier(epsilon, B / N),
            accountant="prv",
            delta=DELTA,
            target_size=N,
            num_shadows=0,
            diagnostics=False,
            canaries=2 * PER_SIDE,
            canary_design="whole-run",
            seed=seed,
            device="cpu",
        )
    )


def _bug(bug: str, twin: TrainConfig, epsilon: float) -> TrainConfig:
    if bug == "shuffle-as-poisson":
        return twin.replaced(sampling="shuffle")
    if bug == "reused-noise":
        return twin.replaced(optimizer="dpsgd-gc-reused-noise")
    if bug == "skipped-noise":
        return twin.replaced(optimizer="dpsgd-gc-skipped-noise")
    assert bug == "understated-q"
    # calibrated as the buggy code would: to the claimed ε with the q its ledger records
    z = _noise_multiplier(epsilon, B / N / optim.UNDERSTATED_SAMPLE_RATE_FACTOR)
    return twin.replaced(optimizer="dpsgd-gc-understated-q", noise_multiplier=z)


def _three_steps(name: str, *, audit_block: bool) -> tuple[list[list[torch.Tensor]], list[optim.StepCost]]:
    """The releases and costs of three steps of ``name`` with no gradient at all (each release: the noise alone),
    on two parameters and, with ``audit_block``, an audit block of 5 coordinates (noise from the model's generator)."""
    params = [torch.zeros(3, 2), torch.zeros(4)] + ([torch.zeros(5)] if audit_block else [])
    hyper = optim.Hyperparameters(lr=1.0, expected_batch_size=2, dataset_size=10, clip_norm=1.0, sigma_dp=0.3)
    opt = optim.get_spec(name).cls(params, hyper, generator=torch.Generator().manual_seed(7))
    if audit_block:
        opt.set_audit_block(1)
    opt.record_updates = True
    releases, costs = [], []
    for _ in range(3):
        opt.accumulate([torch.zeros(2, 3, 2), torch.zeros(2, 4)])
        costs.append(opt.step(realized_batch_size=2))
        releases.append([update.clone() for update in opt.last_update])  # an audit block's: valid until the next step
    return releases, costs


@pytest.mark.parametrize("audit_block", [False, True])
def test_the_broken_variants_depart_from_dpsgd_gc_in_exactly_one_way_and_claim_nothing(audit_block):
    correct, correct_costs = _three_steps("dpsgd-gc", audit_block=audit_block)
    understated, understated_costs = _three_steps("dpsgd-gc-understated-q", audit_block=audit_block)
    reused, reused_costs = _three_steps("dpsgd-gc-reused-noise", audit_block=audit_block)
    for name in ("dpsgd-gc-understated-q", "dpsgd-gc-reused-noise"):
        assert optim.get_spec(name).dp_claim is False and optim.get_spec(name).cls.takes_dirac_records()
    for step in range(3):
        # understated-q: the same releases, a ledger with q / 4
        for got, want in zip(understated[step], correct[step]):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert understated_costs[step] == correct_costs[step]._replace(sample_rate=0.2 / 4)
        # reused noise: the first step's draw (dpsgd-gc's, audit block included) at every step, the same ledger
        for got, want in zip(reused[step], correct[0]):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert reused_costs[step] == correct_costs[step]
    assert not torch.equal(correct[1][-1], correct[0][-1])  # dpsgd-gc draws afresh, on the block too


_RUNS: dict[TrainConfig, tuple] = {}  # a twin is shared by the bugs of its ε


def _audit(config: TrainConfig, tmp_path_factory):
    """(flag, observations) of ``config``'s run, audited against its own ledger (what it claims: the ledger's PLD ε)
    by the validation rule, ``validation_flag``."""
    if config not in _RUNS:
        out = tmp_path_factory.mktemp("run")
        with pytest.MonkeyPatch.context() as patch:  # the tests read the observations, beyond the size kept by default
            patch.setattr(canary_run, "KEEP_OBSERVATIONS_MAX_VALUES", math.inf)
            train_configuration(config, out_dir=out, progress=False)
        flag = validation_flag(canaries=out, epsilon=None, delta=DELTA, seed=config.seed)
        _RUNS[config] = flag, load_run_canaries(out)
    return _RUNS[config]


def _flagged(flag) -> bool:
    return flag.flagged


def _check_claim(flag, epsilon: float) -> None:
    # the claimed ε (the ledger's, PLD) is the one the run was calibrated to (PRV), within the accountants' slack
    assert flag.epsilon_claimed == pytest.approx(epsilon, rel=0.02)


@pytest.mark.integration
@pytest.mark.parametrize(("bug", "epsilon"), [("shuffle-as-poisson", 32.0), ("understated-q", 4.0)])
def test_a_whole_run_audit_flags_the_bug_and_not_its_twin(bug, epsilon, tmp_path_factory):
    twin = _twin(epsilon)
    bug_flag, observed = _audit(_bug(bug, twin, epsilon), tmp_path_factory)
    twin_flag, _ = _audit(twin, tmp_path_factory)
    _check_claim(bug_flag, epsilon)
    _check_claim(twin_flag, epsilon)
    if bug == "understated-q":
        assert observed.sample_rates[0] == pytest.approx(0.1 / optim.UNDERSTATED_SAMPLE_RATE_FACTOR)
    assert _flagged(bug_flag), bug_flag.summary()
    assert not _flagged(twin_flag), twin_flag.summary()


@pytest.mark.integration
def test_a_whole_run_audit_flags_reused_noise_by_the_spread_over_the_steps(tmp_path_factory):
    twin = _twin(4.0)
    bug_flag, bug = _audit(_bug("reused-noise", twin, 4.0), tmp_path_factory)
    twin_flag, _ = _audit(twin, tmp_path_factory)
    _check_claim(bug_flag, 4.0)
    nonmembers = bug.observations[:, ~bug.members]
    assert np.all(nonmembers == nonmembers[0])  # one draw, at every step
    # so every non-member's spread is 0, up to the rounding of the online float32 sums it is computed from (against
    # T − 1 = 199 for fresh noise)
    assert np.all(bug.spread()[~bug.members] < 1e-3)
    # the bounds on Λ are blind to it; the spread flags it (and the members' shift, whose test assumes noise
    # independent across steps, may reject the claimed mechanism too)
    assert _flagged(bug_flag) and bug_flag.flagged_by[0] == "spread", bug_flag.summary()
    assert not {"all_iterates_family", "all_iterates"} & set(bug_flag.flagged_by), bug_flag.summary()
    assert not _flagged(twin_flag), twin_flag.summary()


@pytest.mark.integration
def test_a_run_that_skips_the_noise_on_five_percent_of_its_steps_is_flagged_at_every_claimed_epsilon(
    tmp_path_factory,
):
    """No noise at every 20th step: the true ε is infinite, yet Λ, the spread and the family bound stay near the
    twin's; the per-step noise check (σ_t from the non-members at every step) flags it at each claimed ε, never the
    twin."""
    for epsilon in (1.0, 2.0, 4.0, 8.0):
        twin = _twin(epsilon)
        bug_flag, bug = _audit(_bug("skipped-noise", twin, epsilon), tmp_path_factory)
        twin_flag, _ = _audit(twin, tmp_path_factory)
        _check_claim(bug_flag, epsilon)
        nonmembers = bug.observations[:, ~bug.members]
        skipped = np.arange(STEPS) % optim.SKIPPED_NOISE_EVERY == optim.SKIPPED_NOISE_EVERY - 1
        assert np.all(nonmembers[skipped] == 0) and np.all(nonmembers[~skipped] != 0)
        assert "step_noise" in bug_flag.flagged_by, bug_flag.summary()
        assert bug_flag.parameter_checks["step_noise"].worst_step == optim.SKIPPED_NOISE_EVERY - 1
        assert not _flagged(twin_flag), twin_flag.summary()


@pytest.mark.slow
def test_the_bugs_over_epsilons_and_seeds_and_the_twins_false_alarms(tmp_path_factory):
    """Each bug where it shows (shuffle-as-poisson at ε = 32, understated-q at every ε) over three seeds, and the
    twins at ε ∈ {1, 2, 4, 8, 32}: at most 5 % of them flagged (rounded up: one of 15)."""
    seeds, epsilons = (0, 1, 2), (1.0, 2.0, 4.0, 8.0, 32.0)
    twins = [_audit(_twin(epsilon, seed=seed), tmp_path_factory)[0] for seed in seeds for epsilon in epsilons]
    false_alarms = sum(_flagged(flag) for flag in twins)
    assert false_alarms <= math.ceil(0.05 * len(twins)), [flag.summary() for flag in twins if _flagged(flag)]
    for seed in seeds:
        assert _flagged(_audit(_bug("shuffle-as-poisson", _twin(32.0, seed=seed), 32.0), tmp_path_factory)[0])
        for epsilon in epsilons:
            assert _flagged(_audit(_bug("understated-q", _twin(epsilon, seed=seed), epsilon), tmp_path_factory)[0])
