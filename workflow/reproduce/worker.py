"""A warm interpreter for the pipeline's local jobs: ``python -m reproduce worker``.

Every job of the pipeline is ``python -m reproduce …``, and a fresh interpreter spends seconds importing torch,
dp-accounting, SciPy, Opacus and dpaudit before its work (``benchmarks/pipeline_worker.py`` measures what the worker
saves). A local ``snakemake`` run starts one worker (the Snakefile's ``onstart``, :func:`start`), which imports them
once and then forks one child per job. The job's own ``python -m reproduce`` (the client, :func:`delegate`) hands the
worker its arguments, working directory, file-mode mask, environment and standard streams (the file descriptors
themselves), and exits with the child's exit status. The child runs the command as a fresh interpreter would: the
same code, the same environment, nothing left by another job (each child is a fork of the worker, which runs no job
itself), so the outputs are the same bit for bit.

A client runs the command itself, as before, wherever the worker cannot: no worker named in the environment
(``DPAUDIT_WORKER``: a Slurm job, a command typed by hand), none listening, or an environment that differs from the
worker's in a variable read when the modules are imported (:data:`IMPORT_TIME_PREFIXES`: thread counts, library
paths, ``PYTHONPATH``, …) or another interpreter. A signal the client gets (Snakemake stopping the job) is passed to
the child, and a child whose client went away (killed outright) stops itself. The worker's socket lies in a folder
only its user can open; the worker stops with the Snakemake run (``onsuccess``, ``onerror``: :func:`stop`), or as
soon as the process that started it is gone.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

#: the environment variable naming the worker's socket (set for the jobs of a local run)
SOCKET_VARIABLE = "DPAUDIT_WORKER"
#: variables whose value the imported modules may have read: a client's must equal the worker's (or both be unset)
IMPORT_TIME_PREFIXES = (
    "PYTHON",
    "LD_",
    "CUDA",
    "TORCH",
    "PYTORCH",
    "OMP_",
    "GOMP",
    "KMP_",
    "MKL",
    "OPENBLAS",
    "GOTO",
    "VECLIB",
    "NUMEXPR",
    "NUMPY",
    "SCIPY",
    "MPL",
    "DPAUDIT",
)
#: what Snakemake sets to a job's thread count in its environment (``snakemake/shell.py``)
SNAKEMAKE_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
#: the modules the worker imports before it forks (what the jobs' interpreters spent their first seconds on; Opacus:
#: its accountants give every PRV ε, in the optimizer runs' ε per checkpoint and the black-box rung's calibration)
PRELOADED = (
    "torch",
    "scipy.stats",
    "dp_accounting",
    "opacus",
    "dpaudit.cli",
    "dpaudit.train",
    "dpaudit.audit",
    "reproduce.cli",
)
_HEADER = struct.Struct("!i")


def _import_time_environment(environment: dict[str, str]) -> dict[str, str]:
    return {
        name: value
        for name, value in environment.items()
        if name.startswith(IMPORT_TIME_PREFIXES) and name != SOCKET_VARIABLE
    }


def _read_exactly(connection: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``connection``, or None if it closed first."""
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_int(connection: socket.socket) -> int | None:
    data = _read_exactly(connection, _HEADER.size)
    return None if data is None else _HEADER.unpack(data)[0]


# --- the client: a job's `python -m reproduce` -------------------------------------------------------------------


def delegate(argv: list[str]) -> int | None:
    """Run ``python -m reproduce`` with ``argv`` (``sys.argv``) in the worker the environment names; its exit status,
    or None where the worker cannot take it (the caller then runs the command itself)."""
    path = os.environ.get(SOCKET_VARIABLE)
    if not path or not _started(Path(path)):
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        socket.send_fds(connection, [b"\0"], [0, 1, 2])
        umask = os.umask(0o022)
        os.umask(umask)
        request = json.dumps(
            {
                "argv": argv,
                "cwd": os.getcwd(),
                "environment": dict(os.environ),
                "executable": sys.executable,
                "umask": umask,
            }
        ).encode()
        connection.sendall(_HEADER.pack(len(request)) + request)
        child = _read_int(connection)
    except OSError:
        connection.close()
        return None
    if not child:  # refused (another environment), or the worker went away: run here
        connection.close()
        return None
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = _read_int(connection)
    finally:
        connection.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if status is not None:
        return status
    if received:  # the child died of the signal passed on: so does this process, as it would have
        signal.signal(received[-1], signal.SIG_DFL)
        os.kill(os.getpid(), received[-1])
    print("reproduce: the pipeline's worker process ended the job without an exit status", file=sys.stderr)
    return 1


def _started(path: Path, *, timeout: float = 60.0) -> bool:
    """Whether the worker listens on ``path``, waiting while it is still importing (its process, named in ``pid``
    beside the socket, alive): the first jobs of a run would spend that time importing the same modules."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not _alive(path.parent / "pid") or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(pid_file: Path) -> bool:
    """Whether the process named in ``pid_file`` runs (a worker that failed is a zombie until Snakemake ends)."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: alive as far as kill says


# --- the worker ----------------------------------------------------------------------------------------------------


def serve(*, path: Path, parent: int) -> int:
    """Import :data:`PRELOADED`, listen on ``path`` and fork a child per request until SIGTERM or until process
    ``parent`` is gone."""
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)
    environment = _import_time_environment(dict(os.environ))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the system; they report to their clients
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path) + ".new")  # connectable once renamed: after the imports
    listener.listen(64)
    os.replace(str(path) + ".new", path)
    listener.settimeout(1.0)
    try:
        while not stopping and os.getppid() == parent:
            try:
                connection, _ = listener.accept()
            except (TimeoutError, InterruptedError):
                continue
            with connection:
                _answer(connection, listener, environment)
    finally:
        listener.close()
        Path(path).unlink(missing_ok=True)
    return 0


def _answer(connection: socket.socket, listener: socket.socket, environment: dict[str, str]) -> None:
    """Read one client's request from ``connection`` and fork its child, or refuse it (the client then runs the
    command itself); the worker keeps none of the client's file descriptors."""
    connection.settimeout(10.0)
    fds: list[int] = []
    try:
        _, fds, _, _ = socket.recv_fds(connection, 1, 3)
        size = _read_int(connection)
        payload = None if size is None else _read_exactly(connection, size)
        if payload is None or len(fds) != 3:
            return
        try:
            request = json.loads(payload)
            accepted = (
                request["executable"] == sys.executable
                and _import_time_environment(request["environment"]) == environment
                and threading.active_count() == 1
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            request, accepted = {"argv": ["?", "(a request dpaudit did not write)"]}, False
        command = " ".join(request["argv"][1:])[:200]
        if not accepted:
            connection.sendall(_HEADER.pack(0))
            print(f"refused (another interpreter or environment): {command}", file=sys.stderr, flush=True)
            return
        child = os.fork()
        if child == 0:
            listener.close()
            _child(connection, fds, request)  # never returns
        print(f"child {child}: {command}", file=sys.stderr, flush=True)
    except OSError:  # the client went away, or no child could be forked: it runs the command itself
        return
    finally:
        for fd in fds:
            os.close(fd)


def _child(connection: socket.socket, fds: list[int], request: dict) -> None:
    """Become the job: the client's streams, folder, file-mode mask, environment and arguments; run it; report the
    exit status."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a job waits for its own subprocesses
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, encoding=sys.stdin.encoding, errors=sys.stdin.errors, closefd=False)
        sys.stdout = open(1, "w", encoding=sys.stdout.encoding, errors=sys.stdout.errors, closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace", closefd=False)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["environment"])
        tempfile.tempdir = None  # TMPDIR is the job's
        sys.argv = list(request["argv"])
        connection.settimeout(None)
        connection.sendall(_HEADER.pack(os.getpid()))

        def watch() -> None:  # the client went away (killed outright): so does the job
            if not connection.recv(1):
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True).start()
        from reproduce.cli import main

        try:
            status = main()
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, (int, type(None))):
                print(exit_.code, file=sys.stderr)
        except KeyboardInterrupt:
            status = 130
        except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, status 1
            traceback.print_exc()
            status = 1
        atexit._run_exitfuncs()  # noqa: SLF001 - what the interpreter runs at exit
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            connection.sendall(_HEADER.pack(status))
        finally:
            os._exit(status)


# --- the Snakefile's side ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worker:
    """A worker :func:`start` started: its process and the private folder of its socket."""

    process: subprocess.Popen
    folder: Path


def start(*, threads: int = 1, log: Path | None = None) -> Worker | None:
    """Start a worker for this process's jobs of ``threads`` threads each, in the environment Snakemake gives them
    (this process's, with :data:`SNAKEMAKE_THREAD_VARIABLES` set to ``threads``), and name it in this process's
    environment, which the jobs inherit; it writes a line per job to ``log``. None where none could be started (jobs
    then run as before)."""
    folder = Path(tempfile.mkdtemp(prefix="dpaudit-worker-"))  # 0700: only this user connects
    environment = {name: value for name, value in os.environ.items() if name != SOCKET_VARIABLE}
    environment.update(dict.fromkeys(SNAKEMAKE_THREAD_VARIABLES, str(threads)))
    command = [sys.executable, "-m", "reproduce", "worker", "--socket", str(folder / "socket")]
    try:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        with open(log if log is not None else os.devnull, "w", encoding="utf-8") as stream:
            process = subprocess.Popen(
                [*command, "--parent", str(os.getpid())],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stream,
                start_new_session=True,  # Snakemake's Ctrl-C stops the jobs, which stop their children; not the worker
            )
    except OSError:
        folder.rmdir()
        return None
    (folder / "pid").write_text(str(process.pid))
    os.environ[SOCKET_VARIABLE] = str(folder / "socket")
    return Worker(process, folder)


def stop(worker: Worker | None) -> None:
    """Stop a worker of :func:`start` (children still running finish) and remove its socket's folder."""
    os.environ.pop(SOCKET_VARIABLE, None)
    if worker is None:
        return
    worker.process.terminate()
    try:
        worker.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
    for leftover in worker.folder.iterdir():
        leftover.unlink(missing_ok=True)
    worker.folder.rmdir()


def main(argv: list[str]) -> int:
    """``python -m reproduce worker --socket PATH --parent PID`` (started by :func:`start`)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m reproduce worker", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, type=Path, help="where to listen (a new path)")
    parser.add_argument("--parent", required=True, type=int, help="stop once this process is gone")
    args = parser.parse_args(argv)
    return serve(path=args.socket, parent=args.parent)
