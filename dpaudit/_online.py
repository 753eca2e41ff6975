"""The whole-run canaries' four statistics summed online, step by step, for M canaries at once.

Shared by the engine's whole-run canaries (``dpaudit.attacks.canary_run.RunCanaries``) and the Opacus record-level
canaries (``dpaudit.opacus.RecordCanaries``): per canary j, from each step's released value at its coordinate
(x_tj = noised_tj / c_t, c_t a present canary's contribution),

* Λ_j = Σ_t log(1 − q_t + q_t·exp((x_tj − ½)/σ_t²)) (:func:`dpaudit.whole_run.likelihood_ratio_scores`),
* Σ_t x_tj (:func:`dpaudit.whole_run.final_model_scores`),
* Σ_t x_tj/σ_t and Σ_t x_tj²/σ_t² (the sums of :func:`dpaudit.whole_run.spread_scores`).

Each step's work is a few passes over the M released values in their own dtype (float32 for a float32 model) into
partial sums over up to :data:`PARTIAL_STEPS` steps of one noise std and one c (to :data:`C_TOLERANCE`), which are
then added to float64 sums. On the CPU Λ's exp and log1p are numpy's on the same memory (several times faster than
torch's); its constant log(1 − q) is added once per partial sum, and its terms are computed in float64 where an
exponent would exceed float32's range. Each float32 term is within about 1e-7 (relative, or absolute near 0) of its
float64 value, so that Λ over T steps moves by about 1e-7·√T, far below the spread of the scores between canaries.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dpaudit.whole_run import step_log_ratio

EXP_CAP32 = 80.0  # the largest exponent float32 terms take (e^80 ≈ 5.5e34; else float64)
PARTIAL_STEPS = 16  # steps summed in the released values' dtype before the float64 sums take them
# a partial sum goes on while c stays within this relative distance of its first step's (Opacus's c varies by an ulp)
C_TOLERANCE = 1e-9


def partial_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype per-step sums of released values of ``dtype`` are taken in: float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class OnlineSums:
    """Λ, Σx, Σx/σ and Σx²/σ² of M canaries, added step by step (module docstring).

    Args:
        count: M, the number of canaries.
        device: where the released values are (the sums stay there).
        dtype: the released values' dtype: float64 keeps the partial sums in float64, anything else float32.
    """

    transient_state: tuple[str, ...] = ("_buffer", "_values", "_rows")  # scratch, and views of the buffers

    def __init__(self, count: int, *, device: torch.device | str, dtype: torch.dtype) -> None:
        work = partial_dtype(dtype)
        self.totals = torch.zeros((4, count), dtype=torch.float64, device=device)  # Λ, Σx, Σx/σ, Σx²/σ²
        self._partial = torch.zeros((3, count), dtype=work, device=device)  # Λ's terms, noised·c_window/c, noised²
        self._steps = 0  # steps in the partial sums
        # the partial sums' c and c·σ (the noised values' std, signed as c)
        self._contribution, self._signed_std = 1.0, 1.0
        self._constant = 0.0  # Σ log(1 − q) of the steps in the partial sums (Λ's terms without it)
        self._buffer = torch.empty(count, dtype=work, device=device)
        self._values = self._buffer.numpy() if self._buffer.device.type == "cpu" else None  # its memory, for numpy
        self._rows = self._partial.unbind(0)  # the partial sums' rows (views: a restored state is copied into them)

    def add(self, noised: torch.Tensor, *, contribution: float, noise_std: float, rate: float) -> None:
        """Add one step: ``noised`` the [M] released values, x = noised/``contribution``; ``noise_std`` the noised
        values' noise std (σ = noise_std/|c| in x's units); ``rate`` the step's q. A step without noise
        (σ = 0) makes Λ, Σx/σ and Σx²/σ² undefined (NaN)."""
        signed_std = math.copysign(noise_std, contribution)
        changed = abs(contribution - self._contribution) > C_TOLERANCE * abs(self._contribution)
        if self._steps and (signed_std != self._signed_std or changed):
            self.flush()
        if not self._steps:
            self._contribution, self._signed_std = contribution, signed_std
        sigma = noise_std / abs(contribution)
        if not sigma > 0:
            self.totals[0].fill_(math.nan)
        elif not self._add_log_ratio_terms(noised, contribution=contribution, sigma=sigma, rate=rate):
            self.totals[0] += step_log_ratio((noised / contribution).to(torch.float64), sigma, rate)
        _, values, squares = self._rows
        values.add_(noised, alpha=self._contribution / contribution)  # in units of the window's c
        squares.addcmul_(noised, noised)
        self._steps += 1
        if self._steps == PARTIAL_STEPS:
            self.flush()

    def _add_log_ratio_terms(self, noised: torch.Tensor, *, contribution: float, sigma: float, rate: float) -> bool:
        """Add one step's Λ terms log(1 − q + q·e^(x/σ² − ½/σ²)), x = noised/c, to the partial sums through the
        scratch buffer; False, with nothing added, where on the CPU an exponent would exceed float32's range."""
        terms, values = self._buffer, self._values
        inverse = 1.0 / (contribution * sigma * sigma)  # x/σ² = noised·inverse
        if values is not None and noised.dtype == terms.dtype and 0 < rate < 1:
            # = log(1 − q) + log1p(e^(x/σ² + s)), s = log(q/(1 − q)) − ½/σ²: numpy's exp and log1p on the buffer's
            # memory, log(1 − q) once per partial sum
            shift = math.log(rate / (1 - rate)) - 0.5 / (sigma * sigma)
            np.multiply(noised.numpy(), inverse, out=values)
            if float(values.max()) + shift > EXP_CAP32:
                return False
            values += shift
            np.exp(values, out=values)
            np.log1p(values, out=values)
            self._constant += math.log1p(-rate)
        else:  # log(1 − q + q·e^min(u, L)) + max(u − L, 0), u = (x − ½)/σ², L = EXP_CAP32: exact to rounding (the
            # ratio's factor 1 + (1 − q)/(q·e^L) aside), and no read of the values (on a GPU: no wait for the device)
            u = torch.mul(noised, inverse, out=terms).sub_(0.5 / (sigma * sigma))
            excess = (u - EXP_CAP32).clamp_(min=0.0)
            u.clamp_(max=EXP_CAP32).exp_().mul_(rate).add_(1.0 - rate).log_().add_(excess)
        self._rows[0].add_(terms)
        return True

    def flush(self) -> None:
        """Add the partial sums to the float64 sums and start new ones."""
        if not self._steps:
            return
        self._add_partial(self.totals)
        self._partial.zero_()
        self._steps, self._constant = 0, 0.0

    def _add_partial(self, totals: torch.Tensor) -> None:
        """Add the partial sums, in the units of the float64 sums, to ``totals`` ([4, M])."""
        totals[0].add_(self._partial[0]).add_(self._constant)
        totals[1].add_(self._partial[1], alpha=1.0 / self._contribution)
        if self._signed_std:
            totals[2].add_(self._partial[1], alpha=1.0 / self._signed_std)
            totals[3].add_(self._partial[2], alpha=1.0 / self._signed_std**2)
        else:  # no noise: x/σ undefined
            totals[2:].fill_(math.nan)

    def result(self) -> np.ndarray:
        """[4, M] float64 on the host: Λ, Σx, Σx/σ, Σx²/σ² over the steps added so far. The partial sums go on as they
        were, so that the sums do not depend on when (or how often) a result is read."""
        totals = self.totals.clone()
        if self._steps:
            self._add_partial(totals)
        return totals.cpu().numpy()
