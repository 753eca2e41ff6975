"""CPU time against wall time of one `dpaudit` command at two source trees, taking turns; prints JSON.

    python tools/job_cpu_time.py --trees OLD_TREE NEW_TREE [--repeats 3] -- train --out {out} ...

On a shared virtual machine the wall time of the same job can vary several-fold with what the host takes away
(the ``steal`` column of ``/proc/stat``), while its CPU time (user + system, ``getrusage`` of the child) does not
count stolen time: comparing CPU times says whether an engine change made a job cheaper. Each tree (a checkout,
e.g. ``git worktree add /tmp/old COMMIT``) is put first on ``PYTHONPATH``; the command runs with one thread, as
Snakemake runs pipeline jobs. ``{out}`` in the command is replaced by a fresh directory for every run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = "import sys; from dpaudit.cli import main; sys.exit(main(sys.argv[1:]))"


def steal_seconds() -> float | None:
    """CPU time the hypervisor has taken from this machine since boot, all cores together (None off Linux)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def source_tree(text: str) -> Path:
    """``--trees`` argument type: a dpaudit checkout (a folder with ``dpaudit/__init__.py``)."""
    tree = Path(text)
    if not (tree / "dpaudit" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{tree} is not a dpaudit source tree (no dpaudit/__init__.py)")
    return tree


def run_once(tree: Path, command: list[str]) -> dict[str, float | None]:
    with tempfile.TemporaryDirectory() as out:
        argv = [part.replace("{out}", out) for part in command]
        env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
        before, stolen, start = resource.getrusage(resource.RUSAGE_CHILDREN), steal_seconds(), time.perf_counter()
        subprocess.run([sys.executable, "-c", CLI, *argv], env=env, cwd=out, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after, stolen_after = resource.getrusage(resource.RUSAGE_CHILDREN), steal_seconds()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "steal_seconds": None if stolen is None else stolen_after - stolen,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, type=source_tree, required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="a dpaudit command line, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the dpaudit command after --")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    runs = {str(tree): [] for tree in args.trees}
    for round_ in range(args.repeats):
        for tree in args.trees:
            runs[str(tree)].append(run_once(tree.resolve(), command))
            print(f"round {round_ + 1}/{args.repeats} {tree}: {runs[str(tree)][-1]}", file=sys.stderr, flush=True)
    print(json.dumps({"command": command, "threads": 1, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
