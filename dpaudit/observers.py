"""Observers of the training loop: what watches (or audits) one model's training without being its arithmetic.

The engine (``dpaudit.train``) calls every observer of a model at fixed points of each step, as Opacus calls
the step hooks attached to its optimizer (``attach_step_hook``)::

    attach(optimizer)                                  once, when the model's optimizer is built
    begin_epoch(optimizer, epoch=e)                    after ``optimizer.begin_epoch(e)``
    grads = accumulate(optimizer, grads, records=r)    each chunk of gradients, before ``optimizer.accumulate``
                                                       (if an observer of the model ``sees_gradients``)
    sampled(present)                                   (an observer with ``extra_records``) which of them the
                                                       run's sampler put in this step's batch, as it is drawn
    before_update(optimizer, epoch=e)                  the batch is accumulated; before ``optimizer.step``
    after_update(optimizer, cost, epoch=e)             after the step (``cost``: what ``step`` returned)
    end_epoch(epoch=e)                                 the epoch is over: write what was recorded so far

A model's observers are called in the order of its list, hook by hook, so each sees what the previous one did:
the white-box canaries (``dpaudit.attacks.canary.GradientCanaries``, or the whole-run canaries of
``dpaudit.attacks.canary_run.RunCanaries``: extra coordinates, inserted before the update, scored after it) come
before the diagnostics (``dpaudit.diagnostics.TrainingDiagnostics``: gradient histogram, support quality), which
histogram the canaries' coordinates too. An observer's state is saved with
the model's training state (``dpaudit._state``) under its ``name`` and restored on resume.

This module is the protocol only; it imports neither torch nor the observers, which import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch

    from dpaudit.optim import Optimizer, StepCost


@runtime_checkable
class TrainingObserver(Protocol):
    """Hooks the engine calls around each step of one model; subclasses override the ones they need.

    Attributes:
        name: the key of the observer's state in a saved training state (one per model).
        sees_gradients: whether the engine must call ``accumulate`` (to change or to read the gradients): the
            model's gradients then go through its observers alone, never through an ensemble's shared (faster)
            accumulation. Without it ``accumulate`` may be skipped.
        reads_updates: whether the observer reads ``optimizer.last_update`` (the step's release before
            momentum), which the optimizer then keeps.
        reads_model_updates: with ``reads_updates``, whether it reads the model's parameters' releases; False:
            its own ``parameters``' alone (the last entries of ``last_update``), and the optimizer copies no other
            release for it.
        parameters: tensors the optimizer updates after the model's parameters (coordinates no loss touches,
            such as the canary tensor); ``accumulate`` must append their gradients.
        extra_records: records the observer adds to the run (the whole-run canaries), which the run's own sampler
            draws with the model's records, by the same call and rule (``dpaudit.sampling.sample_batches``); one
            observer of a model at most has them.
    """

    name: ClassVar[str]
    sees_gradients: ClassVar[bool] = False
    reads_updates: ClassVar[bool] = False
    reads_model_updates: ClassVar[bool] = True
    extra_records: int = 0

    @property
    def parameters(self) -> tuple[torch.Tensor, ...]:
        return ()

    def attach(self, optimizer: Optimizer) -> None:
        """The model's optimizer is built (before any resume restores its state); its parameters end with the
        observers' ``parameters``."""
        return None  # (an explicit body: not abstract)

    def begin_epoch(self, optimizer: Optimizer, *, epoch: int) -> None:
        """Epoch ``epoch`` (1-based) starts; ``optimizer.begin_epoch`` has run."""
        return None

    def accumulate(
        self, optimizer: Optimizer, grads: Sequence[torch.Tensor], *, records: int
    ) -> Sequence[torch.Tensor]:
        """The gradients of a chunk of ``records`` records (per-sample, or a share of the batch mean if the
        optimizer is not ``per_sample``), as ``optimizer.accumulate`` should receive them."""
        return grads

    def sampled(self, present: npt.NDArray[np.intp]) -> None:
        """The indices (in [0, ``extra_records``)) of the observer's extra records that the run's sampler put in
        this step's batch; called as the batch is drawn (before its gradients and ``before_update``), at every step,
        by a model whose observer has them."""
        return None

    def before_update(self, optimizer: Optimizer, *, epoch: int) -> None:
        """The batch's gradients are accumulated; ``optimizer.step`` comes next."""
        return None

    def after_update(self, optimizer: Optimizer, cost: StepCost | None, *, epoch: int) -> None:
        """``optimizer.step`` has run and returned ``cost``: the step's noise multiplier z, sample rate q and
        accounting phase, or None for a non-private optimizer."""
        return None

    def end_epoch(self, *, epoch: int) -> None:
        """The epoch is over: write what was recorded so far (so an interrupted run keeps it)."""
        return None
