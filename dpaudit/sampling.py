"""The engine's sampler: one epoch's batches of a run's records, and of the extra records an audit adds.

Whole-run canaries (``dpaudit.attacks.canary_run``) are extra records of the run: :func:`sample_batches` draws them
with the model's records, from the same stream and by the same rule (:func:`poisson_rate` for Poisson sampling), so
that a bug in the sampling of the records is one in theirs. Only numpy is needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from dpaudit._streams import derived_rng


def steps_per_epoch(*, dataset_size: int, batch_size: int) -> int:
    """ceil(n / b): the steps of one epoch, for both sampling schemes (T = ceil(n/b)·E)."""
    return math.ceil(dataset_size / batch_size)


def poisson_rate(*, dataset_size: int, batch_size: int) -> float:
    """q = b/n: the probability with which Poisson sampling puts each record (and each whole-run canary) in a
    step's batch."""
    return batch_size / dataset_size


def sample_batches(
    *,
    dataset_size: int,
    batch_size: int,
    sampling: str,
    rng: np.random.Generator,
    extra: int = 0,
    joint: bool = False,
) -> Iterator[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]:
    """Yield one epoch's batches, each as (record indices, indices of the extra records in it).

    Extra records (the whole-run canaries, ``dpaudit.attacks.canary_run``) are drawn by the records' own draw, from
    the same ``rng`` by the same rule, so that a bug in the sampling of the records is one in theirs:

    * ``poisson``: every record and every extra record joins each step independently with probability
      q = b/n (:func:`poisson_rate`): one uniform each, all compared with the same q (the extra records of a derived
      draw by the gaps between those selected, :func:`bernoulli_positions`: the same law, fewer draws);
    * ``shuffle``: a permutation of the n records cut into ceil(n/b) batches; each extra record sits in one batch
      of the epoch, batch s with probability |batch s|/n, as a record of the permutation does.

    Args:
        dataset_size, batch_size: n and b.
        sampling: "poisson" or "shuffle".
        rng: the run's sampling stream.
        extra: how many extra records (0: the records alone, as without them).
        joint: draw the extra records' uniforms (or batches) in one call with the records'; False: draw them from
            a stream derived from the state ``rng`` is in after the records' draw (``dpaudit._streams``), so that
            the records' batches are those of a run without extra records, bit for bit.
    """
    steps = steps_per_epoch(dataset_size=dataset_size, batch_size=batch_size)
    none = np.zeros(0, dtype=np.intp)
    if sampling == "shuffle":
        order = rng.permutation(dataset_size)
        slots = _shuffle_slots(rng if joint else derived_rng(rng), extra, dataset_size, batch_size)
        for step in range(steps):
            yield order[step * batch_size : (step + 1) * batch_size], slots[step] if extra else none
        return
    rate = poisson_rate(dataset_size=dataset_size, batch_size=batch_size)
    if not extra:
        for _ in range(steps):
            yield np.flatnonzero(rng.random(dataset_size) < rate), none
    elif joint:  # one call: the records' uniforms, then the extra records'
        for _ in range(steps):
            drawn = rng.random(dataset_size + extra) < rate
            yield np.flatnonzero(drawn[:dataset_size]), np.flatnonzero(drawn[dataset_size:])
    else:  # the records' draw, then the extra records' from a stream derived from the state it left; the whole
        # epoch before its first batch (the same values: the stream is the sampler's alone), so that the draws run
        # one after the other, not each after the model's work has evicted their code and data from the caches
        batches = []
        for _ in range(steps):
            records = np.flatnonzero(rng.random(dataset_size) < rate)
            batches.append((records, bernoulli_positions(derived_rng(rng), count=extra, rate=rate)))
        yield from batches


def bernoulli_positions(rng: np.random.Generator, *, count: int, rate: float) -> npt.NDArray[np.intp]:
    """The indices in [0, count) that independent Bernoulli(rate) trials select, drawn by their gaps: the gap from one
    selected index to the next is Geometric(rate), so this is the same law as ``flatnonzero(random(count) < rate)``
    with about count·rate draws instead of count (the whole-run canaries' draw at 10⁷ members and q = 0.1: about a
    third less time)."""
    if rate >= 1.0:
        return np.arange(count, dtype=np.intp)
    expected = count * rate
    chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
    positions = np.cumsum(rng.geometric(rate, size=chunk)) - 1
    while positions[-1] < count:  # rarely: more gaps until past the end
        more = np.cumsum(rng.geometric(rate, size=chunk)) + positions[-1]
        positions = np.concatenate([positions, more])
    return positions[: np.searchsorted(positions, count)].astype(np.intp)


def _shuffle_slots(rng: np.random.Generator, extra: int, dataset_size: int, batch_size: int) -> list[np.ndarray]:
    """Per step of a shuffled epoch, the extra records in its batch: each in batch s with probability |s|/n."""
    if not extra:
        return []
    steps = steps_per_epoch(dataset_size=dataset_size, batch_size=batch_size)
    sizes = np.full(steps, batch_size, dtype=float)
    sizes[-1] = dataset_size - (steps - 1) * batch_size
    slots = rng.choice(steps, size=extra, p=sizes / dataset_size)
    order = np.argsort(slots, kind="stable")
    bounds = np.searchsorted(slots[order], np.arange(steps + 1))
    return [order[bounds[step] : bounds[step + 1]] for step in range(steps)]


def batch_indices(*, dataset_size: int, batch_size: int, sampling: str, rng: np.random.Generator):
    """Yield the record indices of one epoch's batches (:func:`sample_batches` without extra records)."""
    for records, _ in sample_batches(dataset_size=dataset_size, batch_size=batch_size, sampling=sampling, rng=rng):
        yield records
