"""Misconfigured Opacus runs that the record-level canaries must flag, each beside its correct twin.

One runner (:func:`train_digits`, and :func:`run_digits` with the report) trains a small MLP on sklearn's digits
with Opacus in a plain loop, record-level canaries attached, with one of :data:`MISCONFIGURATIONS` planted or none
(the correct twin). The tests (``tests/test_opacus_records.py``) and the benchmark
(``benchmarks/opacus_record_bugs.py``) run it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from dpaudit._validation import DPAuditError
from dpaudit.opacus._records import RecordAuditReport, RecordCanaries

#: The planted misconfigurations, with what each does to the run.
MISCONFIGURATIONS = {
    "other-loader": "the loop iterates a rebuilt loader of 4× the batch (shuffled); the accountant keeps the "
    "accounted loader's q",
    "shuffled-as-poisson": "shuffled batches (poisson_sampling=False), accounted as Poisson by Opacus's accountant",
    "manual-accumulation": "4 shuffled batches accumulated by hand into each optimizer step, the noise calibrated "
    "(and the ε claimed) as if each batch were a step (Opacus's own accountant records one step at 4q; with Poisson "
    "sampling Opacus refuses to accumulate)",
    "expected-batch-small-n": "a mean-reduced loss divided by ⌊q·n⌋ (Opacus's expected_batch_size) at a small n "
    "(run it with records=30, batch=15: q = 1/2), where one record more or fewer moves it (Opacus #819/#571)",
    "noise-over-batch": "the model's noise (Opacus's _generate_noise, which also noises the canary block) divided "
    "by the batch size once more",
}
DELTA = 1e-5


def digits_dataset(records: int | None = None) -> torch.utils.data.TensorDataset:
    """sklearn's digits as (64 pixels in [0, 1], label) pairs: the first ``records`` (None: all 1,797)."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    return torch.utils.data.TensorDataset(
        torch.tensor(images[:records] / 16.0, dtype=torch.float32), torch.tensor(labels[:records])
    )


def digits_mlp() -> torch.nn.Module:
    """The small MLP of these runs: 64 → 16 → 10 with a ReLU."""
    return torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))


@contextlib.contextmanager
def _noise_over_batch(batch: int) -> Iterator[None]:
    import opacus.optimizers.optimizer as module

    generate = module._generate_noise

    def divided(std: float, reference: torch.Tensor, **options: Any) -> torch.Tensor:
        return generate(std / batch, reference, **options)

    module._generate_noise = divided
    try:
        yield
    finally:
        module._generate_noise = generate


def run_digits(misconfiguration: str | None, **options: Any) -> RecordAuditReport:
    """:func:`train_digits` with ``options``, then the canaries' report at δ = 1e-5 against the run's accountant,
    testing the ε the run claims: the target its noise was calibrated to (``epsilon``)."""
    canaries, engine = train_digits(misconfiguration, **options)
    claimed = options.get("epsilon", 4.0)
    return canaries.report(accountant=engine.accountant, delta=DELTA, claimed_epsilon=claimed)


def train_digits(
    misconfiguration: str | None,
    *,
    canaries: int = 4000,
    epsilon: float = 4.0,
    epochs: int = 3,
    seed: int = 0,
    reduction: str = "sum",
    records: int | None = None,
    batch: int = 64,
    device: str = "cpu",
) -> tuple[RecordCanaries, Any]:
    """Train the MLP (64-16-10) on digits with record-level canaries and one planted misconfiguration (None: the
    correct twin), noise calibrated by the PRV accountant to ``epsilon`` at δ = 1e-5 over ``epochs``, C = 1, SGD at
    lr 0.5, batch 64 of the digits (``batch_size_for``); the canaries and the privacy engine (its accountant).

    Args:
        misconfiguration: a key of :data:`MISCONFIGURATIONS`, or None.
        canaries: M, canaries in all.
        epsilon: the ε (nats, at δ = 1e-5) the run claims.
        epochs: epochs of the accounted loader.
        seed: seed of the model, the sampling and the canaries' membership.
        reduction: the loss's reduction, "sum" (divisor 1) or "mean" (Opacus divides by its expected batch size);
            "expected-batch-small-n" is "mean".
        records: the first this many digits (None: all 1,797).
        batch: the batch of the digits alone (the loader's is ``batch_size_for(batch)``).
        device: where the model trains ("cpu", "cuda"); the loop moves each batch there.

    Raises:
        DPAuditError: an unknown misconfiguration.
    """
    from opacus import PrivacyEngine

    if misconfiguration is not None and misconfiguration not in MISCONFIGURATIONS:
        raise DPAuditError(f"misconfiguration must be one of {', '.join(MISCONFIGURATIONS)} or None")
    if misconfiguration == "expected-batch-small-n":
        reduction = "mean"
    poisson = misconfiguration not in ("shuffled-as-poisson", "manual-accumulation")
    accumulate = 4 if misconfiguration == "manual-accumulation" else 1
    torch.manual_seed(seed)
    audit = RecordCanaries(num_canaries=canaries, seed=seed)
    wrapped = audit.dataset(digits_dataset(records))
    model = audit.model(digits_mlp())
    model = model.to(device)
    engine = PrivacyEngine(accountant="prv")
    loader = torch.utils.data.DataLoader(wrapped, batch_size=wrapped.batch_size_for(batch), shuffle=not poisson)
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=loader,
        target_epsilon=epsilon,
        target_delta=DELTA,
        epochs=epochs,
        max_grad_norm=1.0,
        loss_reduction=reduction,
        poisson_sampling=poisson,
    )
    audit.attach(optimizer, data_loader=loader)
    iterated = loader
    if misconfiguration == "other-loader":
        iterated = torch.utils.data.DataLoader(wrapped, batch_size=4 * wrapped.batch_size_for(batch), shuffle=True)
    noise = _noise_over_batch(batch) if misconfiguration == "noise-over-batch" else contextlib.nullcontext()
    # as many optimizer steps as the accountant was calibrated for: 4 loops of the 4×-batch loader (or of the
    # accumulated batches) per accounted epoch
    loops = epochs * (4 if misconfiguration in ("other-loader", "manual-accumulation") else 1)
    with noise:
        for _ in range(loops):
            for k, (inputs, targets) in enumerate(iterated):
                outputs = model(inputs.to(device))
                torch.nn.functional.cross_entropy(outputs, targets.to(device), reduction=reduction).backward()
                if (k + 1) % accumulate == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    return audit, engine
