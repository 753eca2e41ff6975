"""Where the ensemble engine makes the host wait for the GPU, and a cProfile of its loop (CUDA only); prints text.

    python tools/ensemble_syncs.py [architecture: cnn] [optimizer: dpsgd-gc]

Trains 11 models (n = 360, b = 36, Poisson) one epoch under ``torch.cuda.set_sync_debug_mode('warn')`` and
counts the synchronising calls by the dpaudit lines that made them, then profiles 100 steps.
"""

import argparse
import collections
import cProfile
import io
import pstats
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import torch
from ensemble import DATASETS, training_set

from dpaudit.config import TrainConfig
from dpaudit.optim import available as available_optimizers
from dpaudit.train import Member, train_models

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("arch", nargs="?", default="cnn", choices=sorted(DATASETS), help="model (default: cnn)")
parser.add_argument(
    "opt", nargs="?", default="dpsgd-gc", choices=available_optimizers(), help="optimizer (default: dpsgd-gc)"
)
args = parser.parse_args()
if not torch.cuda.is_available():
    parser.error("torch sees no CUDA device here (this tool times the engine's waits for a GPU)")
arch, opt = args.arch, args.opt
dataset = DATASETS[arch]
data = training_set(dataset, 360)
members = [Member(train_data=data, model_index=k, label=f"m{k}") for k in range(11)]
config = TrainConfig.from_dict(
    dict(
        dataset=dataset,
        model=arch,
        optimizer=opt,
        epochs=1,
        batch_size=36,
        lr=0.1,
        clip_norm=1.0,
        noise_multiplier=1.0,
        sampling="poisson",
        target_size=360,
        num_shadows=0,
        diagnostics=False,
        device="cuda",
        memory_budget_mb=32768,
    )
).validated()
train_models(config=config, members=members, test_data=None, progress=False)
sites = collections.Counter()


def hook(message, category, filename, lineno, file=None, line=None):
    stack = [f for f in traceback.extract_stack() if "dpaudit" in f.filename]
    sites[" <- ".join(f"{f.filename.split('dpaudit/')[-1]}:{f.lineno} {f.line}" for f in reversed(stack[-3:]))] += 1


warnings.showwarning = hook
torch.cuda.set_sync_debug_mode("warn")
with warnings.catch_warnings():
    warnings.simplefilter("always")
    warnings.showwarning = hook
    train_models(config=config, members=members, test_data=None, progress=False)
torch.cuda.set_sync_debug_mode(0)
print(f"== {arch} {opt}: syncs in one epoch (10 steps)")
for site, n in sites.most_common():
    print(n, site)
prof = cProfile.Profile()
torch.cuda.synchronize()
t = time.perf_counter()
prof.enable()
train_models(
    config=config.replaced(epochs=10).validated(),
    members=members,
    test_data=None,
    progress=False,
)
torch.cuda.synchronize()
prof.disable()
print("seconds for 100 steps", time.perf_counter() - t)
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
print(s.getvalue()[-6000:])
