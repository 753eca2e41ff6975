"""The pipeline through `profiles/slurm` on a live single-node Slurm cluster (tools/slurm/cluster.sh).

The smoke preset is submitted job by job with `sbatch` (snakemake-executor-plugin-slurm), one job is cancelled with
`scancel` while it runs, and the run must still finish: the profile's `retries: 1` resubmits it. Accounting
(`sacct`) must list every job of the DAG as completed, with the resources the rules and the profile ask for, and the
outputs must equal those of a local run of the same preset, apart from what the wall clock decides.

Needs root and Debian's Slurm packages (`apt-get install -y slurmctld slurmd slurmdbd munge mariadb-server
slurm-client`); skipped without them, unless DPAUDIT_REQUIRE_SLURM is set (CI), where it fails instead.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support import ROOT

pytestmark = pytest.mark.slow

CLUSTER = ROOT / "tools" / "slurm" / "cluster.sh"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
PROGRAMS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct", "squeue", "scancel")
# what tools/slurm/cluster.sh creates: the account, the partition (and two pretend GPUs, which run on the CPU)
ACCOUNT, PARTITION = "dpaudit", "main"
# the DPSGD-GC/DC training jobs ask for a GPU, as in the paper preset, with their own memory and time limit
GPU_SECTION = "dpsgd_dc:\n  resources: {gpu: 1, mem_mb: 3000, runtime: 30}\n"
PRESET = ["--configfile", "configs/smoke.yaml", "gpu.yaml"]
CANCELLED_RULE = "dpsgd_dc_run"
# what each job must be given (memory, minutes, GPUs): gpu.yaml for the DPSGD-GC/DC training jobs, the training
# rules' own defaults (section_resources in workflow/rules/common.smk) for the other training jobs, the profile's
# default-resources for the rest
TRAINING_DEFAULTS = ("2000M", "60", None)
TRAINING_RULES = (
    "optimizers_run",
    "audit_run",
    "audit_optimizer",
    "audit_run_optimizer",
    "audit_run_bug",
    "audit_blackbox",
)
RESOURCES = {"dpsgd_dc_run": ("3000M", "30", "1"), **dict.fromkeys(TRAINING_RULES, TRAINING_DEFAULTS)}
PROFILE_DEFAULTS = ("4000M", "120", None)


def _expected_resources(rule: str) -> tuple[str, str, str | None]:
    """(memory, minutes, GPUs) a job of ``rule`` must be given; the paper runs' jobs are papers_<optimizer>."""
    return TRAINING_DEFAULTS if rule.startswith("papers_") else RESOURCES.get(rule, PROFILE_DEFAULTS)


@pytest.fixture(scope="module")
def slurm_cluster():
    missing = [program for program in PROGRAMS if shutil.which(program) is None]
    reason = None
    if os.geteuid() != 0:
        reason = "starting a Slurm cluster (tools/slurm/cluster.sh) needs root"
    elif missing:
        reason = (
            f"Slurm is not installed (no {', '.join(missing)}): "
            "apt-get install -y slurmctld slurmd slurmdbd munge mariadb-server slurm-client"
        )
    if reason:
        if os.environ.get("DPAUDIT_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)
    started = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield
    finally:
        subprocess.run([str(CLUSTER), "stop"], capture_output=True, timeout=300)


def _workflow(folder: Path) -> Path:
    folder.mkdir()
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, folder / name)
    for name in ("workflow", "configs", "profiles"):
        shutil.copytree(ROOT / name, folder / name)
    (folder / "gpu.yaml").write_text(GPU_SECTION)
    return folder


def _planned_jobs(folder: Path) -> Counter:
    """Jobs per rule that a run of the preset executes (`all` has no action and is never submitted)."""
    result = subprocess.run(
        [*SNAKEMAKE, "-n", "--cores", "1", *PRESET], cwd=folder, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts = Counter()
    # the table's rows, up to the blank line that ends it (the jobs' own lines follow: "jobid: 3", "priority: 1")
    table = result.stdout.split("Job stats:", 1)[1].strip("\n").split("\n\n", 1)[0]
    for line in table.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "all", "job"):
            counts[parts[0]] = int(parts[1])
    return counts


def _run_id(log: Path, process: subprocess.Popen) -> str:
    for _ in range(300):
        found = re.search(r"SLURM run ID: (\S+)", log.read_text())
        if found:
            return found.group(1)
        assert process.poll() is None, log.read_text()[-3000:]
        time.sleep(1)
    raise AssertionError("no SLURM run ID after 300 s:\n" + log.read_text()[-3000:])


def _training_job(run_id: str, folder: Path) -> tuple[str, str] | None:
    """A running DPSGD-GC/DC training job whose `dpaudit train` has begun (it wrote a split): id and comment. The
    smoke preset has one such job per configuration (``dpsgd_dc.one_job_per``), its comment naming the run."""
    jobs = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "--name", run_id, "-o", "%i|%k"], capture_output=True, text=True, check=True
    ).stdout.split()
    for job in jobs:
        job_id, comment = job.split("|")
        if comment.startswith(f"rule_{CANCELLED_RULE}_wildcards_"):
            run = comment.split("_wildcards_")[1]
            if any((folder / "results" / "dpsgd_dc" / run).glob("trial_*/split.json")):
                return job_id, comment
    return None


def _cancel_a_running_job(run_id: str, folder: Path, process: subprocess.Popen, log: Path) -> tuple[str, str]:
    """`scancel` the first DPSGD-GC/DC training job seen training; its job id and comment."""
    for _ in range(2400):
        assert process.poll() is None, "the run ended before a job could be cancelled:\n" + log.read_text()[-3000:]
        found = _training_job(run_id, folder)
        if found:
            subprocess.run(["scancel", found[0]], check=True)
            return found
        time.sleep(0.5)
    queue = subprocess.run(["squeue", "-o", "%i %T %r %k"], capture_output=True, text=True).stdout
    node = subprocess.run(["sinfo", "-o", "%N %T %C %G %E"], capture_output=True, text=True).stdout
    raise AssertionError(f"no {CANCELLED_RULE} job trained within 20 minutes; the queue:\n{queue}the node:\n{node}")


def _failure(log: Path, folder: Path) -> str:
    """The end of a failed run's log, and the end of each failed job's own log it names."""
    text = log.read_text(errors="replace")
    named = [folder / name for name in dict.fromkeys(re.findall(r"log: (\S+) \(check log file", text))]
    jobs = [f"--- {path}:\n" + path.read_text(errors="replace")[-2000:] for path in named if path.is_file()]
    return "\n".join([text[-5000:], *jobs])


def _accounting(run_id: str) -> list[dict]:
    fields = ["JobIDRaw", "State", "Comment", "AllocTRES", "TimelimitRaw", "Account", "Partition"]
    output = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--name", run_id, "-S", "now-1days", "-o", ",".join(fields)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(zip(fields, line.split("|"))) for line in output.splitlines() if line]


def _rule(comment: str) -> str:
    """The rule of a job from the comment the plugin gives it: rule_<rule> or rule_<rule>_wildcards_<values>."""
    return comment.removeprefix("rule_").split("_wildcards_")[0]


def _wall_clock(key: str) -> bool:
    return key.startswith("seconds") or key.endswith("_seconds")


def _without_wall_clock(value):
    """A JSON value without its wall-clock fields (``elapsed_seconds``, ``seconds_*``), which measure the machine's
    load, and without the verdict (``verdict``) of a claim whose numbers are all wall-clock times."""
    if isinstance(value, dict):
        numbers = value.get("numbers")
        timed_claim = isinstance(numbers, dict) and bool(numbers) and all(_wall_clock(key) for key in numbers)
        return {
            key: _without_wall_clock(item)
            for key, item in value.items()
            if not _wall_clock(key) and not (timed_claim and key == "verdict")
        }
    if isinstance(value, list):
        return [_without_wall_clock(item) for item in value]
    return value


def _keys(value):
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def _timed_figures(folder: Path) -> set[str]:
    """Figures whose manifest records wall-clock times (AdaDPIGU Fig 8 colours its points by training time)."""
    return {
        str(path.relative_to(folder / "figures")).removesuffix(".manifest.json")
        for path in (folder / "figures").rglob("*.manifest.json")
        if any(_wall_clock(key) for key in _keys(json.loads(path.read_text())))
    }


def _same_manifest(a: dict, b: dict, ours: Path, theirs: Path) -> bool:
    """Two runs' manifests (``dpaudit.integrity``) agree: the same configuration and files, and the same hash of
    every file that is byte-identical in both runs (a file with wall-clock times is compared on its own)."""
    files_a, files_b = a.pop("files"), b.pop("files")
    return (
        a == b
        and files_a.keys() == files_b.keys()
        and all(
            files_a[name] == files_b[name] or (ours.parent / name).read_bytes() != (theirs.parent / name).read_bytes()
            for name in files_a
            if (ours.parent / name).is_file() and (theirs.parent / name).is_file()
        )
    )


def _differing_files(ours: Path, theirs: Path) -> list[str]:
    """Output files that differ between two runs of the same preset, beyond what the wall clock explains: JSON
    leaf by leaf without wall-clock fields; every other file byte for byte, except the drawings and tables of a
    figure that plots times and, in the claim and gallery pages, the lines that name such a figure."""

    def files(folder):
        return sorted(
            str(path.relative_to(folder))
            for name in ("results", "figures", "metrics")
            for path in (folder / name).rglob("*")
            if path.is_file()
        )

    names = files(ours)
    assert names == files(theirs), set(names) ^ set(files(theirs))
    assert len(names) > 100
    timed = _timed_figures(ours)
    assert timed == _timed_figures(theirs)
    differing = []
    for name in names:
        a, b = (ours / name).read_bytes(), (theirs / name).read_bytes()
        if a == b:
            continue
        if name.startswith("results/") and name.endswith("/dpaudit-run.json"):  # a run's hashes of its files
            if _same_manifest(json.loads(a), json.loads(b), ours / name, theirs / name):
                continue
        elif name.endswith(".json"):
            if _without_wall_clock(json.loads(a)) == _without_wall_clock(json.loads(b)):
                continue
        elif name in ("figures/claims.md", "figures/gallery.md"):
            a, b = (
                [line for line in text.decode().splitlines() if not any(figure in line for figure in timed)]
                for text in (a, b)
            )
            if a == b:
                continue
        elif name.startswith("figures/") and name.removeprefix("figures/").rsplit(".", 1)[0] in timed:
            continue
        differing.append(name)
    return differing


def test_smoke_preset_through_slurm_equals_a_local_run_after_a_cancelled_job(slurm_cluster, tmp_path):
    on_slurm, local = _workflow(tmp_path / "slurm"), _workflow(tmp_path / "local")
    planned = _planned_jobs(local)
    assert planned[CANCELLED_RULE] > 0
    log = tmp_path / "slurm.log"
    environment = {**os.environ, "SBATCH_ACCOUNT": ACCOUNT, "SBATCH_PARTITION": PARTITION}
    command = [*SNAKEMAKE, "--workflow-profile", "profiles/slurm", *PRESET, "--slurm-init-seconds-before-status-checks"]
    process = subprocess.Popen(
        [*command, "5"], cwd=on_slurm, env=environment, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    # the same preset on this machine, meanwhile (the default profile)
    local_log = tmp_path / "local.log"  # a file, not a pipe: a full pipe would stall the run
    local_run = subprocess.Popen(
        [*SNAKEMAKE, "--cores", "2", *PRESET], cwd=local, stdout=local_log.open("w"), stderr=subprocess.STDOUT
    )
    try:
        run_id = _run_id(log, process)
        cancelled, cancelled_comment = _cancel_a_running_job(run_id, on_slurm, process, log)
        assert process.wait(timeout=3600) == 0, _failure(log, on_slurm)
        assert local_run.wait(timeout=3600) == 0, _failure(local_log, local)
    finally:
        for running in (process, local_run):
            if running.poll() is None:
                running.kill()
                running.wait()

    _check_run(run_id, on_slurm, local, log, planned, cancelled, cancelled_comment)


def _check_run(run_id, on_slurm, local, log, planned, cancelled, cancelled_comment):
    jobs = _accounting(run_id)
    by_id = {job["JobIDRaw"]: job for job in jobs}
    # the cancelled job was resubmitted (retries: 1) and completed on its second attempt
    assert by_id[cancelled]["State"].startswith("CANCELLED"), by_id[cancelled]
    assert any(job["Comment"] == cancelled_comment and job["State"] == "COMPLETED" for job in jobs)
    assert "Trying to restart job" in log.read_text()
    # every job of the DAG went through Slurm and completed there once; nothing else failed
    completed = [job for job in jobs if job["State"] == "COMPLETED"]
    assert len(completed) == len(jobs) - 1, [job for job in jobs if job["State"] != "COMPLETED"]
    assert Counter(_rule(job["Comment"]) for job in completed) == planned
    assert len({job["Comment"] for job in completed}) == len(completed)
    # resources: the rule's (GPU, memory, time limit) or the profile's defaults; account and partition from
    # SBATCH_ACCOUNT and SBATCH_PARTITION
    for job in jobs:
        assert (job["Account"], job["Partition"]) == (ACCOUNT, PARTITION), job
        memory, minutes, gpus = _expected_resources(_rule(job["Comment"]))
        assert job["TimelimitRaw"] == minutes, job
        if job["JobIDRaw"] != cancelled:  # a job cancelled at once may show no allocation
            tres = dict(item.split("=") for item in job["AllocTRES"].split(","))
            assert (tres["cpu"], tres["mem"], tres.get("gres/gpu")) == ("1", memory, gpus), job
    # each job's Slurm log stays where the docs say: .snakemake/slurm_logs/rule_<rule>/<wildcards>/<job id>.log
    logs = {path.stem: path for path in (on_slurm / ".snakemake" / "slurm_logs").rglob("*.log")}
    for job in jobs:
        path = logs[job["JobIDRaw"]]
        assert path.relative_to(on_slurm / ".snakemake" / "slurm_logs").parts[0] == f"rule_{_rule(job['Comment'])}"
    for job in completed:
        assert f"(Rule: {_rule(job['Comment'])})" in logs[job["JobIDRaw"]].read_text(), job
    # the outputs equal the local run's, but for wall-clock fields
    assert _differing_files(on_slurm, local) == []
