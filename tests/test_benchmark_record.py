"""benchmarks/record.py: what a result says of the machine it was measured on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _record():
    spec = importlib.util.spec_from_file_location("record", ROOT / "benchmarks" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_model_is_read_from_cpuinfo_and_is_empty_where_there_is_none(tmp_path):
    record = _record()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n"
        "\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n"
    )
    assert record._cpu_model(cpuinfo) == "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    cpuinfo.write_text("processor\t: 0\nfeatures\t: fp asimd\n")  # e.g. an ARM kernel's: no model name
    assert record._cpu_model(cpuinfo) == ""
    assert record._cpu_model(tmp_path / "absent") == ""
