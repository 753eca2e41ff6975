"""Membership-inference attacks, and the registry of those that ``dpaudit audit --run`` scores.

:data:`ATTACKS` holds one :class:`Attack` per name, in the order the command line lists them: what a run needs
for it (shadow models, paired halves, canaries, the scores of ``dpaudit attack``), how it scores the run's target
(:meth:`Attack.scores` → :class:`AttackScores`: member and non-member scores, and the ε the run claims against
them) and which claimed ε an audit compares with. The command line (``dpaudit audit``, the reproduction's
``validation``), the run summaries (:func:`dpaudit.summary.summarize_run`) and the workflow schema (a test checks its
``attacks`` enums) all read it, so adding an attack is one entry in :data:`ATTACKS`.

Importing this package loads no torch: each scorer imports its module (which does) when it first runs, and the
shadow-model attack's names load on first use.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit._io import read_json
from dpaudit._validation import DPAuditError, brief, check_choice
from dpaudit.integrity import verify_file
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


_MEMBER_VALUES = {"0": 0, "1": 1, "false": 0, "true": 1}


def read_scores_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) from a CSV with columns ``score`` and ``is_member`` (1/0).

    The file is UTF-8 text, with or without a byte-order mark; ``is_member`` is 0, 1, true or false (any case);
    every score a finite number. Rows are counted as the file's lines, the header being row 1; blank lines are
    skipped.

    Raises:
        DPAuditError: one line naming the file (and the row, where one is at fault): a missing or unreadable
            file, one not saved as UTF-8 (UTF-16, Latin-1, …), an empty or header-only file, a missing column, a
            row with fewer or more fields than the header, a score that is not a finite number or an
            ``is_member`` that is not 0 or 1.
    """
    path = Path(path)
    if not path.is_file():
        raise DPAuditError(f"score file not found: {path}")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DPAuditError(f"cannot read the score file {path}: {error.strerror or error}") from None
    text = _utf8_text(path, data)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next((row for row in reader if row), None)
        if header is None:
            raise DPAuditError(f"{path} is empty: it needs a header row (score, is_member) and one row per score")
        header = [name.strip() for name in header]
        missing = {"score", "is_member"} - set(header)
        if missing:
            raise DPAuditError(f"{path} lacks the column(s) {', '.join(sorted(missing))} (need score, is_member)")
        score_at, member_at = header.index("score"), header.index("is_member")
        scores, members = [], []
        for row in reader:
            if not row:
                continue
            where = f"{path}, row {reader.line_num}"
            if len(row) != len(header):
                fewer = "fewer" if len(row) < len(header) else "more"
                raise DPAuditError(f"{where} has {len(row)} field(s), {fewer} than the header's {len(header)}")
            try:
                score = float(row[score_at])
            except ValueError:
                raise DPAuditError(f"{where}: score must be a number, got {brief(row[score_at])}") from None
            if not math.isfinite(score):
                raise DPAuditError(f"{where}: score must be a finite number, got {brief(row[score_at])}")
            member = _MEMBER_VALUES.get(row[member_at].strip().lower())
            if member is None:
                raise DPAuditError(f"{where}: is_member must be 0 or 1 (or true/false), got {brief(row[member_at])}")
            scores.append(score)
            members.append(member)
    except csv.Error as error:
        raise DPAuditError(f"{path}, row {reader.line_num}: not valid CSV ({error})") from None
    if not scores:
        raise DPAuditError(f"{path} has a header but no rows of scores")
    values, member_flags = np.array(scores, dtype=float), np.array(members, dtype=bool)
    return values[member_flags], values[~member_flags]


def _utf8_text(path: Path, data: bytes) -> str:
    """The text of a score file saved as UTF-8 (a byte-order mark dropped); any other encoding refused."""
    refuse = f"{path} is not UTF-8 text ({{}}); save it as UTF-8"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DPAuditError(refuse.format("it starts with a UTF-16 byte-order mark"))
    if b"\x00" in data:
        raise DPAuditError(refuse.format("it holds NUL bytes, as UTF-16 text does"))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DPAuditError(refuse.format(f"byte 0x{data[error.start]:02x} on line {line} is not UTF-8")) from None


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
    verify_file(path)
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
