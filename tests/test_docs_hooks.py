"""The docs site's benchmark tables (docs/_hooks.py) render every recorded number, lists of records included."""

from __future__ import annotations

import json

from support import ROOT, load_file_module


def _hooks():
    return load_file_module(ROOT / "docs" / "_hooks.py", "docs_hooks")


def _record(result):
    machine = {"cores": 2, "processor": "x86_64", "python": "3.11", "gpu": None}
    return {"name": "demo", "date": "2026-01-01", "machine": machine, "command": "python demo.py", "result": result}


def test_records_become_rows_or_columns_and_scalars_stay_in_the_quantity_table(tmp_path, monkeypatch):
    hooks = _hooks()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    few_fields = [{"eps": 1.0, "rule": "a|b"}, {"eps": 2.0, "rule": "c"}, {"eps": 4.0, "rule": "d"}]
    many_fields = [{"eps": 1.0, "bounds": {"family": 0.84, "free": 0.48}}, {"eps": 2.0, "bounds": {"family": 0.93}}]
    record = _record({"delta": 1e-5, "seconds": [1.5, 2.25], "rows": few_fields, "runs": many_fields})
    (results / "demo.json").write_text(json.dumps(record))
    monkeypatch.setattr(hooks, "ROOT", tmp_path)
    lines = hooks.benchmark_tables().splitlines()
    assert "| `delta` | 1e-05 |" in lines and "| `seconds` | 1.5, 2.25 |" in lines
    # three records of two fields: one row each; a "|" in a value is escaped
    assert "| `eps` | `rule` |" in lines and "| 1 | a\\|b |" in lines and "| 4 | d |" in lines
    # two records of three fields: one column each, a missing field left empty
    assert "| | 1 | 2 |" in lines
    assert "| `bounds.family` | 0.84 | 0.93 |" in lines and "| `bounds.free` | 0.48 |  |" in lines


def test_every_recorded_result_renders():
    text = _hooks().benchmark_tables()
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        assert f"### {json.loads(path.read_text())['name']}" in text
