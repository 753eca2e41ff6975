"""``python -m reproduce``: the pipeline commands; in a local Snakemake run, run by its warm worker
(:mod:`reproduce.worker`) where it can take them."""

import sys

from reproduce import worker

if sys.argv[1:2] == ["worker"]:
    sys.exit(worker.main(sys.argv[2:]))
status = worker.delegate(sys.argv)
if status is None:
    from reproduce.cli import main

    status = main()
sys.exit(status)
