"""Whether two source trees train bit for bit the same models with the ensemble engine; prints JSON.

    python tools/engine_fingerprint.py                            # this tree's fingerprints
    python tools/engine_fingerprint.py --trees OLD_TREE NEW_TREE  # each tree's, and which cases differ

A change meant to make the engine faster without touching its arithmetic should leave every trained bit as it was,
and then a pipeline's committed outputs stay those of the new engine too. Each case trains 4 models together
(``engine: ensemble``) for 12 Poisson steps on ``digits`` records with 20 canaries on the target (the workload of
``tests/engine/test_ensemble.py``, whose helpers it imports from ``tests/support.py``: install with ``[dev]``), and
hashes (SHA-256) every model's parameters, per-epoch training losses and privacy ledger. The cases: every
registered optimizer; DP-SGD with momentum, with one model × one sample per gradient call (a tiny
``memory_budget_mb``), with the target's training diagnostics, on the 32×32 CNN (random images) and by Opacus's
hooks (``grad_sample: opacus``); D2P-SGD with
shuffled batches; the pipeline's other canary designs (noise-scale, support). With ``--trees``, each tree (a
checkout, e.g. ``git worktree add /tmp/old COMMIT``) is put first on ``PYTHONPATH`` and runs this script (with this
script's tests) without ``--trees``; an optimizer registered in one tree only is reported as missing from the
other.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from job_cpu_time import source_tree

MODELS, RECORDS = 4, 60
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # ensemble.training_set


def cases() -> dict[str, tuple[str, dict]]:
    """(optimizer, settings beyond ``support.engine_config``'s) of every case, by name."""
    from dpaudit import optim

    named = {name: (name, {}) for name in optim.available()}
    named["dpsgd-gc+momentum"] = ("dpsgd-gc", {"momentum": 0.9})
    named["dpsgd-gc+one-sample-calls"] = ("dpsgd-gc", {"memory_budget_mb": 1e-6})
    named["dpsgd-gc+diagnostics"] = ("dpsgd-gc", {"diagnostics": True})
    named["dpsgd-gc+cnn-32x32"] = ("dpsgd-gc", {"dataset": "cifar10", "model": "cnn"})
    named["dpsgd-gc+opacus-hooks"] = ("dpsgd-gc", {"grad_sample": "opacus"})
    named["d2p-sgd+shuffle"] = ("d2p-sgd", {"sampling": "shuffle"})
    named["dp-psac-batch-noise+noise-scale-canary"] = (
        "dp-psac-batch-noise",
        {"canaries": 1, "canary_design": "noise-scale"},
    )
    named["adadpigu+support-canary"] = ("adadpigu", {"canaries": 1, "canary_design": "support"})
    return named


def random_images_members():
    import numpy as np
    from ensemble import training_set  # its random 32×32×3 images

    from dpaudit.train import Member

    data = training_set("cifar10", MODELS * RECORDS)
    return [
        Member(train_data=data.subset(np.arange(RECORDS * k, RECORDS * (k + 1))), model_index=k, label=f"m{k}")
        for k in range(MODELS)
    ]


def fingerprint(optimizer: str, settings: dict) -> str:
    """SHA-256 of the parameters, per-epoch losses and ledgers of ``MODELS`` models trained together."""
    from support import digit_members, engine_config  # the workload the ensemble-vs-one-at-a-time test trains

    from dpaudit.train import train_models

    config = engine_config(optimizer, engine="ensemble", **{"canaries": 20, **settings})
    members = digit_members(MODELS) if config.to_dict()["dataset"] == "digits" else random_images_members()
    digest = hashlib.sha256()
    for trained in train_models(config=config, members=members, test_data=None, progress=False):
        for parameter in trained.model.parameters():
            digest.update(parameter.detach().cpu().numpy().tobytes())
        digest.update(json.dumps([trained.metrics.train_loss, trained.ledger.to_dict()], sort_keys=True).encode())
    return digest.hexdigest()


def this_tree() -> dict[str, str]:
    import torch

    torch.set_num_threads(1)
    found = {}
    for name, (optimizer, settings) in cases().items():
        found[name] = fingerprint(optimizer, settings)
        print(f"{name}: {found[name][:16]}", file=sys.stderr, flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, type=source_tree, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.trees is None:
        print(json.dumps(this_tree(), indent=2))
        return
    found = {}
    for tree in args.trees:
        print(f"== {tree}", file=sys.stderr, flush=True)
        env = dict(os.environ, PYTHONPATH=str(tree.resolve()), OMP_NUM_THREADS="1")
        done = subprocess.run([sys.executable, __file__], env=env, check=True, stdout=subprocess.PIPE, text=True)
        found[str(tree)] = json.loads(done.stdout)
    old, new = found.values()
    print(
        json.dumps(
            {
                "trees": [str(tree) for tree in args.trees],
                "same": sorted(name for name in old.keys() & new.keys() if old[name] == new[name]),
                "different": sorted(name for name in old.keys() & new.keys() if old[name] != new[name]),
                "missing": sorted(old.keys() ^ new.keys()),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
