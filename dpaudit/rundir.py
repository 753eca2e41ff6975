"""Where every file of a ``dpaudit train`` run lives: the run folder's layout, named once (importable without torch).

Layout::

    RUN/dpaudit-run.json          the configuration, whether training completed, the SHA-256 of every file written
                                  (:mod:`dpaudit.integrity`)
    RUN/config.json               the validated configuration and derived values (z, σ_DP, q, T/epoch)
    RUN/split.json                member / non-member indices of the target and every shadow
    RUN/attack.json               what ``dpaudit attack`` found, per checkpoint epoch
    RUN/summary.json              what the paper figures draw from the run (``dpaudit.summary.summarize_run``)
    RUN/audit_ATTACK.json         what ``dpaudit audit --run RUN --attack ATTACK`` found (+ .png, .pdf: its ROC)
    RUN/scores_epoch_EEEE.csv     per-record attack scores at epoch EEEE
    RUN/<model>/metrics.json      per epoch: training loss, test loss and accuracy
    RUN/<model>/ledger.json       per step: noise multiplier z, sample rate q (run-length encoded)
    RUN/<model>/epsilon.json      the theoretical ε per epoch (``dpaudit epsilon --run``)
    RUN/<model>/canaries.npz      the white-box canaries' observations (target only)
    RUN/<model>/canaries_run.npz  the whole-run canaries' membership and observations (target only; + .json)
    RUN/<model>/diagnostics.json  gradient histogram and support diagnostics (target only)
    RUN/<model>/epoch_EEEE.pt     state_dict at each evaluation epoch (+ epoch_EEEE.json metadata)

where <model> is ``target`` or :func:`shadow_name` (``shadow_00``, …). Code names these files through
:class:`RunDir` and :class:`ModelDir` only, never by a literal name (:mod:`dpaudit.integrity`'s patterns of the names a
run owns are checked against them by a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TARGET = "target"
#: The run's manifest (:mod:`dpaudit.integrity`): what marks a folder as a run's, hence a name no other tool uses.
MANIFEST = "dpaudit-run.json"
#: A run's summary for the paper figures (``dpaudit train --summarize``, ``dpaudit.summary.summarize_run``).
SUMMARY = "summary.json"


def shadow_name(index: int) -> str:
    """The folder name of shadow model ``index`` (0-based)."""
    return f"shadow_{index:02d}"


@dataclass(frozen=True)
class ModelDir:
    """The folder of one model of a run (the target or a shadow)."""

    path: Path

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.json"

    @property
    def ledger(self) -> Path:
        return self.path / "ledger.json"

    @property
    def epsilon(self) -> Path:
        return self.path / "epsilon.json"

    @property
    def canaries(self) -> Path:
        return self.path / "canaries.npz"

    @property
    def canaries_run(self) -> Path:
        """The whole-run canaries' observations (``dpaudit.attacks.canary_run``; sidecar: the same name, .json)."""
        return self.path / "canaries_run.npz"

    @property
    def diagnostics(self) -> Path:
        return self.path / "diagnostics.json"

    def checkpoint(self, epoch: int) -> Path:
        """The state_dict saved at the end of ``epoch`` (1-based)."""
        return self.path / f"epoch_{epoch:04d}.pt"

    def state(self, epoch: int) -> Path:
        """The training state saved after ``epoch`` for resuming (``dpaudit.train``)."""
        return self.path / f"state_{epoch:04d}.pt"

    def states(self) -> dict[int, Path]:
        """The saved training states present, by epoch."""
        if not self.path.is_dir():
            return {}
        return {int(path.stem.split("_")[1]): path for path in self.path.glob("state_[0-9][0-9][0-9][0-9].pt")}


@dataclass(frozen=True)
class RunDir:
    """The folder of one run: ``RunDir(path).config``, ``RunDir(path).target.ledger``, …"""

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def split(self) -> Path:
        return self.path / "split.json"

    @property
    def attack(self) -> Path:
        return self.path / "attack.json"

    @property
    def manifest(self) -> Path:
        """The run's manifest: its configuration, whether it completed, the SHA-256 of its files."""
        return self.path / MANIFEST

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    def audit(self, attack: str) -> Path:
        """What ``dpaudit audit`` found with ``attack`` (its ROC plot: the same name, .png and .pdf)."""
        return self.path / f"audit_{attack}.json"

    def scores(self, epoch: int) -> Path:
        """The per-record attack scores at checkpoint ``epoch``."""
        return self.path / f"scores_epoch_{epoch:04d}.csv"

    def model(self, name: str) -> ModelDir:
        """The folder of model ``name`` (``"target"`` or ``shadow_name(i)``)."""
        return ModelDir(self.path / name)

    @property
    def target(self) -> ModelDir:
        return self.model(TARGET)

    def shadow(self, index: int) -> ModelDir:
        return self.model(shadow_name(index))
