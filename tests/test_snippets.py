"""Every Python snippet in the README and the docs site runs, and the numbers their comments show are what it gives.

A page's snippets run in order in one namespace (a later block may use an earlier block's names), in an empty
working folder. Names a snippet takes from its surroundings (``member_scores``, a trained ``model`` …) come from
the page's setup below. A block preceded by ``<!-- fragment -->`` is part of the reader's own program (an Opacus
training loop); it is compiled, not run. A line ``expression  # 2.5966`` (or ``# ≈ 0.10``) is a known answer: the
expression must give that number to the digits shown.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
from support import ROOT

PAGES = ["README.md", *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```", re.S)
# a trailing comment that starts with a number (optionally "≈"): the value the expression gives
ANSWER = re.compile(r"#\s*(?P<approx>≈\s*)?(?P<number>-?\d+(?:\.\d+)?(?:e-?\d+)?)\b(?!\s*[%×/])")


def _blocks(page: str) -> list[tuple[int, str, bool]]:
    """(line, code, is_fragment) of each Python block of a page."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        line = text[: match.start("code")].count("\n") + 1
        found.append((line, match.group("code"), match.group("before").strip() == "<!-- fragment -->"))
    return found


def _setup_auditing(namespace: dict) -> None:
    rng = np.random.default_rng(0)
    namespace["member_scores"] = rng.normal(1.0, 1.0, 2000)
    namespace["nonmember_scores"] = rng.normal(0.0, 1.0, 2000)
    from dpaudit.models import build_model

    namespace["model"] = build_model("cnn-digits", input_shape=(1, 8, 8), num_classes=10, seed=0)
    namespace["member_idx"] = np.arange(0, 200)
    namespace["nonmember_idx"] = np.arange(0, 200)


def _setup_accounting(namespace: dict) -> None:
    from dpaudit.ledger import PrivacyLedger

    ledger = PrivacyLedger()
    for _ in range(3):
        for _ in range(10):
            ledger.record(noise_multiplier=1.1, sample_rate=0.1)
        ledger.end_epoch()
    folder = Path("results/demo/target")
    folder.mkdir(parents=True)
    (folder / "ledger.json").write_text(json.dumps(ledger.to_dict()), encoding="utf-8")


SETUP = {"docs/auditing.md": _setup_auditing, "docs/accounting.md": _setup_accounting}


def _expected(segment: str) -> tuple[float, bool, int] | None:
    """(value, approximate, decimals) of a known-answer comment, None if the comment holds none."""
    match = ANSWER.search(segment)
    if match is None:
        return None
    number = match.group("number")
    decimals = len(number.split(".")[1].split("e")[0]) if "." in number else 0
    return float(number), bool(match.group("approx")), decimals


def _run(code: str, namespace: dict, *, where: str) -> None:
    """Run a block statement by statement; check each known-answer comment against what it evaluates to."""
    lines = code.splitlines()
    tree = ast.parse(code, filename=where)
    for statement in tree.body:
        comment = lines[statement.end_lineno - 1][statement.end_col_offset :]
        expected = _expected(comment) if isinstance(statement, ast.Expr) else None
        if expected is None:
            exec(compile(ast.Module([statement], []), where, "exec"), namespace)
            continue
        value = eval(compile(ast.Expression(statement.value), where, "eval"), namespace)
        number, approximate, decimals = expected
        got = float(value[0] if isinstance(value, tuple) else value)
        tolerance = 0.6 * 10.0**-decimals if not approximate else max(0.6 * 10.0**-decimals, 0.15 * abs(number))
        assert abs(got - number) <= tolerance, f"{where}:{statement.lineno}: gives {got!r}, the page says {number}"


@pytest.mark.parametrize("page", [page for page in PAGES if _blocks(page)])
def test_every_snippet_of_the_page_runs_and_gives_the_numbers_it_shows(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__snippet__"}
    if page in SETUP:
        SETUP[page](namespace)
    for line, code, fragment in _blocks(page):
        where = f"{page}:{line}"
        if fragment:
            compile(code, where, "exec")
        else:
            _run(code, namespace, where=where)


def test_known_answer_comments_are_read():
    assert _expected("  # 2.5966") == (2.5966, False, 4)
    assert _expected("  # ≈ 0.10") == (0.10, True, 2)
    assert _expected("  # plateau, β*, T_sat") is None
    assert _expected("  # Clopper–Pearson lower bound on ε, holds with probability ≥ 95 %") is None
