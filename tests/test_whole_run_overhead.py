"""``benchmarks/whole_run_overhead.py --phases``: its timers see every part of the loop and change nothing."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from support import digit_members, engine_config, load_file_module

from dpaudit import train
from dpaudit.attacks.canary_run import RunCanaryObservations
from dpaudit.optim.clipping import PrivateOptimizer

OVERHEAD = load_file_module(Path(__file__).parents[1] / "benchmarks" / "whole_run_overhead.py", "whole_run_overhead")


def _trained(out: Path) -> tuple[RunCanaryObservations, float]:
    """The observations of a short whole-run training into ``out``, and its seconds."""
    config = engine_config("dpsgd-gc", canaries=200, canary_design="whole-run", epochs=2)
    started = time.perf_counter()
    train.train_models(
        config=config, members=[replace(digit_members(1)[0], out_dir=out)], test_data=None, progress=False
    )
    return RunCanaryObservations.load(out / "canaries_run.npz"), time.perf_counter() - started


def test_the_phases_timers_time_every_part_of_the_loop_and_change_nothing(tmp_path):
    methods = ("batches", "before_update", "after_update", "end_epoch")
    engine = {name: train._ModelRun.__dict__[name] for name in methods}
    gradient_engine, step_together = train._gradient_engine, PrivateOptimizer.__dict__["step_together"]
    plain, _ = _trained(tmp_path / "plain")
    totals = dict.fromkeys(OVERHEAD.PHASES, 0.0)
    with OVERHEAD._timed_phases(totals):
        timed, seconds = _trained(tmp_path / "timed")
    # every part took some time, and the parts (disjoint) took no longer than the loop that holds them
    assert all(seconds > 0 for seconds in totals.values()), totals
    assert sum(totals.values()) <= seconds
    # the same run: the timers only wrap
    for field in ("members", "observations", "all_iterates_scores", "noise_multipliers", "sampled", "step_sums"):
        np.testing.assert_array_equal(getattr(plain, field), getattr(timed, field))
    # and the engine is as it was
    assert {name: train._ModelRun.__dict__[name] for name in engine} == engine
    assert train._gradient_engine is gradient_engine and PrivateOptimizer.__dict__["step_together"] is step_together


def test_the_ratios_bootstrap_interval_holds_the_ratio_and_narrows_with_quiet_repetitions():
    without = [1.0, 1.2, 0.9, 1.1, 1.0]
    # every repetition adds the same: each resample's medians are those, and the interval is the ratio itself
    steady = OVERHEAD._ratio_interval([t + 0.3 for t in without], [t + 0.2 for t in without], without)
    np.testing.assert_allclose(steady, [1.5, 1.5])
    # noisy repetitions: a wide interval around the ratio of the medians (0.3 / 0.2)
    rng = np.random.default_rng(1)
    without = list(rng.uniform(1.0, 1.5, size=41))
    added = [t + 0.3 + rng.normal(0, 0.2) for t in without]
    floor = [t + 0.2 + rng.normal(0, 0.2) for t in without]
    low, high = OVERHEAD._ratio_interval(added, floor, without)
    assert low < 1.5 < high and high - low > 0.5
