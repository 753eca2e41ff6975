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


def test_the_cpu_identity_names_the_generation_and_the_widest_vector_extension(tmp_path):
    record = load_file_module(ROOT / "benchmarks" / "record.py", "record")
    cpuinfo = tmp_path / "cpuinfo"
    first = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\n"
    cpuinfo.write_text(
        f"processor\t: 0\n{first}flags\t\t: fpu sse4_2 avx avx2 fma\n\nprocessor\t: 1\nflags\t: avx512f\n"
    )
    assert record._cpu_identity(cpuinfo) == {
        "vendor": "AuthenticAMD",
        "family": "25",
        "model": "1",
        "stepping": "1",
        "vector": "avx2",  # the first processor's flags, not the second's
    }
    cpuinfo.write_text(f"processor\t: 0\n{first}flags\t\t: sse4_2 avx avx2 avx512f avx512bw\n")
    assert record._cpu_identity(cpuinfo)["vector"] == "avx512f"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm\nCPU implementer\t: 0x41\n")  # an ARM kernel's
    assert record._cpu_identity(cpuinfo) == {"vector": "asimd"}
    assert record._cpu_identity(tmp_path / "absent") is None
