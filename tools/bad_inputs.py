"""Try each bad input through the `dpaudit`, `python -m reproduce` and `snakemake` command lines; print a Markdown
table of what happened (exit status, and the message's last line). The README's bad-input table is this script's
output.

Usage: python tools/bad_inputs.py   (about a minute on 2 cores; works in a scratch folder)
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DPAUDIT = [sys.executable, "-m", "dpaudit.cli"]
# the reproduction's commands (workflow/reproduce), with workflow/ on the path as the Snakefile gives its jobs
REPRODUCE = [sys.executable, "-m", "reproduce"]


def _without(arguments: list[str], *flags: str) -> list[str]:
    """``arguments`` less each of ``flags`` and its value (SGD reads no C and no noise: giving them is an error)."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument in flags:
            skip = True
        else:
            kept.append(argument)
    return kept


REPRODUCE_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT / "workflow"), os.environ.get("PYTHONPATH")))),
}
TINY = [
    "--dataset",
    "digits",
    "--model",
    "cnn-digits",
    "--optimizer",
    "dpsgd-gc",
    "--noise-multiplier",
    "1",
    "--clip-norm",
    "1",
    "--batch-size",
    "20",
    "--lr",
    "0.1",
    "--epochs",
    "2",
    "--target-size",
    "60",
    "--num-shadows",
    "1",
    "--quiet",
]


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    errors = [index for index, line in enumerate(lines) if "error" in line.lower() and "Traceback" not in line]
    if not errors:
        return result.returncode, (lines or [""])[-1].strip()
    line = lines[errors[-1]].strip()
    if line.endswith(":") and errors[-1] + 1 < len(lines):  # Snakemake: "ValueError in file …:" then the message
        line = lines[errors[-1] + 1].strip()
    return result.returncode, line


def _write_idx(path: Path, array) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + b"".join(struct.pack(">I", n) for n in array.shape)
    path.write_bytes(header + array.tobytes())


def main() -> None:
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="dpaudit-bad-"))
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, work / name)
    for folder in ("workflow", "configs", "profiles"):
        shutil.copytree(ROOT / folder, work / folder)
    params = (work / "params.yaml").read_text()
    cases = []

    def snakemake_with(description, old, new):
        (work / "params.yaml").write_text(params.replace(old, new, 1))
        cases.append((description, *_run([sys.executable, "-m", "snakemake", "-n", "--cores", "1"], work)))
        (work / "params.yaml").write_text(params)

    snakemake_with("params.yaml: negative learning rate", "lr: 0.1 ", "lr: -0.1 ")
    snakemake_with("params.yaml: learning rate NaN", "lr: 0.1 ", "lr: .nan ")
    snakemake_with("params.yaml: batch size 36.0", "batch_size: 36 ", "batch_size: 36.0 ")
    snakemake_with("params.yaml: a preset name with a shell command", "preset: default ", 'preset: "x; touch pwned" ')
    snakemake_with(
        "params.yaml: unknown optimizer in optimizers.runs", "{name: auto-v, lr: 0.2}", "{name: auto-w, lr: 0.2}"
    )
    snakemake_with(
        "params.yaml: validation twin not in optimizers.runs",
        "- [dpsgd-no-clip, dpsgd-gc]",
        "- [dpsgd-no-clip, dpsgd-dc]",
    )
    snakemake_with(
        "params.yaml: projection-aligned canaries for a twin without a projection",
        "- [dp2-sgd-as-published, dp2-sgd]",
        "- [dp2-sgd-as-published, dpsgd-gc, {canary_design: projection-aligned}]",
    )
    cases.append(
        (
            "`train --canary-design projection-aligned` with DP-SGD",
            *_run(
                [*DPAUDIT, "train", *TINY, "--canaries", "10", "--canary-design", "projection-aligned", "--out", "r"],
                work,
            ),
        )
    )
    snakemake_with(
        "params.yaml: support canaries for a twin that learns no support",
        "- [adadpigu-code, adadpigu,",
        "- [adadpigu-code, dpsgd-gc,",
    )
    cases.append(
        (
            "`train --canary-design support` with DP-SGD",
            *_run([*DPAUDIT, "train", *TINY, "--canaries", "10", "--canary-design", "support", "--out", "r"], work),
        )
    )
    snakemake_with(
        "params.yaml: noise-scale canaries with 200 canaries",
        "{canary_design: noise-scale, canaries: 1}",
        "{canary_design: noise-scale, canaries: 200}",
    )
    cases.append(
        (
            "`train --canary-design noise-scale --canaries 10`",
            *_run([*DPAUDIT, "train", *TINY, "--canaries", "10", "--canary-design", "noise-scale", "--out", "r"], work),
        )
    )
    cases.append(
        (
            "`train --canary-design whole-run --canary-support ranked` with ON-TopK",
            *_run(
                [*DPAUDIT, "train", *TINY, "--optimizer", "on-topk", "--canaries", "10", "--canary-design"]
                + ["whole-run", "--canary-support", "ranked", "--out", "r"],
                work,
            ),
        )
    )
    cases.append(
        ("`train --optimizer adam`", *_run([*DPAUDIT, "train", *TINY, "--optimizer", "adam", "--out", "r"], work))
    )
    cases.append(
        (
            "`train --active-ratio 0.2` with DP-SGD (a setting it does not read)",
            *_run([*DPAUDIT, "train", *TINY, "--active-ratio", "0.2", "--out", "r"], work),
        )
    )
    cases.append(
        (
            "`train --batch-size 5000` (more than the data)",
            *_run([*DPAUDIT, "train", *TINY, "--batch-size", "5000", "--out", "r"], work),
        )
    )
    cases.append(
        (
            "`train --dataset mnist` without the files",
            *_run(
                [
                    *DPAUDIT,
                    "train",
                    *TINY,
                    "--dataset",
                    "mnist",
                    "--model",
                    "mlp",
                    "--data-root",
                    "nodata",
                    "--out",
                    "r",
                ],
                work,
            ),
        )
    )
    _write_idx(work / "corrupt" / "MNIST" / "raw" / "t10k-labels-idx1-ubyte", np.zeros(3, dtype=np.uint8))
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"):
        (work / "corrupt" / "MNIST" / "raw" / name).write_bytes(b"not MNIST")
    cases.append(
        (
            "`data fetch mnist` over corrupted files, with only the files present to try",
            *_run([*DPAUDIT, "data", "fetch", "mnist", "--root", "corrupt", "--route", "present"], work),
        )
    )
    _write_idx(work / "wrong" / "MNIST" / "raw" / "train-images-idx3-ubyte", np.zeros((3, 27, 27), dtype=np.uint8))
    _write_idx(work / "wrong" / "MNIST" / "raw" / "train-labels-idx1-ubyte", np.zeros(3, dtype=np.uint8))
    cases.append(
        (
            "MNIST images of the wrong shape (27×27)",
            *_run(
                [
                    *DPAUDIT,
                    "train",
                    *TINY,
                    "--dataset",
                    "mnist",
                    "--model",
                    "mlp",
                    "--data-root",
                    "wrong",
                    "--out",
                    "r",
                ],
                work,
            ),
        )
    )
    cases.append(
        (
            "loss becomes NaN (`--optimizer sgd --lr 1e12`)",
            *_run(
                [
                    *DPAUDIT,
                    "train",
                    *_without(TINY, "--noise-multiplier", "--clip-norm"),
                    "--optimizer",
                    "sgd",
                    "--lr",
                    "1e12",
                    "--out",
                    "nan",
                ],
                work,
            ),
        )
    )
    subprocess.run([*DPAUDIT, "train", *TINY, "--out", "run"], cwd=work, check=True, capture_output=True)
    checkpoint = work / "run" / "target" / "epoch_0002.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:200])
    cases.append(("truncated checkpoint, then `attack --run`", *_run([*DPAUDIT, "attack", "--run", "run"], work)))
    for model in ("target", "shadow_00"):  # as if a kill had left epoch 1's training state, then the disk garbled it
        (work / "run" / model / "state_0001.pt").write_bytes(checkpoint.read_bytes()[:100])
    cases.append(
        (
            "truncated training state, then `train` again (resume)",
            *_run([*DPAUDIT, "train", *TINY, "--out", "run"], work),
        )
    )
    cases.append(
        ("`train --state-every -5`", *_run([*DPAUDIT, "train", *TINY, "--state-every", "-5", "--out", "r"], work))
    )
    (work / "run" / "config.json").write_text("{not json")
    cases.append(("garbled config.json, then `audit --run`", *_run([*DPAUDIT, "audit", "--run", "run"], work)))
    (work / "scores.csv").write_text("score,member\n0.5,1\n")
    cases.append(
        ("score CSV without an `is_member` column", *_run([*DPAUDIT, "audit", "--scores", "scores.csv"], work))
    )
    cases.append(
        (
            "`batch` with a bad second command",
            *_run([*REPRODUCE, "batch", f"train {' '.join(TINY)} --out b", "train --epochs 2"], work, REPRODUCE_ENV),
        )
    )

    def dpaudit(description, *argv):
        cases.append((description, *_run([*DPAUDIT, *argv], work)))

    # the run folder: owned, checked, never mixed
    (work / "project").mkdir()
    (work / "project" / "config.json").write_text('{"theme": "dark"}')
    dpaudit("`train --out` a folder with a config.json that is not a run's", "train", *TINY, "--out", "project")
    (work / "home" / "notes").mkdir(parents=True)
    dpaudit("`train --out` a folder of other files", "train", *TINY, "--out", "home")
    (work / "afile").write_text("x")
    dpaudit("`train --out` a file", "train", *TINY, "--out", "afile")
    subprocess.run([*DPAUDIT, "train", *TINY, "--out", "good"], cwd=work, check=True, capture_output=True)
    dpaudit("`train` again into a run of another configuration", "train", *TINY, "--lr", "0.2", "--out", "good")
    dpaudit("`train --canaries 1000000000`", "train", *TINY, "--canaries", "1000000000", "--out", "big")
    dpaudit("`audit --run` naming one run twice", "audit", "--run", "good", "good", "--attack", "loss")
    shutil.copytree(work / "good", work / "copy")
    dpaudit(
        "`audit --run` pooling two runs of one seed and trial", "audit", "--run", "good", "copy", "--attack", "loss"
    )
    ledger = work / "good" / "target" / "ledger.json"
    original = ledger.read_text()
    ledger.write_text(original.replace('"noise_multiplier": 1.0', '"noise_multiplier": 100.0'))
    dpaudit("privacy ledger edited (z = 1 → 100), then `epsilon --run`", "epsilon", "--run", "good")
    ledger.write_text(original)
    dpaudit("the run whose loss became NaN (above), then `epsilon --run`", "epsilon", "--run", "nan")
    dpaudit("`train --config` naming a missing file", "train", *TINY, "--config", "missing.yaml", "--out", "r")
    (work / "bad.yaml").write_text("lr: [0.1\n")
    dpaudit("`train --config` with malformed YAML", "train", *TINY, "--config", "bad.yaml", "--out", "r")
    (work / "utf16.csv").write_text("score,is_member\n0.5,1\n", encoding="utf-16")
    dpaudit("score CSV saved as UTF-16", "audit", "--scores", "utf16.csv")
    (work / "short.csv").write_text("score,is_member\n0.5,1\n0.7\n")
    dpaudit("score CSV with a short row", "audit", "--scores", "short.csv")
    dpaudit("`calibrate --steps -3`", "calibrate", "--target-epsilon", "1", "--sample-rate", "0.01", "--steps", "-3")
    print("| bad input | exit status | message (last line) |")
    print("|---|---|---|")
    for description, code, message in cases:
        print(f"| {description} | {code} | `{message.replace('|', '/')}` |")
    shutil.rmtree(work)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    main()
