"""The ensemble fast path: K optimizers' parameters and gradient sums as rows of one stack per parameter."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from dpaudit.optim.base import Optimizer
    from dpaudit.optim.clipping import PrivateOptimizer


#: Rows of at least this many noise values each are drawn side by side by the host's threads (``draw_noise_rows``)
CONCURRENT_DRAW_VALUES = 2**16


@dataclass(eq=False)
class StackedRows:
    """An ensemble's parameters and gradient sums as one [K, *shape] tensor per parameter: optimizer k's own
    tensors are row k of them (``Optimizer.stack_rows``), so one call updates all K. ``rows`` gives a run of
    consecutive rows as views, ``noise`` the buffer their step's noise is drawn into; ``state``, by attribute name,
    further per-parameter state of the optimizers stacked the same way (a class's ``stack_rows`` says which)."""

    params: list[torch.Tensor]
    sums: list[torch.Tensor]
    first: int = 0  # where these rows start in the whole stack
    whole: StackedRows | None = None  # the whole stack, for a run of its rows
    _noise_buffer: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    state: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def rows(self, first: int, count: int) -> StackedRows:
        """Rows ``first`` to ``first + count - 1`` of the whole stack (the stack itself if that is all of it)."""
        if first == 0 and count == len(self.params[0]):
            return self
        return StackedRows(
            [t.narrow(0, first, count) for t in self.params],
            [t.narrow(0, first, count) for t in self.sums],
            first,
            self,
            state={name: [t.narrow(0, first, count) for t in values] for name, values in self.state.items()},
        )

    def keep(self, name: str, optimizers: Sequence[Optimizer]) -> None:
        """Stack the optimizers' per-parameter list ``name`` (the first ``len(params)`` of it) like the parameters:
        each optimizer's tensors become views of its row of ``state[name]``, their values unchanged."""
        stacked = [torch.stack([getattr(o, name)[j] for o in optimizers]) for j in range(len(self.params))]
        for k, optimizer in enumerate(optimizers):
            getattr(optimizer, name)[: len(stacked)] = [values[k] for values in stacked]
        self.state[name] = stacked

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


def draw_noise_rows(optimizers: Sequence[PrivateOptimizer], rows: Sequence[torch.Tensor]) -> None:
    """Each optimizer's step noise into its row (``_step_noise(out=row)``); on a CPU with several torch threads and
    rows of at least :data:`CONCURRENT_DRAW_VALUES` values, side by side in threads. Each optimizer draws from its
    own generator (torch's CPU normal draw is serial per generator), so the values are those of drawing row after
    row."""
    threads = min(len(rows), torch.get_num_threads())
    if threads < 2 or rows[0].device.type != "cpu" or rows[0].numel() < CONCURRENT_DRAW_VALUES:
        for optimizer, row in zip(optimizers, rows):
            optimizer._step_noise(out=row)
        return
    list(_threads(threads, os.getpid()).map(lambda optimizer, row: optimizer._step_noise(out=row), optimizers, rows))


@functools.cache
def _threads(count: int, pid: int) -> ThreadPoolExecutor:
    """A pool of ``count`` threads of process ``pid`` (a forked child makes its own: it inherits no threads)."""
    return ThreadPoolExecutor(count, thread_name_prefix="dpaudit-noise")
