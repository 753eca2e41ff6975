"""MkDocs hooks: render the benchmark results (benchmarks/results/*.json) and include files kept outside docs/.

A page line ``{{ benchmark_results }}`` becomes one table per result file: its date, machine and command, then
every number or string of the benchmark's JSON (nested keys joined by dots, lists of numbers inline), and each
list of records (one per setting or run) as a table of its own. ``{{ include PATH }}`` inserts a repository file
as it is (e.g. CHANGELOG.md), so that no document copies another.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"^\{\{ include (\S+) \}\}$", re.MULTILINE)


def _scalar(value) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None


def _flat(prefix: str, value) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in _flat(f"{prefix}.{key}" if prefix else key, item)]
    if _scalar(value):
        return [(prefix, value)]
    if isinstance(value, list) and value and all(_scalar(item) for item in value):
        return [(prefix, ", ".join(_format(item) for item in value))]
    return []  # lists of records: tables of their own (_records_table); deeper lists stay in the JSON file


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def _records_table(name: str, records: list[dict]) -> list[str]:
    """One row per record, or one column per record where the records have more fields than there are records."""
    rows = [dict(_flat("", record)) for record in records]
    keys = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["", f"`{name}` ({len(rows)}):", ""]
    if len(keys) <= len(rows):
        lines += ["| " + " | ".join(f"`{key}`" for key in keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join(_format(row.get(key, "")) for key in keys) + " |" for row in rows]
    else:
        lines += ["| | " + " | ".join(str(index) for index in range(1, len(rows) + 1)) + " |"]
        lines += ["|" + "---|" * (len(rows) + 1)]
        lines += [f"| `{key}` | " + " | ".join(_format(row.get(key, "")) for row in rows) + " |" for key in keys]
    return lines


def benchmark_tables() -> str:
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    if not files:
        return "No recorded results yet: run `python benchmarks/record.py NAME -- COMMAND`."
    parts = []
    for path in files:
        record = json.loads(path.read_text())
        machine = record.get("machine", {})
        cpu = machine.get("cpu") or {}  # family, model and vector extension: hosts of one model name differ in speed
        generation = ", ".join(f"{key} {cpu[key]}" for key in ("family", "model", "vector") if key in cpu)
        host = "; ".join(part for part in (machine.get("processor"), generation, machine.get("gpu")) if part)
        parts.append(
            f"### {record['name']}\n\nMeasured {record['date']} on {machine.get('cores')} cores "
            f"({host}), Python {machine.get('python')}: `{record['command']}`. "
            f"Full result: `benchmarks/results/{path.name}`.\n\n| quantity | value |\n|---|---|"
        )
        parts.extend(f"| `{key}` | {_format(value)} |" for key, value in _flat("", record["result"]))
        for key, value in record["result"].items():
            if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
                parts.extend(_records_table(key, value))
        parts.append("")
    return "\n".join(parts)


def on_page_markdown(markdown: str, **_) -> str:
    markdown = INCLUDE.sub(lambda match: (ROOT / match.group(1)).read_text(), markdown)
    if "{{ benchmark_results }}" in markdown:
        markdown = markdown.replace("{{ benchmark_results }}", benchmark_tables())
    return markdown
