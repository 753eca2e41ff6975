"""``tools/output_drift.py``: which manifest numbers a run changed, a NaN (an undecided value) equal to a NaN."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from support import load_file_module

TOOL = Path(__file__).parents[1] / "tools" / "output_drift.py"
DRIFT = load_file_module(TOOL, "output_drift")


def test_a_nan_left_undecided_is_no_change_and_a_moved_number_is():
    old = {
        "a": {"eps": 2.0, "undecided": math.nan, "seconds_fit": 3.0, "holds": True, "verdict": "holds"},
        "b": [1.0, math.nan],
    }
    new = {
        "a": {"eps": 3.0, "undecided": math.nan, "seconds_fit": 9.0, "holds": False, "verdict": "inconclusive"},
        "b": [1.0, 4.0],
    }
    drift = DRIFT.manifest_drift(old, new)
    # numbers: eps, undecided, seconds_fit, b[0], b[1]; changed: eps (1 → relative 0.5) and b[1] (NaN → 4: no ratio)
    assert drift["numbers"] == 5
    assert drift["changed"] == 2
    assert drift["changed_wall_clock"] == 1
    assert drift["smallest_relative_change"] == 0.5
    assert drift["verdicts_changed"] == ["/a/holds", "/a/verdict"]
    assert DRIFT.manifest_drift(old, old)["changed"] == 0


def test_a_preset_without_outputs_is_refused_in_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, str(TOOL), "--preset", "presets/none", str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"output_drift.py: error: --preset presets/none: no figures/manifest.json under it in {tmp_path}"
    )


def test_an_epsilon_hat_left_undecided_is_an_equal_row():
    header = "config,epoch,epsilon_hat\n"
    old = header + "a,1,nan\na,2,1.0\n"
    new = header + "a,1,nan\na,2,1.5\n"
    assert DRIFT.epsilon_hat_drift(old, new) == {"rows": 2, "equal": 1, "largest_change": 0.5, "median_change": 0.25}
