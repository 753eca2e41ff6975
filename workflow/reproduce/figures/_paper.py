"""Helpers of the AdaDPIGU, TP-TopK, DP-PSAC and D2P2-SGD figures: run summaries, manifest entries, tables,
the ε̂ conventions.

Conventions of every paper figure: the theoretical ε is the run's composed ε at δ (RDP accountant,
replayed from its privacy ledger). Beside it, ε̂ of the black-box loss attack on the checkpoint, comparable to
the run's ε: first its 95 % lower bound (the empirical number that certifies leakage), then the papers' eq. 20
point estimate, only ever shown with its null level beside it (:func:`point_with_null`): the 95 % quantile of the
same estimate on the same scores with permuted membership labels
(:func:`dpaudit.estimate.epsilon_point_null`), i.e. what chance alone gives. Eq. 20 maximised over all
thresholds is about 1.1 on average at 360 + 360 scores with no leakage at all, so a point at or below its null
level says nothing, even above the theoretical ε. Summaries written before the null level existed show
"null n/a". Tables also give the white-box canary audit's ε̂ lower bound, which is comparable to the theoretical
ε of one step (the mechanism each canary faces), not to the run's ε. The matched-ε tables put first, where
whole-run canaries fit the optimizer, the strongest audit: the family bound of the method's twin run in the audit
ladder (the same optimizer at the same target ε with whole-run canaries), comparable to the run's ε.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import atomic_write_bytes, read_json
from dpaudit._validation import DPAuditError
from dpaudit.rundir import RunDir
from dpaudit.stats import decide
from reproduce.experiments import load_summaries

PAPERS = {
    "adadpigu": "AdaDPIGU, differentially private SGD with adaptive importance-based gradient updates",
    "tp_topk": "When do fewer coordinates suffice in DP-SGD? (TP-TopK)",
    "dp_psac": "Differentially private learning with per-sample adaptive clipping (DP-PSAC)",
    "d2p2_sgd": "Dynamically private SGD with random projection (D2P2-SGD)",
}
LOSS_EPSILON_LABEL = "ε̂ loss attack"
SKIPPED = [  # listed in figures/manifest.json with the reason; drawn when the user supplies the data
    {
        "name": "tp_topk/table5",
        "paper": PAPERS["tp_topk"],
        "figure": "Table 5",
        "skipped": "needs EyePACS retinal images (Kaggle licence, not freely downloadable); supply them as a dataset "
        "to run it",
    },
    {
        "name": "dp_psac/table3",
        "paper": PAPERS["dp_psac"],
        "figure": "Table 3",
        "skipped": "needs GLUE with a pretrained RoBERTa (private-transformers); supply the data and weights to run it",
    },
    {
        "name": "tp_topk/table6",
        "paper": PAPERS["tp_topk"],
        "figure": "Table 6",
        "skipped": "contextual table of literature numbers; its own rows are Table 2's",
    },
]


VERDICTS = ("holds", "contradicted", "inconclusive")
#: "paper": evidence about a paper's claim; "check": true by construction, or a check of the toolkit itself.
KINDS = ("paper", "check")


def claim(text: str, verdict: str, /, *, test: str, kind: str = "paper", **numbers: Any) -> dict[str, Any]:
    """A manifest claim: its text, verdict (one of :data:`VERDICTS`), the test that decided it (one line:
    statistic, interval or tolerance, level, trials/records), its kind (:data:`KINDS`) and its numbers (which may
    hold a comparison's own ``verdict``, as :func:`accuracy_verdict` gives it).

    Raises:
        DPAuditError: On an unknown verdict or kind, an empty test, or no numbers.
    """
    if verdict not in VERDICTS:
        raise DPAuditError(f"claim verdict must be one of {VERDICTS}, got {verdict!r} ({text})")
    if kind not in KINDS:
        raise DPAuditError(f"claim kind must be one of {KINDS}, got {kind!r} ({text})")
    if not test or not numbers:
        raise DPAuditError(f"claim {text!r} needs a test and numbers")
    return {"claim": text, "verdict": verdict, "kind": kind, "test": test, "numbers": numbers}


QUOTES_FILE = Path(__file__).with_name("quotes.yaml")


def attach_quotes(entry: dict[str, Any], *, name: str) -> dict[str, Any]:
    """Give each paper claim of figure ``name``'s manifest ``entry`` the paper's own words (``quote``, ``section``,
    ``dataset``; :data:`QUOTES_FILE`, matched by the start of the claim's text), or ``quote: None`` with a ``note``
    saying that no sentence of the paper makes it. Changes ``entry`` in place and returns it.

    Raises:
        DPAuditError: a paper claim that the quotes file does not list (every claim must carry the paper's words).
    """
    import yaml

    listed = yaml.safe_load(QUOTES_FILE.read_text(encoding="utf-8")).get(name, [])
    for claim in (c for c in entry["claims"] if c["kind"] == "paper"):
        found = next((item for item in listed if claim["claim"].startswith(item["claim"])), None)
        if found is None:
            raise DPAuditError(f"{name}: the claim {claim['claim']!r} has no entry in {QUOTES_FILE.name}")
        claim.update({key: value for key, value in found.items() if key != "claim"})
    return entry


def exact(holds: bool) -> str:
    """Verdict of a deterministic comparison (closed form, or within a stated tolerance)."""
    return "holds" if holds else "contradicted"


def combine(verdicts: Iterable[str]) -> str:
    """Verdict of "every comparison holds": holds if all hold, contradicted if any is contradicted, else
    inconclusive (also when there is no comparison)."""
    verdicts = list(verdicts)
    if any(v == "contradicted" for v in verdicts):
        return "contradicted"
    return "holds" if verdicts and all(v == "holds" for v in verdicts) else "inconclusive"


def test_records(run: dict[str, Any]) -> int:
    """Records of a summarised run's test-accuracy set: the target's non-members (``target_size`` test
    records), or as many test records (at most the test split) for the "halves" split design."""
    config = run["config"]
    if config.get("split_design", "disjoint") != "halves":
        return int(config["target_size"])
    from dpaudit.data import dataset_info

    return min(int(config["target_size"]), dataset_info(config["dataset"]).test_size)


def run_accuracies(runs: list[dict[str, Any]], *, last: int = 1, at: int | None = None) -> np.ndarray:
    """Each run's test accuracy (fraction): the mean of its ``last`` epochs, or its epoch index ``at``."""
    table = series(runs, "test_accuracy")
    return np.nanmean(table[:, -last:] if at is None else table[:, at : at + 1], axis=1)


def accuracy_estimate(runs: list[dict[str, Any]], *, last: int = 1, at: int | None = None) -> tuple[float, float]:
    """Mean test accuracy of a group of runs (trials/seeds; per run: mean of its ``last`` epochs, or its
    epoch index ``at``) and its variance: the test set's binomial p(1 − p)/n_test plus, with ≥ 2 runs, the
    trial-to-trial s²/m (the trials share one test set, so its binomial error does not average out)."""
    values = run_accuracies(runs, last=last, at=at)
    p = float(np.mean(values))
    n_test = min(test_records(run) for run in runs)
    variance = p * (1 - p) / n_test + (float(np.var(values, ddof=1)) / len(values) if len(values) > 1 else 0.0)
    return p, variance


LOWER_BOUND_TEST = (
    "each 95 % ε̂ lower bound against the theoretical ε of the same run (exact); inconclusive when every lower "
    "bound is 0 (the audit has no power to contradict)"
)


def lower_bound_verdict(lowers: Iterable[float], epsilons: Iterable[float]) -> str:
    """Verdict of "no ε̂ lower bound exceeds the theoretical ε": contradicted if one does, inconclusive if
    every lower bound is 0 or not finite (vacuous), holds otherwise."""
    pairs = [(float(lo), float(eps)) for lo, eps in zip(lowers, epsilons)]
    if any(np.isfinite(lo) and lo > eps for lo, eps in pairs):
        return "contradicted"
    return "holds" if any(np.isfinite(lo) and lo > 0 for lo, _ in pairs) else "inconclusive"


#: The equivalence margin of accuracy claims (fraction): a superiority claim ("A beats B", "best") whose difference
#: the data show inside ±1 point (two one-sided tests, each at 95 %) is contradicted: no advantage that matters.
EQUIVALENCE_MARGIN = 0.01


def accuracy_test(
    runs: list[dict[str, Any]] | Iterable[list[dict[str, Any]]],
    *,
    last: int = 1,
    what: str = "accuracy difference",
    equivalence: bool = True,
) -> str:
    """The ``test`` line of accuracy comparisons decided by :func:`accuracy_verdict`.

    Args:
        runs: one group of summarised runs, or the groups compared (for their trial counts and test-set sizes).
        last: epochs averaged per run.
        what: the difference the claim is about.
        equivalence: the claim is one of superiority, so equivalence within :data:`EQUIVALENCE_MARGIN` refutes it.
    """
    runs = list(runs)
    groups = [runs] if runs and isinstance(runs[0], dict) else [list(group) for group in runs if group]
    trials = sorted({len(group) for group in groups})
    n_test = min(test_records(run) for group in groups for run in group)
    count = "–".join(str(t) for t in (trials[0], trials[-1]) if t) if trials[0] != trials[-1] else str(trials[0])
    spread = "+ trials' s²/m" if trials[-1] > 1 else "(no training spread: 1 trial)"
    epochs = f"mean of last {last} epochs" if last > 1 else "last epoch"
    text = (
        f"{what} ({epochs}, {count} trials/seeds); 95 % normal CI, SE² = Σ p(1−p)/n_test (n_test = {n_test}) {spread}"
    )
    if equivalence:
        text += (
            f"; contradicted also when equivalent within ±{100 * EQUIVALENCE_MARGIN:g} point (TOST, 90 % CI inside the "
            "margin: no advantage)"
        )
    return text


def accuracy_verdict(
    better: list[dict[str, Any]] | tuple[float, float],
    worse: list[dict[str, Any]] | tuple[float, float],
    *,
    last: int = 1,
    margin: float = 0.0,
    level: float = 0.95,
    equivalence: float | None = EQUIVALENCE_MARGIN,
) -> tuple[str, dict[str, float]]:
    """Verdict on "``better``'s test accuracy exceeds ``worse``'s by more than ``margin``" (fractions).

    Args:
        better, worse: groups of summarised runs (trials/seeds), or (estimate, variance) pairs from
            :func:`accuracy_estimate`.
        last: epochs averaged per run.
        margin: the claimed gap (fraction; negative for "at most −margin worse").
        level: confidence level.
        equivalence: for a claim of superiority (``margin`` ≥ 0), the equivalence margin: an undecided comparison
            whose difference the data show inside ±``equivalence`` (:func:`dpaudit.stats.equivalent`) is
            contradicted; None: no equivalence test.

    Returns:
        (verdict, numbers: the verdict, difference, its standard error and the CI's ends; ``equivalent_within``
        where equivalence decided it; ``trial_sd``, the seed-to-seed SD of one run's accuracy of each side with two
        runs or more whose runs make a DP claim; when a side is one run and the verdict is decided,
        ``stands_up_to_training_sd``, see :func:`training_sd_tolerated`).
    """
    (pa, va), (pb, vb) = (x if isinstance(x, tuple) else accuracy_estimate(x, last=last) for x in (better, worse))
    difference, se = pa - pb, float(np.sqrt(va + vb))
    from scipy import stats

    from dpaudit.stats import equivalent

    q = float(stats.norm.ppf((1 + level) / 2))
    verdict = decide(difference=difference, standard_error=se, level=level, margin=margin)
    numbers: dict[str, Any] = {"verdict": verdict, "difference": difference, "standard_error": se}
    numbers["ci"] = [difference - q * se, difference + q * se]
    if (
        verdict == "inconclusive"
        and equivalence is not None
        and margin >= 0
        and equivalent(difference=difference, standard_error=se, margin=equivalence, level=level)
    ):
        verdict = numbers["verdict"] = "contradicted"
        numbers["equivalent_within"] = equivalence
    private = [x for x in (better, worse) if isinstance(x, list) and len(x) > 1 and all(r.get("dp_claim") for r in x)]
    if private:  # each DP side's seed-to-seed SD of one run's accuracy, where it has two runs or more
        numbers["trial_sd"] = [float(np.std(run_accuracies(x, last=last), ddof=1)) for x in private]
    single = [1 for x in (better, worse) if isinstance(x, list) and len(x) == 1]
    if single and verdict != "inconclusive" and "equivalent_within" not in numbers:
        # the one-run sides model no training spread: how large it may be before the verdict changes
        numbers["stands_up_to_training_sd"] = training_sd_tolerated(
            gap=difference - margin, variance=se**2, quantile=q, runs=tuple(single)
        )
    return verdict, numbers


def training_sd_tolerated(*, gap: float, variance: float, quantile: float, runs: tuple[int, int]) -> float:
    """The seed-to-seed standard deviation s of one run's test accuracy (fraction) up to which a decided
    comparison keeps its verdict: adding s²/m per side to its variance leaves its interval on the same side of the
    margin, i.e. |gap| = quantile·√(variance + s²·Σ 1/m). A single run's accuracy comparison models no training
    spread (one seed), so this says how large that spread may be before the verdict changes.

    Args:
        gap: the difference minus the claim's margin (fraction).
        variance: the variance the verdict was decided with (fraction²).
        quantile: the interval's normal quantile (1.96 at 95 %).
        runs: runs (trials/seeds) on each side.
    """
    excess = (abs(gap) / quantile) ** 2 - variance
    return float(np.sqrt(max(excess, 0.0) / sum(1 / m for m in runs)))


def _nested_dicts(value: Any) -> Iterable[dict[str, Any]]:
    """``value`` and every dict nested in it (through dict values), depth first: a claim's comparisons."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _nested_dicts(item)


def measured_training_sds(entries: Iterable[dict[str, Any]]) -> list[float]:
    """The distinct seed-to-seed SDs of one DP run's test accuracy (``trial_sd`` of :func:`accuracy_verdict`) over
    the claims of manifest ``entries``: what the pipeline measured where a DP setting has two runs or more."""
    found = (d.get("trial_sd", []) for entry in entries for c in entry["claims"] for d in _nested_dicts(c["numbers"]))
    return sorted({sd for sds in found for sd in sds})


def settle_by_measured_spread(entries: Iterable[dict[str, Any]]) -> float | None:
    """Make *inconclusive* every decided claim of manifest ``entries`` that stands only while one run's
    seed-to-seed SD is below the median SD this pipeline run measured between seeds of DP runs
    (:func:`measured_training_sds`): a verdict that a typical DP run's spread would overturn is decided by noise
    (one DP noise draw moves accuracy by several points, far more than non-private SGD's seeds). The claim keeps its
    former verdict as ``numbers["verdict_without_training_spread"]`` and its test says why. Changes ``entries``
    in place.

    Returns:
        The median measured SD (fraction), or None when no DP setting had two runs or more (nothing changes).
    """
    entries = list(entries)
    measured = measured_training_sds(entries)
    if not measured:
        return None
    floor = float(np.median(measured))
    for claim in (c for entry in entries for c in entry["claims"]):
        tolerated = claim_training_sd_tolerated(claim)
        if tolerated is not None and tolerated < floor:
            claim["numbers"]["verdict_without_training_spread"] = claim["verdict"]
            claim["verdict"] = "inconclusive"
            claim["test"] += (
                f"; inconclusive: {claim['numbers']['verdict_without_training_spread']} only while one run's "
                f"seed-to-seed SD is below {100 * tolerated:.1f} points, less than the median this pipeline run "
                f"measured between seeds of DP runs ({100 * floor:.1f})"
            )
    return floor


def comparison_verdicts(claim: dict[str, Any]) -> dict[str, int]:
    """How many of a claim's comparisons (the dicts nested in its numbers that carry their own ``verdict``) hold,
    are contradicted and are inconclusive."""
    found = [d["verdict"] for d in _nested_dicts(claim["numbers"]) if "verdict" in d]
    return {verdict: found.count(verdict) for verdict in VERDICTS}


def claim_training_sd_tolerated(claim: dict[str, Any]) -> float | None:
    """The training spread up to which a decided claim keeps its verdict, from its comparisons'
    ``stands_up_to_training_sd`` (:func:`accuracy_verdict`): a claim that holds because every comparison holds
    stands while the least robust one does; a contradicted claim stands while its most robust contradicting
    comparison does. None when no comparison of the claim carries the number (inconclusive, or trials modelled)."""
    deciding = [c for c in _nested_dicts(claim["numbers"]) if c.get("verdict") == claim["verdict"]]
    if not deciding or claim["verdict"] == "inconclusive":
        return None
    if any("stands_up_to_training_sd" not in c for c in deciding):
        return None  # some deciding comparison models its trials' spread or is not a run-to-run comparison
    tolerated = [c["stands_up_to_training_sd"] for c in deciding]
    return min(tolerated) if claim["verdict"] == "holds" else max(tolerated)


def entry(
    paper: str, figure: str, title: str, files: Sequence[Path], claims: list[dict], *, dataset: str, **extra: Any
) -> dict[str, Any]:
    return {
        "paper": PAPERS[paper],
        "figure": figure,
        "title": title,
        "files": [str(p) for p in files],
        "dataset": dataset,
        "claims": claims,
        **extra,
    }


def summaries(runs: Iterable[str | Path]) -> list[dict[str, Any]]:
    found = load_summaries(runs)
    if not found:
        raise DPAuditError("this figure needs --runs (run folders with summary.json)")
    return found


def setting(run: dict[str, Any], key: str) -> Any:
    """A training setting of a summarised run (``noise_multiplier``: the run's z, set or calibrated)."""
    if key == "noise_multiplier":  # z = σ_DP·b/C, recomputed: rounded so that equal settings group together
        return None if run["noise_multiplier"] is None else round(run["noise_multiplier"], 6)
    if key == "target_epsilon":
        return run.get("target_epsilon")
    return run["config"][key]


def group(
    runs: list[dict[str, Any]], *keys: str, where: Callable[[dict], bool] | None = None
) -> dict[Hashable, list[dict[str, Any]]]:
    """Runs (trials together) grouped by settings ``keys`` (one key: plain values), sorted."""
    groups: dict[Hashable, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if where is None or where(run):
            value = tuple(setting(run, key) for key in keys)
            groups[value[0] if len(keys) == 1 else value].append(run)
    return dict(
        sorted(
            groups.items(),
            key=lambda item: tuple(str(v) if v is None else v for v in (item[0] if len(keys) > 1 else (item[0],))),
        )
    )


def describe(runs: list[dict[str, Any]], preset: str) -> str:
    datasets = sorted({run["config"]["dataset"] for run in runs})
    return f"{', '.join(datasets)}, {preset} preset"


def series(runs: list[dict[str, Any]], key: str) -> np.ndarray:
    """[trials, epochs] of a per-epoch field (None → NaN)."""
    return np.array([[np.nan if v is None else v for v in run[key]] for run in runs], dtype=float)


def final(runs: list[dict[str, Any]], key: str = "test_accuracy", *, last: int = 1) -> float:
    """Mean over trials of a per-epoch field, averaged over the ``last`` epochs."""
    return float(np.nanmean(series(runs, key)[:, -last:]))


def final_epsilon(runs: list[dict[str, Any]]) -> float:
    values = [run["epsilon"][-1] for run in runs]
    return float("inf") if any(v is None for v in values) else float(np.mean(values))


def loss_audit(runs: list[dict[str, Any]], epoch: int | None = None) -> dict[str, float]:
    """Loss-attack ε̂ point and lower bound at ``epoch`` (default: the last checkpoint), mean over trials."""
    reports = []
    for run in runs:
        epochs = sorted(int(e) for e in run.get("loss", {}))
        if epochs:
            reports.append(run["loss"][str(epochs[-1] if epoch is None else epoch)])
    if not reports:
        return {"point": float("nan"), "lower": float("nan"), "ceiling": float("nan"), "null": float("nan")}
    nulls = [r.get("epsilon_point_null") for r in reports]
    return {
        "point": float(np.mean([float(r["epsilon_point"]) for r in reports])),
        "lower": float(np.mean([float(r["epsilon_lower"]) for r in reports])),
        "ceiling": float(np.mean([float(r["epsilon_ceiling"]) for r in reports])),
        # each trial's 95 % null level, averaged like the points (NaN: a summary written before the null level)
        "null": float("nan") if any(v is None for v in nulls) else float(np.mean([float(v) for v in nulls])),
    }


def null_text(loss: dict[str, float]) -> str:
    """The null level as table text: "null 95 %: 1.95", or "null n/a" for summaries without it."""
    return "null n/a" if not np.isfinite(loss["null"]) else f"null 95 %: {loss['null']:.2f}"


def point_with_null(loss: dict[str, float]) -> str:
    """The loss attack's eq. 20 point estimate with its null level beside it: "1.39 (null 95 %: 1.95)"."""
    return f"{loss['point']:.2f} ({null_text(loss)})"


def canary_audit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Canary ε̂ point and lower bound with the per-step mechanism ε they face, mean over trials."""
    reports = [run["canary"] for run in runs if run.get("canary")]
    if not reports:
        return {"point": float("nan"), "lower": float("nan"), "mechanism": float("nan")}
    return {
        "point": float(np.mean([float(r["epsilon_point"]) for r in reports])),
        "lower": float(np.mean([float(r["epsilon_lower"]) for r in reports])),
        "mechanism": float(np.mean([r["epsilon_mechanism"] for r in reports])),
    }


def whole_run_audit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Whole-run canary audit of all iterates (``summary["canary-run"]``), mean over trials: the family bound
    (``family``), the assumption-free lower bound (``lower``) and the ε the ledger claims (``pld``, ``rdp``); NaN
    where the runs trained no whole-run canaries."""
    reports = [run["canary-run"] for run in runs if run.get("canary-run")]
    keys = {"family": "family_epsilon", "lower": "epsilon_lower", "pld": "epsilon_pld", "rdp": "epsilon_rdp"}
    return {
        name: float(np.mean([float(r[key]) for r in reports])) if reports else float("nan")
        for name, key in keys.items()
    }


def whole_run_check(audits: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The toolkit's check that no whole-run family bound (95 %) exceeds the ε (PLD) its run's ledger claims;
    ``audits``: label → :func:`whole_run_audit` of the runs behind it."""
    return claim(
        "No whole-run ε̂ lower bound exceeds the ε its run's ledger claims",
        lower_bound_verdict([a["family"] for a in audits.values()], [a["pld"] for a in audits.values()]),
        test=LOWER_BOUND_TEST + " (whole-run canaries, all iterates, family bound, against the ledger's PLD ε)",
        kind="check",
        **audits,
    )


NULL_LABEL = "null 95 % of the ε̂ point (labels permuted)"
NULL_STYLE = {"color": "0.55", "marker": "_", "markersize": 12, "markeredgewidth": 2, "linestyle": "none"}


def draw_null(ax, x: Sequence[float], losses: Sequence[dict[str, float]], *, label: bool = True) -> None:
    """Grey bars at each x: the null level of the loss attack's point estimates ``losses`` (from :func:`loss_audit`);
    with ``label``, one legend entry, which says "n/a" when no summary has the null level."""
    nulls = [loss["null"] for loss in losses]
    known = bool(np.isfinite(nulls).any()) if nulls else False
    text = NULL_LABEL if known else f"{NULL_LABEL}: n/a (old summaries)"
    ax.plot(list(x), nulls, label=text if label else None, **NULL_STYLE)


#: Table-caption text on the loss attack's columns.
TABLE_NOTE = (
    "ε̂ point: eq. 20 over all thresholds, with its null level (95 % quantile with permuted membership labels, no "
    "signal) beside it; a point at or below its null level says nothing about leakage. The canary's 95 % lower bound "
    "is compared with the ε of one step, not with the run's ε (for dynamic-noise methods, the least-noisy epoch's step)"
)


def audit_cells(runs: list[dict[str, Any]], *, twins: list[dict[str, Any]] | None = None) -> list[str]:
    """Table cells: theoretical ε, (with ``twins``, a list: the whole-run twins' :func:`whole_run_cells`, "–" when
    empty), loss ε̂ 95 % lower bound, loss ε̂ point with its null level, canary ε̂ lower bound / the ε of one step it
    is compared with."""
    loss, canary = loss_audit(runs), canary_audit(runs)
    whole = [] if twins is None else whole_run_cells(twins)
    return [
        f"{final_epsilon(runs):.2f}",
        *whole,
        f"{loss['lower']:.2f}",
        point_with_null(loss),
        f"{canary['lower']:.2f} / {canary['mechanism']:.2f}",
    ]


AUDIT_HEADER = [
    "ε (theory)",
    "ε̂ loss, 95 % lower bound",
    "ε̂ loss point (null 95 %)",
    "ε̂ canary 95 % lower (white box) / ε of one step",
]


#: What a whole-run family bound is and assumes, for every legend and caption that shows one: a test of the ledger's
#: parameters, not what an adversary demonstrates without the assumption (that is the assumption-free bound).
FAMILY_ASSUMPTION = (
    "a test of the ledger's σ, q and T: a lower bound only if the run is a composed Poisson-subsampled Gaussian "
    "with its ledger's q and T"
)
#: Legend labels of the whole-run canaries' two bounds on all iterates (against the run's ε).
WHOLE_RUN_LABEL = f"whole-run canaries, 95 % (family bound, all iterates: {FAMILY_ASSUMPTION})"
WHOLE_RUN_FREE_LABEL = "whole-run canaries, 95 % lower (assumption-free, all iterates)"
#: Table columns and caption text: the whole-run canary audit of each row's twin in the audit ladder, and that
#: run's accuracy.
WHOLE_RUN_COLUMNS = ["ε̂ whole run, 95 % test of the ledger (family bound) / ε (PLD)", "its run's test accuracy (%)"]
WHOLE_RUN_NOTE = (
    "Whole run, the strongest audit that fits the optimizer: the all-iterates family bound (95 %; "
    f"{FAMILY_ASSUMPTION}) from the whole-run "
    "canaries of the audit ladder's run of the same optimizer at the same target ε, against the ε (PLD) of that "
    "run's ledger (checked in the ladder, metrics/audit_ladder.md); – where whole-run canaries do not fit the "
    "optimizer (the ladder says why). That run is another noise draw than the row's (its canaries draw from "
    "generators derived from the model's, so its model trains as without canaries, while the row's per-step canaries "
    "share the model's stream; initialisation and batches are the same): its test accuracy beside the row's shows how "
    "far one noise draw moves accuracy, which the accuracy verdicts, on the row's run alone, leave out"
)


def whole_run_twins(found: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[Hashable, list[dict[str, Any]]]]:
    """A table's runs apart from their whole-run twins (the runs that carry whole-run canaries: the audit ladder's
    runs of the same optimizer and target ε), the twins grouped by (target ε, optimizer)."""
    twins = [run for run in found if run.get("canary-run")]
    return [run for run in found if not run.get("canary-run")], group(twins, "target_epsilon", "optimizer")


def whole_run_cells(twins: list[dict[str, Any]]) -> list[str]:
    """Table cells of :data:`WHOLE_RUN_COLUMNS`: "family bound / ε (PLD)" and the twins' test accuracy (%), or
    "–" without a twin."""
    if not twins:
        return ["–", "–"]
    audit = whole_run_audit(twins)
    return [f"{audit['family']:.2f} / {audit['pld']:.2f}", percent(final(twins))]


@dataclass(frozen=True)
class MatchedTable:
    """Table 2 of the TP-TopK, DP-PSAC and D2P2-SGD papers, as :func:`matched_epsilon_table` wrote it.

    Attributes:
        found: The summarised runs of the table's rows (without the whole-run twins).
        groups: Those runs grouped by (target ε, optimizer).
        accuracy: Final test accuracy (a fraction) per group.
        epsilons: The target ε, sorted.
        files: The files written: ``table2.md`` and ``table2.tex``.
    """

    found: list[dict[str, Any]]
    groups: dict[Hashable, list[dict[str, Any]]]
    accuracy: dict[Hashable, float]
    epsilons: list[float]
    files: list[Path]


def matched_epsilon_table(
    out_dir: str | Path, runs: Iterable[str | Path], *, preset: str, caption: str
) -> MatchedTable:
    """Table 2 of the TP-TopK, DP-PSAC and D2P2-SGD papers: test accuracy per (target ε, method) with the
    theoretical ε, the whole-run audit of the method's twin run where it fits, and the other audits' ε̂."""
    found, twins = whole_run_twins(summaries(runs))
    groups = group(found, "target_epsilon", "optimizer")
    rows = [
        [f"{eps:g}", name, percent(final(runs_)), *audit_cells(runs_, twins=twins.get((eps, name), []))]
        for (eps, name), runs_ in groups.items()
    ]
    files = write_table(
        Path(out_dir) / "table2",
        ["target ε", "method", "test accuracy (%)", *AUDIT_HEADER_WHOLE_RUN],
        rows,
        caption=f"{caption} ({describe(found, preset)}). {WHOLE_RUN_NOTE}. {TABLE_NOTE}",
    )
    accuracy = {key: final(runs_) for key, runs_ in groups.items()}
    epsilons = sorted({eps for eps, _ in accuracy})
    return MatchedTable(found, groups, accuracy, epsilons, files)


#: :data:`AUDIT_HEADER` with the whole-run columns second, for :func:`audit_cells` with ``twins``.
AUDIT_HEADER_WHOLE_RUN = [AUDIT_HEADER[0], *WHOLE_RUN_COLUMNS, *AUDIT_HEADER[1:]]


def write_table(stem: str | Path, header: list[str], rows: list[list[str]], *, caption: str) -> list[Path]:
    """``stem.md`` (caption as a first line) and ``stem.tex`` (booktabs tabular with the caption)."""
    stem = Path(stem)
    lines = [f"**{caption}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    markdown = atomic_write_bytes(stem.with_suffix(".md"), ("\n".join(lines) + "\n").encode())
    tex_lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        r"\begin{tabular}{" + "l" * len(header) + "}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in header) + r" \\",
        r"\midrule",
        *(" & ".join(latex_escape(c) for c in row) + r" \\" for row in rows),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    tex = atomic_write_bytes(stem.with_suffix(".tex"), ("\n".join(tex_lines) + "\n").encode())
    return [markdown, tex]


#: LaTeX's special characters in text mode, escaped.
_LATEX_TEXT = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}", "~": r"\~{}"}
#: Unicode written in math mode: Greek letters, relations, operators, super- and superscript markers.
_LATEX_MATH = {
    **{
        char: "\\" + name
        for char, name in zip(
            "αβγδΔεηθλΛμνξπρσΣτφϕχψωΩκζ",
            (
                "alpha beta gamma delta Delta varepsilon eta theta lambda Lambda mu nu xi pi rho sigma Sigma tau "
                "varphi varphi chi psi omega Omega kappa zeta"
            ).split(),
            strict=True,
        )
    },
    "≤": r"\leq",
    "≥": r"\geq",
    "≈": r"\approx",
    "≠": r"\neq",
    "≫": r"\gg",
    "≪": r"\ll",
    "−": "-",
    "×": r"\times",
    "·": r"\cdot",
    "√": r"\surd",
    "∞": r"\infty",
    "→": r"\to",
    "±": r"\pm",
    "∈": r"\in",
    "⁰": "^{0}",
    "¹": "^{1}",
    "²": "^{2}",
    "³": "^{3}",
    "⁴": "^{4}",
    "₀": "_{0}",
    "₁": "_{1}",
    "‖": r"\|",
    "<": "<",  # in text mode pdflatex's default (OT1) fonts print < > | as ¡ ¿ —
    ">": ">",
    "|": "|",
    "∑": r"\sum",
    "†": r"^{\dagger}",
    "‡": r"^{\ddagger}",
}
#: Unicode written in text mode.
_LATEX_UNICODE_TEXT = {
    "—": "---",
    "–": "--",
    "ö": r"\"o",
    "ü": r"\"u",
    "é": r"\'e",
    "…": r"\ldots{}",
    "’": "'",
    "\u00a0": "~",
}
_COMBINING_HAT = "\u0302"


def latex_escape(text: str) -> str:
    """``text`` as plain LaTeX that compiles without Unicode support (pdflatex): the text-mode specials escaped,
    Greek letters and mathematical symbols in math mode (ε → ``$\\varepsilon$``, ε̂ → ``$\\hat{\\varepsilon}$``,
    α* → ``$\\alpha^{*}$``, ≤ → ``$\\leq$``, ² → ``$^{2}$``, √ → ``$\\surd$``, † → ``$^{\\dagger}$``), dashes
    and accented letters in text mode. Adjacent math pieces share one ``$…$``. A character it does not know is
    kept as it is (tests check that the tables written are ASCII)."""
    pieces: list[tuple[bool, str]] = []  # (math?, LaTeX)
    for char in text:
        if char == _COMBINING_HAT and pieces:
            is_math, last = pieces.pop()
            base = last if is_math else last[-1:]
            if not is_math and len(last) > 1:
                pieces.append((False, last[:-1]))
            pieces.append((True, rf"\hat{{{base}}}"))
        elif char == "*" and pieces and pieces[-1][0] and not pieces[-1][1].startswith("^"):
            pieces.append((True, "^{*}"))  # α* is α-star, a superscript
        elif char in _LATEX_MATH:
            pieces.append((True, _LATEX_MATH[char]))
        else:
            pieces.append((False, _LATEX_TEXT.get(char) or _LATEX_UNICODE_TEXT.get(char) or char))
    out: list[str] = []
    math: list[str] = []
    for is_math, piece in [*pieces, (False, "")]:
        if is_math:
            if math and piece[0].isalpha() and math[-1][-1].isalpha():
                math.append(" ")  # \alpha\sigma would be one unknown command
            math.append(piece)
            continue
        if math:
            out.append("$" + "".join(math) + "$")
            math = []
        out.append(piece)
    return "".join(out)


def diagnostics(run: str | Path) -> dict[str, Any]:
    path = RunDir(run).target.diagnostics
    if not path.is_file():
        raise DPAuditError(f"{path} is missing: train the run with diagnostics on")
    return read_json(path)


def percent(value: float) -> str:
    return "–" if not np.isfinite(value) else f"{100 * value:.1f}"
