"""benchmarks/record.py: what a result says of the machine it was measured on."""

from __future__ import annotations

from support import ROOT, load_file_module


def test_the_cpu_model_is_read_from_cpuinfo_and_is_empty_where_there_is_none(tmp_path):
    record = load_file_module(ROOT / "benchmarks" / "record.py", "record")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n"
        "\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n"
    )
    assert record._cpu_model(cpuinfo) == "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    cpuinfo.write_text("processor\t: 0\nfeatures\t: fp asimd\n")  # e.g. an ARM kernel's: no model name
    assert record._cpu_model(cpuinfo) == ""
    assert record._cpu_model(tmp_path / "absent") == ""
