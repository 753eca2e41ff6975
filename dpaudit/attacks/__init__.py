"""Membership-inference attacks, and the registry of those that ``dpaudit audit --run`` scores.

:data:`ATTACKS` holds one :class:`Attack` per name, in the order the command line lists them: what a run needs
for it (shadow models, paired halves, canaries, the scores of ``dpaudit attack``), how it scores the run's target
(:meth:`Attack.scores` → :class:`AttackScores`: member and non-member scores, and the ε the run claims against
them) and which claimed ε an audit compares with. The command line (``dpaudit audit``, ``dpaudit validation``),
the paper summaries (:func:`dpaudit.experiments.summarize_run`) and the workflow schema (a test checks its
``attacks`` enums) all read it, so adding an attack is one entry in :data:`ATTACKS`.

Importing this package loads no torch: each scorer imports its module (which does) when it first runs, and the
shadow-model attack's names load on first use.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit._io import read_json
from dpaudit._validation import DPAuditError, check_choice
from dpaudit.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from dpaudit.attacks.shadow import AttackResult, ShadowAttackConfig, attack_run, shadow_attack  # noqa: F401

_SHADOW_NAMES = ("AttackResult", "ShadowAttackConfig", "attack_run", "shadow_attack")

__all__ = ["ATTACKS", "Attack", "AttackScores", "get_attack", "read_scores_csv", *_SHADOW_NAMES]


@dataclass(frozen=True, eq=False)
class AttackScores:
    """What one attack finds on one run: per-record scores (higher = member) and what the run claims against them.

    Attributes:
        members: scores of the target's members.
        nonmembers: scores of its non-members.
        selection: the threshold selection these scores call for in :func:`dpaudit.audit.audit_scores`
            ("gaussian" for canary scores that are Gaussian by construction); None: the caller's default, "split".
        epsilon_run: the ε (at the run's δ) the run's training claims, its planned ε; None where it has none.
        epsilon_mechanism: ε at the audit's δ of the mechanism each trial of a whole-run attack faces; None for
            the attacks that score a checkpoint.
        mechanism: what ``epsilon_mechanism`` accounts for, one line.
        audited_steps: how many steps' trials the scores pool (whole-run attacks).
        ledger: the composed subsampled Gaussian that the whole-run canaries' claim and scores rest on, for the
            family bound (:func:`dpaudit.whole_run.family_lower_bound`): ``noise_multipliers`` (z_t, the ledger's
            claim), ``noise_std`` (σ_t of the normalised observations) and ``sample_rates`` (q_t), each [T];
            None for the attacks whose scores are not a statistic of that mechanism.
    """

    members: np.ndarray
    nonmembers: np.ndarray
    selection: str | None = None
    epsilon_run: float | None = None
    epsilon_mechanism: float | None = None
    mechanism: str | None = None
    audited_steps: int | None = None
    ledger: Mapping[str, np.ndarray] | None = None


@dataclass(frozen=True)
class Attack:
    """One membership-inference attack on a ``dpaudit train`` run.

    Attributes:
        name: its name in ``dpaudit audit --attack`` and in params.yaml's ``audit.attacks``.
        description: one line.
        scorer: ``scorer(run_dir, *, epoch, delta) -> AttackScores``, without ``epsilon_run`` (which
            :meth:`scores` adds).
        needs: what the run needs beyond a plain ``dpaudit train``, as ``dpaudit audit --help`` says it; None:
            nothing.
        needs_shadows: it scores the target with the run's shadow models; the attacks without them are those a
            targets-only audit (``audit.cross_optimizer``, ``audit.validation``) can use.
        whole_run: it scores the whole run (every step) instead of one checkpoint epoch.
        claim: the ε the run claims against it: "run" (the composed ε of the whole run, ``epsilon_run``) or
            "mechanism" (the ε of the mechanism each trial faces, ``epsilon_mechanism``).
    """

    name: str
    description: str
    scorer: Callable[..., AttackScores] = field(repr=False)
    needs: str | None = None
    needs_shadows: bool = False
    whole_run: bool = False
    claim: str = "run"

    @property
    def claim_key(self) -> str:
        """The key of the claimed ε in an audit's JSON and in :class:`AttackScores`: "epsilon_run" or
        "epsilon_mechanism"."""
        return f"epsilon_{self.claim}"

    def scores(self, run_dir: str | Path, *, epoch: int | None, delta: float) -> AttackScores:
        """Score the target of one run.

        Args:
            run_dir: output folder of ``dpaudit train``.
            epoch: checkpoint epoch to attack; ignored (give None) when ``whole_run``.
            delta: δ of ``epsilon_mechanism``.

        Returns:
            The scores, with ``epsilon_run`` read from the run's config.json.
        """
        run = Path(run_dir)
        planned = read_json(RunDir(run).config)["derived"].get("planned_epsilon")
        return replace(self.scorer(run, epoch=epoch, delta=delta), epsilon_run=planned)


def read_scores_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) from a CSV with columns ``score`` and ``is_member`` (1/0).

    Raises:
        DPAuditError: a missing file, a missing column or a value that is not a number / not 0 or 1.
    """
    path = Path(path)
    if not path.is_file():
        raise DPAuditError(f"score file not found: {path}")
    with open(path, encoding="utf-8", newline="") as stream:
        reader = csv.DictReader(stream)
        missing = {"score", "is_member"} - set(reader.fieldnames or ())
        if missing:
            raise DPAuditError(f"{path} lacks the column(s) {', '.join(sorted(missing))} (need score, is_member)")
        try:
            rows = [(float(row["score"]), int(row["is_member"])) for row in reader]
        except ValueError as error:
            raise DPAuditError(f"{path}: {error}") from None
    scores = np.array([s for s, _ in rows], dtype=float)
    member = np.array([m for _, m in rows])
    if not set(member.tolist()) <= {0, 1}:
        raise DPAuditError(f"{path}: is_member must be 0 or 1")
    return scores[member == 1], scores[member == 0]


# The scorers import the attack modules when called: those load torch, which this package must not (speed).


def _loss_scorer(signal: str) -> Callable[..., AttackScores]:
    def scorer(run: Path, *, epoch: int, delta: float) -> AttackScores:
        from dpaudit.attacks.loss import run_loss_scores

        return AttackScores(*run_loss_scores(run, epoch=epoch, signal=signal))

    return scorer


def _lira_scorer(variant: str) -> Callable[..., AttackScores]:
    def scorer(run: Path, *, epoch: int, delta: float) -> AttackScores:
        from dpaudit.attacks.lira import run_lira_scores

        return AttackScores(*run_lira_scores(run, epoch=epoch, variant=variant))

    return scorer


def _shadow_scores(run: Path, *, epoch: int, delta: float) -> AttackScores:
    path = RunDir(run).scores(epoch)
    if not path.is_file():
        raise DPAuditError(f"no shadow-attack scores at {path}; run `dpaudit attack --run {run}` first")
    return AttackScores(*read_scores_csv(path))


def _canary_scores(run: Path, *, epoch: None, delta: float) -> AttackScores:
    from dpaudit.attacks.canary import CanaryObservations

    observed = CanaryObservations.load(RunDir(run).target.canaries)
    return AttackScores(
        *observed.scores(),
        selection=observed.selection,
        epsilon_mechanism=observed.mechanism_epsilon(delta=delta),
        mechanism=(
            "the dense steps' composition, no subsampling; trials: the learned support"
            if observed.design == "support"
            else "one Gaussian step at the runs' smallest noise multiplier, no subsampling; "
            "trials: each run's steps at its smallest noise multiplier"
        ),
        audited_steps=int(observed.audited_steps().sum()),
    )


def _run_canary_scorer(statistic: str) -> Callable[..., AttackScores]:
    def scorer(run: Path, *, epoch: None, delta: float) -> AttackScores:
        from dpaudit.attacks.canary_run import load_run_canaries

        observed = load_run_canaries(run)
        return AttackScores(
            *observed.scores(statistic),
            audited_steps=observed.steps,
            ledger={
                "noise_multipliers": observed.noise_multipliers,
                "noise_std": observed.noise_std,
                "sample_rates": observed.sample_rates,
            },
        )

    return scorer


_HALVES = "runs trained with --split-design halves"
_WHOLE_RUN_CANARIES = "after training with --canaries M --canary-design whole-run"

#: Every attack by name, in the order ``dpaudit audit --attack`` and the workflow schema list them.
ATTACKS: Mapping[str, Attack] = MappingProxyType(
    {
        attack.name: attack
        for attack in (
            Attack("loss", "−cross-entropy of the target at a checkpoint (Yeom et al. 2018)", _loss_scorer("loss")),
            Attack("confidence", "true-class probability of the target at a checkpoint", _loss_scorer("confidence")),
            Attack(
                "shadow",
                "the DPSGD-GC/DC paper's shadow-model attack (scores written by `dpaudit attack`)",
                _shadow_scores,
                needs="after `dpaudit attack`",
                needs_shadows=True,
            ),
            Attack(
                "lira-online",
                "LiRA (Carlini et al. 2022), in and out Gaussians from the shadows",
                _lira_scorer("online"),
                needs=_HALVES,
                needs_shadows=True,
            ),
            Attack(
                "lira-offline",
                "LiRA (Carlini et al. 2022), the out Gaussian alone",
                _lira_scorer("offline"),
                needs=_HALVES,
                needs_shadows=True,
            ),
            Attack(
                "canary",
                "white-box gradient canaries, every audited step of the run",
                _canary_scores,
                needs="after training with --canaries M",
                whole_run=True,
                claim="mechanism",
            ),
            Attack(
                "canary-run",
                "whole-run canaries, every iterate seen: the log likelihood ratio of member against non-member",
                _run_canary_scorer("all"),
                needs=_WHOLE_RUN_CANARIES,
                whole_run=True,
                claim="run",
            ),
            Attack(
                "canary-final",
                "whole-run canaries, the final model only: the canary coordinate's total update",
                _run_canary_scorer("final"),
                needs=_WHOLE_RUN_CANARIES,
                whole_run=True,
                claim="run",
            ),
            Attack(
                "canary-spread",
                "whole-run canaries, white box, every iterate: each canary's spread over the steps, a test of the "
                "noise's independence across steps",
                _run_canary_scorer("spread"),
                needs=_WHOLE_RUN_CANARIES,
                whole_run=True,
                claim="run",
            ),
        )
    }
)


def get_attack(name: str) -> Attack:
    """The attack called ``name``; an unknown name is a one-line error listing the attacks."""
    check_choice("attack", name, ATTACKS)
    return ATTACKS[name]


def __getattr__(name: str) -> Any:
    if name in _SHADOW_NAMES:  # loaded on first use: the shadow-model attack imports torch
        from dpaudit.attacks import shadow

        return getattr(shadow, name)
    raise AttributeError(f"module 'dpaudit.attacks' has no attribute {name!r}")
