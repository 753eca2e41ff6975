"""The benchmarks' and tools' scripts start: each answers ``--help`` with its usage (an import that a refactor broke,
or a script that takes its arguments unchecked, fails here rather than on the day someone runs it)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import ROOT

LIBRARIES = {"benchmarks/preset.py"}  # imported by the benchmarks, not run
SCRIPTS = sorted(
    str(path.relative_to(ROOT))
    for folder in ("benchmarks", "tools")
    for path in (ROOT / folder).glob("*.py")
    if str(path.relative_to(ROOT)) not in LIBRARIES
)


def test_every_script_is_found():
    assert "benchmarks/ensemble.py" in SCRIPTS and "tools/engine_fingerprint.py" in SCRIPTS
    assert all((ROOT / library).is_file() for library in LIBRARIES)


@pytest.mark.integration  # each starts Python and most import torch: about 2 s apiece
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_answers_help_with_its_usage(script):
    result = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:"), result.stdout[:500]
