"""Whole-run canaries in a user's own Opacus training (``import dpaudit.opacus``; needs Opacus).

Two designs, both scored by :func:`dpaudit.audit_whole_run` against the user's accountant:

* :class:`RecordCanaries` — **the audit of the run.** The canaries are records of the user's dataset, sampled by
  the user's own loader, counted in n and in the realised batches; each canary row's gradient comes from the user's
  loss through the model wrapper, is clipped with the real batch at the optimizer's bound, noised by the
  optimizer's own ``add_noise`` call (the block is its last parameter, so the model's noise draws are unchanged)
  and divided as the optimizer divides. Presence, noise and divisor are read from what reached the optimizer::

      canaries = dpaudit.opacus.RecordCanaries(num_canaries=20_000, seed=0)
      data = canaries.dataset(data)                       # the user's Dataset plus the member canaries
      model = canaries.model(model)                       # the user's module plus the canary rows' outputs
      loader = DataLoader(data, batch_size=data.batch_size_for(64))   # the same q for the user's records
      optimizer = torch.optim.SGD(model.parameters(), lr=...)
      model, optimizer, loader = privacy_engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                             noise_multiplier=1.0, max_grad_norm=1.0)
      canaries.attach(optimizer, data_loader=loader)
      ...the user's training loop, unchanged...
      report = canaries.report(accountant=privacy_engine.accountant, delta=1e-5)

  What changes for the user's records: the dataset holds the member canaries too (n grows by about M/2), so with
  the same q the loader's batches are larger by about q·M/2 canary rows, and a mean-reduced loss is divided by the
  larger expected batch (Opacus's ``expected_batch_size``): the real rows' update is n_real/n of what it was, which
  a learning rate larger by n/n_real restores for SGD. The user's module never sees a canary row. The trained
  parameters are not bit-identical to a run without canaries (another n draws other batches).

* :class:`CanaryAudit` — **the configuration check** (bit-identical training): the canaries are simulated from the
  loader's configuration and pass through the optimizer's clipping and noise on a separate tensor, from their own
  noise stream. It tests that sampler, noise and accountant agree; it cannot see the batches that really reached the
  optimizer.

The record-level canaries work in plain loops and in PyTorch Lightning (attach the DPOptimizer, or Lightning's wrapper
of it). Refused with the reason (:data:`REFUSED_OPTIMIZERS`): ghost clipping, distributed optimizers, per-layer and
adaptive clipping, the Hugging Face Trainer's accelerate wrapper; models with BatchNorm in any form
(:func:`cross_record_modules`).
"""

from dpaudit.opacus._configuration import (
    NORM_FACTOR,
    SAMPLINGS,
    CanaryAudit,
    LoaderSampling,
    OpacusAuditReport,
    Sampling,
    accountant_epsilon,
    accountant_ledger,
    claim_findings,
    loader_sampling,
)
from dpaudit.opacus._records import (
    CROSS_RECORD_MODULES,
    REFUSED_OPTIMIZERS,
    CanaryDataset,
    CanaryModule,
    RecordAuditReport,
    RecordCanaries,
    RecordCanaryObservations,
    cross_record_modules,
    mark_canaries,
)

__all__ = [
    "CROSS_RECORD_MODULES",
    "NORM_FACTOR",
    "REFUSED_OPTIMIZERS",
    "SAMPLINGS",
    "CanaryAudit",
    "CanaryDataset",
    "CanaryModule",
    "LoaderSampling",
    "OpacusAuditReport",
    "RecordAuditReport",
    "RecordCanaries",
    "RecordCanaryObservations",
    "Sampling",
    "accountant_epsilon",
    "accountant_ledger",
    "claim_findings",
    "cross_record_modules",
    "loader_sampling",
    "mark_canaries",
]
