"""Membership-inference attacks, and the registry of those that ``dpaudit audit --run`` scores.

:data:`ATTACKS` holds one :class:`Attack` per name, in the order the command line lists them: what a run needs
for it (shadow models, paired halves, canaries, the scores of ``dpaudit attack``), how it scores the run's target
(:meth:`Attack.scores` → :class:`AttackScores`: member and non-member scores, and the ε the run claims against
them), which claimed ε an audit compares with, and which whole-run statistic its scores are. The command line
(``dpaudit audit``, ``dpaudit list attacks``, the reproduction's ``validation``), :func:`dpaudit.audit.audit_model`,
the run summaries (:func:`dpaudit.summary.summarize_run`) and the workflow schema (a test checks its ``attacks``
enums) all read it, so adding an attack is one call of :func:`register_attack`, from inside dpaudit or from a plugin
module of your own (:mod:`dpaudit.plugins`).

Importing this package loads no torch: each scorer imports its module (which does) when it first runs, and the
shadow-model attack's names load on first use.
"""

from __future__ import annotations

import csv
import io
import math
import re
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

__all__ = ["ATTACKS", "Attack", "AttackScores", "get_attack", "read_scores_csv", "register_attack", *_SHADOW_NAMES]

#: The whole-run statistics a family bound reads scores as (``statistic`` of
#: :func:`dpaudit.whole_run.family_lower_bound`; a test keeps this equal to ``dpaudit.whole_run.STATISTICS``).
FAMILY_STATISTICS = ("all-iterates", "final-model")
#: What an attack may claim against it: the run's composed ε or the ε of the mechanism each trial faces.
CLAIMS = ("run", "mechanism")
#: Names an audit's JSON already gives to audits without a registered attack (``--scores``, ``--canary-record``).
RESERVED_NAMES = ("scores", "canary-record")
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


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
    """One membership-inference attack on a ``dpaudit train`` run (register one with :func:`register_attack`).

    Attributes:
        name: its name in ``dpaudit audit --attack`` and in params.yaml's ``audit.attacks``: lowercase letters,
            digits and single hyphens, starting with a letter (it names the file ``audit_<name>.json``).
        description: one line.
        scorer: ``scorer(run_dir, *, epoch, delta) -> AttackScores``, without ``epsilon_run`` (which
            :meth:`scores` adds); ``run_dir`` is a ``pathlib.Path``, ``epoch`` the checkpoint epoch (None for a
            whole-run attack), ``delta`` the audit's δ.
        needs: what the run needs beyond a plain ``dpaudit train``, as ``dpaudit audit --help`` says it; None:
            nothing.
        needs_shadows: it scores the target with the run's shadow models; the attacks without them are those a
            targets-only audit (``audit.cross_optimizer``, ``audit.validation``) can use.
        whole_run: it scores the whole run (every step) instead of one checkpoint epoch.
        claim: the ε the run claims against it: "run" (the composed ε of the whole run, ``epsilon_run``) or
            "mechanism" (the ε of the mechanism each trial faces, ``epsilon_mechanism``).
        family_statistic: for whole-run canary scores that come with a ledger (:attr:`AttackScores.ledger`), the
            statistic the family lower bound reads them as (:data:`FAMILY_STATISTICS`: "all-iterates", Λ of
            every iterate, or "final-model", the final model only, which also reports the last-iterate heuristic
            ε); None: no family bound (every other attack, and a statistic outside the family such as the
            spread over the steps).
        model_scorer: ``model_scorer(model, records, *, device) -> scores``: the per-record scores (higher =
            member) of a model in memory, for :func:`dpaudit.audit.audit_model`; None: the attack needs a run.

    Raises:
        DPAuditError: one line naming the field, for a record that breaks any of the above.
    """

    name: str
    description: str
    scorer: Callable[..., AttackScores] = field(repr=False)
    needs: str | None = None
    needs_shadows: bool = False
    whole_run: bool = False
    claim: str = "run"
    family_statistic: str | None = None
    model_scorer: Callable[..., np.ndarray] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise DPAuditError(
                f"attack name {brief(self.name)} must be lowercase letters, digits and single hyphens, starting "
                "with a letter (e.g. 'my-attack')"
            )
        where = f"attack {self.name!r}"
        for key in ("description", "needs"):
            text = getattr(self, key)
            if (text is not None or key == "description") and (
                not isinstance(text, str) or not text.strip() or "\n" in text
            ):
                raise DPAuditError(f"{where}: {key} must be one non-empty line of text, got {brief(text)}")
        for key in ("scorer", "model_scorer"):
            if not callable(getattr(self, key)) and (key == "scorer" or getattr(self, key) is not None):
                raise DPAuditError(f"{where}: {key} must be a function, got {brief(getattr(self, key))}")
        for key in ("needs_shadows", "whole_run"):
            if not isinstance(getattr(self, key), bool):
                raise DPAuditError(f"{where}: {key} must be True or False, got {brief(getattr(self, key))}")
        check_choice(f"claim of {where}", self.claim, CLAIMS)
        if self.family_statistic is not None:
            check_choice(f"family_statistic of {where}", self.family_statistic, FAMILY_STATISTICS)
            if not self.whole_run:
                raise DPAuditError(f"{where}: a family_statistic needs whole_run=True (it reads a run's ledger)")

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

        Raises:
            DPAuditError: the scorer returned something other than :class:`AttackScores` (a plugin's bug, named
                in one line).
        """
        run = Path(run_dir)
        planned = read_json(RunDir(run).config)["derived"].get("planned_epsilon")
        found = self.scorer(run, epoch=epoch, delta=delta)
        if not isinstance(found, AttackScores):
            raise DPAuditError(
                f"the scorer of attack {self.name!r} returned {type(found).__name__}, not dpaudit.attacks.AttackScores"
            )
        return replace(found, epsilon_run=planned)


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


def _rmia_scorer(variant: str) -> Callable[..., AttackScores]:
    def scorer(run: Path, *, epoch: int, delta: float) -> AttackScores:
        from dpaudit.attacks.rmia import run_rmia_scores

        return AttackScores(*run_rmia_scores(run, epoch=epoch, variant=variant))

    return scorer


def _model_scorer(signal: str) -> Callable[..., np.ndarray]:
    def model_scorer(model: Any, records: Any, *, device: Any = "cpu") -> np.ndarray:
        from dpaudit.attacks.loss import loss_scores

        return loss_scores(model, records, signal=signal, device=device)

    return model_scorer


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

_ATTACKS: dict[str, Attack] = {}
#: Every attack by name, in the order of registration (``dpaudit audit --attack``, ``dpaudit list attacks`` and the
#: workflow schema list them so): dpaudit's own, then those of plugins. Read-only: add one with
#: :func:`register_attack`.
ATTACKS: Mapping[str, Attack] = MappingProxyType(_ATTACKS)


def register_attack(
    *,
    name: str,
    description: str,
    scorer: Callable[..., AttackScores],
    needs: str | None = None,
    needs_shadows: bool = False,
    whole_run: bool = False,
    claim: str = "run",
    family_statistic: str | None = None,
    model_scorer: Callable[..., np.ndarray] | None = None,
) -> Attack:
    """Add an attack to :data:`ATTACKS`, from dpaudit or from outside it, and return its record.

    Once registered (before the command line is built: at the import of a plugin module, see
    :mod:`dpaudit.plugins`), ``dpaudit audit --run RUN --attack NAME`` scores runs with it, ``dpaudit list
    attacks`` lists it and, with a ``model_scorer``, :func:`dpaudit.audit.audit_model` accepts it.

    Args:
        name: lowercase letters, digits and single hyphens, starting with a letter; not a registered name, nor
            one of :data:`RESERVED_NAMES`.
        description: one line, shown by ``dpaudit list attacks``.
        scorer: ``scorer(run_dir: Path, *, epoch: int | None, delta: float) -> AttackScores``: the member and
            non-member scores (higher = member) of the run's target at checkpoint ``epoch`` (None when
            ``whole_run``); δ is the audit's.
        needs, needs_shadows, whole_run, claim, family_statistic, model_scorer: as the fields of
            :class:`Attack`.

    Returns:
        The validated :class:`Attack`.

    Raises:
        DPAuditError: one line, for a name already registered or reserved, or a field :class:`Attack` refuses.

    Example:
        >>> import numpy as np
        >>> from dpaudit import DPAuditError
        >>> from dpaudit.attacks import AttackScores, register_attack
        >>> def constant(run_dir, *, epoch, delta):  # every record scores 0: an attack that finds nothing
        ...     return AttackScores(members=np.zeros(3), nonmembers=np.zeros(3))
        >>> try:
        ...     register_attack(name="loss", description="the same name again", scorer=constant)
        ... except DPAuditError as error:
        ...     print(error)
        attack 'loss' is already registered (dpaudit.attacks.ATTACKS); choose another name
    """
    attack = Attack(
        name=name,
        description=description,
        scorer=scorer,
        needs=needs,
        needs_shadows=needs_shadows,
        whole_run=whole_run,
        claim=claim,
        family_statistic=family_statistic,
        model_scorer=model_scorer,
    )
    if name in _ATTACKS:
        raise DPAuditError(f"attack {name!r} is already registered (dpaudit.attacks.ATTACKS); choose another name")
    if name in RESERVED_NAMES:
        raise DPAuditError(f"attack name {name!r} is reserved (an audit's JSON names its own {name!r} audits)")
    _ATTACKS[name] = attack
    return attack


register_attack(
    name="loss",
    description="−cross-entropy of the target at a checkpoint (Yeom et al. 2018)",
    scorer=_loss_scorer("loss"),
    model_scorer=_model_scorer("loss"),
)
register_attack(
    name="confidence",
    description="true-class probability of the target at a checkpoint",
    scorer=_loss_scorer("confidence"),
    model_scorer=_model_scorer("confidence"),
)
register_attack(
    name="shadow",
    description="the DPSGD-GC/DC paper's shadow-model attack (scores written by `dpaudit attack`)",
    scorer=_shadow_scores,
    needs="after `dpaudit attack`",
    needs_shadows=True,
)
register_attack(
    name="lira-online",
    description="LiRA (Carlini et al. 2022), in and out Gaussians from the shadows",
    scorer=_lira_scorer("online"),
    needs=_HALVES,
    needs_shadows=True,
)
register_attack(
    name="lira-offline",
    description="LiRA (Carlini et al. 2022), the out Gaussian alone",
    scorer=_lira_scorer("offline"),
    needs=_HALVES,
    needs_shadows=True,
)
register_attack(
    name="rmia-online",
    description="RMIA (Zarifzadeh et al. 2024): pairwise likelihood ratios against test-split records, every shadow "
    "a reference model",
    scorer=_rmia_scorer("online"),
    needs=_HALVES,
    needs_shadows=True,
)
register_attack(
    name="rmia-offline",
    description="RMIA (Zarifzadeh et al. 2024) with the shadows that did not train on each record as references",
    scorer=_rmia_scorer("offline"),
    needs=_HALVES,
    needs_shadows=True,
)
register_attack(
    name="canary",
    description="white-box gradient canaries, every audited step of the run",
    scorer=_canary_scores,
    needs="after training with --canaries M",
    whole_run=True,
    claim="mechanism",
)
register_attack(
    name="canary-run",
    description="whole-run canaries, every iterate seen: the log likelihood ratio of member against non-member",
    scorer=_run_canary_scorer("all"),
    needs=_WHOLE_RUN_CANARIES,
    whole_run=True,
    family_statistic="all-iterates",
)
register_attack(
    name="canary-final",
    description="whole-run canaries, the final model only: the canary coordinate's total update",
    scorer=_run_canary_scorer("final"),
    needs=_WHOLE_RUN_CANARIES,
    whole_run=True,
    family_statistic="final-model",
)
register_attack(
    name="canary-spread",
    description="whole-run canaries, white box, every iterate: each canary's spread over the steps, a test of the "
    "noise's independence across steps",
    scorer=_run_canary_scorer("spread"),
    needs=_WHOLE_RUN_CANARIES,
    whole_run=True,
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
