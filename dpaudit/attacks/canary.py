"""White-box gradient canaries (Nasr et al. 2023): an audit of the optimizer itself.

m canaries live in one extra parameter tensor that no loss touches, so real records have a zero gradient
there. At every step each canary j is inserted into the batch independently with probability ½ (bit b_tj)
as one more record whose per-sample gradient is ``norm_factor``·C·v_j for a unit direction v_j; it goes
through the optimizer's own clipping, weighting, masking, projection and noise. The adversary sees every
released update u_t (all-updates white-box threat model) and scores trial (t, j) by ⟨u_t, v_j⟩ / s_j.

Two designs choose the directions (``CANARY_DESIGNS``):

* ``"dirac"``: v_j = e_j, s_j = 1 — one coordinate per canary (tensor size m); the score is u_tj.
* ``"projection-aligned"``, for the random-projection optimizers (``ProjectedNoise``): the canary
  tensor's projection A ∈ R^{d×p} (the optimizer's own, known to a white-box auditor) has the SVD
  A = U S Vᵀ; v_j is the left singular vector of the j-th largest singular value s_j, so the canaries sit
  where A stretches most and stay orthogonal after projection. The tensor is made large enough that
  p ≥ 3m (``ALIGNED_SPECTRUM``): the canaries use the top third of the spectrum. Projecting each record's
  gradient and then clipping (the DP form) still bounds canary j's shift of ⟨w, r_j⟩ (w the noisy
  release in R^p, r_j = Aᵀv_j / s_j) by C; clipping first and projecting the sum moves it by
  C·s_j/√p ≈ (1 + √(d/p))·C, which this design exposes and a Dirac canary (‖Aᵀe_j‖/√p ≈ 1) does not.

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
from dpaudit._validation import DPAuditError, check_choice
from dpaudit.config import CANARY_DESIGNS

ALIGNED_SPECTRUM = 3  # a projection-aligned canary tensor keeps p ≥ 3m singular directions; the canaries take the top m


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


def canary_dimension(*, count: int, design: str, reduction_rate: float = 1.0, reduction_convention: str = "code") -> int:
    """Size of the canary tensor: m for Dirac canaries; for projection-aligned ones the smallest d whose
    projected dimension p (``optim.projected_dimension``) is at least ``ALIGNED_SPECTRUM``·m."""
    if design == "dirac":
        return count
    from dpaudit.optim import projected_dimension

    needed = ALIGNED_SPECTRUM * count
    kept = reduction_rate if reduction_convention == "code" else 1 - reduction_rate  # > 0: TrainConfig checks
    dimension = max(needed, int(needed / kept))
    while projected_dimension(dimension, rate=reduction_rate, convention=reduction_convention) < needed:
        dimension += 1
    return dimension


class GradientCanaries:
    """The engine's side: the canary tensor, the per-step insertion and the observation.

    Args:
        count: m, the number of canaries.
        clip_norm: C of the run (the canary gradient's norm is ``norm_factor``·C).
        seed: fixes the bits.
        device, dtype: of the model's parameters.
        design: ``"dirac"`` or ``"projection-aligned"`` (module docstring).
        dimension: size of the canary tensor (``canary_dimension``; default m).
        norm_factor: ≥ 1, so that clipping or normalisation brings each canary to (about) C.
    """

    transient_state = ("_aligned",)  # the SVD of the optimizer's projection, recomputed from its seed on use

    def __init__(self, *, count: int, clip_norm: float, seed: int, device, dtype, design: str = "dirac",
                 dimension: int | None = None, norm_factor: float = 1e3):
        check_choice("canary design", design, CANARY_DESIGNS)
        self.count = count
        self.design = design
        self.parameter = torch.zeros(dimension or count, device=device, dtype=dtype)
        self.norm = norm_factor * clip_norm
        self.clip_norm = clip_norm
        self.rng = np.random.default_rng([seed, 0xCA2A])
        self._bits: list[np.ndarray] = []
        self._observations: list[np.ndarray] = []
        self._noise: list[float] = []
        self._current: np.ndarray | None = None
        self._aligned: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (A, V [m, d], s [m])

    def directions(self, optimizer) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(v_j as rows [m, d], scales s_j [m]) this step, or None for Dirac canaries (v_j = e_j, s_j = 1)."""
        if self.design == "dirac":
            return None
        matrix = optimizer.matrices()[-1]  # the canary tensor is the optimizer's last parameter
        if self._aligned is None or self._aligned[0] is not matrix:
            left, singular, _ = torch.linalg.svd(matrix.double(), full_matrices=False)
            self._aligned = (matrix, left[:, : self.count].T.to(matrix.dtype).contiguous(),
                             singular[: self.count].to(matrix.dtype))
        return self._aligned[1], self._aligned[2]

    def insert(self, optimizer, model_params: list[torch.Tensor]) -> None:
        """Draw this step's bits and feed the included canaries to the optimizer as extra records."""
        bits = self.rng.random(self.count) < 0.5
        self._current = bits
        aligned = self.directions(optimizer)  # before the step: ``observe`` scores along these
        included = np.flatnonzero(bits)
        if included.size == 0:
            return
        chosen = torch.as_tensor(included, device=self.parameter.device)
        if aligned is None:
            rows = torch.zeros((included.size, self.parameter.numel()), device=self.parameter.device,
                               dtype=self.parameter.dtype)
            rows[torch.arange(included.size), chosen] = self.norm
        else:
            rows = self.norm * aligned[0].index_select(0, chosen)
        if optimizer.per_sample:
            zeros = [torch.zeros((included.size, *p.shape), device=p.device, dtype=p.dtype) for p in model_params]
            optimizer.accumulate(zeros + [rows])
        else:  # non-private SGD receives batch means
            zeros = [torch.zeros_like(p) for p in model_params]
            optimizer.accumulate(zeros + [rows.sum(0) / optimizer.hyper.expected_batch_size])

    def observe(self, optimizer, cost) -> None:
        """Record each canary's score in the released update (before momentum) and the step's z."""
        update = optimizer.last_update[-1].detach()
        if self.design == "dirac":
            scores = update
        else:  # the directions of the step just taken (cached at insert; the next step may redraw A)
            _, directions, scales = self._aligned
            scores = directions @ update / scales
        self._observations.append(scores.double().cpu().numpy().copy())
        self._bits.append(self._current)
        self._noise.append(float(cost[0]) if cost is not None else 0.0)

    def result(self) -> CanaryObservations:
        return CanaryObservations(np.array(self._bits, dtype=bool), np.array(self._observations),
                                  np.array(self._noise), self.clip_norm)
