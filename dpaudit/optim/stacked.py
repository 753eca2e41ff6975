"""The ensemble fast path: K optimizers' parameters and gradient sums as rows of one stack per parameter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from dpaudit.optim.base import Optimizer


@dataclass(eq=False)
class StackedRows:
    """An ensemble's parameters and gradient sums as one [K, *shape] tensor per parameter: optimizer k's own
    tensors are row k of them (``Optimizer.stack_rows``), so one call updates all K. ``rows`` gives a run of
    consecutive rows as views, ``noise`` the buffer their step's noise is drawn into."""

    params: list[torch.Tensor]
    sums: list[torch.Tensor]
    first: int = 0  # where these rows start in the whole stack
    whole: StackedRows | None = None  # the whole stack, for a run of its rows
    _noise_buffer: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def rows(self, first: int, count: int) -> StackedRows:
        """Rows ``first`` to ``first + count - 1`` of the whole stack (the stack itself if that is all of it)."""
        if first == 0 and count == len(self.params[0]):
            return self
        return StackedRows(
            [t.narrow(0, first, count) for t in self.params],
            [t.narrow(0, first, count) for t in self.sums],
            first,
            self,
        )

    def noise(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(per parameter a [M, *shape] view, per row the flat buffer) of the memory these rows' models draw a
        step's noise into, their coordinates parameter after parameter; made on first use and kept."""
        whole = self.whole or self
        if whole._noise_buffer is None:
            sizes = [p[0].numel() for p in whole.params]
            flat = whole.params[0].new_empty((len(whole.params[0]), sum(sizes)))
            views = [values.view(p.shape) for values, p in zip(flat.split(sizes, dim=1), whole.params)]
            whole._noise_buffer = views, list(flat)
        views, rows = whole._noise_buffer
        if whole is self:
            return views, rows
        count = len(self.params[0])
        return [view.narrow(0, self.first, count) for view in views], rows[self.first : self.first + count]


def _stacked_rows(optimizers: Sequence[Optimizer]) -> StackedRows | None:
    """The rows of ``optimizers`` in their ``StackedRows``, if they are consecutive rows of one in order and have
    no parameters beside it but an audit block (``Optimizer.set_audit_block``: no gradient reaches it); else None."""
    stack, first = optimizers[0]._stack, optimizers[0]._row
    if stack is None or any(
        optimizer._stack is not stack or optimizer._row != first + m or optimizer._model_parameters != len(stack.params)
        for m, optimizer in enumerate(optimizers)
    ):
        return None
    return stack.rows(first, len(optimizers))
