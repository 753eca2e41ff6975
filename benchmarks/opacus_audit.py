"""What attaching dpaudit.opacus.CanaryAudit (the configuration check) costs an Opacus training, and what it certifies;
prints JSON.

The training: a 64-32-10 MLP on digits (n = 1797), make_private_with_epsilon (Poisson, b = 64, 7 epochs, PRV, ε = 4
at δ = 1e-5, C = 1), plain SGD loop, one torch thread (the record-level canaries of examples/opacus_audit.py:
benchmarks/opacus_records.py). Trained ``--repeats`` times with the audit (2·10⁵ canaries) and as often without it,
interleaved (without, with, without, …) so that both see the same load; ``overhead`` is the median time with the
audit over the median without. The last audited run is scored
(``report``): the all-iterates family and assumption-free bounds and their ratio to the accountant's ε, and the
seconds the scoring took (apart from training).

Usage: python benchmarks/opacus_audit.py [--canaries 200000] [--repeats 3] [--epsilon 4]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings

DELTA = 1e-5


def _train(*, canaries: int, epsilon: float, epochs: int, seed: int):
    import torch
    from opacus import PrivacyEngine
    from sklearn.datasets import load_digits

    import dpaudit.opacus

    torch.manual_seed(seed)
    images, labels = load_digits(return_X_y=True)
    data = torch.utils.data.TensorDataset(torch.tensor(images / 16.0, dtype=torch.float32), torch.tensor(labels))
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=torch.utils.data.DataLoader(data, batch_size=64),
        target_epsilon=epsilon,
        target_delta=DELTA,
        epochs=epochs,
        max_grad_norm=1.0,
    )
    audit = (
        dpaudit.opacus.CanaryAudit(optimizer, data_loader=loader, num_canaries=canaries, seed=seed)
        if canaries
        else None
    )
    started = time.perf_counter()
    for _ in range(epochs):
        for batch, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(batch), targets).backward()
            optimizer.step()
    return time.perf_counter() - started, audit, engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--epochs", type=int, default=7)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    options = {"epsilon": args.epsilon, "epochs": args.epochs}
    _train(canaries=0, seed=0, **options)  # warm-up: imports, first-call costs
    without, with_audit = [], []
    for repeat in range(args.repeats):
        without.append(_train(canaries=0, seed=repeat, **options)[0])
        seconds, audit, engine = _train(canaries=args.canaries, seed=repeat, **options)
        with_audit.append(seconds)
    started = time.perf_counter()
    report = audit.report(accountant=engine.accountant, delta=DELTA)
    scored = time.perf_counter() - started
    run = report.whole_run
    result = {
        "machine": platform.machine(),
        "torch_threads": 1,
        "canaries": args.canaries,
        "members": int(audit.members.sum()),
        "steps": audit.steps,
        "noise_multiplier": audit.noise_multipliers[0],
        "sample_rate": audit.sampling.sample_rate,
        "seconds_training_without_audit": without,
        "seconds_training_with_audit": with_audit,
        "overhead": statistics.median(with_audit) / statistics.median(without),
        "seconds_report": scored,
        "epsilon_accountant_prv": report.epsilon_accountant,
        "epsilon_pld": run.epsilon_pld,
        "all_iterates_family": run.all_iterates_family.epsilon,
        "all_iterates_assumption_free": run.all_iterates.epsilon_lower,
        "final_model_family": run.final_model_family.epsilon,
        "final_model_assumption_free": run.final_model.epsilon_lower,
        "ratio_family_to_accountant": run.all_iterates_family.epsilon / report.epsilon_accountant,
        "ratio_assumption_free_to_accountant": run.all_iterates.epsilon_lower / report.epsilon_accountant,
        "flagged": report.flagged,
        "delta": DELTA,
        "confidence": run.confidence,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
