"""White-box gradient canaries (Nasr et al. 2023): an audit of the optimizer itself.

m canary coordinates live in one extra parameter tensor that no loss touches, so real records have a
zero gradient there. At every step each canary j is inserted into the batch independently with
probability ½ (bit b_tj) as one more record whose per-sample gradient is a Dirac ``norm_factor``·C·e_j;
it goes through the optimizer's own clipping, weighting, masking, projection and noise. The adversary
sees every released update u_t (all-updates white-box threat model) and scores trial (t, j) by u_tj.

For DP-SGD, u_tj = b_tj·C/b + N(0, σ_DP²) independently over (t, j): each trial is one Gaussian
mechanism with sensitivity C and noise multiplier z_t (no subsampling: the canary is in the batch
whenever its bit is 1), i.e. exactly (1/z_t)-GDP. So the ε this audit can certify is that of one such
step at the smallest z of the run — "the mechanism the canary faces" — not the run's composed ε.

The canary tensor is one of the optimizer's coordinates: sparse optimizers rank and mask it like the
model's (k = ⌊ρ(d + m)⌋), so a frozen canary coordinate releases nothing (its trials are uninformative).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import numpy as np
import torch

from dpaudit._io import atomic_write_bytes, read_json, write_json
from dpaudit._validation import DPAuditError


@dataclass
class CanaryObservations:
    """Bits and released canary coordinates of one training run.

    Attributes:
        bits: [T, m] 1 where canary j was in step t's batch.
        observations: [T, m] the released update at canary coordinate j in step t.
        noise_multipliers: [T] z_t of each step (from the optimizer's ledger entries).
        clip_norm: C.
    """

    bits: np.ndarray
    observations: np.ndarray
    noise_multipliers: np.ndarray
    clip_norm: float

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(member scores, non-member scores): observations with bit 1 and with bit 0."""
        flat_bits = self.bits.astype(bool).ravel()
        flat = self.observations.ravel()
        return flat[flat_bits], flat[~flat_bits]

    def mechanism_epsilon(self, *, delta: float) -> float:
        """ε at δ of one Gaussian step at the smallest z of the run (the mechanism each trial faces)."""
        from dpaudit.estimate import gdp_epsilon

        z = float(np.min(self.noise_multipliers))
        return float("inf") if z <= 0 else gdp_epsilon(mu=1.0 / z, delta=delta)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        write_json(path.with_suffix(".json"), {"clip_norm": self.clip_norm, "steps": int(self.bits.shape[0]),
                                               "canaries": int(self.bits.shape[1]),
                                               "smallest_noise_multiplier": float(np.min(self.noise_multipliers))})
        buffer = _npz_bytes(bits=self.bits.astype(np.uint8), observations=self.observations,
                            noise_multipliers=self.noise_multipliers)
        return atomic_write_bytes(path, buffer)

    @classmethod
    def load(cls, path: str | Path) -> CanaryObservations:
        path = Path(path)
        if not path.is_file():
            raise DPAuditError(f"no canary observations at {path}; train with --canaries M")
        try:
            with np.load(path, allow_pickle=False) as data:
                bits, observations, z = data["bits"], data["observations"], data["noise_multipliers"]
            clip_norm = float(read_json(path.with_suffix(".json"))["clip_norm"])
        except Exception as error:  # noqa: BLE001 - any failure means an unusable file
            raise DPAuditError(f"cannot read canary observations {path}: {str(error).splitlines()[0]}") from None
        return cls(bits, observations, z, clip_norm)


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


class DiracCanaries:
    """The engine's side: the canary tensor, the per-step insertion and the observation.

    Args:
        count: m, the number of canary coordinates.
        clip_norm: C of the run (the canary gradient's norm is ``norm_factor``·C).
        norm_factor: ≥ 1, so that clipping or normalisation brings each canary to (about) C.
        seed: fixes the bits.
        device, dtype: of the model's parameters.
    """

    def __init__(self, *, count: int, clip_norm: float, seed: int, device, dtype, norm_factor: float = 1e3):
        self.parameter = torch.zeros(count, device=device, dtype=dtype)
        self.norm = norm_factor * clip_norm
        self.clip_norm = clip_norm
        self.rng = np.random.default_rng([seed, 0xCA2A])
        self._bits: list[np.ndarray] = []
        self._observations: list[np.ndarray] = []
        self._noise: list[float] = []
        self._current: np.ndarray | None = None

    def insert(self, optimizer, model_params: list[torch.Tensor]) -> None:
        """Draw this step's bits and feed the included canaries to the optimizer as extra records."""
        bits = self.rng.random(self.parameter.numel()) < 0.5
        self._current = bits
        included = np.flatnonzero(bits)
        if included.size == 0:
            return
        rows = torch.zeros((included.size, self.parameter.numel()), device=self.parameter.device, dtype=self.parameter.dtype)
        rows[torch.arange(included.size), torch.as_tensor(included, device=rows.device)] = self.norm
        if optimizer.per_sample:
            zeros = [torch.zeros((included.size, *p.shape), device=p.device, dtype=p.dtype) for p in model_params]
            optimizer.accumulate(zeros + [rows])
        else:  # non-private SGD receives batch means
            zeros = [torch.zeros_like(p) for p in model_params]
            optimizer.accumulate(zeros + [rows.sum(0) / optimizer.hyper.expected_batch_size])

    def observe(self, optimizer, cost) -> None:
        """Record the released update at the canary coordinates (before momentum) and the step's z."""
        update = optimizer.last_update[-1]
        self._observations.append(update.detach().double().cpu().numpy().copy())
        self._bits.append(self._current)
        self._noise.append(float(cost[0]) if cost is not None else 0.0)

    def result(self) -> CanaryObservations:
        return CanaryObservations(np.array(self._bits, dtype=bool), np.array(self._observations),
                                  np.array(self._noise), self.clip_norm)

