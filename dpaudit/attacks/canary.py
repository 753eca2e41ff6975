"""White-box gradient canaries (Nasr et al. 2023): an audit of the optimizer itself.

m canaries live in one extra parameter tensor that no loss touches, so real records have a zero gradient
there. At every step each canary j is inserted into the batch independently with probability ½ (bit b_tj)
as one more record whose per-sample gradient is ``norm_factor``·C·v_j for a unit direction v_j; it goes
through the optimizer's own clipping, weighting, masking, projection and noise. The adversary sees every
released update u_t (all-updates white-box threat model) and scores trial (t, j) by ⟨u_t, v_j⟩ / s_j.

Four designs (``CANARY_DESIGNS``); the first two choose the directions:

* ``"dirac"``: v_j = e_j, s_j = 1 — one coordinate per canary (tensor size m); the score is u_tj.
* ``"projection-aligned"``, for the random-projection optimizers (``ProjectedNoise``): the canary
  tensor's projection A ∈ R^{d×p} (the optimizer's own, known to a white-box auditor) has the SVD
  A = U S Vᵀ; v_j is the left singular vector of the j-th largest singular value s_j, so the canaries sit
  where A stretches most and stay orthogonal after projection. The tensor is made large enough that
  p ≥ 3m (``ALIGNED_SPECTRUM``): the canaries use the top third of the spectrum. Projecting each record's
  gradient and then clipping (the DP form) still bounds canary j's shift of ⟨w, r_j⟩ (w the noisy
  release in R^p, r_j = Aᵀv_j / s_j) by C; clipping first and projecting the sum moves it by
  C·s_j/√p ≈ (1 + √(d/p))·C, which this design exposes and a Dirac canary (‖Aᵀe_j‖/√p ≈ 1) does not.
* ``"support"``, for the optimizers that learn their support once from dense steps (AdaDPIGU's
  pre-training, the two-phase methods' phase 1): Dirac canaries with one bit b_j per canary, drawn once, in
  (or out of) *every* dense step, and none afterwards. The score of canary j is 1 if the learned support
  keeps its coordinate (visible to the adversary: frozen coordinates never move), else 0. The support is
  post-processing of the T dense releases, each a Gaussian mechanism with sensitivity C for b_j, so the
  claim is their composition, (√(Σ_t 1/z_t²))-GDP; a support ranked on un-noised gradients breaks it.
* ``"noise-scale"``, for noise that depends on the batch: one Dirac canary (m = 1), in or out of each step,
  and the adversary's dataset: every other record of the batch has a zero gradient (records are still
  sampled, so the realised batch is the run's). The score of step t is the root mean square of the
  released update over the model's coordinates, there the noise alone. A correct optimizer's noise does not
  depend on the batch, so the score's law is the same with the canary in or out (the audit is valid, and
  finds nothing); noise scaled to the batch's largest clipped norm is 0 without the canary. One trial per
  step, each one Gaussian step as for Dirac canaries.

For DP-SGD, u_tj = b_tj·C/b + N(0, σ_DP²) independently over (t, j): each trial is one Gaussian
mechanism with sensitivity C and noise multiplier z_t (no subsampling: the canary is in the batch
whenever its bit is 1), i.e. exactly (1/z_t)-GDP. So the ε this audit can certify is that of one such
step at the smallest z of the run — "the mechanism the canary faces" — not the run's composed ε; the audit
scores the trials of the steps at that z (all steps unless the schedule varies z).

The canary tensor is one of the optimizer's coordinates: sparse optimizers rank and mask it like the
model's (k = ⌊ρ(d + m)⌋), so a frozen canary coordinate releases nothing (its trials are uninformative).

Independence of the pooled trials. The audit counts its trials with Clopper–Pearson, which needs them
independent. Where the canaries sit on separate coordinates with independent noise (every optimizer but the
random-projection ones), the m canaries of a step are m independent trials of the exact mechanism, and the
steps are independent of each other. On the random-projection optimizers (``ProjectedNoise``: dp2-sgd,
d2p2-sgd and their as-published variants) the canary tensor has its own projection A ∈ R^{d×p} (the model's
tensors have theirs, and real records have a zero gradient on the canary tensor, so the canaries do not mix
with the model's records). Canary k enters the release w ∈ R^p of that tensor along a_k ∝ Aᵀv_k with a
clipped length c_k (c_k = C for dp2-sgd up to γ; C·‖Aᵀv_k‖/√p as published): with b the expected batch size,

    w = (1/b)·Σ_k b_k·c_k·a_k + σ·ξ,   ξ ~ N(0, I_p),   u = A·w (the released update of the canary tensor).

* ``"dirac"`` (v_k = e_k, a_k = r_k/‖r_k‖ with r_k = Aᵀe_k the k-th row of A): the score of canary j is
  u_j = r_jᵀw = (1/b)·(b_j·c_j·‖r_j‖ + Σ_{k≠j} b_k·c_k·r_jᵀr_k/‖r_k‖) + σ·r_jᵀξ. Within a step the m scores
  share the noise (Cov(u_j, u_k) = σ²·r_jᵀr_k, correlation ≈ N(0, 1/p) for a Gaussian A) and each carries
  the other canaries' bits; as d = m > p they are m linear functions of p Gaussians. They are not m
  independent trials. Across steps, given A (drawn once per run with ``projection_refresh: run``, or
  redrawn each step), the steps' bits and noises are independent: canary j's trials at different steps are
  independent, and each is at most (1/z_t)-GDP in b_j (w is a Gaussian mechanism of sensitivity c_j/b ≤ C/b
  given the other bits, which are independent of b_j). So the audit keeps **one trial per step**, canary 0's
  (``CanaryObservations.independent_canaries`` False): independent and identically distributed given A.
* ``"projection-aligned"`` (v_k the left singular vector of A = U S Vᵀ for s_k): Aᵀv_k = s_k·V_k, so
  a_k = V_k and the score v_jᵀA·w/s_j = V_jᵀw = b_j·c_j/b + σ·V_jᵀξ. The V_j are orthonormal, so there is
  no cross-talk and the noises V_jᵀξ are independent N(0, 1): the m canaries of a step are m independent
  trials (up to float rounding of the SVD), and the steps are independent given A. All m·T are pooled.

The whole-run design (``dpaudit.attacks.canary_run``) refuses these optimizers before training.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch

from dpaudit._io import atomic_write_bytes, read_json, write_json
from dpaudit._validation import DPAuditError, check_choice
from dpaudit.config import CANARY_DESIGNS
from dpaudit.estimate import gdp_epsilon
from dpaudit.integrity import verify_file
from dpaudit.observers import TrainingObserver
from dpaudit.optim import PrivateOptimizer, ProjectedNoise, StepCost, projected_dimension

if TYPE_CHECKING:
    from dpaudit.optim import MaskedSupport, Optimizer

ALIGNED_SPECTRUM = 3  # a projection-aligned canary tensor keeps p ≥ 3m singular directions; the canaries take the top m


@dataclass
class CanaryObservations:
    """Bits and released canary coordinates of one training run.

    Attributes:
        bits: [T, m] 1 where canary j was in step t's batch.
        observations: [T, m] the released update at canary coordinate j in step t.
        noise_multipliers: [T] z_t of each step (from the optimizer's ledger entries). For the
            ``"support"`` design bits and observations have one row (b_j; the support's 0/1 at canary j,
            none before the support is chosen) and these are the z_t of the dense steps the bits were in.
        clip_norm: C.
        design: the canary design (``CANARY_DESIGNS``).
        independent_canaries: whether the m canaries of one step are independent trials; False for Dirac
            canaries on a random-projection optimizer, whose release mixes them (module docstring), and then
            `scores` keeps one trial per step, canary 0's.
    """

    bits: npt.NDArray[np.bool_]
    observations: npt.NDArray[np.float64]
    noise_multipliers: npt.NDArray[np.float64]
    clip_norm: float
    design: str = "dirac"
    independent_canaries: bool = True

    @property
    def selection(self) -> str:
        """``audit_scores``'s threshold selection: "gaussian" for the per-coordinate scores of Dirac and aligned
        canaries, else "split" (the support's 0/1 scores; noise levels, 0 where the noise depends on the batch)."""
        return "gaussian" if self.design in ("dirac", "projection-aligned") else "split"

    def audited_steps(self) -> npt.NDArray[np.bool_]:
        """[T] bool: the steps at the run's smallest z, whose trials face the mechanism `mechanism_epsilon` names.

        A step with a larger z is a weaker mechanism: pooling its trials keeps the audit valid but dilutes it,
        so a decaying or two-phase schedule is audited at its least noisy steps (a constant z keeps all).
        """
        z = self.noise_multipliers
        if self.design == "support" or z.size == 0:
            return np.ones(self.bits.shape[0], dtype=bool)
        return z <= z.min() * (1 + 1e-9)

    def scores(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(member scores, non-member scores) of the audited steps: observations with bit 1 and with bit 0, of
        every canary, or of canary 0 alone where the canaries of a step are not independent trials."""
        steps = self.audited_steps()
        kept = slice(None) if self.independent_canaries else slice(0, 1)
        flat_bits = self.bits[steps][:, kept].astype(bool).ravel()
        flat = self.observations[steps][:, kept].ravel()
        return flat[flat_bits], flat[~flat_bits]

    def mechanism_epsilon(self, *, delta: float) -> float:
        """ε at δ of the mechanism each trial faces: one Gaussian step at the smallest z of the run, or for
        the support design the composition of the dense steps."""
        z = self.noise_multipliers
        if z.size == 0 or np.min(z) <= 0:
            return float("inf")
        mu = float(np.sqrt(np.sum(1.0 / z**2))) if self.design == "support" else 1.0 / float(np.min(z))
        return gdp_epsilon(mu=mu, delta=delta)

    def save(self, path: str | Path) -> Path:
        """Write the arrays to ``path`` (npz) and the settings to its .json sidecar, each atomically."""
        path = Path(path)
        write_json(
            path.with_suffix(".json"),
            {
                "clip_norm": self.clip_norm,
                "design": self.design,
                "steps": int(self.bits.shape[0]),
                "canaries": int(self.bits.shape[1]),
                "smallest_noise_multiplier": float(np.min(self.noise_multipliers, initial=np.inf)),
                "independent_canaries": bool(self.independent_canaries),
            },
        )
        buffer = _npz_bytes(
            bits=self.bits.astype(np.uint8), observations=self.observations, noise_multipliers=self.noise_multipliers
        )
        return atomic_write_bytes(path, buffer)

    @classmethod
    def load(cls, path: str | Path) -> CanaryObservations:
        """Read a ``save``d file."""
        path = Path(path)
        if not path.is_file():
            raise DPAuditError(f"no canary observations at {path}; train with --canaries M")
        verify_file(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                bits, observations, z = data["bits"], data["observations"], data["noise_multipliers"]
            sidecar = read_json(path.with_suffix(".json"))
            clip_norm, design = float(sidecar["clip_norm"]), sidecar.get("design", "dirac")
            independent = bool(sidecar.get("independent_canaries", True))  # absent: written before the key
        except Exception as error:  # noqa: BLE001 - any failure means an unusable file
            raise DPAuditError(f"cannot read canary observations {path}: {str(error).splitlines()[0]}") from None
        return cls(bits, observations, z, clip_norm, design, independent_canaries=independent)


def _npz_bytes(**arrays: npt.NDArray[Any]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]  # array names, never savez's own keyword allow_pickle
    return buffer.getvalue()


def canary_dimension(
    *, count: int, design: str, reduction_rate: float = 1.0, reduction_convention: str = "code"
) -> int:
    """Size of the canary tensor: m for Dirac and support canaries; for projection-aligned ones the smallest d whose
    projected dimension p (``optim.projected_dimension``) is at least ``ALIGNED_SPECTRUM``·m."""
    if design != "projection-aligned":
        return count
    needed = ALIGNED_SPECTRUM * count
    kept = reduction_rate if reduction_convention == "code" else 1 - reduction_rate  # > 0: TrainConfig checks
    dimension = max(needed, int(needed / kept))
    while projected_dimension(dimension, rate=reduction_rate, convention=reduction_convention) < needed:
        dimension += 1
    return dimension


def _masked(optimizer: Optimizer) -> MaskedSupport:
    """The optimizer of a support-design run: TrainConfig admits AdaDPIGU and the two-phase sparse ones only."""
    return cast("MaskedSupport", optimizer)


class GradientCanaries(TrainingObserver):
    """The engine's side, an observer of the target's training loop (``dpaudit.observers``): the canary tensor
    (the optimizer's last parameter), the per-step insertion (``before_update``) and the observation
    (``after_update``).

    Args:
        count: m, the number of canaries.
        clip_norm: C of the run (the canary gradient's norm is ``norm_factor``·C).
        seed: fixes the bits.
        device, dtype: of the model's parameters.
        design: one of ``CANARY_DESIGNS`` (module docstring).
        dimension: size of the canary tensor (``canary_dimension``; default m).
        norm_factor: ≥ 1, so that clipping or normalisation brings each canary to (about) C.
        path: where each epoch end writes the observations (``CanaryObservations.save``; None: keep in memory).
    """

    name = "canaries"
    sees_gradients = True  # it appends the canary tensor's zero gradients (noise-scale design: zeroes the records')
    reads_updates = True  # the scores are read from the released update
    # the SVD of the optimizer's projection, recomputed from its seed on use; the output file
    transient_state = ("_aligned", "path")

    def __init__(
        self,
        *,
        count: int,
        clip_norm: float,
        seed: int,
        device: torch.device | str,
        dtype: torch.dtype,
        design: str = "dirac",
        dimension: int | None = None,
        norm_factor: float = 1e3,
        path: str | Path | None = None,
    ) -> None:
        check_choice("canary design", design, CANARY_DESIGNS)
        self.count = count
        self.design = design
        self.parameter = torch.zeros(dimension or count, device=device, dtype=dtype)
        self.norm = norm_factor * clip_norm
        self.clip_norm = clip_norm
        self.rng = np.random.default_rng([seed, 0xCA2A])
        self._bits: list[npt.NDArray[np.bool_]] = []
        self._observations: list[npt.NDArray[np.float64]] = []
        self._noise: list[float] = []
        self._current: npt.NDArray[np.bool_] | None = None
        self._aligned: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (A, V [m, d], s [m])
        self._fixed_bits: npt.NDArray[np.bool_] | None = None  # support design: b_j for every dense step
        self._support: npt.NDArray[np.float64] | None = None  # support design: the learned support at the canaries
        self._projected = False  # whether the optimizer projects (``ProjectedNoise``): set by ``after_update``
        self.path = Path(path) if path is not None else None

    @property
    def zeroes_records(self) -> bool:
        """Whether every real record's gradient is zeroed (the noise-scale design's dataset)."""
        return self.design == "noise-scale"

    @property
    def parameters(self) -> tuple[torch.Tensor, ...]:
        """The canary tensor, the optimizer's last parameter."""
        return (self.parameter,)

    def accumulate(self, optimizer: Optimizer, grads: Sequence[torch.Tensor], *, records: int) -> list[torch.Tensor]:
        """The records' gradients (zeroed for the noise-scale design) and their zero gradients at the canary
        tensor, a coordinate no loss touches."""
        if self.zeroes_records:  # the noise-scale audit's dataset: records with zero gradients
            grads = [torch.zeros_like(g) for g in grads]
        shape = (records, *self.parameter.shape) if optimizer.per_sample else self.parameter.shape
        return list(grads) + [self.parameter.new_zeros(shape)]

    def directions(self, optimizer: Optimizer) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(v_j as rows [m, d], scales s_j [m]) this step, or None for Dirac canaries (v_j = e_j, s_j = 1)."""
        if self.design != "projection-aligned":
            return None
        # TrainConfig admits this design for ProjectedNoise optimizers only; the canary tensor is the last parameter
        matrix = cast(ProjectedNoise, optimizer).matrices()[-1]
        if self._aligned is None or self._aligned[0] is not matrix:
            left, singular, _ = torch.linalg.svd(matrix.double(), full_matrices=False)
            self._aligned = (
                matrix,
                left[:, : self.count].T.to(matrix.dtype).contiguous(),
                singular[: self.count].to(matrix.dtype),
            )
        return self._aligned[1], self._aligned[2]

    def before_update(self, optimizer: Optimizer, *, epoch: int) -> None:
        """Draw this step's bits and feed the included canaries to the optimizer as extra records."""
        if self.design != "support":
            bits = self.rng.random(self.count) < 0.5
        elif _masked(optimizer).mask is None:  # a dense step: the same canaries in every one
            if self._fixed_bits is None:
                self._fixed_bits = self.rng.random(self.count) < 0.5
            bits = self._fixed_bits
        else:
            bits = np.zeros(self.count, dtype=bool)
        self._current = bits
        aligned = self.directions(optimizer)  # before the step: ``after_update`` scores along these
        included = np.flatnonzero(bits)
        if included.size == 0:
            return
        chosen = torch.as_tensor(included, device=self.parameter.device)
        if aligned is None and _weights_each_record(optimizer):
            # the sums ``accumulate`` would make of the rows below, without the rows of zeros on the model's
            # parameters: each canary adds φ(‖c‖)·‖c‖ at its own coordinate (every other term is an exact 0)
            optimizer.accumulate_diracs(coordinates=chosen, magnitude=self.norm)
            return
        if aligned is None:
            rows = torch.zeros(
                (included.size, self.parameter.numel()), device=self.parameter.device, dtype=self.parameter.dtype
            )
            rows[torch.arange(included.size), chosen] = self.norm
        else:
            rows = self.norm * aligned[0].index_select(0, chosen)
        model_params = optimizer.params[:-1]  # the canary tensor is the optimizer's last parameter
        if optimizer.per_sample:
            zeros = [torch.zeros((included.size, *p.shape), device=p.device, dtype=p.dtype) for p in model_params]
            optimizer.accumulate(zeros + [rows])
        else:  # non-private SGD receives batch means
            zeros = [torch.zeros_like(p) for p in model_params]
            optimizer.accumulate(zeros + [rows.sum(0) / optimizer.hyper.expected_batch_size])

    def after_update(self, optimizer: Optimizer, cost: StepCost | None, *, epoch: int) -> None:
        """Record each canary's score in the released update (before momentum) and the step's z
        (``cost.noise_multiplier``)."""
        z = float(cost.noise_multiplier) if cost is not None else 0.0
        if self.design == "support":
            if self._support is None:  # a dense step the canaries were in (or out of)
                self._noise.append(z)
                mask = _masked(optimizer).mask
                if mask is not None:  # chosen after this step
                    self._support = mask[-1].detach().double().cpu().numpy().copy()
            return
        self._projected = isinstance(optimizer, ProjectedNoise)
        released = optimizer.last_update
        assert released is not None  # kept for an observer that reads_updates
        update = released[-1].detach()
        if self.design == "dirac":
            scores = update
        elif self.design == "noise-scale":  # the model's coordinates: no record moves them (zeroed gradients)
            model = torch.cat([part.detach().reshape(-1) for part in released[:-1]])
            scores = model.double().pow(2).mean().sqrt().reshape(1)
        else:  # the directions of the step just taken (cached before it; the next step may redraw A)
            assert self._aligned is not None  # set by directions() in before_update
            _, directions, scales = self._aligned
            scores = directions @ update / scales
        assert self._current is not None  # drawn by before_update
        self._observations.append(scores.double().cpu().numpy().copy())
        self._bits.append(self._current)
        self._noise.append(z)

    def end_epoch(self, *, epoch: int) -> None:
        """Write the observations so far to ``path`` (if any)."""
        if self.path is not None:
            self.result().save(self.path)

    def result(self) -> CanaryObservations:
        """The observations so far."""
        if self.design == "support":
            if self._support is None:  # an epoch end before the support is chosen
                bits, observations = np.zeros((0, self.count), dtype=bool), np.zeros((0, self.count))
            else:
                # the support is learned after dense steps (TrainConfig admits AdaDPIGU and two-phase optimizers
                # only), whose bits were drawn then
                assert self._fixed_bits is not None
                bits, observations = self._fixed_bits[None, :], self._support[None, :]
            return CanaryObservations(bits, observations, np.array(self._noise), self.clip_norm, self.design)
        return CanaryObservations(
            np.array(self._bits, dtype=bool),
            np.array(self._observations),
            np.array(self._noise),
            self.clip_norm,
            self.design,
            # a projection mixes Dirac canaries (module docstring); aligned ones stay independent
            independent_canaries=not (self.design == "dirac" and getattr(self, "_projected", False)),
        )


def _weights_each_record(optimizer: Optimizer) -> bool:
    """Whether ``optimizer`` adds each record's gradient weighted by φ of its norm, nothing else, on every coordinate
    (``PrivateOptimizer.accumulate`` and ``accumulate_diracs`` themselves, no audit block): a Dirac canary record is
    then φ(‖c‖)·‖c‖ at its coordinate, and ``accumulate_diracs`` adds exactly what ``accumulate`` adds. (A subclass's
    own ``accumulate_diracs`` may count whole-run canaries as records of the batch, which these are not.)"""
    cls = type(optimizer)
    return (
        isinstance(optimizer, PrivateOptimizer)
        and cls.accumulate is PrivateOptimizer.accumulate
        and cls.accumulate_diracs is PrivateOptimizer.accumulate_diracs
        and not optimizer.audit_parameters
    )
