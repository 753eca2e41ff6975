"""Random streams derived from a generator's state: how whole-run canaries draw from the model's own randomness
without changing it (``canary_randomness: derived``).

A derived stream is seeded by a hash of the generator's whole state at the moment of the model's draw, so it is a
function of that state alone: a bug that repeats the model's state (a generator re-seeded every step) repeats the
derived stream too, while distinct states give streams as independent as two seeds'. Unlike continuing the
generator and rewinding it, no value of a derived stream is ever drawn by the model later.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def _seed(state: bytes) -> int:
    """A 64-bit seed from the bytes of a generator's state (BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(state, digest_size=8).digest(), "little")


def derived_rng(rng: np.random.Generator) -> np.random.Generator:
    """A numpy generator seeded by ``rng``'s current state (``rng`` itself is not advanced)."""
    return np.random.default_rng(_seed(repr(rng.bit_generator.state).encode()))


def derived_generator(generator: torch.Generator, *, into: torch.Generator | None = None) -> torch.Generator:
    """A torch generator on ``generator``'s device, seeded by its current state (``generator`` is not advanced).

    Args:
        generator: the generator whose state seeds the derived one.
        into: a generator on that device to seed and return (the same stream as a new one's, without making one at
            every step); None: a new one.
    """
    import torch

    seed = _seed(generator.get_state().cpu().numpy().tobytes()) >> 1
    return (torch.Generator(device=generator.device) if into is None else into).manual_seed(seed)
