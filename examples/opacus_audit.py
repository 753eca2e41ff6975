"""Audit your own Opacus training with record-level canaries (dpaudit.opacus.RecordCanaries); see docs/opacus.md.

A small CNN on sklearn's digits, trained with Opacus in a plain loop (Poisson sampling, the PRV accountant, the noise
calibrated to ε = 4 at δ = 1e-5, C = 1, 10 epochs). 2·10⁵ canaries (10⁵ per side on average) are records of the
dataset: the loader samples them, the optimizer clips, noises and divides them with the real batch. After training
the report gives the whole-run lower bounds on ε beside the accountant's ε, what the canaries measured of the run,
and the flag; the ROC curves and the ε chart are written to opacus_audit.png (and .pdf).

Usage: python examples/opacus_audit.py [--canaries 200000] [--epsilon 4] [--out opacus_audit]
Needs: pip install -e ".[train]" (Opacus, torch, scikit-learn, matplotlib).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_digits

import dpaudit.opacus

DELTA = 1e-5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=200_000, help="canaries in all (half members on average)")
    parser.add_argument("--epsilon", type=float, default=4.0, help="the ε the noise is calibrated to (PRV)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default="opacus_audit", help="stem of the figure")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", module="opacus")  # Opacus's notes on secure RNG and optimizer state
    warnings.filterwarnings("ignore", message="Full backward hook")  # torch, on Opacus's hooks of the first layer
    torch.set_num_threads(1)  # a tiny model: more threads only contend
    torch.manual_seed(args.seed)

    images, labels = load_digits(return_X_y=True)
    inputs = torch.tensor(images / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    data = torch.utils.data.TensorDataset(inputs, torch.tensor(labels))
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 4 * 4, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )

    # the audit, before the loader and the optimizer: the canaries join the dataset, the model gets their outputs
    canaries = dpaudit.opacus.RecordCanaries(num_canaries=args.canaries, seed=args.seed)
    data, model = canaries.dataset(data), canaries.model(model)
    loader = torch.utils.data.DataLoader(data, batch_size=data.batch_size_for(64))  # the digits keep q = 64/1797

    privacy_engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = privacy_engine.make_private_with_epsilon(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=loader,
        target_epsilon=args.epsilon,
        target_delta=DELTA,
        epochs=args.epochs,
        max_grad_norm=1.0,
    )
    canaries.attach(optimizer, data_loader=loader)

    started = time.perf_counter()
    for _ in range(args.epochs):  # the user's training loop, unchanged
        for batch, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(batch), targets).backward()
            optimizer.step()
    trained = time.perf_counter() - started

    started = time.perf_counter()
    report = canaries.report(accountant=privacy_engine.accountant, delta=DELTA)
    scored = time.perf_counter() - started
    with torch.no_grad():
        accuracy = (model.module(inputs).argmax(1) == torch.tensor(labels)).float().mean().item()
    print(
        f"trained {canaries.steps} steps (z = {optimizer.noise_multiplier:.3f}) in {trained:.1f} s, training "
        f"accuracy {accuracy:.3f}; audited in {scored:.1f} s"
    )
    print(report.summary())
    family = report.whole_run.all_iterates_family.epsilon
    print(f"family bound / accountant ε = {family / report.epsilon_accountant:.3f}")
    paths = report.plot(stem=args.out, title=f"Opacus on digits, ε = {args.epsilon:g}: record-level canaries")
    print("wrote " + ", ".join(str(path) for path in paths))


if __name__ == "__main__":
    main()
