"""Bugs planted in the engine's own sampling and noise, to check that an audit sees what really ran.

Each bug touches only the model's stream — the engine's sampler of the records, or the optimizer's noise — the way
a bug in training code would, and claims the same ε as the correct run (the ledger is not touched). Whole-run
canaries whose presence and noise are drawn by the run's own sampler and generator (``dpaudit.attacks.canary_run``)
see each of them; canaries drawing from streams of their own saw none. ``benchmarks/model_stream_bugs.py`` measures
which are flagged, ``tests/attacks/test_model_stream_bugs.py`` checks it on small runs.

* ``reseeded-noise``: the noise generator is re-seeded before every draw, so every step adds the same noise
  (no privacy after the first step);
* ``noise-over-batch``: the noise is divided by the expected batch size b once more (σ_DP/b instead of σ_DP);
* ``half-rate-sampler``: Poisson sampling draws each record at q/2 while the ledger records q = b/n (the run is
  more private than it claims, but it is not the run the ledger describes).

The two noise bugs are planted where every private optimizer draws its noise (``PrivateOptimizer._draw_noise``),
so that they reach each optimizer's own noise code: DP-SGD's one draw per step, the per-tensor draws of the
supports and masks (TP-TopK, AdaDPIGU) and the projected draws of DP2-SGD and D2P2-SGD.

A bug is planted for the duration of a ``with planted(name):`` block, in this process only (it patches classes
and functions; not thread-safe). None of them is a variant anyone should train with: they exist to be caught.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from dpaudit._validation import check_choice

PLANTED_BUGS = ("reseeded-noise", "noise-over-batch", "half-rate-sampler")


def _reseeded_noise(original: Callable[..., Any]) -> Callable[..., Any]:
    def draw_noise(self: Any, out: Any) -> Any:
        self.generator.manual_seed(self.generator.initial_seed())  # the bug: the same state before every draw
        return original(self, out)

    return draw_noise


def _noise_over_batch(original: Callable[..., Any]) -> Callable[..., Any]:
    def draw_noise(self: Any, out: Any) -> Any:
        return original(self, out).div_(self.hyper.expected_batch_size)  # the bug: σ_DP divided by b once more

    return draw_noise


def _half_rate_sampler(original: Callable[..., float]) -> Callable[..., float]:
    def poisson_rate(*, dataset_size: int, batch_size: int) -> float:
        return original(dataset_size=dataset_size, batch_size=batch_size) / 2  # the bug: q/2

    return poisson_rate


@contextlib.contextmanager
def planted(bug: str) -> Iterator[None]:
    """Plant ``bug`` (one of :data:`PLANTED_BUGS`) in the engine for the duration of the block."""
    check_choice("planted bug", bug, PLANTED_BUGS)
    from dpaudit import sampling
    from dpaudit.optim import PrivateOptimizer

    owner, name, patch = {
        "reseeded-noise": (PrivateOptimizer, "_draw_noise", _reseeded_noise),
        "noise-over-batch": (PrivateOptimizer, "_draw_noise", _noise_over_batch),
        "half-rate-sampler": (sampling, "poisson_rate", _half_rate_sampler),
    }[bug]
    original = getattr(owner, name)
    setattr(owner, name, patch(original))
    try:
        yield
    finally:
        setattr(owner, name, original)
