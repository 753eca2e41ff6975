"""The default preset's runs (``optimizers.runs`` of params.yaml) as benchmark settings, so that a benchmark that
trains "the default preset's" optimizer declares none of its settings again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def run_settings(name: str) -> dict[str, Any]:
    """The settings of run ``name`` of the default preset's ``optimizers.runs``, beside the common ones: without its
    name and its canary design (a benchmark chooses its own canaries)."""
    import yaml

    runs = {run["name"]: run for run in yaml.safe_load(PARAMS.read_text(encoding="utf-8"))["optimizers"]["runs"]}
    return {key: value for key, value in runs[name].items() if key not in ("name", "canary_design")}
