"""The benchmarks' and tools' scripts start: each answers ``--help`` with its usage (an import that a refactor broke,
or a script that takes its arguments unchecked, fails here rather than on the day someone runs it)."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from support import ROOT, load_file_module

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


# each benchmark at a small workload runs to its end and prints its JSON (what benchmarks/record.py keeps); left out:
# accounting.py (no smaller workload than its minutes), pipeline_jobs.py (reads a pipeline's log) and record.py itself
TINY_RUNS = {
    "audit_scores": "--n 1000 --repeats 1",
    "point_null": "--sizes 100 --repeats 1 --draws 5",
    "calibration_grid": "--rates 0.01 --steps 100 --epsilons 1",
    "family_selection": "--seeds 1 --per-side 1000 --epsilons 2",
    "whole_run_overhead": "--canaries 20 2000 --repeats 1 --epochs 2",
    "resume_overhead": "--epochs 2 --repeats 1",
    "opacus_audit": "--canaries 200 --repeats 1 --epochs 1",
    "opacus_records": "--canaries 200 --repeats 1 --epochs 1",
    "blackbox_pruning": "--models 8 --cases rung",
    "validation_bugs": "--per-side 200 --epsilons 2 --epochs 1 --seeds 0 --bugs reused-noise",
    "model_stream_bugs": "--per-side 200 --epsilons 2 --epochs 1 --seeds 0",
    "opacus_record_bugs": "--canaries 200 --epsilons 2 --twin-seeds 0",
    "whole_run_profile": "--per-side 200 --epsilons 2",
    "whole_run_audit": "--per-side 200 --epsilons 2 --optimizers dpsgd-gc",
    "whole_run_ceiling": "--quick",
    "blackbox_audit": "--scale 0.01 --cases poisson",
    "dpsgd_dc_regime": "--trials 1 --regimes 'mlp, n=180, E=120, b=20'",
    "ensemble": "--architectures cnn-digits cnn-d2p2 --models 2 --steps 2 --repeats 1",
}


def test_the_tiny_runs_name_benchmarks():
    assert {f"benchmarks/{name}.py" for name in TINY_RUNS} <= set(SCRIPTS)


@pytest.mark.integration  # 1–30 s each on 2 cores
@pytest.mark.parametrize("name", sorted(TINY_RUNS))
def test_each_benchmark_runs_to_its_json_at_a_tiny_workload(name, tmp_path):
    record = load_file_module(ROOT / "benchmarks" / "record.py", "record")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *shlex.split(TINY_RUNS[name])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert isinstance(record.last_json(result.stdout), dict)


@pytest.mark.integration  # about 10 s on 2 cores
def test_the_ensemble_breakdown_splits_the_layerwise_calls_by_layer(tmp_path):
    record = load_file_module(ROOT / "benchmarks" / "record.py", "record")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "ensemble_breakdown.py"), "--models", "2", "--steps", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = record.last_json(result.stdout)
    # cnn-digits: conv, ReLU, conv, ReLU→pool swapped, flatten, linear; per-sample steps of the three with parameters
    parts = found["layerwise_seconds"]
    assert {"forward 0: Conv2d", "per-sample 0: Conv2d", "per-sample 2: Conv2d", "backward"} <= set(parts)
    assert sum(parts.values()) <= found["seconds"]["gradient_calls"]


def test_the_ensemble_benchmark_gives_each_architecture_images_of_its_datasets_shape():
    import torch

    from dpaudit.data import dataset_info
    from dpaudit.models import build_model

    ensemble = load_file_module(ROOT / "benchmarks" / "ensemble.py", "ensemble_benchmark")
    assert {"cnn-small": "mnist", "cnn-d2p2": "fashion-mnist"}.items() <= ensemble.DATASETS.items()
    for architecture, dataset in ensemble.DATASETS.items():
        info, data = dataset_info(dataset), ensemble.training_set(dataset, 5)
        assert data.images.shape == (5, *info.input_shape) and data.num_classes == info.num_classes
        assert 0 <= data.labels.min() and data.labels.max() < info.num_classes
        model = build_model(architecture, input_shape=info.input_shape, num_classes=info.num_classes).eval()
        with torch.no_grad():
            assert model(torch.from_numpy(data.images)).shape == (5, info.num_classes)
