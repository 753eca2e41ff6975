"""Run one benchmark and keep its JSON as a dated result: benchmarks/results/<name>.json.

    python benchmarks/record.py NAME -- COMMAND ...     # e.g. record.py ensemble -- python benchmarks/ensemble.py

The result holds the date (UTC), the machine (processor, cores, GPU if any), the command and the benchmark's
own JSON (the last JSON document it printed on standard output). The docs' benchmark page renders every result
file as a table, so measured numbers live here and nowhere else.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """Processor, core count and GPU name (if torch sees one) of this machine."""
    gpu = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "processor": _cpu_model() or platform.processor() or platform.machine(),
        "cpu": _cpu_identity(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "gpu": gpu or None,
    }


#: the vector extensions told apart, widest first: MKL and oneDNN take other kernels on each (other speed, and sums
#: in another order, so other last bits)
VECTOR_EXTENSIONS = ("avx512f", "avx2", "avx", "sse4_2", "asimd")


def _first_processor(cpuinfo: Path) -> dict[str, str]:
    """The fields Linux's ``cpuinfo`` gives its first processor ({} where it cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in text.split("\n\n", 1)[0].splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as Linux reports it in ``cpuinfo``, or "" where it does not: records from machines of
    one architecture and different speeds then say which they came from."""
    return _first_processor(cpuinfo).get("model name", "")


def _cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict | None:
    """Family, model and stepping (the generation: a virtual machine's model name is often only "AMD EPYC") and the
    widest vector extension of :data:`VECTOR_EXTENSIONS` the CPU has; None where ``cpuinfo`` gives none of them.
    Two hosts that differ here may differ twofold in speed and in the last bits of a pipeline's outputs."""
    fields = _first_processor(cpuinfo)
    flags = set((fields.get("flags") or fields.get("Features") or fields.get("features") or "").split())
    names = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping"}
    identity = {name: fields[key] for key, name in names.items() if fields.get(key)}
    vector = next((name for name in VECTOR_EXTENSIONS if name in flags), None)
    if vector:
        identity["vector"] = vector
    return identity or None


def last_json(text: str):
    """The JSON document that ends ``text`` (benchmarks print one, possibly after progress lines)."""
    decoder = json.JSONDecoder()
    for start in reversed([i for i, char in enumerate(text) if char in "{[" and (i == 0 or text[i - 1] == "\n")]):
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if not text[end:].strip():
            return value
    raise SystemExit("record.py: the benchmark's output does not end with a JSON document")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="result name (file benchmarks/results/NAME.json)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the benchmark's command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the benchmark's command after --")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)  # its progress lines go to stderr as they come
    if done.returncode:
        raise SystemExit(f"record.py: {' '.join(command)} exited with {done.returncode}")
    record = {
        "name": args.name,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": machine(),
        "command": " ".join(command),
        "result": last_json(done.stdout),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"benchmarks/results/{args.name}.json")


if __name__ == "__main__":
    main()
