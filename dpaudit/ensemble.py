"""Gradients of K models of one architecture in one vectorised call.

The engine (``dpaudit.train``) trains the target and shadow models of one configuration in lockstep.
:class:`EnsembleGradients` stacks their parameters into one tensor per parameter name ([K, *shape]) and
points every model's parameters at its slice, so optimizers, checkpoints and evaluation keep working on
ordinary ``nn.Module`` objects while the per-sample gradients of all K models come from one call: the
stacked models run as one network and each layer's per-sample gradients follow in closed form
(``method="layers"``, ``dpaudit.layerwise``, for sequential CNNs and MLPs), or ``vmap(vmap(grad))`` over
models and samples (``method="functorch"``, any model), or Opacus's hooks one model at a time
(``method="opacus"``), or each layer's input and output gradient kept as factors one model at a time
(``method="ghost"``, ``dpaudit.ghost``). For a model the layer-wise method cannot take, ``method="auto"`` times the
others on the first step and keeps the fastest (:data:`TRIAL_CALLS`). Each model keeps its own data, sampling stream,
noise stream and optimizer: the result is the same algorithm as training the models one at a time
(``engine: sequential``). :class:`RecordPool` holds all K models' records in one tensor, so each chunk's
batches are one indexed read.

Memory: a call over m models and s samples holds about m·s per-sample gradients and activations;
:func:`plan_chunks` picks (m, s) under a budget in MiB, so paper-scale ResNet-18 ensembles fit.
"""

from __future__ import annotations

import functools
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from dpaudit import ghost, layerwise
from dpaudit import models as model_registry
from dpaudit._device import host_to_device
from dpaudit._validation import DPAuditError, check_positive

FLOAT_BYTES = 4
# per (model, sample): its gradient once in the output and once more (inside vmap, or where a consumer copies
# the layer-wise method's permuted convolution gradients); activations kept for the
# backward pass, their gradients and slack for the framework's temporaries
GRADIENT_COPIES, ACTIVATION_COPIES = 2, 3
# On CPU a layer-wise call is fastest while its largest activation (over all its models and samples) stays about
# the size of a last-level cache (11 32×32 CNNs then take 17 samples per call; `benchmarks/ensemble.py
# --architectures cnn` measures it, `tools/ensemble_dispatch.py --cpu-plan` shows the calls)
CPU_CALL_ACTIVATION_BYTES = 24 * 2**20
#: Where ``method="auto"`` has several candidates, each computes a share of this many steps' records, timed, before
#: the engine keeps the one with the fewest seconds per record in its last share: a step's batches are split evenly
#: between the candidates still to be timed and the method that computes the rest (with two candidates, a third
#: each). Before its first share, each makes one untimed warm-up call on one record per model (first-call costs: lazy
#: loading, allocations, Opacus's checks)
TRIAL_CALLS = 1
#: The gradient methods an ensemble can compute with
METHODS = ("layers", "functorch", "opacus", "ghost")


@dataclass(frozen=True)
class ChunkPlan:
    """How a batch of K models × B samples is split into gradient calls."""

    models_per_call: int
    samples_per_call: int
    bytes_per_model_sample: int


def plan_chunks(*, models: int, samples: int, bytes_per_model_sample: int, memory_budget_mb: float) -> ChunkPlan:
    """Largest (models, samples) per call whose estimated memory fits ``memory_budget_mb`` (MiB).

    All models are kept together while at least one sample per model fits; otherwise fewer models and
    one sample at a time. A budget too small for one model and one sample still runs (1 × 1).
    """
    check_positive("memory_budget_mb", memory_budget_mb)
    capacity = max(1, int(memory_budget_mb * 2**20 // max(1, bytes_per_model_sample)))  # model-samples per call
    if capacity >= models:
        return ChunkPlan(models, max(1, min(samples, capacity // models)), bytes_per_model_sample)
    return ChunkPlan(capacity, 1, bytes_per_model_sample)


def _leaf_output_sizes(model: nn.Module, example: torch.Tensor) -> list[int]:
    """Number of values in each leaf module's output in the forward pass of one sample."""
    return [
        output.numel() for _, output in model_registry.leaf_outputs(model, example) if isinstance(output, torch.Tensor)
    ]


def activation_elements(model: nn.Module, example: torch.Tensor) -> int:
    """Number of values the forward pass of one sample produces (outputs of every leaf module)."""
    return sum(_leaf_output_sizes(model, example))


def largest_activation_elements(model: nn.Module, example: torch.Tensor) -> int:
    """Number of values in the largest output of a leaf module in the forward pass of one sample."""
    return max(_leaf_output_sizes(model, example), default=1)


class EnsembleGradients:
    """Per-sample (or batch-mean) cross-entropy gradients of K same-architecture models at once.

    Args:
        models: the K models; their trainable parameters are re-pointed at slices of stacked tensors
            (``stacked[j][k]`` is parameter j of model k), so in-place optimizer updates are seen here.
        per_sample: per-sample gradients ([n_k, *shape] per model) or the gradient of the batch mean.
        example: one input sample (for the memory estimate, and the ghost method's check of a forward pass).
        max_samples: the most samples one model contributes per call (the engine's microbatch size); on CPU
            the layer-wise method takes fewer where its largest activation would pass ``CPU_CALL_ACTIVATION_BYTES``.
        memory_budget_mb: MiB for one call (``plan_chunks``).
        method: "layers", "functorch", "opacus", "ghost" or "auto": layers where ``layerwise.unsupported_reason``
            accepts the model; else, for per-sample gradients, functorch, opacus and ghost (those that take the model,
            ``candidate_methods``) each compute a share of the first step's records, timed (:data:`TRIAL_CALLS`; after
            an untimed call on one record per model), and the one with the fewest seconds per record computes the rest
            from then on (``self.trials``; a line on stderr says which). ``self.method`` is the one in use.
        factored: with method "layers", per-sample Linear weight gradients come as
            ``layerwise.OuterProducts`` (consumers use ``layerwise.dense``, ``sample_norms``, ``weighted_sample_sums``);
            the ghost method always gives Linear and Conv2d weights' as factors.
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        *,
        per_sample: bool,
        example: torch.Tensor,
        max_samples: int,
        memory_budget_mb: float,
        method: str = "auto",
        factored: bool = False,
    ) -> None:
        if not models:
            raise DPAuditError("an ensemble needs at least one model")
        self.models = list(models)
        base = self.models[0]
        self.names = [name for name, p in base.named_parameters() if p.requires_grad]
        with torch.no_grad():
            self.stacked = [
                torch.stack([dict(m.named_parameters())[name].detach() for m in self.models]) for name in self.names
            ]
        for k, model in enumerate(self.models):
            owned = dict(model.named_parameters())
            for name, values in zip(self.names, self.stacked):
                owned[name].data = values[k]

        self.per_sample = per_sample
        self.candidates = candidate_methods(base, method, per_sample=per_sample, example=example)
        self.method = self.candidates[0]
        self.clock: Callable[[], float] = time.perf_counter  # the trials' timer
        self.trials: dict[str, list[float]] = {candidate: [] for candidate in self.candidates}
        self._example, self._max_samples, self._memory_budget_mb = example, max_samples, memory_budget_mb
        self._factored = factored
        self._backends: dict[str, tuple[Callable[..., tuple[list[layerwise.Gradient], torch.Tensor]], ChunkPlan]] = {}
        self._backend(self.method)  # a bad budget fails here, before any step

    @property
    def plan(self) -> ChunkPlan:
        """How the method in use splits a batch into calls."""
        return self._backend(self.method)[1]

    def _backend(self, method: str) -> tuple[Callable[..., tuple[list[layerwise.Gradient], torch.Tensor]], ChunkPlan]:
        """(call, plan) of ``method``, made at its first use."""
        if method not in self._backends:
            base, models, samples = self.models[0], len(self.models), self._max_samples
            call: Callable[..., tuple[list[layerwise.Gradient], torch.Tensor]]
            if method == "layers":
                # the layer-wise call differentiates with respect to leaves: made once, they share the stacked
                # memory, so they see every in-place update
                leaves = [values.detach().requires_grad_() for values in self.stacked]
                layers = layerwise.LayerwiseGradients(base, factored=self._factored)
                call = functools.partial(self._stacked_call, layers, leaves)
                if self.stacked[0].device.type == "cpu":
                    largest = FLOAT_BYTES * largest_activation_elements(base, self._example)
                    samples = min(samples, max(1, CPU_CALL_ACTIVATION_BYTES // (models * largest)))
            elif method == "functorch":
                call = functools.partial(self._stacked_call, _vmapped_gradients(base), self.stacked)
            elif method == "ghost":
                call, models = ghost.GhostGradients(self.models), 1
            else:
                call, models = OpacusGradients(self.models), 1
            size = bytes_per_model_sample(base, example=self._example, method=method, factored=self._factored)
            plan = plan_chunks(
                models=models, samples=samples, bytes_per_model_sample=size, memory_budget_mb=self._memory_budget_mb
            )
            self._backends[method] = call, plan
        return self._backends[method]

    def accumulate(self, pool: RecordPool, indices: Sequence[npt.NDArray[np.int64]], sink: Callable[..., None]) -> None:
        """Compute the gradients of model k on its batch ``indices[k]`` (positions in its records in ``pool``) and
        hand them to ``sink``.

        ``sink(models, counts, grads, losses, padding)`` is called once per chunk: ``models`` are the indices of
        the M models in the chunk, ``counts[m]`` their records in it; ``grads`` has one tensor per parameter,
        [M, W, *shape] per-sample gradients (rows from ``counts[m]`` on are padding) or, for
        per_sample=False, [M, *shape], the chunk's share of each model's batch-mean gradient; ``losses``
        is [M, W] (0 in padding rows); ``padding`` is [M, W], True in the padding rows. Models with an empty
        batch get no rows.
        """
        if len(self.candidates) == 1:
            self._accumulate(self.method, pool, indices, sink)
            return
        # the trial: each candidate not yet timed computes its share of the step's records, timed; the last share goes
        # to the faster where every candidate has its times (else to the last one tried)
        untried = [method for method in self.candidates if len(self.trials[method]) < TRIAL_CALLS]
        shares = [np.array_split(index, len(untried) + 1) for index in indices]
        for part, method in enumerate(untried):
            self.method = method
            self._timed(method, pool, [pieces[part] for pieces in shares], sink)
        if all(len(times) == TRIAL_CALLS for times in self.trials.values()):
            self._keep(min(self.candidates, key=lambda method: self.trials[method][-1]))
        self._accumulate(self.method, pool, [pieces[-1] for pieces in shares], sink)

    def _timed(
        self, method: str, pool: RecordPool, indices: Sequence[npt.NDArray[np.int64]], sink: Callable[..., None]
    ) -> None:
        """``_accumulate`` by ``method``, its seconds per record appended to ``self.trials[method]`` (nothing without
        records); before its first, an untimed warm-up call on one record per model whose gradients are dropped."""
        records = sum(len(index) for index in indices)
        if not records:
            return
        if not self.trials[method]:
            self._accumulate(method, pool, [index[:1] for index in indices], lambda *_: None)
        device = self.stacked[0].device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = self.clock()
        self._accumulate(method, pool, indices, sink)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.trials[method].append((self.clock() - started) / records)

    def _keep(self, method: str) -> None:
        """Use ``method`` from now on and drop the other candidates (Opacus's hooks removed from the models)."""
        timings = ", ".join(f"{name} {1e3 * self.trials[name][-1]:.3g}" for name in self.candidates)
        print(
            f"dpaudit: gradients of {len(self.models)} models by {method} (ms per record: {timings})",
            file=sys.stderr,
            flush=True,
        )
        for name, (call, _) in list(self._backends.items()):
            if name != method:
                if isinstance(call, (OpacusGradients, ghost.GhostGradients)):
                    call.close()
                del self._backends[name]
        self.method, self.candidates = method, (method,)

    def _accumulate(
        self, method: str, pool: RecordPool, indices: Sequence[npt.NDArray[np.int64]], sink: Callable[..., None]
    ) -> None:
        call, plan = self._backend(method)
        counts = [len(index) for index in indices]
        for first in range(0, len(self.models), plan.models_per_call):
            group = range(first, min(first + plan.models_per_call, len(self.models)))
            longest = max(counts[k] for k in group)
            for start in range(0, longest, plan.samples_per_call):
                active = [k for k in group if counts[k] > start]
                width = min(plan.samples_per_call, longest - start)
                part_counts = [min(counts[k] - start, width) for k in active]
                images, labels, padding = pool.read(
                    [indices[k][start : start + width] for k in active], models=active, width=width
                )
                weights = None if self.per_sample else self._batch_mean_weights(part_counts, counts, active, images)
                grads, losses = self._gradients(call, active, images, labels, weights)
                if min(part_counts) < width:
                    losses = losses.masked_fill(padding, 0.0)
                sink(active, part_counts, grads, losses, padding)

    def _gradients(
        self, call: Callable[..., tuple[list[layerwise.Gradient], torch.Tensor]], *arguments: object
    ) -> tuple[list[layerwise.Gradient], torch.Tensor]:
        """One gradient call (a method of its own: ``tools/ensemble_breakdown.py`` times it)."""
        return call(*arguments)

    @staticmethod
    def _batch_mean_weights(
        part_counts: list[int], counts: list[int], active: list[int], images: torch.Tensor
    ) -> torch.Tensor:
        """[M, W]: each record's share of its model's batch mean (0 in padding rows), on the images' device."""
        width = images.shape[1]
        weights = np.where(
            np.arange(width)[None, :] < np.array(part_counts)[:, None],
            1.0 / np.array([counts[k] for k in active], dtype=np.float64)[:, None],
            0.0,
        )
        return host_to_device(weights, images.device).to(images.dtype)

    def _stacked_call(
        self,
        gradients: layerwise.GradientFunction,
        params: list[torch.Tensor],
        active: list[int],
        images: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor | None,
    ) -> tuple[list[layerwise.Gradient], torch.Tensor]:
        """``gradients`` of the ``active`` models' rows of ``params`` (the stacked parameters or their leaves)."""
        if len(active) < len(self.models):
            index = host_to_device(active, self.stacked[0].device)
            params = [values.index_select(0, index) for values in self.stacked]
        return gradients(params, images, labels, weights)


class OpacusGradients:
    """Per-sample gradients of each model by Opacus's hooks (its ``GradSampleModule``), one model per call.

    The backward pass goes to the images alone where that reaches every hook (``_reaches_every_hook``): torch then
    skips the parameters' batch gradients, which nothing reads, and the hooks compute the same per-sample gradients.
    The hooks are enabled only inside a call, so that another method's passes over the same models (``auto``'s trial)
    leave them alone.

    Args:
        models: the models; each is wrapped (its modules get Opacus's hooks) until :meth:`close`.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        from opacus import GradSampleModule

        self.wrapped = [GradSampleModule(model, loss_reduction="sum") for model in models]
        for wrapped in self.wrapped:
            wrapped.disable_hooks()
        self.params = [model_registry.trainable_parameters(model) for model in models]
        self.through_images: bool | None = None  # decided at the first call (the models share their architecture)

    def __call__(
        self, active: list[int], images: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
    ) -> tuple[list[layerwise.Gradient], torch.Tensor]:
        """(grads [1, W, *shape] per parameter, losses [1, W]) of the one ``active`` model on ``images`` [1, W, ...]
        (``plan_chunks`` gives Opacus's hooks one model per call); the gradients are Opacus's own tensors, not
        copies."""
        if weights is not None:
            raise DPAuditError("Opacus's hooks give per-sample gradients only")
        (k,) = active
        if self.through_images is None:
            self.through_images = self._reaches_every_hook(images[0, :1])
        inputs = images[0].detach().requires_grad_() if self.through_images else images[0]
        self.wrapped[k].enable_hooks()
        try:
            with warnings.catch_warnings():  # that the images need no gradient: Opacus's hooks work without
                warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
                loss = F.cross_entropy(self.wrapped[k](inputs), labels[0], reduction="none")
                torch.autograd.backward(loss.sum(), inputs=[inputs] if self.through_images else None)
        finally:
            self.wrapped[k].disable_hooks()
        # Opacus's hooks set grad_sample on each parameter at run time (torch's stubs do not declare it); a layer that
        # did not run has none: zero gradients, as torch.func gives
        samples = [getattr(p, "grad_sample", None) for p in self.params[k]]
        grads = [
            (sample if sample is not None else p.new_zeros(len(labels[0]), *p.shape)).unsqueeze(0)
            for p, sample in zip(self.params[k], samples, strict=True)
        ]
        for p in self.params[k]:
            p.grad_sample = p.grad = None  # type: ignore[attr-defined]
        return grads, loss.detach().unsqueeze(0)

    def _reaches_every_hook(self, image: torch.Tensor) -> bool:
        """Whether a backward pass to ``image`` [1, ...] alone passes every module with trainable parameters (so that
        each hook gets its output's gradient): with the parameters frozen, each such module's output still needs a
        gradient, in a forward pass without Opacus's hooks, in eval mode (no running statistics move)."""
        wrapped = self.wrapped[0]
        modules = [
            module
            for module in wrapped._module.modules()
            if any(p.requires_grad for p in module.parameters(recurse=False))
        ]
        if not image.is_floating_point() or not modules:
            return False
        needs_gradient: dict[nn.Module, bool] = {}

        def note(module: nn.Module, _inputs: object, output: object) -> None:
            reached = isinstance(output, torch.Tensor) and output.requires_grad
            needs_gradient[module] = needs_gradient.get(module, True) and reached

        handles = [module.register_forward_hook(note) for module in modules]
        training = wrapped.training
        try:
            for p in self.params[0]:
                p.requires_grad_(False)
            with torch.enable_grad():
                wrapped.eval()(image.detach().requires_grad_())
        finally:
            for p in self.params[0]:
                p.requires_grad_(True)
            for handle in handles:
                handle.remove()
            wrapped.train(training)
        return len(needs_gradient) == len(modules) and all(needs_gradient.values())

    def close(self) -> None:
        """Remove the hooks and the attributes Opacus added."""
        for wrapped in self.wrapped:
            wrapped.remove_hooks()
            wrapped._close()


class RecordPool:
    """The training records of K models in one tensor on their device, then one all-zero record (label 0) that
    pads short batches: a chunk of all K models' batches is one indexed read.

    Args:
        records: (images [n_k, ...], labels [n_k]) of each model, all on one device.
    """

    def __init__(self, records: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        images, labels = zip(*records)
        self.images = torch.cat([*images, images[0].new_zeros((1, *images[0].shape[1:]))])
        self.labels = torch.cat([*labels, labels[0].new_zeros(1)])
        self.sizes = [len(part) for part in labels]
        self.offsets = np.cumsum([0, *self.sizes[:-1]])
        self.zero_record = sum(self.sizes)  # its position

    def records(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Model k's (images, labels), as views of the pool."""
        start, stop = self.offsets[k], self.offsets[k] + self.sizes[k]
        return self.images[start:stop], self.labels[start:stop]

    def read(
        self, positions: Sequence[npt.NDArray[np.int64]], *, models: Sequence[int], width: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(images [M, W, ...], labels [M, W], padding [M, W]) of record ``positions[m]`` of model ``models[m]``,
        each row padded to ``width`` with the zero record (``padding`` True there)."""
        index = np.full((len(models), width), self.zero_record, dtype=np.int64)
        for row, (k, part) in enumerate(zip(models, positions)):
            index[row, : len(part)] = self.offsets[k] + np.asarray(part)
        on_device = host_to_device(index, self.images.device)
        return self.images[on_device], self.labels[on_device], on_device == self.zero_record


def resolve_method(model: nn.Module, method: str, *, name: str | None = None) -> str:
    """The gradient method "auto" starts with for ``model`` (registered as ``name``, if given, for the message):
    "layers" where the layer-wise method takes it, else "functorch"; a one-line error if "layers" or "ghost" cannot
    take it (for "ghost": by its layers; what only a forward pass shows is checked at the first call)."""
    reason = layerwise.unsupported_reason(model)
    if method == "auto":
        return "functorch" if reason else "layers"
    if method == "ghost":
        reason = ghost.unsupported_reason(model)
    if method in ("layers", "ghost") and reason:
        which = "this model" if name is None else f"model {name!r}"
        raise DPAuditError(f"grad_sample {method!r} cannot take {which}: {reason}; use 'functorch' or 'auto'")
    if method not in METHODS:
        raise DPAuditError(f"unknown gradient method {method!r}; choose 'auto', {', '.join(map(repr, METHODS))}")
    return method


def candidate_methods(
    model: nn.Module, method: str, *, per_sample: bool, example: torch.Tensor | None = None
) -> tuple[str, ...]:
    """The methods :class:`EnsembleGradients` may use: ``method`` itself, or for "auto" on a model the layer-wise
    method cannot take and per-sample gradients, torch.func's vmap over all models, Opacus's hooks one model at
    a time (where Opacus accepts the model) and the ghost method (where ``ghost.unsupported_reason`` accepts it; with
    ``example``, one input sample, also its forward pass), timed on the first step. A batch-mean gradient
    (``per_sample`` False) needs no per-sample hooks: "opacus" and "ghost" then compute it as "functorch" does."""
    first = resolve_method(model, method)
    if not per_sample and first in ("opacus", "ghost"):
        return ("functorch",)
    if method != "auto" or first == "layers" or not per_sample:
        return (first,)
    from opacus import GradSampleModule

    opacus = () if GradSampleModule.validate(module=model, strict=False) else ("opacus",)
    return (first, *opacus, *(() if ghost.unsupported_reason(model, example) else ("ghost",)))


def _vmapped_gradients(model: nn.Module) -> layerwise.GradientFunction:
    """``f(params, images, labels[, weights]) -> (grads, losses)`` by torch.func: vmap over models (every
    argument has the model axis first) of per-sample gradients (vmap over samples) or of Σ weights·loss."""
    from torch.func import grad_and_value, vmap

    losses_of = model_registry.functional_losses(model)

    def loss_of_one(param_values: Sequence[torch.Tensor], image: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        return losses_of(param_values, image[None], label[None])[0]

    def weighted_sum(
        param_values: Sequence[torch.Tensor], images: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        losses = losses_of(param_values, images, labels)
        return (losses * weights).sum(), losses

    per_sample = vmap(vmap(grad_and_value(loss_of_one), in_dims=(None, 0, 0)))
    batch = vmap(grad_and_value(weighted_sum, has_aux=True))

    def gradients(
        params: Sequence[torch.Tensor],
        images: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor | None = None,
    ) -> tuple[list[layerwise.Gradient], torch.Tensor]:
        if weights is None:
            grads, losses = per_sample(params, images, labels)
        else:
            grads, (_, losses) = batch(params, images, labels, weights)
        return list(grads), losses.detach()

    return gradients


def bytes_per_model_sample(
    model: nn.Module, *, example: torch.Tensor, method: str = "functorch", factored: bool = False
) -> int:
    """Estimated bytes one (model, sample) pair takes in a per-sample gradient call; the layer-wise method
    is also charged one convolution's unfolded input (room for the copies its per-sample weight gradient
    makes; Opacus's hooks unfold it too), and with ``factored`` a Linear weight's per-sample gradient takes O + F
    values instead of O·F (the layer-wise method only)."""
    gradient_values, unfolded = model_registry.parameter_count(model), 0
    if method in ("layers", "opacus", "ghost"):
        unfolded = layerwise.largest_unfolded_input(model, example)
        if factored and method == "layers":
            gradient_values -= sum(
                layer.weight.numel() - sum(layer.weight.shape)
                for layer in model.modules()
                if isinstance(layer, nn.Linear)
            )
    values = GRADIENT_COPIES * gradient_values + ACTIVATION_COPIES * activation_elements(model, example) + unfolded
    return FLOAT_BYTES * values
