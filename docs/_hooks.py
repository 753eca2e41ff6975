"""MkDocs hooks: render the benchmark results (benchmarks/results/*.json) and include files kept outside docs/.

A page line ``{{ benchmark_results }}`` becomes one table per result file: its date, machine and command, then
every number or string of the benchmark's top-level JSON. ``{{ include PATH }}`` inserts a repository file as it
is (e.g. CHANGELOG.md), so that no document copies another.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"^\{\{ include (\S+) \}\}$", re.MULTILINE)


def _flat(prefix: str, value) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in _flat(f"{prefix}.{key}" if prefix else key, item)]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return [(prefix, value)]
    return []  # lists (per-setting records) stay in the JSON file


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def benchmark_tables() -> str:
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    if not files:
        return "No recorded results yet: run `python benchmarks/record.py NAME -- COMMAND`."
    parts = []
    for path in files:
        record = json.loads(path.read_text())
        machine = record.get("machine", {})
        gpu = f", {machine['gpu']}" if machine.get("gpu") else ""
        parts.append(
            f"### {record['name']}\n\nMeasured {record['date']} on {machine.get('cores')} cores "
            f"({machine.get('processor')}{gpu}), Python {machine.get('python')}: `{record['command']}`. "
            f"Full result: `benchmarks/results/{path.name}`.\n\n| quantity | value |\n|---|---|"
        )
        parts.extend(f"| `{key}` | {_format(value)} |" for key, value in _flat("", record["result"]))
        parts.append("")
    return "\n".join(parts)


def on_page_markdown(markdown: str, **_) -> str:
    markdown = INCLUDE.sub(lambda match: (ROOT / match.group(1)).read_text(), markdown)
    if "{{ benchmark_results }}" in markdown:
        markdown = markdown.replace("{{ benchmark_results }}", benchmark_tables())
    return markdown
