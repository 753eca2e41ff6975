"""Certified lower bounds on ε (Kairouz–Oh–Viswanath + Clopper–Pearson) and how their threshold is chosen.

For a threshold with counts (FP of N, FN of P) the bound is
ε_lo = max(0, ln((1−δ−FPR_u)/FNR_u), ln((1−δ−FNR_u)/FPR_u)) with one-sided Clopper–Pearson upper
bounds FPR_u, FNR_u. Choosing the threshold on the same scores would void the confidence; a
:class:`ThresholdSelection` says how the choice is paid for. The three selections are
:class:`SplitSelection` ("split"), :class:`GaussianSelection` ("gaussian") and
:class:`BonferroniSelection` ("bonferroni"); :data:`SELECTIONS` maps each name to its object, and
every public function takes either the name or the object (:func:`resolve_selection`).
ε is in nats, δ a probability, α = 1 − confidence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from dpaudit._validation import (
    DPAuditError,
    check_alpha,
    check_choice,
    check_confidence,
    check_count,
    check_counts,
    check_delta,
    check_scores,
    check_seed,
    check_split_sizes,
)
from dpaudit.estimate.counts import ScoreCounts, _best_threshold, _certify, _cp_upper, _kov_epsilon

GAUSSIAN_SELECTION_FRACTION = 0.2
"""Share of each class the "gaussian" selection fits on; the rest certifies."""


def epsilon_from_counts(
    *, false_positives: int, nonmembers: int, false_negatives: int, members: int, delta: float, alpha: float
) -> float:
    """Lower bound on ε from one threshold fixed in advance (independently of these counts).

    FPR_u and FNR_u are one-sided Clopper–Pearson upper bounds at α/2 each (union bound: both hold
    with probability ≥ 1 − α), and ε_lo = max(0, ln((1−δ−FPR_u)/FNR_u), ln((1−δ−FNR_u)/FPR_u)); it is
    0 when the confidence rectangle reaches the chance line FPR + FNR = 1 − δ. With zero errors and
    δ = 0 this is ln(p/(1−p)), p = (α/2)^(1/n) for n scores per class (the sample-size ceiling).

    Args:
        false_positives: non-members predicted member.
        nonmembers: number of non-member trials N ≥ 1.
        false_negatives: members predicted non-member.
        members: number of member trials P ≥ 1.
        delta: the DP δ in [0, 1).
        alpha: total significance α in (0, 1) (the bound holds with probability ≥ 1 − α).

    Returns:
        ε lower bound in nats, ≥ 0.

    Raises:
        DPAuditError: bad counts, δ outside [0, 1), α outside (0, 1).
    """
    fp, n_non = check_counts(false_positives, nonmembers, k_name="false_positives", n_name="nonmembers")
    fn, n_mem = check_counts(false_negatives, members, k_name="false_negatives", n_name="members")
    if fp.ndim or fn.ndim:
        raise DPAuditError("epsilon_from_counts takes scalar counts")
    delta = check_delta(delta)
    alpha = check_alpha(alpha)
    return _certify(int(fp), int(n_non), int(fn), int(n_mem), delta, alpha / 2, alpha / 2)[0]


def epsilon_from_rates(*, fpr_upper: npt.ArrayLike, fnr_upper: npt.ArrayLike, delta: float) -> npt.NDArray[np.float64]:
    """ε_lo = max(0, ln((1−δ−FPR_u)/FNR_u), ln((1−δ−FNR_u)/FPR_u)) elementwise (Kairouz–Oh–Viswanath), from upper
    bounds on the error rates already at hand (e.g. Clopper–Pearson bounds of a threshold fixed in advance, or the
    rates a threshold is expected to have); a ratio with a zero denominator or a numerator ≤ 0 counts as 0.

    Args:
        fpr_upper: upper bound(s) on the false-positive rate, in [0, 1].
        fnr_upper: upper bound(s) on the false-negative rate, in [0, 1], broadcast against ``fpr_upper``.
        delta: the DP δ in [0, 1).

    Returns:
        ε_lo in nats, ≥ 0, an array of the broadcast shape.
    """
    return _kov_epsilon(fpr_upper, fnr_upper, check_delta(delta))


@dataclass(frozen=True)
class EpsilonBound:
    """A certified lower bound on ε and how it was obtained.

    Attributes:
        epsilon: the lower bound on ε (nats), ≥ 0; it holds with probability ≥ ``confidence``.
        threshold: the certified threshold (score ≥ threshold predicts member).
        false_positives: FP count of the threshold on the certifying sample.
        false_negatives: FN count of the threshold on the certifying sample.
        fpr_upper: Clopper–Pearson upper bound on FPR used.
        fnr_upper: Clopper–Pearson upper bound on FNR used.
        n_members: member scores in the certifying sample.
        n_nonmembers: non-member scores in the certifying sample.
        delta: the δ of the bound.
        confidence: 1 − α.
        selection: the name of the threshold selection: "split", "gaussian" or "bonferroni".
        method: a one-line description of the method.
    """

    epsilon: float
    threshold: float
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float
    selection: str
    method: str

    def __float__(self) -> float:
        return self.epsilon


# ----------------------------------------------------------------------------------------------
# Threshold selections
# ----------------------------------------------------------------------------------------------


class ThresholdSelection(ABC):
    """How a lower bound chooses its threshold without voiding its confidence.

    A selection knows its ``name`` (the string the public functions accept), its one-line ``method``
    text, the per-side significance levels it certifies at, how many scores of a class certify, and
    how to compute the bound. The methods take arguments that were already checked (as
    :func:`epsilon_lower_bound` checks them): finite 1-D float score arrays, δ in [0, 1), α in (0, 1).

    Attributes:
        name: the selection's name, e.g. "split".
        method: one-line description, as in :attr:`EpsilonBound.method`.
        holds_out: True when part of each class only chooses the threshold (then each class needs
            at least 2 scores), False when all scores certify.
    """

    name: ClassVar[str]
    method: ClassVar[str]
    holds_out: ClassVar[bool]

    @abstractmethod
    def side_alphas(self, alpha: float, *, n_members: int, n_nonmembers: int) -> tuple[float, float]:
        """Per-side significance levels (for FPR, for FNR) whose sum is at most α.

        Args:
            alpha: total significance α = 1 − confidence.
            n_members: P, member scores in the certifying sample.
            n_nonmembers: N, non-member scores in the certifying sample.

        Returns:
            ``(alpha_fpr, alpha_fnr)``.
        """

    @abstractmethod
    def certifying_size(self, n: int) -> int:
        """How many of a class's ``n`` scores certify the chosen threshold."""

    @abstractmethod
    def lower_bound(
        self,
        members: npt.NDArray[np.float64],
        nonmembers: npt.NDArray[np.float64],
        *,
        delta: float,
        alpha: float,
        seed: int,
    ) -> EpsilonBound:
        """The certified lower bound on ε for checked scores (see :func:`epsilon_lower_bound`).

        Args:
            members: 1-D finite member scores.
            nonmembers: 1-D finite non-member scores.
            delta: δ in [0, 1).
            alpha: α = 1 − confidence, in (0, 1).
            seed: non-negative seed of the held-out split (unused when nothing is held out).

        Returns:
            An :class:`EpsilonBound`.
        """

    def ceiling(self, *, n_members: int, n_nonmembers: int, delta: float, alpha: float) -> float:
        """The bound a perfect attack (FP = FN = 0 on the certifying sample) reaches, in nats.

        Args:
            n_members: total member scores, ≥ 2 when the selection holds scores out.
            n_nonmembers: total non-member scores, likewise.
            delta: δ in [0, 1).
            alpha: α = 1 − confidence, in (0, 1).

        Returns:
            The ceiling of :meth:`lower_bound` for these sizes.
        """
        alpha_fp, alpha_fn = self.side_alphas(alpha, n_members=n_members, n_nonmembers=n_nonmembers)
        return _certify(
            0, self.certifying_size(n_nonmembers), 0, self.certifying_size(n_members), delta, alpha_fp, alpha_fn
        )[0]


class _HeldOutSelection(ThresholdSelection):
    """A selection that chooses the threshold on a seeded random part of each class and certifies it
    on the rest at α/2 per side."""

    holds_out: ClassVar[bool] = True

    @abstractmethod
    def selection_size(self, n: int) -> int:
        """How many of a class's ``n`` scores choose the threshold."""

    def side_alphas(self, alpha: float, *, n_members: int = 0, n_nonmembers: int = 0) -> tuple[float, float]:
        """α/2 per side (a union bound over the two sides of one threshold)."""
        return alpha / 2, alpha / 2

    def certifying_size(self, n: int) -> int:
        """``n`` minus :meth:`selection_size`."""
        return n - self.selection_size(n)

    def split(self, n: int, rng: np.random.Generator) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(selection part, certifying part): indices of a random permutation of ``n`` scores drawn from ``rng``,
        its first :meth:`selection_size` and the rest."""
        order = rng.permutation(n)
        size = self.selection_size(n)
        return order[:size], order[size:]

    def _certify_cut(
        self,
        cut: float,
        members: npt.NDArray[np.float64],
        nonmembers: npt.NDArray[np.float64],
        delta: float,
        alpha: float,
        seed: int,
    ) -> EpsilonBound:
        alpha_fp, alpha_fn = self.side_alphas(alpha)
        fp = int(np.count_nonzero(nonmembers >= cut))
        fn = int(np.count_nonzero(members < cut))
        epsilon, fpr_u, fnr_u = _certify(fp, nonmembers.size, fn, members.size, delta, alpha_fp, alpha_fn)
        return EpsilonBound(
            epsilon,
            float(cut),
            fp,
            fn,
            fpr_u,
            fnr_u,
            int(members.size),
            int(nonmembers.size),
            delta,
            1.0 - alpha,
            self.name,
            self.method + f" (seed {seed})",
        )


@dataclass(frozen=True)
class SplitSelection(_HeldOutSelection):
    """``"split"``: choose the threshold empirically on a held-out half, certify it on the other half.

    Each class is permuted with ``np.random.default_rng(seed)`` (members first, then non-members); the
    first ⌊n/2⌋ of each permutation form the selection half, the remaining ⌈n/2⌉ the certifying half.
    The threshold maximising the selection half's bound (Clopper–Pearson at α/2 per side; ties broken
    by larger TPR − FPR) is placed in the middle of the gap between its selection score and the next
    lower one, then certified once on the certifying half at α/2 per side.
    """

    name: ClassVar[str] = "split"
    method: ClassVar[str] = "Clopper-Pearson, threshold chosen on a held-out half"

    def selection_size(self, n: int) -> int:
        """⌊n/2⌋."""
        return n // 2

    def lower_bound(
        self,
        members: npt.NDArray[np.float64],
        nonmembers: npt.NDArray[np.float64],
        *,
        delta: float,
        alpha: float,
        seed: int,
    ) -> EpsilonBound:
        """The bound of the threshold chosen on the selection halves, certified on the other halves."""
        rng = np.random.default_rng(seed)
        sel_m, cert_m = self.split(members.size, rng)
        sel_n, cert_n = self.split(nonmembers.size, rng)
        chosen = ScoreCounts.from_scores(member_scores=members[sel_m], nonmember_scores=nonmembers[sel_n])
        alpha_fp, alpha_fn = self.side_alphas(alpha)
        # the largest bound; ties → the largest TPR − FPR, then the last (np.lexsort((youden, bound))[-1])
        best = _best_threshold(
            lambda fpr_u, fnr_u: _kov_epsilon(fpr_u, fnr_u, delta),
            chosen,
            alpha_fp=alpha_fp,
            alpha_fn=alpha_fn,
            youden=chosen.tpr - chosen.fpr,
        )
        cut = chosen.gap_threshold(best)
        return self._certify_cut(cut, members[cert_m], nonmembers[cert_n], delta, alpha, seed)


@dataclass(frozen=True)
class GaussianSelection(_HeldOutSelection):
    """``"gaussian"``: choose the threshold from normal fits to a held-out fifth, certify on the rest.

    Fit N(m₁, s₁²) to ⌊n/5⌋ (at least one) of the members and N(m₀, s₀²) to as many of the
    non-members, pick the threshold whose bound is largest under the fits with the certifying sizes,
    and certify it on the remaining four fifths at α/2 per side. The fits only choose the threshold,
    so the bound stays valid whatever the score distributions are; when they are Gaussian (white-box
    canaries), the choice is far less noisy than an empirical one in the tail.

    Attributes:
        fraction: share of each class used for the fits (:data:`GAUSSIAN_SELECTION_FRACTION`).
        grid_points: candidate thresholds, evenly spaced over the fits' ±10 standard deviations.
    """

    name: ClassVar[str] = "gaussian"
    method: ClassVar[str] = "Clopper-Pearson, threshold chosen by Gaussian fits to a held-out fifth"
    fraction: ClassVar[float] = GAUSSIAN_SELECTION_FRACTION
    grid_points: ClassVar[int] = 4001

    def selection_size(self, n: int) -> int:
        """⌊n·fraction⌋, at least 1."""
        return max(1, int(n * self.fraction))

    def lower_bound(
        self,
        members: npt.NDArray[np.float64],
        nonmembers: npt.NDArray[np.float64],
        *,
        delta: float,
        alpha: float,
        seed: int,
    ) -> EpsilonBound:
        """The bound of the threshold the normal fits choose, certified on the remaining scores."""
        from scipy import stats

        rng = np.random.default_rng(seed)
        fit_m, cert_m = (members[part] for part in self.split(members.size, rng))
        fit_n, cert_n = (nonmembers[part] for part in self.split(nonmembers.size, rng))
        scale = max(float(np.ptp(np.concatenate([fit_m, fit_n]))), abs(float(fit_m.mean())), 1.0)
        mean_m, mean_n = float(fit_m.mean()), float(fit_n.mean())
        std_m = max(float(fit_m.std()), 1e-9 * scale)
        std_n = max(float(fit_n.std()), 1e-9 * scale)
        low = min(mean_m - 10 * std_m, mean_n - 10 * std_n)
        high = max(mean_m + 10 * std_m, mean_n + 10 * std_n)
        cuts = np.linspace(low, high, self.grid_points)
        alpha_fp, alpha_fn = self.side_alphas(alpha)
        expected_fp = np.round(cert_n.size * stats.norm.sf(cuts, loc=mean_n, scale=std_n)).astype(np.int64)
        expected_fn = np.round(cert_m.size * stats.norm.cdf(cuts, loc=mean_m, scale=std_m)).astype(np.int64)
        bound = _kov_epsilon(
            _cp_upper(expected_fp, cert_n.size, alpha_fp), _cp_upper(expected_fn, cert_m.size, alpha_fn), delta
        )
        best = np.flatnonzero(bound == bound.max())
        return self._certify_cut(cuts[best[best.size // 2]], cert_m, cert_n, delta, alpha, seed)


@dataclass(frozen=True)
class BonferroniSelection(ThresholdSelection):
    """``"bonferroni"``: every threshold on all scores, with bounds valid for all of them at once.

    FPR_u is certified at α/(2N) and FNR_u at α/(2P): a Bonferroni correction over the count levels at
    which a bound can fail. FP(t) can be atypically small at only N levels and FN(t) at only P,
    whichever (data-dependent) thresholds are tried, so the bounds hold simultaneously for every
    threshold with probability ≥ 1 − α, ties included. With distinct scores this is never stricter
    than α/(2·#thresholds) (#thresholds = N + P + 1).
    """

    name: ClassVar[str] = "bonferroni"
    method: ClassVar[str] = "Clopper-Pearson, simultaneous over all thresholds (Bonferroni over count levels)"
    holds_out: ClassVar[bool] = False

    def side_alphas(self, alpha: float, *, n_members: int, n_nonmembers: int) -> tuple[float, float]:
        """α/(2N) for FPR and α/(2P) for FNR."""
        return alpha / (2 * n_nonmembers), alpha / (2 * n_members)

    def certifying_size(self, n: int) -> int:
        """All ``n`` scores certify."""
        return n

    def band(self, counts: ScoreCounts, alpha: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Clopper–Pearson upper bounds on FPR and FNR at every threshold of ``counts``, valid
        simultaneously with probability ≥ 1 − α.

        Args:
            counts: the :class:`ScoreCounts` of the scores.
            alpha: α = 1 − confidence, in (0, 1).

        Returns:
            ``(fpr_upper, fnr_upper)``, one entry per threshold.
        """
        alpha_fp, alpha_fn = self.side_alphas(alpha, n_members=counts.n_members, n_nonmembers=counts.n_nonmembers)
        return _cp_upper(counts.fp, counts.n_nonmembers, alpha_fp), _cp_upper(counts.fn, counts.n_members, alpha_fn)

    def lower_bound_from_counts(self, counts: ScoreCounts, *, delta: float, alpha: float) -> EpsilonBound:
        """:meth:`lower_bound` from the counts of already sorted scores.

        Args:
            counts: the :class:`ScoreCounts` of the scores.
            delta: δ in [0, 1).
            alpha: α = 1 − confidence, in (0, 1).

        Returns:
            An :class:`EpsilonBound` for the best threshold of the simultaneous band.
        """
        alpha_fp, alpha_fn = self.side_alphas(alpha, n_members=counts.n_members, n_nonmembers=counts.n_nonmembers)
        # np.argmax of the KOV ε over the band (:meth:`band`), without inverting every count
        best = _best_threshold(
            lambda fpr_u, fnr_u: _kov_epsilon(fpr_u, fnr_u, delta), counts, alpha_fp=alpha_fp, alpha_fn=alpha_fn
        )
        fp = int(counts.fp[best])
        fn = int(counts.fn[best])
        epsilon, fpr_u, fnr_u = _certify(fp, counts.n_nonmembers, fn, counts.n_members, delta, alpha_fp, alpha_fn)
        return EpsilonBound(
            epsilon,
            float(counts.thresholds[best]),
            fp,
            fn,
            fpr_u,
            fnr_u,
            counts.n_members,
            counts.n_nonmembers,
            delta,
            1.0 - alpha,
            self.name,
            self.method,
        )

    def lower_bound(
        self,
        members: npt.NDArray[np.float64],
        nonmembers: npt.NDArray[np.float64],
        *,
        delta: float,
        alpha: float,
        seed: int = 0,
    ) -> EpsilonBound:
        """:meth:`lower_bound_from_counts` of the scores' counts (``seed`` is unused)."""
        counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
        return self.lower_bound_from_counts(counts, delta=delta, alpha=alpha)


SELECTIONS: dict[str, ThresholdSelection] = {
    selection.name: selection for selection in (SplitSelection(), GaussianSelection(), BonferroniSelection())
}
"""The threshold selections by name: "split", "gaussian" and "bonferroni"."""


def resolve_selection(
    selection: str | ThresholdSelection, *, choices: Iterable[str] | None = None
) -> ThresholdSelection:
    """The :class:`ThresholdSelection` a ``selection`` argument names.

    Args:
        selection: a name of :data:`SELECTIONS` ("split", "gaussian" or "bonferroni") or a
            :class:`ThresholdSelection` object.
        choices: the names allowed here (default: all of :data:`SELECTIONS`); an object is held to its
            ``name`` when ``choices`` is given.

    Returns:
        The selection object.

    Raises:
        DPAuditError: an unknown name ("unknown selection 'x'; choose from: …"), or a name or object
            outside ``choices``.
    """
    names = tuple(SELECTIONS) if choices is None else tuple(choices)
    if isinstance(selection, ThresholdSelection):
        if choices is not None:
            check_choice("selection", selection.name, names)
        return selection
    check_choice("selection", selection, names)
    return SELECTIONS[selection]


# ----------------------------------------------------------------------------------------------
# Public bounds
# ----------------------------------------------------------------------------------------------


def epsilon_lower_bound(
    member_scores: npt.ArrayLike,
    nonmember_scores: npt.ArrayLike,
    *,
    delta: float,
    confidence: float = 0.95,
    selection: str | ThresholdSelection = "split",
    seed: int = 0,
) -> EpsilonBound:
    """Lower bound on ε that holds with probability ≥ confidence (Kairouz–Oh–Viswanath + Clopper–Pearson).

    For a threshold with counts (FP of N, FN of P) the bound is
    ε_lo = max(0, ln((1−δ−FPR_u)/FNR_u), ln((1−δ−FNR_u)/FPR_u)) with one-sided Clopper–Pearson upper
    bounds FPR_u, FNR_u (union bound over the two sides). Choosing the threshold on the same data
    would invalidate the bound, so ``selection`` says how the choice is paid for:

    * ``"split"``: each class is permuted with ``np.random.default_rng(seed)`` (members first, then
      non-members); the first ⌊n/2⌋ of each permutation form the selection half, the remaining
      ⌈n/2⌉ the certifying half. The threshold maximising the selection half's bound (CP at α/2 per
      side; ties broken by larger TPR − FPR) is placed in the middle of the gap between its selection
      score and the next lower one, then certified once on the certifying half at α/2 per side.
    * ``"gaussian"``: the same kind of split, but only ⌊n/5⌋ of each class (at least one) choose the
      threshold: a normal distribution is fitted to each class there, and the threshold maximising the
      bound the fits predict for the certifying sizes is certified on the remaining four fifths at α/2
      per side. Valid for any scores; it pays off when they are near Gaussian (white-box canaries),
      where an empirical tail choice is noisy.
    * ``"bonferroni"``: all data and all thresholds, with FPR_u at α/(2N) and FNR_u at α/(2P). This
      is a Bonferroni correction over the count levels at which a bound can fail: FP(t) can be
      atypically small at only N levels and FN(t) at only P, whichever (data-dependent) thresholds are
      tried, so the bounds hold simultaneously for every threshold with probability ≥ 1 − α, ties
      included. With distinct scores this is never stricter than α/(2·#thresholds) (#thresholds =
      N + P + 1).

    Args:
        member_scores: 1-D finite member scores (higher = member); one independent trial each.
        nonmember_scores: 1-D finite non-member scores.
        delta: the DP δ in [0, 1).
        confidence: 1 − α, in (0, 1).
        selection: "split", "gaussian" or "bonferroni", or a :class:`ThresholdSelection` object.
        seed: non-negative integer seed of the split (ignored for "bonferroni").

    Returns:
        An :class:`EpsilonBound`; ``float(bound)`` is ε_lo in nats. It never exceeds
        :func:`epsilon_ceiling` for the same sizes, and equals it when the certified threshold makes no
        error on the certifying sample (always so for perfectly separated scores with "bonferroni";
        with "split", whenever the chosen cut also separates the held-out half, e.g. separated clusters).

    Raises:
        DPAuditError: empty or non-finite scores, δ outside [0, 1), confidence outside (0, 1), unknown
            selection, fewer than 2 scores per class with "split" or "gaussian".
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    delta = check_delta(delta)
    alpha = check_confidence(confidence)
    chosen = resolve_selection(selection)
    seed = check_seed(seed)
    if chosen.holds_out:
        check_split_sizes(members, nonmembers)
    return chosen.lower_bound(members, nonmembers, delta=delta, alpha=alpha, seed=seed)


def epsilon_ceiling(
    *,
    n_members: int,
    n_nonmembers: int,
    delta: float,
    confidence: float = 0.95,
    selection: str | ThresholdSelection = "split",
) -> float:
    """The largest :func:`epsilon_lower_bound` these sample sizes allow, reached by a perfect attack.

    It is the bound for FP = FN = 0 on the certifying sample: for ``"split"`` the held-out halves of
    ⌈n_members/2⌉ and ⌈n_nonmembers/2⌉ scores at α/2 per side (for ``"gaussian"`` the four fifths that
    certify); for ``"bonferroni"`` all scores with
    FPR_u at α/(2·n_nonmembers) and FNR_u at α/(2·n_members) (the correction every threshold, the
    perfect one included, is certified at; it does not depend on how many distinct scores there are).
    Print it next to ε_lo: a bound at the ceiling means the sample size, not the attack, limits it.

    Args:
        n_members: total member scores (as passed to :func:`epsilon_lower_bound`), ≥ 1 (≥ 2 for split).
        n_nonmembers: total non-member scores, ≥ 1 (≥ 2 for split).
        delta: the DP δ in [0, 1).
        confidence: 1 − α, in (0, 1).
        selection: "split", "gaussian" or "bonferroni", or a :class:`ThresholdSelection` object.

    Returns:
        The ceiling in nats.

    Raises:
        DPAuditError: bad sizes, δ outside [0, 1), confidence outside (0, 1), unknown selection.

    Examples:
        The most any attack can certify with 720 members and 720 non-members, half of them held out for the
        threshold:

        >>> round(epsilon_ceiling(n_members=720, n_nonmembers=720, delta=1e-5, confidence=0.95, selection="split"), 2)
        4.58
    """
    n_mem = check_count("n_members", n_members, allow_zero=False)
    n_non = check_count("n_nonmembers", n_nonmembers, allow_zero=False)
    delta = check_delta(delta)
    alpha = check_confidence(confidence)
    chosen = resolve_selection(selection)
    if chosen.holds_out and (n_mem < 2 or n_non < 2):
        raise DPAuditError(f"selection={chosen.name!r} needs at least 2 scores per class, got {n_mem} and {n_non}")
    return chosen.ceiling(n_members=n_mem, n_nonmembers=n_non, delta=delta, alpha=alpha)


__all__ = [
    "GAUSSIAN_SELECTION_FRACTION",
    "SELECTIONS",
    "BonferroniSelection",
    "EpsilonBound",
    "GaussianSelection",
    "SplitSelection",
    "ThresholdSelection",
    "epsilon_ceiling",
    "epsilon_from_counts",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "resolve_selection",
]
