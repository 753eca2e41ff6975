"""Record-level canaries (dpaudit.opacus.RecordCanaries) in a user's Opacus CNN training on digits: what they cost
the training loop and what they certify; prints JSON.

The user script of ../shared/reviews/opacus-2.md: a small CNN (Conv 16 → MaxPool → FC 64 → FC 10) on the 1,797 digits,
make_private_with_epsilon (Poisson, PRV, ε = 4 at δ = 1e-5, C = 1, 10 epochs), plain SGD loop at lr 0.5, one torch
thread. Without canaries the loader's batch is 64; with M canaries the dataset holds about M/2 member canaries more and
the batch is ``batch_size_for(64)``, so that the user's records are sampled at the same q. The runs are interleaved
(without, 2·10⁴, 2·10⁵, without, …) ``--repeats`` times; ``overhead`` is the median training-loop time with the
canaries over the median without. The last run of each count is reported (``report``): the all-iterates family and
assumption-free bounds, their ratio to the accountant's ε, the checks, the seconds the report took (every dpaudit
cache emptied first: the runs of one count share their ledger, and a report would otherwise reuse the hypotheses of
the one before). ``floor`` repeats the largest count with the canaries' online statistics switched off (the run's
sampling, noise, loss rows and checks as before): what the record-level design costs before any statistic is
computed. Every repeat's run is reported too, for
its flag alone: ``repeats_flagged`` of the ``--repeats`` correct runs were flagged, each with probability at most 5 %
(``flagged_by_per_repeat``: the tests that flagged each; a finding of the divisor flags a run too; the noise
check's p-values, uniform on (0, 1) for these runs, in ``noise_p_value_per_repeat``).

Usage: python benchmarks/opacus_records.py [--canaries 20000 200000] [--repeats 3] [--epsilon 4] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings

DELTA = 1e-5


def cnn():
    """The user's CNN (Conv 16 → MaxPool → FC 64 → FC 10) for 1×8×8 digits."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 4 * 4, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def train(*, canaries: int, epsilon: float, epochs: int, seed: int, device: str = "cpu"):
    """(seconds of the training loop, the canaries or None, the privacy engine, the steps)."""
    import torch
    from opacus import PrivacyEngine
    from sklearn.datasets import load_digits

    import dpaudit.opacus

    torch.manual_seed(seed)
    images, labels = load_digits(return_X_y=True)
    inputs = torch.tensor(images / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    data = torch.utils.data.TensorDataset(inputs, torch.tensor(labels))
    model, batch_size, audit = cnn(), 64, None
    if canaries:
        audit = dpaudit.opacus.RecordCanaries(num_canaries=canaries, seed=seed)
        data, model = audit.dataset(data), audit.model(model)
        batch_size = data.batch_size_for(64)
    model = model.to(device)
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=torch.utils.data.DataLoader(data, batch_size=batch_size),
        target_epsilon=epsilon,
        target_delta=DELTA,
        epochs=epochs,
        max_grad_norm=1.0,
    )
    if audit is not None:
        audit.attach(optimizer, data_loader=loader)
    steps = 0
    started = time.perf_counter()
    for _ in range(epochs):
        for batch, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(batch.to(device)), targets.to(device)).backward()
            optimizer.step()
            steps += 1
    if device != "cpu":
        torch.cuda.synchronize()
    return time.perf_counter() - started, audit, engine, steps


def clear_caches() -> None:
    """Empty every functools cache of dpaudit's modules (the family bound's hypotheses, PLD ε's, RDP terms,
    Clopper–Pearson inversions are kept per ledger, and every run of one count has the same ledger)."""
    import sys

    for name, module in list(sys.modules.items()):
        if name == "dpaudit" or name.startswith("dpaudit."):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--device", default="cpu", help="where the model trains: cpu or cuda")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    import dpaudit.opacus

    torch.set_num_threads(1)
    options = {"epsilon": args.epsilon, "epochs": args.epochs, "device": args.device}
    train(canaries=0, seed=0, **options)  # warm-up: imports, first-call costs
    seconds: dict[int, list[float]] = {count: [] for count in [0, *args.canaries]}
    last = {}
    reports: dict[int, list] = {count: [] for count in args.canaries}  # every repeat's, for its flag
    floor, accumulate = [], dpaudit.opacus.RecordCanaries._accumulate
    for repeat in range(args.repeats):
        for count in seconds:
            elapsed, audit, engine, steps = train(canaries=count, seed=repeat, **options)
            seconds[count].append(elapsed)
            if count:
                clear_caches()  # the runs of one count share their ledger: time a report that computes it all
                started = time.perf_counter()
                report = audit.report(accountant=engine.accountant, delta=DELTA)
                last[count] = (audit, steps, report, time.perf_counter() - started)
                reports[count].append(report)
        dpaudit.opacus.RecordCanaries._accumulate = lambda *args, **kwargs: None  # type: ignore[method-assign]
        floor.append(train(canaries=max(args.canaries), seed=repeat, **options)[0])
        dpaudit.opacus.RecordCanaries._accumulate = accumulate  # type: ignore[method-assign]
    base = statistics.median(seconds[0])
    runs = []
    for count in args.canaries:
        audit, steps, report, scored = last[count]
        run = report.whole_run
        runs.append(
            {
                "canaries": count,
                "members": int(audit.members.sum()),
                "steps": steps,
                "seconds_training": seconds[count],
                "overhead": statistics.median(seconds[count]) / base,
                "ms_added_per_step": 1e3 * (statistics.median(seconds[count]) - base) / steps,
                "seconds_report": scored,
                "observed": report.observed,
                "epsilon_accountant_prv": report.epsilon_accountant,
                "epsilon_pld": run.epsilon_pld,
                "all_iterates_family": run.all_iterates_family.epsilon,
                "all_iterates_family_label": "lower bound at 95 %, assuming a composed Poisson-subsampled Gaussian",
                "all_iterates_assumption_free": run.all_iterates.epsilon_lower,
                "final_model_family": run.final_model_family.epsilon,
                "final_model_assumption_free": run.final_model.epsilon_lower,
                "ratio_family_to_accountant": run.all_iterates_family.epsilon / report.epsilon_accountant,
                "ratio_assumption_free_to_accountant": run.all_iterates.epsilon_lower / report.epsilon_accountant,
                "flagged": report.flagged,
                # the runs keep their claim: each report is flagged with probability at most 1 − confidence (5 %)
                "repeats_flagged": sum(each.flagged for each in reports[count]),
                "flagged_by_per_repeat": [list(each.flag.flagged_by) for each in reports[count]],
                # uniform on (0, 1) where the noise is z·C
                "noise_p_value_per_repeat": [each.flag.checks.get("noise") for each in reports[count]],
                "findings": list(report.findings),
                "notes": list(report.notes),
                "checks": report.flag.to_dict(),
            }
        )
    result = {
        "machine": platform.machine(),
        "device": args.device,
        "torch_threads": 1,
        "model": "cnn (Conv 16, MaxPool, FC 64, FC 10) on digits",
        "epsilon_target": args.epsilon,
        "delta": DELTA,
        "epochs": args.epochs,
        "seconds_training_without_canaries": seconds[0],
        "runs": runs,
        "floor": {
            "canaries": max(args.canaries),
            "what": "the run with the canaries' online statistics (Λ, Σx, Σx²) switched off",
            "seconds_training": floor,
            "overhead": statistics.median(floor) / base,
        },
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
