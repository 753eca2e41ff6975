"""The Snakemake workflow: schema validation, presets, profiles, dispatch through an executor plugin."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


@pytest.fixture()
def workflow_copy(tmp_path):
    """The workflow files in a scratch folder, so tests never touch the repository's results."""
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for folder in ("workflow", "configs", "profiles"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def _snakemake(folder, *args, check=True):
    result = subprocess.run([*SNAKEMAKE, *args], cwd=folder, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(result.stdout[-3000:] + result.stderr[-3000:])
    return result


def _job_count(output: str, rule: str) -> int:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == rule:
            return int(parts[1])
    return 0


@pytest.mark.parametrize("preset, trainings", [(None, 4 * 3 + 6 * 3), ("configs/smoke.yaml", 2 * 2 + 4 * 2),
                                               ("configs/paper.yaml", 6 * 10 + 6 * 10)])
def test_presets_build_the_same_dag(workflow_copy, preset, trainings):
    args = ["-n", "--cores", "1"] + (["--configfile", preset] if preset else [])
    output = _snakemake(workflow_copy, *args).stdout
    assert _job_count(output, "seed004_train") == trainings
    assert _job_count(output, "seed004_attack") == trainings
    assert _job_count(output, "seed004_data_figure") == 3


def test_bad_parameter_is_rejected_before_any_job(workflow_copy):
    params = workflow_copy / "params.yaml"
    params.write_text(params.read_text().replace("lr: 0.1 ", "lr: -0.1 "))
    result = _snakemake(workflow_copy, "-n", "--cores", "1", check=False)
    assert result.returncode != 0
    assert "Error validating config file" in result.stdout + result.stderr
    assert "seed004_train" not in result.stdout


def test_slurm_profile_parses_and_builds_the_paper_dag(workflow_copy):
    output = _snakemake(workflow_copy, "-n", "--workflow-profile", "profiles/slurm",
                        "--configfile", "configs/paper.yaml").stdout
    assert _job_count(output, "seed004_train") == 120


def test_jobs_are_dispatched_through_an_executor_plugin(workflow_copy):
    submit = workflow_copy / "submit.sh"
    log = workflow_copy / "submitted.log"
    submit.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\nbash "${{@: -1}}" > /dev/null 2>&1 &\necho $!\n')
    submit.chmod(0o755)
    _snakemake(workflow_copy, "--executor", "cluster-generic", "--cluster-generic-submit-cmd", str(submit),
               "--jobs", "2", "--latency-wait", "30", "figures/dpsgd_dc/figure1.pdf", "figures/dpsgd_dc/table1.md")
    assert (workflow_copy / "figures" / "dpsgd_dc" / "figure1.png").is_file()
    assert (workflow_copy / "figures" / "dpsgd_dc" / "table1.tex").is_file()
    assert len(log.read_text().strip().splitlines()) == 2  # two jobs, each through the submit command
