"""How far a pipeline run's outputs are from the committed ones; prints JSON.

    python tools/output_drift.py [--ref HEAD] [--preset FOLDER] [CHECKOUT]

After ``snakemake --cores all`` in CHECKOUT (default: this repository), compares its ``figures/manifest.json``
and ``metrics/*_epsilon_hat.csv`` (under ``--preset``, e.g. ``presets/mnist``, for a preset run apart) with the
versions committed at ``--ref``: how many numbers changed (a NaN, an undecided value, equals a NaN), by how much, and
which claim verdicts changed (``verdict``: holds, contradicted, inconclusive; or a true/false check). Wall-clock
numbers (``seconds_*``) are counted apart: they depend on the machine's load, not on the arithmetic. On one machine a
rerun gives no change at all (``tests/reproduce/test_workflow.py``); across machines the floating point may differ in
the last bits, and training grows such differences.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import subprocess
from pathlib import Path


def committed(checkout: Path, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def leaves(value, path: str = ""):
    """(path, value) of every scalar in a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def differ(old: float, new: float) -> bool:
    """Whether two numbers differ, a NaN (an undecided value) being equal to a NaN."""
    return old != new and not (math.isnan(old) and math.isnan(new))


def manifest_drift(old: dict, new: dict) -> dict:
    old, new = dict(leaves(old)), dict(leaves(new))
    numbers = [
        path
        for path, value in old.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and path in new
    ]
    changed = [path for path in numbers if differ(old[path], new[path])]
    clock = [path for path in changed if path.rsplit("/", 1)[-1].startswith("seconds")]
    relative = [  # none for a NaN that became a number, or back
        abs(new[path] - old[path]) / max(abs(old[path]), 1e-300)
        for path in changed
        if path not in clock and not math.isnan(old[path]) and not math.isnan(new[path])
    ]
    return {
        "numbers": len(numbers),
        "changed": len(changed) - len(clock),
        "changed_wall_clock": len(clock),
        "smallest_relative_change": min(relative, default=None),
        "verdicts_changed": sorted(
            path
            for path, value in old.items()
            if (isinstance(value, bool) or path.endswith("/verdict")) and new.get(path) != value
        ),
    }


def epsilon_hat_drift(old_text: str, new_text: str) -> dict:
    old, new = list(csv.DictReader(io.StringIO(old_text))), list(csv.DictReader(io.StringIO(new_text)))
    if [(row["config"], row["epoch"]) for row in old] != [(row["config"], row["epoch"]) for row in new]:
        return {"rows_differ": True}
    pairs = [(float(a["epsilon_hat"]), float(b["epsilon_hat"])) for a, b in zip(old, new)]
    changes = [abs(b - a) if differ(a, b) else 0.0 for a, b in pairs]
    return {
        "rows": len(changes),
        "equal": sum(change == 0 for change in changes),
        "largest_change": max(changes, default=0.0),
        "median_change": statistics.median(changes) if changes else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--ref", default="HEAD", help="the commit whose outputs to compare with (default: HEAD)")
    parser.add_argument(
        "--preset", default=".", help="the folder, in the checkout, of a preset run apart (e.g. presets/mnist)"
    )
    args = parser.parse_args()
    folder = Path(args.preset)
    if folder.is_absolute() or ".." in folder.parts or not (args.checkout / folder / "figures/manifest.json").is_file():
        parser.error(f"--preset {args.preset}: no figures/manifest.json under it in {args.checkout}")
    report = {
        "checkout": str(args.checkout),
        "ref": args.ref,
        "preset": folder.as_posix(),
        "manifest": manifest_drift(
            json.loads(committed(args.checkout, args.ref, (folder / "figures/manifest.json").as_posix())),
            json.loads((args.checkout / folder / "figures/manifest.json").read_text()),
        ),
    }
    for table in sorted((args.checkout / folder / "metrics").glob("*_epsilon_hat.csv")):
        path = (folder / "metrics" / table.name).as_posix()
        report[path] = epsilon_hat_drift(committed(args.checkout, args.ref, path), table.read_text())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
