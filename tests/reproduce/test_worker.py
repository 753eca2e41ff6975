"""The pipeline's warm worker (``reproduce.worker``): a job it runs prints, returns and writes what a fresh interpreter
does; it refuses another environment; a signal to the job, or the job's end, stops what it started."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, assert_same_results, with_workflow_path

from reproduce import worker

TRAIN = (
    "train --quiet --overwrite --out {out} --dataset digits --model mlp --sampling poisson --batch-size 30"
    " --epochs {epochs} --eval-epochs {epochs} --clip-norm 1.0 --sigma-dp 0.02 --target-size 120 --seed 3"
    " --canaries 20 --num-shadows 1 --optimizer dpsgd-gc --lr 0.2"
)


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """A worker started as the Snakefile starts one (one thread a job), the environment of its jobs, and its log."""
    saved = dict(os.environ)
    os.environ.update(with_workflow_path(saved))
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    running = worker.start(threads=1, log=log)
    assert running is not None
    jobs = {**os.environ, **dict.fromkeys(worker.SNAKEMAKE_THREAD_VARIABLES, "1")}
    socket = Path(jobs[worker.SOCKET_VARIABLE])
    deadline = time.monotonic() + 120
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield running, jobs, log
    worker.stop(running)
    os.environ.clear()
    os.environ.update(saved)
    assert not running.folder.exists() and running.process.returncode is not None


def _reproduce(arguments, environment):
    command = [sys.executable, "-m", "reproduce", *arguments]
    return subprocess.run(command, env=environment, cwd=ROOT, capture_output=True, text=True)


def _children(process):
    """The processes the worker forked that are still running."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == process.pid:
            found.append(int(stat.parent.name))
    return found


def test_a_command_the_worker_runs_prints_and_returns_what_a_fresh_interpreter_does(started):
    _, jobs, _ = started
    fresh = {name: value for name, value in jobs.items() if name != worker.SOCKET_VARIABLE}
    for arguments in (["list"], ["figure", "--no-such-flag"], ["batch", "'train --out'"]):
        warm, cold = _reproduce(arguments, jobs), _reproduce(arguments, fresh)
        assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr), arguments
    assert _reproduce(["list"], jobs).returncode == 0


def test_the_client_hands_its_command_over_and_takes_the_exit_status(started, monkeypatch, capfd):
    _, jobs, _ = started
    for name in worker.SNAKEMAKE_THREAD_VARIABLES:
        monkeypatch.setenv(name, "1")
    assert worker.delegate(["reproduce", "figure", "--no-such-flag"]) == 2
    assert "python -m reproduce figure: error:" in capfd.readouterr().err
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # read when torch was imported: the worker's is 1
    assert worker.delegate(["reproduce", "list"]) is None
    monkeypatch.delenv(worker.SOCKET_VARIABLE)
    assert worker.delegate(["reproduce", "list"]) is None


def test_a_training_the_worker_runs_writes_the_files_a_fresh_interpreter_writes(started, tmp_path):
    _, jobs, log = started
    fresh = {name: value for name, value in jobs.items() if name != worker.SOCKET_VARIABLE}
    for name, environment in (("warm", jobs), ("cold", fresh)):
        command = TRAIN.format(out=tmp_path / name / "run", epochs=2)
        result = _reproduce(["batch", "--quiet", command], environment)
        assert result.returncode == 0, result.stderr
    assert_same_results(tmp_path / "warm", tmp_path / "cold")
    ran = log.read_text()
    assert str(tmp_path / "warm") in ran and str(tmp_path / "cold") not in ran  # the warm one ran in the worker


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_job_stopped_by_a_signal_or_killed_outright_stops_its_child(started, tmp_path, signum):
    running, jobs, _ = started
    out = tmp_path / "run"
    client = subprocess.Popen(
        [sys.executable, "-m", "reproduce", "batch", "--quiet", TRAIN.format(out=out, epochs=5000)],
        env=jobs,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (out / "dpaudit-run.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children(running.process), "the worker runs the job"
    client.send_signal(signum)
    assert client.wait(timeout=30) == -signum
    deadline = time.monotonic() + 30
    while _children(running.process) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children(running.process)


def test_a_worker_stops_once_the_process_that_started_it_is_gone(tmp_path):
    starter = (
        "import sys, time; from pathlib import Path; from reproduce import worker\n"
        "running = worker.start(threads=1)\n"
        "socket = running.folder / 'socket'\n"
        "while not socket.exists(): time.sleep(0.05)\n"
        "print(running.process.pid, running.folder, flush=True)\n"
    )
    others = {name: value for name, value in os.environ.items() if name != worker.SOCKET_VARIABLE}
    environment = with_workflow_path(others)
    result = subprocess.run(
        [sys.executable, "-c", starter], env=environment, capture_output=True, text=True, check=True, timeout=120
    )
    pid, folder = result.stdout.split()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the worker outlived the process that started it"
        time.sleep(0.1)
    assert not (Path(folder) / "socket").exists()
    for leftover in Path(folder).iterdir():
        leftover.unlink()
    Path(folder).rmdir()
