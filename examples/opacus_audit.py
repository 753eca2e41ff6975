"""Audit your own Opacus training with whole-run canaries (dpaudit.opacus.CanaryAudit); see docs/opacus.md.

A small MLP on sklearn's digits, trained with Opacus in a plain loop (Poisson sampling, the PRV accountant, the noise
calibrated to ε = 4 at δ = 1e-5). Two lines attach 10⁵ canaries per side (2·10⁵ in all) to the DPOptimizer and
report, after training, the whole-run lower bounds on ε beside the accountant's ε; the ROC curves of both threat
models are written to opacus_audit_roc.png (and .pdf).

Usage: python examples/opacus_audit.py [--canaries 200000] [--epsilon 4] [--out opacus_audit]
Needs: pip install "dpaudit[train]" (Opacus, torch, scikit-learn, matplotlib).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_digits

import dpaudit.opacus
from dpaudit.plot import plot_roc

DELTA = 1e-5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=200_000, help="canaries in all (half members on average)")
    parser.add_argument("--epsilon", type=float, default=4.0, help="the ε the noise is calibrated to (PRV)")
    parser.add_argument("--epochs", type=int, default=7)
    parser.add_argument("--out", default="opacus_audit", help="stem of the ROC figure")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", module="opacus")  # Opacus's notes on secure RNG and optimizer state
    warnings.filterwarnings("ignore", message="Full backward hook")  # torch, on Opacus's hooks of the first layer
    torch.set_num_threads(1)  # a tiny model: more threads only contend
    torch.manual_seed(args.seed)

    images, labels = load_digits(return_X_y=True)
    data = torch.utils.data.TensorDataset(torch.tensor(images / 16.0, dtype=torch.float32), torch.tensor(labels))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    privacy_engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = privacy_engine.make_private_with_epsilon(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        target_epsilon=args.epsilon,
        target_delta=DELTA,
        epochs=args.epochs,
        max_grad_norm=1.0,
    )
    # the audit: whole-run canaries on the DPOptimizer, following the loader's Poisson sampling
    audit = dpaudit.opacus.CanaryAudit(optimizer, data_loader=loader, num_canaries=args.canaries, seed=args.seed)

    started = time.perf_counter()
    for _ in range(args.epochs):  # the user's training loop, unchanged
        for batch, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(batch), targets).backward()
            optimizer.step()
    trained = time.perf_counter() - started

    started = time.perf_counter()
    report = audit.report(accountant=privacy_engine.accountant, delta=DELTA)
    scored = time.perf_counter() - started
    with torch.no_grad():
        accuracy = (model(data.tensors[0]).argmax(1) == data.tensors[1]).float().mean().item()
    print(
        f"trained {audit.steps} steps (z = {optimizer.noise_multiplier:.3f}, q = {audit.sampling.sample_rate:.4f}) "
        f"in {trained:.1f} s, training accuracy {accuracy:.3f}; audited in {scored:.1f} s"
    )
    print(report.summary())
    family = report.whole_run.all_iterates_family.epsilon
    print(f"family bound / accountant ε = {family / report.epsilon_accountant:.3f}")
    curves = {
        "all iterates": report.whole_run.all_iterates.to_dict(),
        "final model": report.whole_run.final_model.to_dict(),
    }
    paths = plot_roc(curves, stem=args.out + "_roc", title=f"Opacus on digits, ε = {args.epsilon:g}: canaries")
    print("wrote " + ", ".join(str(path) for path in paths))


if __name__ == "__main__":
    main()
