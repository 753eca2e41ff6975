"""The privacy ledger: what each training step spent, for any accountant to replay.

A step of a subsampled Gaussian mechanism is described by its noise multiplier z (noise std divided
by the ℓ2 sensitivity C of one record's contribution to the summed gradient) and its sample rate q.
Consecutive identical steps are stored as one run, so a ledger of 10⁵ steps stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpaudit._validation import DPAuditError


@dataclass
class LedgerRun:
    """``steps`` consecutive steps with the same noise multiplier z, sample rate q and phase."""

    steps: int
    noise_multiplier: float
    sample_rate: float
    phase: str = "train"


@dataclass
class PrivacyLedger:
    """Per-step record of (z, q) of one training run, with epoch boundaries.

    Attributes:
        runs: consecutive steps grouped by identical (z, q, phase).
        epoch_ends: number of steps completed at the end of each epoch (1-based epochs).
        sampling: "poisson" or "shuffle" (what the steps actually used).
        dp_claim: False for optimizers that make no DP claim (their ledger is informational).
    """

    runs: list[LedgerRun] = field(default_factory=list)
    epoch_ends: list[int] = field(default_factory=list)
    sampling: str = "poisson"
    dp_claim: bool = True

    def record(self, *, noise_multiplier: float, sample_rate: float, phase: str = "train") -> None:
        """Append one step."""
        last = self.runs[-1] if self.runs else None
        if last and (last.noise_multiplier, last.sample_rate, last.phase) == (noise_multiplier, sample_rate, phase):
            last.steps += 1
        else:
            self.runs.append(LedgerRun(1, float(noise_multiplier), float(sample_rate), phase))

    def end_epoch(self) -> None:
        self.epoch_ends.append(self.steps)

    @property
    def steps(self) -> int:
        return sum(run.steps for run in self.runs)

    def per_step(self) -> tuple[np.ndarray, np.ndarray]:
        """Noise multipliers and sample rates, one entry per step."""
        counts = [run.steps for run in self.runs]
        return (
            np.repeat([run.noise_multiplier for run in self.runs], counts),
            np.repeat([run.sample_rate for run in self.runs], counts),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sampling": self.sampling,
            "dp_claim": self.dp_claim,
            "steps": self.steps,
            "epoch_ends": list(self.epoch_ends),
            "runs": [vars(run).copy() for run in self.runs],
        }

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> PrivacyLedger:
        try:
            runs = [LedgerRun(**run) for run in payload["runs"]]
            ledger = cls(runs, list(payload["epoch_ends"]), payload["sampling"], bool(payload["dp_claim"]))
        except (KeyError, TypeError) as error:
            raise DPAuditError(f"malformed privacy ledger: {error}") from None
        if ledger.steps != payload.get("steps", ledger.steps):
            raise DPAuditError("malformed privacy ledger: step count does not match its runs")
        return ledger
