"""Fuzzing the public API: whatever it is given, a result or a one-line DPAuditError, never another exception.

Hypothesis draws arguments of every type (numbers of any size, NaN, ±inf, booleans, None, text, lists, dicts,
arrays) for ``dpaudit.audit_scores``, ``dpaudit.empirical_epsilon``, ``dpaudit.theory.epsilon`` and
``calibrate_noise``, random bytes and random rows for the scores CSV reader, and random command lines of the
commands that do not train (``audit --scores``, ``epsilon``, ``calibrate``, ``theory``, ``list``), where argparse's
usage error (SystemExit 2) is a clean refusal too. Every example set is derandomized, so a failure found here is
found again on every machine; each exception the fuzzer found was fixed where it was raised, not caught here.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dpaudit
from dpaudit._validation import DPAuditError
from dpaudit.attacks import read_scores_csv
from dpaudit.cli import main
from dpaudit.theory import accounting, available_bounds, calibrate_noise, epsilon


def fuzz(examples: int):
    """Derandomized settings: the same examples on every run, no deadline (the first PRV call imports torch)."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def clean(call):
    """Run ``call``; a result or a one-line DPAuditError passes, any other exception fails the example."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call()
        except DPAuditError as error:
            assert "\n" not in str(error), f"a DPAuditError of several lines: {error}"
            return error


# --- strategies: numbers of every kind, and anything else an argument could be given ---

floats = st.floats(allow_nan=True, allow_infinity=True)
numbers = st.one_of(
    floats,
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, -1, 2**63, 10**400, 1e-320, 5e-324, 1e308, -0.0, 0.5, 1e-5]),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.int64, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["0.5", "1e-5", "nan", "3", "", "rdp", b"1"]),
    st.lists(numbers, max_size=4),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), numbers, max_size=2),
    st.just([[0.5, 0.5], [0.5, 0.5]]),
    st.just(np.zeros((2, 2))),
    st.just(object()),
    st.complex_numbers(max_magnitude=10),
)
anything = st.one_of(numbers, junk)


def either(good, odds: int = 5):
    """``good`` values but one time in ``odds``, anything at all (``st.one_of`` would flatten ``anything``'s own
    branches, which would then outnumber ``good``)."""
    return st.integers(1, odds).flatmap(lambda draw: anything if draw == 1 else good)


@st.composite
def spoiled(draw, good: st.SearchStrategy[dict]) -> dict:
    """Keyword arguments drawn from ``good``, then none, one or a few of them replaced by anything at all: each
    check is reached with the others passing, so that the search goes past the first one."""
    arguments = draw(good)
    for name in draw(st.lists(st.sampled_from(sorted(arguments)), max_size=3, unique=True)):
        arguments[name] = draw(anything)
    return arguments


def tensor(values: np.ndarray):
    """``values`` as a torch tensor that requires grad, the output of a graph (torch imported only when drawn)."""
    import torch

    return torch.tensor(values, dtype=torch.float64, requires_grad=True) * 1.0


score_arrays = st.one_of(
    hnp.arrays(np.float64, st.integers(0, 40), elements=st.floats(-1e6, 1e6)),
    hnp.arrays(np.float64, st.integers(0, 40), elements=st.floats(-1e6, 1e6)).map(tensor),
    hnp.arrays(np.float64, st.integers(0, 40), elements=floats),
    hnp.arrays(np.int64, st.integers(0, 40)),
    st.lists(st.floats(-1e300, 1e300), max_size=40),
    st.lists(numbers, max_size=10),
    st.just(np.full(200_000, 1.0)),
    st.just(np.array([1e308, -1e308, 1e308, 5e-324])),
)
audits = st.fixed_dictionaries(
    {
        "member_scores": score_arrays,
        "nonmember_scores": score_arrays,
        "delta": st.floats(1e-12, 0.5),
        "confidence": st.floats(0.01, 0.999),
        "seed": st.integers(0, 2**32),
        "selection": st.sampled_from(["split", "gaussian"]),
    }
)


@pytest.mark.integration
@fuzz(120)
@given(arguments=spoiled(audits))
def test_audit_scores_gives_a_report_or_one_line(arguments):
    result = clean(lambda: dpaudit.audit_scores(**arguments))
    if not isinstance(result, DPAuditError):
        assert 0 <= result.epsilon_lower <= result.epsilon_ceiling and 0 <= result.auc <= 1


unit_rates = st.one_of(st.floats(0, 1), hnp.arrays(np.float64, st.integers(0, 5), elements=st.floats(0, 1)))


@fuzz(120)
@given(arguments=spoiled(st.fixed_dictionaries({"fpr": unit_rates, "fnr": unit_rates, "delta": st.floats(0, 0.5)})))
def test_empirical_epsilon_gives_a_number_or_one_line(arguments):
    result = clean(lambda: dpaudit.empirical_epsilon(arguments.pop("fpr"), arguments.pop("fnr"), **arguments))
    if not isinstance(result, DPAuditError):
        assert not np.any(np.isnan(result))


# --- the accountants: the PRV grid is capped at 16 MiB here, so that no example builds a big one ---

noise = st.floats(0.3, 50.0)
rates = st.floats(1e-6, 1.0)
per_step = st.lists(noise, min_size=0, max_size=30)
options = {
    "delta": st.floats(1e-12, 0.5),
    "accountant": st.sampled_from(["rdp", "rdp", "rdp", "rdp", "rdp", "prv"]),
    "orders": st.sampled_from([accounting.DEFAULT_ORDERS, (1.5, 2.0, 32.0), range(2, 300)]),
    "conversion": st.sampled_from(["improved", "classic"]),
    "eps_error": st.floats(0.01, 2.0),
}
# Opacus's PRV accountant computes its own RDP of every distinct (z, q) in pure Python, about 0.1-0.5 s each: its
# examples keep to a few distinct steps, and its grid is capped at 16 MiB, so that no example builds a big one
small_prv = mock.patch.object(accounting, "PRV_MEMORY_BUDGET", 1 << 24)


@st.composite
def accountings(draw) -> dict:
    """The arguments of epsilon, agreeing: numbers and T, or one value per step (a few for PRV)."""
    arguments = draw(st.fixed_dictionaries(options))
    if draw(st.booleans()):
        return {**arguments, "noise_multiplier": draw(noise), "sample_rate": draw(rates), "steps": draw(steps)}
    z = draw(st.lists(noise, max_size=3 if arguments["accountant"] == "prv" else 30))
    q = draw(st.one_of(rates, st.lists(rates, min_size=len(z), max_size=len(z))))
    return {**arguments, "noise_multiplier": z, "sample_rate": q, "steps": draw(st.sampled_from([None, len(z)]))}


steps = st.integers(0, 10**15)


@fuzz(150)
@given(arguments=spoiled(accountings()))
def test_epsilon_gives_a_finite_number_or_one_line(arguments):
    with small_prv:
        result = clean(lambda: epsilon(**arguments))
    if not isinstance(result, DPAuditError):
        assert isinstance(result, float) and math.isfinite(result) and result >= 0


@st.composite
def calibrations(draw) -> dict:
    """The arguments of calibrate_noise, agreeing: q and T, or per-step q and/or a noise schedule (RDP only: each
    PRV calibration asks Opacus for a dozen grids)."""
    arguments = {"target_epsilon": draw(st.floats(0.05, 50.0)), **draw(st.fixed_dictionaries(options))}
    if arguments["accountant"] == "prv" or draw(st.booleans()):
        arguments.update(sample_rate=draw(rates), steps=draw(st.integers(1, 10**15)))
    else:
        length = draw(st.integers(1, 20))
        arguments["sample_rate"] = draw(st.one_of(rates, st.lists(rates, min_size=length, max_size=length)))
        arguments["noise_schedule"] = draw(st.lists(st.floats(0.1, 10.0), min_size=length, max_size=length))
        arguments["steps"] = draw(st.sampled_from([None, length]))
    if draw(st.booleans()):
        arguments["tolerance"] = draw(st.floats(1e-6, 0.5))
    if draw(st.booleans()):
        arguments["grid"] = draw(st.floats(1e-3, 1.0))
    if arguments["accountant"] == "rdp" and draw(st.booleans()):
        arguments["preceding"] = (draw(st.one_of(noise, per_step)), draw(rates))
    return arguments


@pytest.mark.integration
@fuzz(60)
@given(arguments=spoiled(calibrations()))
def test_calibrate_noise_gives_a_noise_multiplier_or_one_line(arguments):
    with small_prv:
        result = clean(lambda: calibrate_noise(**arguments))
    if not isinstance(result, DPAuditError):
        assert isinstance(result, float) and math.isfinite(result) and result > 0


# --- the scores CSV: random bytes, and random rows of text under a plausible header ---


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder for the score files and the commands' outputs (module-scoped: hypothesis runs every example of a
    test inside one call of it)."""
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "good.csv").write_text("score,is_member\n" + "".join(f"{i / 7:.3f},{i % 2}\n" for i in range(12)))
    (folder / "short.csv").write_text("score,is_member\n0.5\n")
    (folder / "utf16.csv").write_bytes("score,is_member\n0.5,1\n0.2,0\n".encode("utf-16"))
    return folder


plausible = st.sampled_from(["0", "1", "1", "0", "true", "False", "0.5", "-3e2", " 1 ", '"1"', "1e308"])
field = st.one_of(
    plausible, plausible, plausible, st.sampled_from(["nan", "inf", "", "2", "1.0", "x"]), st.text(max_size=6)
)
headers = st.sampled_from(["score,is_member", "is_member,score,record", "\ufeffscore,is_member", "score", "a,b"])
newline = st.sampled_from(["\n", "\r\n", "\r"])
encoding = st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "latin-1"])


@st.composite
def score_files(draw) -> str:
    """CSV text: a header, then rows mostly of as many fields as it has, sometimes of any number."""
    header = draw(headers)
    width = header.count(",") + 1
    good = st.tuples(st.floats(allow_nan=False, allow_infinity=False).map(repr), st.sampled_from(["0", "1", "TRUE"]))
    if header.endswith("score,is_member") and draw(st.booleans()):  # well-formed rows but for one field or two
        rows = [list(row) for row in draw(st.lists(good, max_size=8))]
        for _ in range(draw(st.integers(0, 2)) if rows else 0):
            rows[draw(st.integers(0, len(rows) - 1))][draw(st.integers(0, 1))] = draw(field)
    else:
        rows = draw(st.lists(st.lists(field, min_size=width, max_size=width) | st.lists(field, max_size=4), max_size=8))
    end = draw(newline)
    return end.join([header, *map(",".join, rows)]) + end


def read_back(folder: Path, data: bytes):
    path = folder / "scores.csv"
    path.write_bytes(data)
    result = clean(lambda: read_scores_csv(path))
    if isinstance(result, DPAuditError):
        assert str(path) in str(result), f"the message does not name the file: {result}"
    else:
        members, nonmembers = result
        assert members.ndim == nonmembers.ndim == 1 and members.size + nonmembers.size > 0
        assert np.all(np.isfinite(members)) and np.all(np.isfinite(nonmembers))


@fuzz(150)
@given(data=st.binary(max_size=200))
def test_scores_csv_of_random_bytes_reads_or_refuses_in_one_line(scratch, data):
    read_back(scratch, data)


@fuzz(150)
@given(text=score_files(), encoding=encoding)
def test_scores_csv_of_random_rows_reads_or_refuses_in_one_line(scratch, text, encoding):
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        data = text.encode("utf-8")
    read_back(scratch, data)


# --- the command line: the real subcommands and flags of the commands that do not train ---

value = st.one_of(
    st.sampled_from(["1", "0", "-1", "0.5", "1e-5", "nan", "inf", "-inf", "1e400", "10", "1000", "abc", ""]),
    st.sampled_from(["rdp", "prv", "rdp,prv", "classic", "improved", "1,2,3", "0,x", "-3", "2.5"]),
    st.integers(-5, 10**13).map(str),
    st.floats().map(repr),
    st.text(max_size=4),
)
number = st.one_of(st.floats().map(repr), st.integers(-5, 10**13).map(str), value)


def flag(*good: str, weight: int = 3):
    """A flag's value: one of ``good`` (its choices, or typical numbers) three times in four, else any text."""
    return st.integers(0, weight).flatmap(lambda draw: st.sampled_from(good) if draw else number)


rate, small = flag("0.01", "0.5", "1", "1e-6", "0"), flag("1e-5", "0.01", "0.3", "0")
FLAGS = {  # the flags of each command, and their values
    "audit": {
        "--delta": small,
        "--confidence": flag("0.95", "0.5", "0.999", "1"),
        "--seed": flag("0", "7", "-1", "2.5"),
        "--selection": flag("split", "gaussian"),
        "--family-selection": flag("split", "ledger"),
        "--epoch": flag("1", "3"),
    },
    "epsilon": {
        "--noise-multiplier": flag("0.5", "1", "3", "0", "1e-300"),
        "--sample-rate": rate,
        "--steps": flag("0", "1", "100", "1000000000000", "-3"),
        "--delta": small,
        "--conversion": flag("improved", "classic"),
        "--eps-error": flag("0.01", "0.5", "0"),
        "--accountants": flag("rdp", "prv", "rdp,prv", weight=8),
        "--logging": flag("epoch-end", "first-step"),
        "--epochs": flag("1", "1,2", "0"),
        "--run": flag("no-run"),
    },
    "calibrate": {
        "--target-epsilon": flag("1", "8", "0.01", "0", "1e9"),
        "--sample-rate": rate,
        "--steps": flag("1", "100", "1000000000000", "0", "-3"),
        "--accountant": flag("rdp", "rdp", "rdp", "prv", weight=8),
        "--delta": small,
        "--conversion": flag("improved", "classic"),
        "--eps-error": flag("0.01", "0.5", "0"),
    },
    "theory": {
        name: flag(*good)
        for name, good in {
            "--alpha": ("2", "4", "1", "0.5"),
            "--L": ("1", "0"),
            "--C": ("1", "0.1"),
            "--sigma": ("1", "0.01", "0"),
            "--D": ("1", "10"),
            "--n": ("1000", "60000", "1.5"),
            "--b": ("10", "256", "0"),
            "--eta": ("0.1", "1"),
            "--m": ("0.5", "1"),
            "--q": ("0.01", "1", "0"),
            "--delta": ("1e-5", "0.5"),
            "--steps": ("10", "1,10,100", "0"),
            "--epochs": ("1", "1,2"),
        }.items()
    },
}
GOOD = {  # a working command of each kind, that the random flags then perturb
    "audit": ["--scores", "good.csv", "--no-plot"],
    "epsilon": ["--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "100"],
    "calibrate": ["--target-epsilon", "2", "--sample-rate", "0.01", "--steps", "100"],
    "theory": ["--alpha", "4", "--C", "1", "--sigma", "1", "--n", "1000", "--b", "10", "--steps", "10"],
}


@contextlib.contextmanager
def inside(folder: Path):
    """Work in ``folder`` (contextlib.chdir is Python ≥ 3.11)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(["audit", "epsilon", "calibrate", "theory", "list"]))
    if command == "list":
        return ["list", draw(flag("datasets", "bounds", "optim"))]
    argv = [command]
    if command == "theory":
        argv.append(draw(flag(*available_bounds(), "alpha-star", weight=8)))
    if command == "audit":
        argv += ["--scores", draw(st.sampled_from(["good.csv", "good.csv", "short.csv", "utf16.csv", "none.csv"]))]
        argv += ["--no-plot", "--out", "audit.json"]
    elif draw(st.booleans()):
        argv += GOOD[command]
    for name in draw(st.lists(st.sampled_from(sorted(FLAGS[command])), max_size=4)):
        argv += [name, draw(FLAGS[command][name])]
    return argv


@pytest.mark.integration
@fuzz(150)
@given(argv=command_lines())
def test_command_line_gives_a_status_or_a_usage_error(scratch, argv):
    output = io.StringIO()
    with inside(scratch), contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        with warnings.catch_warnings(), small_prv:
            warnings.simplefilter("ignore")
            try:
                status = main(argv)
            except SystemExit as exit_:  # argparse's usage error
                assert exit_.code == 2, (argv, output.getvalue()[-500:])
                return
    assert status in (0, 2), (argv, status)
    if status == 2:
        message = output.getvalue().strip().splitlines()
        assert message and message[-1].startswith("dpaudit: error: "), (argv, output.getvalue()[-500:])


# --- what the fuzzer found, and what the issue named, as plain examples ---

SCORES = "score,is_member\n0.9,1\n0.8,true\n0.1,0\n0.2,FALSE\n"


@pytest.mark.parametrize(
    "data",
    [
        SCORES.encode(),
        b"\xef\xbb\xbf" + SCORES.encode(),
        SCORES.replace("\n", "\r\n").encode(),
        (SCORES + "\n\n").encode(),
    ],
    ids=["utf-8", "utf-8 with BOM", "CRLF", "blank lines"],
)
def test_scores_csv_reads_utf8_with_or_without_a_byte_order_mark(tmp_path, data):
    path = tmp_path / "scores.csv"
    path.write_bytes(data)
    members, nonmembers = read_scores_csv(path)
    np.testing.assert_array_equal(members, [0.9, 0.8])
    np.testing.assert_array_equal(nonmembers, [0.1, 0.2])


@pytest.mark.parametrize(
    "data, message",
    [
        (SCORES.encode("utf-16"), r"is not UTF-8 text \(it starts with a UTF-16 byte-order mark\); save it as UTF-8"),
        (
            SCORES.encode("utf-16-le"),
            r"is not UTF-8 text \(it holds NUL bytes, as UTF-16 text does\); save it as UTF-8",
        ),
        (SCORES.encode("utf-16-be"), "NUL bytes.*save it as UTF-8"),
        (
            "score,is_member,name\n0.5,1,José\n".encode("latin-1"),
            r"byte 0xe9 on line 2 is not UTF-8\); save it as UTF-8",
        ),
        (b"", "is empty"),
        (b"\n\n", "is empty"),
        (b"score,is_member\n", "has a header but no rows of scores"),
        (b"score,is_member\n0.5,1\n0.7\n", r", row 3 has 1 field\(s\), fewer than the header's 2"),
        (b"score,is_member\n0.5,1,7\n", r", row 2 has 3 field\(s\), more than the header's 2"),
        (b"score,is_member\n0.5,1\n\nhigh,0\n", ", row 4: score must be a number, got 'high'"),
        (b"score,is_member\nnan,0\n", ", row 2: score must be a finite number, got 'nan'"),
        (b"score,is_member\n0.5,2\n", r", row 2: is_member must be 0 or 1 \(or true/false\), got '2'"),
        (b"score,is_member\n0.5,yes\n", ", row 2: is_member must be 0 or 1"),
        (b"score\n0.5\n", r"lacks the column\(s\) is_member \(need score, is_member\)"),
    ],
    ids=["utf-16", "utf-16-le", "utf-16-be", "latin-1", "empty", "blank", "header only", "short row", "long row"]
    + ["word score", "nan score", "is_member 2", "is_member yes", "no is_member"],
)
def test_scores_csv_refuses_in_one_line_naming_the_file(tmp_path, data, message):
    path = tmp_path / "scores.csv"
    path.write_bytes(data)
    with pytest.raises(DPAuditError, match=message) as caught:
        read_scores_csv(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_audit_scores_takes_torch_tensors_that_require_grad():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    members, nonmembers = rng.normal(1, 1, 50), rng.normal(0, 1, 50)
    want = dpaudit.audit_scores(members, nonmembers)
    tensors = [torch.tensor(values, requires_grad=True) * 1.0 for values in (members, nonmembers)]  # a graph's output
    got = dpaudit.audit_scores(*tensors)
    assert got.to_dict() == want.to_dict()
    got = dpaudit.audit_scores(torch.tensor(members, dtype=torch.float32), torch.tensor(nonmembers).to(torch.bfloat16))
    assert got.n_members == 50 and got.n_nonmembers == 50
    with pytest.raises(DPAuditError, match="member_scores must be real numbers, got a complex tensor"):
        dpaudit.audit_scores(torch.ones(3, dtype=torch.complex64), nonmembers)


@pytest.mark.parametrize(
    "scores, message",
    [
        (5, r"must be a 1-D array, got shape \(\)"),
        (["0.5", "0.7", "0.9"], "must be a 1-D array of numbers, got text"),
        ("0.5 0.7", "must be a 1-D array of numbers, got str"),
        ([[0.5, 0.7], [0.9, 0.1]], r"must be a 1-D array, got shape \(2, 2\)"),
        ({"a": 0.5}, "must be a 1-D array of numbers, got dict"),
        ([0.5, None, 0.7], "got None among them"),
        ([1 + 2j, 0.5], "got complex numbers"),
        ([10**400, 0.5], "must be a 1-D array of numbers"),
    ],
    ids=repr,
)
def test_audit_scores_refuses_what_is_not_scores_in_one_line(scores, message):
    with pytest.raises(DPAuditError, match=message) as caught:
        dpaudit.audit_scores(scores, [0.1, 0.2, 0.3])
    assert str(caught.value).startswith("member_scores ") and "\n" not in str(caught.value)


def test_empirical_epsilon_of_a_negative_zero_rate_is_infinite_not_nan():
    # fnr = −0.0 passed the range check and gave log(1/−0.0) = log(−inf) = NaN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert dpaudit.empirical_epsilon(0.0, -0.0, delta=0.0) == math.inf
        assert dpaudit.empirical_epsilon(0.1, -0.0, delta=1e-5) == math.inf


@pytest.mark.parametrize(
    "fpr, fnr, delta, message",
    [
        ("0.1", 0.2, 1e-5, "fpr must be a rate"),
        (0.1, {"x": 1}, 1e-5, "fnr must be a rate"),
        ([0.1, 0.2], [0.1, 0.2, 0.3], 1e-5, r"fpr \(2,\) and fnr \(3,\) do not broadcast together"),
        (0.1, 0.2, False, r"delta must lie in \[0, 1\), got False"),
        (0.1, 0.2, "0", r"delta must lie in \[0, 1\)"),
    ],
)
def test_empirical_epsilon_refuses_in_one_line(fpr, fnr, delta, message):
    with pytest.raises(DPAuditError, match=message):
        dpaudit.empirical_epsilon(fpr, fnr, delta=delta)
