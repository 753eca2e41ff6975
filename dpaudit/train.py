"""The training engine: one loop for every optimizer, target and shadow models, checkpoints, ledger.

``train_configuration(config, out_dir=...)`` trains the target and the shadow models of one
configuration and one Monte Carlo trial (Liang et al., App. D.2 and D.4) and writes::

    out_dir/config.json              the validated configuration and derived values (z, σ_DP, q, T/epoch)
    out_dir/split.json               member / non-member indices of the target and every shadow (either design)
    out_dir/<model>/metrics.json     per epoch: training loss, test loss and accuracy
    out_dir/<model>/ledger.json      per step: noise multiplier z, sample rate q (run-length encoded)
    out_dir/<model>/epoch_EEEE.pt    state_dict at each evaluation epoch (+ epoch_EEEE.json metadata)
    out_dir/target/canaries.npz      the white-box canaries' bits and observations (``dpaudit.attacks.canary``)
    out_dir/target/canaries_run.npz  the whole-run canaries' membership and observations (``...canary_run``)
    out_dir/target/diagnostics.json  gradient histogram and support quality (``dpaudit.diagnostics``)
    out_dir/<model>/state_EEEE.pt    while training: the full training state after epoch EEEE (resume)

where <model> is ``target``, ``shadow_00``, ``shadow_01``, … Every file is written atomically.

The canaries and the diagnostics are observers of the loop (``dpaudit.observers``), built from the
configuration for the target and called at fixed points of every step, not branches of it.

No lost work: at the end of an epoch, once ``state_every`` seconds have passed since the last save,
each model's whole training state (parameters, optimizer state, the sampling, noise, canary and
diagnostics random streams, ledger, metrics) is saved; a run started again on the same folder with the
same configuration resumes after the last epoch every model saved and ends bit-identical to an
uninterrupted run. The state files are removed when training completes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import math
import platform
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from dpaudit import integrity, optim, theory
from dpaudit import models as model_registry
from dpaudit._device import host_to_device, resolve_device
from dpaudit._io import atomic_write_stream, write_json
from dpaudit._state import capture, decode, encode, restore
from dpaudit._validation import DPAuditError, check_positive
from dpaudit.attacks.canary import GradientCanaries, canary_dimension
from dpaudit.attacks.canary_run import RunCanaries
from dpaudit.config import TrainConfig
from dpaudit.data import ArrayDataset, dataset_info, load_dataset
from dpaudit.diagnostics import TrainingDiagnostics
from dpaudit.ensemble import EnsembleGradients, RecordPool
from dpaudit.inference import evaluate, predict_logits  # noqa: F401 - predict_logits: dpaudit.train's public name
from dpaudit.layerwise import dense
from dpaudit.ledger import PrivacyLedger
from dpaudit.observers import TrainingObserver
from dpaudit.per_sample import PerSampleGradients
from dpaudit.run import (  # noqa: F401 - the run-folder readers stay importable from dpaudit.train
    _first_sentence,
    load_checkpoint,
    load_run_config,
    open_run,
    save_checkpoint,
    shadow_name,
)
from dpaudit.rundir import TARGET, ModelDir, RunDir
from dpaudit.sampling import batch_indices, sample_batches, steps_per_epoch  # noqa: F401 - batch_indices: public here
from dpaudit.settings import ProjectionSettings

STATE_FORMAT = 1
STATE_EVERY_SECONDS = 60.0  # the default: a kill loses at most about this much training (plus one epoch)


class TrainingDivergedError(DPAuditError):
    """The training loss became NaN or infinite; finished checkpoints are kept."""


@dataclass
class EpochMetrics:
    epoch: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    test_loss: list[float | None] = field(default_factory=list)
    test_accuracy: list[float | None] = field(default_factory=list)
    train_accuracy: list[float | None] = field(default_factory=list)
    elapsed_seconds: list[float] = field(default_factory=list)


@dataclass
class TrainedModel:
    """The result of one ``train_model`` call."""

    model: nn.Module
    metrics: EpochMetrics
    ledger: PrivacyLedger
    checkpoints: dict[int, Path]
    diagnostics: Any = None
    #: how its gradients were computed: "layers", "functorch", "opacus", "ghost" (``grad_sample``, "auto" resolved) or
    #: "batch mean" (a non-private optimizer on the sequential engine)
    gradient_method: str | None = None


@functools.cache
def keep_freed_memory() -> bool:
    """Let glibc reuse freed tensor buffers instead of unmapping and re-mapping them on every step.

    By default glibc returns each large buffer (above a threshold that adapts up to 32 MiB) to the
    system when it is freed, so every training step pays page faults for its fresh per-sample gradient
    buffers: it doubled the time of a vmapped gradient call on 2 CPU cores. Process-wide; the price is
    that resident memory stays at its peak. Returns False where there is no glibc (nothing changes).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 * 2**20) and libc.mallopt(m_trim_threshold, 2**30))
    except (OSError, AttributeError):
        return False


def model_seeds(*, seed: int, trial: int, model_index: int) -> tuple[int, int, int]:
    """Independent seeds (initialisation, sampling, noise) for one model of one trial."""
    state = np.random.SeedSequence([seed, trial, model_index]).generate_state(3)
    return int(state[0]), int(state[1]), int(state[2])


@dataclass(frozen=True)
class Member:
    """One model of an ensemble: its training records, its index (0: target) and where its files go.

    Attributes:
        train_data: Its records; n = len(train_data) sets q = b/n and the steps per epoch.
        model_index: 0 for the target, 1 + i for shadow i; with (seed, trial) it fixes the randomness.
        label: Its name in progress bars and messages.
        out_dir: Where its files go (None: kept in memory).
        absent: Indices of ``train_data`` records the sampler draws like any other but that never join a batch: the
            "out" world of an input-space canary (``dpaudit.blackbox``), which differs from the "in" world by that
            record alone, at the same q and with the same draws (add/remove adjacency).
        initial_state: Parameters to start from instead of the seeded initialisation (a ``state_dict``): the
            worst-case initialisation of a black-box audit, where the adversary chooses θ₀.
    """

    train_data: ArrayDataset
    model_index: int
    label: str = "model"
    out_dir: str | Path | None = None
    absent: tuple[int, ...] = ()
    initial_state: Mapping[str, torch.Tensor] | None = None


def _observers(
    config: TrainConfig,
    member: Member,
    *,
    model: nn.Module,
    held_out: ArrayDataset | None,
    noise_seed: int,
    sampling_seed: int,
    device: torch.device,
    dtype: torch.dtype,
    out: ModelDir | None,
) -> list[TrainingObserver]:
    """The observers of one model's training, in the order the loop calls them: the target's white-box canaries
    (``config.audit.canaries``; seeded by its noise seed), then its diagnostics (``config.audit.diagnostics``; seeded
    by its sampling seed), which also see the canaries' coordinates. Their files go to ``out`` (None: none written)."""
    if member.model_index != 0:
        return []
    observers: list[TrainingObserver] = []
    if config.audit.canaries and config.audit.canary_design == "whole-run":
        # whole-run canaries need a private optimizer (``TrainConfig``), whose ``check`` requires C
        assert config.privacy.clip_norm is not None, "whole-run canaries need clip_norm (C)"
        observers.append(
            RunCanaries(
                count=config.audit.canaries,
                clip_norm=config.privacy.clip_norm,
                seed=noise_seed,
                sampling=config.optimizer.sampling,
                device=device,
                dtype=dtype,
                joint=config.audit.canary_randomness == "joint",
                ranked=config.audit.canary_support == "ranked",
                path=out.canaries_run if out is not None else None,
            )
        )
    elif config.audit.canaries:
        dimension = _canary_dimension(config)
        observers.append(
            GradientCanaries(
                count=config.audit.canaries,
                clip_norm=config.privacy.clip_norm or 1.0,
                seed=noise_seed,
                device=device,
                dtype=dtype,
                design=config.audit.canary_design,
                dimension=dimension,
                path=out.canaries if out is not None else None,
            )
        )
    if config.audit.diagnostics:
        observers.append(
            TrainingDiagnostics(
                model=model,
                train_data=member.train_data,
                held_out=held_out,
                batch_size=config.optimizer.batch_size,
                seed=sampling_seed,
                histogram_epoch=config.audit.histogram_epoch or min(5, config.optimizer.epochs),
                path=out.diagnostics if out is not None else None,
            )
        )
    return observers


class _ModelRun:
    """One model's state in the engine's lockstep loop: network, optimizer, streams, ledger, metrics, files."""

    def __init__(self, config: TrainConfig, member: Member, test_data: ArrayDataset | None, device: torch.device):
        self.config = config
        self.label = member.label
        self.model_index = member.model_index
        self.train_data = member.train_data
        self.test_data = test_data
        self.device = device
        init_seed, sampling_seed, noise_seed = model_seeds(
            seed=config.seed, trial=config.trial, model_index=member.model_index
        )
        info = dataset_info(config.data.dataset)
        self.model = model_registry.build_model(
            config.model.name, input_shape=info.input_shape, num_classes=info.num_classes, seed=init_seed
        )
        if member.initial_state is not None:
            self.model.load_state_dict(member.initial_state)
        self.model.to(device)
        self.absent = np.asarray(member.absent, dtype=np.intp)
        # which records a batch keeps, by index: one lookup per batch instead of ``np.isin`` (the many-models audit)
        self._kept = np.ones(len(member.train_data), dtype=bool)
        self._kept[self.absent[(self.absent >= 0) & (self.absent < len(self._kept))]] = False
        self.initial_state = member.initial_state
        spec = optim.get_spec(config.optimizer.name)
        self.params = model_registry.trainable_parameters(self.model)
        self._every_parameter = list(self.model.parameters())  # the divergence check's, listed once
        self.out = ModelDir(Path(member.out_dir)) if member.out_dir is not None else None
        self.observers = _observers(
            config,
            member,
            model=self.model,
            held_out=test_data,
            noise_seed=noise_seed,
            sampling_seed=sampling_seed,
            device=device,
            dtype=self.params[0].dtype,
            out=self.out,
        )
        # this model's gradients go through its observers alone, not through an ensemble's shared accumulation
        self.observes_gradients = any(observer.sees_gradients for observer in self.observers)
        generator = torch.Generator(device=device).manual_seed(noise_seed)
        self.optimizer = spec.cls(
            self.params + [tensor for observer in self.observers for tensor in observer.parameters],
            config.hyperparameters(len(member.train_data)),
            generator=generator,
        )
        self.optimizer.record_updates = any(observer.reads_updates for observer in self.observers)
        self.optimizer.record_model_updates = any(
            observer.reads_updates and observer.reads_model_updates for observer in self.observers
        )
        for observer in self.observers:
            observer.attach(self.optimizer)
        # the observer whose records (whole-run canaries) the run's sampler draws with the model's, if any
        with_records = [observer for observer in self.observers if observer.extra_records]
        assert len(with_records) <= 1, "one observer of a model at most adds records"
        self._record_observer = with_records[0] if with_records else None
        self.rng = np.random.default_rng(sampling_seed)
        self.images = torch.from_numpy(member.train_data.images).to(device)
        self.labels = torch.from_numpy(member.train_data.labels).to(device)
        self.ledger = PrivacyLedger(sampling=config.optimizer.sampling, dp_claim=spec.dp_claim)
        self.metrics = EpochMetrics()
        self.checkpoints: dict[int, Path] = {}
        # loss sums stay on the device (float64), read once per epoch: reading them every step would make the
        # host wait for the GPU
        self._loss_sum: torch.Tensor | None = None
        self._batch_losses: list[tuple[torch.Tensor, int]] = []  # (loss sum, records) of each batch

    def batches(self) -> Iterator[np.ndarray]:
        """Yield the record indices of one epoch's batches; the extra records (an observer's) each batch holds are
        drawn by the same sampler call and handed to that observer (``sampled``) as the batch is yielded."""
        observer = self._record_observer
        for records, extra in sample_batches(
            dataset_size=len(self.train_data),
            batch_size=self.config.optimizer.batch_size,
            sampling=self.config.optimizer.sampling,
            rng=self.rng,
            extra=observer.extra_records if observer is not None else 0,
            joint=self.config.audit.canary_randomness == "joint",
        ):
            if observer is not None:
                observer.sampled(extra)
            yield records[self._kept[records]] if len(self.absent) else records

    def begin_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` starts, its optimizer's ``begin_epoch`` done (``Optimizer.begin_epoch_together``): the
        observers' look, and a fresh list of batch losses."""
        for observer in self.observers:
            observer.begin_epoch(self.optimizer, epoch=epoch)
        self._batch_losses = []

    def accumulate(self, grads: Sequence[torch.Tensor], losses: torch.Tensor) -> None:
        """Feed one chunk of gradients (per-sample, or a share of the batch mean) to the optimizer, through the
        observers (the canaries' coordinates, the noise-scale audit's zeroed records)."""
        for observer in self.observers:
            grads = observer.accumulate(self.optimizer, grads, records=len(losses))
        self.optimizer.accumulate(grads)
        self.add_losses(losses)

    def add_losses(self, losses: torch.Tensor) -> None:
        self.add_loss_sum(losses.sum().double())

    def add_loss_sum(self, total: torch.Tensor) -> None:
        self._loss_sum = total if self._loss_sum is None else self._loss_sum + total

    def before_update(self, index: np.ndarray, *, epoch: int) -> None:
        """The batch's loss, then the observers (the canaries' insertion, the diagnostics' look) before the
        optimizer's update."""
        if len(index) and self._loss_sum is not None:
            self._batch_losses.append((self._loss_sum, len(index)))
        self._loss_sum = None
        for observer in self.observers:
            observer.before_update(self.optimizer, epoch=epoch)

    def after_update(self, cost: optim.StepCost | None, *, epoch: int) -> None:
        """The observers' look at the update (``cost``: what ``optimizer.step`` returned), then the ledger."""
        for observer in self.observers:
            observer.after_update(self.optimizer, cost, epoch=epoch)
        if cost is not None:
            self.ledger.record(noise_multiplier=cost.noise_multiplier, sample_rate=cost.sample_rate, phase=cost.phase)

    def end_epoch(self, epoch: int, *, started: float) -> bool:
        """Record the epoch's metrics, write files and the checkpoint; return whether training diverged."""
        self.ledger.end_epoch()
        if self._batch_losses:
            sums, records = zip(*self._batch_losses)
            train_loss = float(np.mean(torch.stack(sums).cpu().numpy() / np.array(records)))
        else:
            train_loss = float("nan")
        test_loss, test_accuracy = (
            evaluate(self.model, self.test_data, device=self.device) if self.test_data is not None else (None, None)
        )
        train_accuracy = evaluate(self.model, self.train_data, device=self.device)[1] if self.model_index == 0 else None
        metrics = self.metrics
        metrics.epoch.append(epoch)
        metrics.steps.append(
            self.ledger.steps
            if self.ledger.runs
            else epoch * steps_per_epoch(dataset_size=len(self.train_data), batch_size=self.config.optimizer.batch_size)
        )
        metrics.train_loss.append(train_loss)
        metrics.test_loss.append(test_loss)
        metrics.test_accuracy.append(test_accuracy)
        metrics.train_accuracy.append(train_accuracy)
        metrics.elapsed_seconds.append(time.perf_counter() - started)
        diverged = bool(self._batch_losses and not math.isfinite(train_loss)) or not bool(
            torch.isfinite(torch.cat([p.detach().flatten() for p in self._every_parameter])).all()
        )
        for observer in self.observers:
            observer.end_epoch(epoch=epoch)
        if self.out is not None:
            # at each checkpoint, at the end and on divergence (and with each saved state, ``save_state``): rewriting
            # them after every epoch cost about a tenth of a short run
            if epoch in self.config.audit.eval_epochs or epoch == self.config.optimizer.epochs or diverged:
                self.write_progress()
            if epoch in self.config.audit.eval_epochs and not diverged:
                self.checkpoints[epoch] = save_checkpoint(
                    self.out.checkpoint(epoch),
                    self.model,
                    {"model": self.label, "epoch": epoch, "steps": self.ledger.steps, "config": self.config.to_dict()},
                )
        return diverged

    def result(self, gradient_method: str) -> TrainedModel:
        diagnostics = next((o for o in self.observers if isinstance(o, TrainingDiagnostics)), None)
        return TrainedModel(self.model, self.metrics, self.ledger, self.checkpoints, diagnostics, gradient_method)

    @property
    def identity(self) -> str:
        """What a saved state must have been trained with to be resumed here."""
        return json.dumps(
            {
                "config": self.config.to_dict(),
                "model_index": self.model_index,
                "records": len(self.train_data),
                **({"absent": self.absent.tolist()} if len(self.absent) else {}),
                **({"initial_state": self._initial_digest} if self.initial_state is not None else {}),
            },
            sort_keys=True,
        )

    @functools.cached_property
    def _initial_digest(self) -> str | None:
        """The chosen initial state's digest, for ``identity`` (computed when a saved state first needs it)."""
        return _state_digest(self.initial_state)

    def saved_states(self) -> dict[int, Path]:
        """Saved training states of this model's folder, by epoch."""
        return {} if self.out is None else self.out.states()

    def write_progress(self) -> None:
        """Write the metrics and the privacy ledger of the epochs trained so far."""
        assert self.out is not None, "a run with an output folder"
        write_json(self.out.metrics, {"model": self.label, **asdict(self.metrics)})
        write_json(self.out.ledger, self.ledger.to_dict())

    def save_state(self, epoch: int) -> None:
        """Write everything the run after ``epoch`` depends on to ``state_EEEE.pt`` (atomically), and the metrics and
        ledger files up to it."""
        assert self.out is not None, "a run with an output folder"
        self.write_progress()
        state = {
            "format": STATE_FORMAT,
            "identity": self.identity,
            "epoch": epoch,
            "model": {key: value.detach().clone() for key, value in self.model.state_dict().items()},
            "optimizer": capture(self.optimizer),
            "sampling_rng": encode(self.rng),
            **{observer.name: capture(observer) for observer in self.observers},
            "ledger": self.ledger.to_dict(),
            "metrics": asdict(self.metrics),
            "checkpoints": {str(key): str(path) for key, path in self.checkpoints.items()},
        }
        # streamed to the file: at 10⁷ canaries the state is about 1 GB, which a bytes copy would double in memory
        atomic_write_stream(self.out.state(epoch), lambda stream: torch.save(state, stream))

    def load_state(self, path: Path) -> dict[str, Any] | None:
        """The state saved at ``path`` if it belongs to this run (None: another configuration's)."""
        integrity.verify_file(path)
        try:
            state = torch.load(path, weights_only=True)
        except Exception as error:  # noqa: BLE001 - any failure here means an unusable file
            raise DPAuditError(
                f"cannot load training state {path}: {_first_sentence(error)}; delete it to train this run "
                "from the start"
            ) from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT or state.get("identity") != self.identity:
            return None
        return state

    def restore_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        restore(self.optimizer, state["optimizer"])
        self.rng = decode(state["sampling_rng"], self.rng)
        for observer in self.observers:
            restore(observer, state[observer.name])
        self.ledger = PrivacyLedger.from_dict(state["ledger"])
        self.metrics = EpochMetrics(**state["metrics"])
        self.checkpoints = {int(key): Path(path) for key, path in state["checkpoints"].items()}

    def drop_states(self, *, keep: int | None = None) -> None:
        """Delete the saved training states, but for epoch ``keep``'s."""
        integrity.forget([path for epoch, path in self.saved_states().items() if epoch != keep])


def _state_digest(state: Mapping[str, torch.Tensor] | None) -> str | None:
    """SHA-1 of a ``state_dict``'s names and values (None: none), for a saved state's identity."""
    if state is None:
        return None
    digest = hashlib.sha1()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _resume(runs: list[_ModelRun]) -> int:
    """Restore every run to the last epoch all of them saved for this configuration; returns that epoch (0: none).

    States of another configuration, or of an epoch not every model reached, are deleted.
    """
    saved = [run.saved_states() for run in runs]
    for epoch in sorted(set.intersection(*(set(states) for states in saved)), reverse=True):
        states = [run.load_state(states[epoch]) for run, states in zip(runs, saved)]
        found = [state for state in states if state is not None]
        if len(found) == len(states):
            for run, state in zip(runs, found):
                run.restore_state(state)
                run.drop_states(keep=epoch)
            return epoch
    for run in runs:
        run.drop_states()
    return 0


def train_models(
    *,
    config: TrainConfig,
    members: list[Member],
    test_data: ArrayDataset | None,
    progress: bool = True,
    label: str | None = None,
    resume: bool = True,
    state_every: float = STATE_EVERY_SECONDS,
) -> list[TrainedModel]:
    """Train several models of one configuration in lockstep: the target and shadows of one trial.

    Every model has its own records, initialisation, sampling and noise streams (fixed by seed, trial and
    ``model_index``), so the result does not depend on which models train together. ``config.engine.name``
    picks how gradients are computed: "ensemble" (all models in one vmapped call; ``dpaudit.ensemble``)
    or "sequential" (one model at a time with ``config.engine.grad_sample``: torch.func or Opacus).

    Args:
        config: a validated ``TrainConfig``.
        members: the models; all with the same number of training records n (so the same steps per epoch).
        test_data: records for the per-epoch test loss / accuracy (None: skip).
        progress: show a progress bar over the training steps.
        label: the progress bar's name (default: the members' labels).
        resume: continue from the training states a previous, interrupted call with the same configuration
            left in the members' folders (False: delete them and start again). Ignored without folders.
        state_every: seconds between saves of the training state (at epoch ends; 0: every epoch).

    Returns:
        One ``TrainedModel`` per member, in order.

    Raises:
        TrainingDivergedError: a loss became NaN/inf; the epoch's files of every model and the finished
            checkpoints are kept.
    """
    if not members:
        raise DPAuditError("train_models needs at least one member")
    check_positive("state_every (seconds)", state_every, allow_zero=True)
    sizes = {len(member.train_data) for member in members}
    if len(sizes) > 1:
        raise DPAuditError(f"models trained together need equal training-set sizes; got {sorted(sizes)}")
    device = resolve_device(config.engine.device)
    keep_freed_memory()
    runs = [_ModelRun(config, member, test_data, device) for member in members]
    keeps_state = all(run.out is not None for run in runs)
    if keeps_state and not resume:
        for run in runs:
            run.drop_states()
    done = _resume(runs) if keeps_state else 0
    name = label or ("+".join(run.label for run in runs) if len(runs) <= 2 else f"{runs[0].label}+{len(runs) - 1}")
    if done:
        assert runs[0].out is not None  # ``done``: resumed from saved states
        print(
            f"dpaudit: resuming {name} after epoch {done} of {config.optimizer.epochs} "
            f"(saved in {runs[0].out.path.parent})",
            file=sys.stderr,
            flush=True,
        )
    gradients, gradient_method = _gradient_engine(config, runs)
    steps = steps_per_epoch(dataset_size=sizes.pop(), batch_size=config.optimizer.batch_size)
    bar = tqdm(
        total=steps * config.optimizer.epochs,
        initial=steps * done,
        desc=name,
        disable=not progress,
        leave=False,
        unit="step",
    )
    for run in runs:
        run.model.train()
    started = time.perf_counter() - (runs[0].metrics.elapsed_seconds[-1] if done else 0.0)
    saved = time.perf_counter()
    for epoch in range(done + 1, config.optimizer.epochs + 1):
        type(runs[0].optimizer).begin_epoch_together([run.optimizer for run in runs], epoch)
        for run in runs:
            run.begin_epoch(epoch)
        for indices in zip(*(run.batches() for run in runs)):
            gradients(indices)
            for run, index in zip(runs, indices):
                run.before_update(index, epoch=epoch)
            costs = type(runs[0].optimizer).step_together([run.optimizer for run in runs], [len(i) for i in indices])
            for run, cost in zip(runs, costs):
                run.after_update(cost, epoch=epoch)
            bar.update()
        diverged = [run for run in runs if run.end_epoch(epoch, started=started)]
        if len(runs) == 1:
            bar.set_postfix(loss=f"{runs[0].metrics.train_loss[-1]:.3f}")
        if diverged:
            bar.close()
            losses = ", ".join(f"{run.label} (loss {run.metrics.train_loss[-1]})" for run in diverged)
            where = diverged[0].out.path if diverged[0].out is not None else None
            kept = (
                ""
                if where is None
                else (
                    f"; checkpoints up to epoch {epoch - 1} kept in {where}"
                    if epoch > 1
                    else f"; its metrics are in {where}"
                )
            )
            raise TrainingDivergedError(
                f"training diverged at epoch {epoch}: {losses} (try a smaller lr or clip_norm){kept}"
            )
        if keeps_state and epoch < config.optimizer.epochs and time.perf_counter() - saved >= state_every:
            saved = time.perf_counter()
            for run in runs:
                run.save_state(epoch)
            for run in runs:  # only now: a kill between two saves leaves the previous epoch for every model
                run.drop_states(keep=epoch)
    bar.close()
    for run in runs:
        run.drop_states()
    return [run.result(gradient_method()) for run in runs]


def _gradient_engine(config: TrainConfig, runs: list[_ModelRun]):
    """(``feed``, ``method``): ``feed(indices)`` feeds every run's optimizer the gradients of its batch
    (``indices[k]`` for run k); ``method()`` says how they are computed (``TrainedModel.gradient_method``)."""
    per_sample = runs[0].optimizer.per_sample
    if config.engine.name == "ensemble":
        ensemble = EnsembleGradients(
            [run.model for run in runs],
            per_sample=per_sample,
            example=runs[0].images[0],
            max_samples=config.engine.microbatch_size,
            memory_budget_mb=config.engine.memory_budget_mb,
            method=config.engine.grad_sample,
            factored=True,
        )
        optimizer_class = type(runs[0].optimizer)
        optimizer_class.stack_rows([run.optimizer for run in runs], ensemble.stacked)
        pool = RecordPool([(run.images, run.labels) for run in runs])
        for k, run in enumerate(runs):  # the pool holds the records now; one copy on the device
            run.images, run.labels = pool.records(k)

        def sink(models, counts, grads, losses, padding):
            loss_sums = losses.sum(1).double().unbind()  # padding rows' losses are 0; one view op for all models
            together = [m for m, k in enumerate(models) if not runs[k].observes_gradients]
            if 0 < len(together) < len(models):
                rows = host_to_device(together, losses.device)
                grads_together = [g.index_select(0, rows) for g in grads]
                padding_together = padding.index_select(0, rows)
            else:
                grads_together, padding_together = grads, padding
            if together:
                optimizer_class.accumulate_together(
                    [runs[models[m]].optimizer for m in together],
                    grads_together,
                    [counts[m] for m in together],
                    padding_together,
                )
            for m, k in enumerate(models):
                if runs[k].observes_gradients:  # e.g. the target's optimizer has the canary tensor too
                    runs[k].accumulate(
                        [dense(g[m, : counts[m]]) if per_sample else g[m] for g in grads], losses[m, : counts[m]]
                    )
                else:
                    runs[k].add_loss_sum(loss_sums[m])

        def feed(indices):
            ensemble.accumulate(pool, indices, sink)

        return feed, lambda: ensemble.method
    backends = [PerSampleGradients(run.model, config.engine.grad_sample) if per_sample else None for run in runs]

    def feed_each(indices):
        for run, backend, index in zip(runs, backends, indices):
            _accumulate_batch(run, backend, index, config.engine.microbatch_size)

    return feed_each, lambda: backends[0].backend if backends[0] is not None else "batch mean"


def train_model(
    *,
    config: TrainConfig,
    train_data: ArrayDataset,
    test_data: ArrayDataset | None,
    model_index: int,
    out_dir: str | Path | None = None,
    progress: bool = True,
    label: str = "model",
) -> TrainedModel:
    """Train one model with ``config``'s optimizer on ``train_data`` (``train_models`` with one member).

    Args:
        config: a validated ``TrainConfig``.
        train_data: the model's training records (n = len(train_data), q = b / n).
        test_data: records for the per-epoch test loss / accuracy (None: skip).
        model_index: 0 for the target, 1 + i for shadow i; with (seed, trial) it fixes the randomness.
        out_dir: where metrics, ledger and checkpoints go (None: keep in memory only).
        progress: show a progress bar over the training steps.
        label: name shown in the progress bar and error messages.

    Returns:
        The trained model, its per-epoch metrics, its privacy ledger and its checkpoint paths.

    Raises:
        TrainingDivergedError: the loss became NaN/inf; metrics and finished checkpoints are kept.
    """
    member = Member(train_data=train_data, model_index=model_index, label=label, out_dir=out_dir)
    return train_models(config=config, members=[member], test_data=test_data, progress=progress)[0]


def _accumulate_batch(
    run: _ModelRun, per_sample: PerSampleGradients | None, index: np.ndarray, microbatch_size: int
) -> None:
    """One model's gradients of one batch, fed to its optimizer in chunks of ``microbatch_size`` records."""
    if len(index) == 0:
        return
    rows = host_to_device(index, run.images.device)
    if per_sample is None:
        losses = F.cross_entropy(run.model(run.images[rows]), run.labels[rows], reduction="none")
        mean_grads = torch.autograd.grad(losses.mean(), run.params)
        run.accumulate([g.detach() for g in mean_grads], losses.detach())
        return
    for chunk in torch.split(rows, microbatch_size):
        grads, losses = per_sample(run.images[chunk], run.labels[chunk])
        run.accumulate(grads, losses)


def train_configuration(
    config: TrainConfig,
    *,
    out_dir: str | Path,
    progress: bool = True,
    resume: bool = True,
    state_every: float = STATE_EVERY_SECONDS,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train the target and all shadow models of one configuration and trial; write ``out_dir``.

    Args:
        config: the configuration (validated here, before any data loads).
        out_dir: the run's folder: new, empty, or holding a run of this same configuration
            (:func:`dpaudit.integrity.claim_run_folder`).
        progress: show progress bars.
        resume: continue an interrupted run of the same configuration in ``out_dir`` from its last saved
            epoch (``train_models``); False: train from the start.
        state_every: seconds between saves of the training state (``train_models``).
        overwrite: replace a run of another configuration in ``out_dir`` (its own files only) instead of refusing.

    Returns:
        A summary dict (also written as ``out_dir/config.json``).

    Raises:
        DPAuditError: a bad configuration, more memory than the machine has (:func:`check_memory`), or an
            ``out_dir`` that is a file, cannot be written, or holds anything but a run of this configuration.
    """
    target_epsilon = config.privacy.target_epsilon
    config = config.validated()
    check_positive("state_every (seconds)", state_every, allow_zero=True)
    check_memory(config)
    out = Path(out_dir)
    integrity.claim_run_folder(out, identity=config.to_dict(), overwrite=overwrite)
    split = config.make_split()
    train_set = load_dataset(
        config.data.dataset, split="train", root=config.data.data_root, download=config.data.download
    )
    test_set = load_dataset(config.data.dataset, split="test", root=config.data.data_root, download=False)
    z = (
        optim.sigma_dp_to_noise_multiplier(
            sigma_dp=config.privacy.sigma_dp, batch_size=config.optimizer.batch_size, clip_norm=config.privacy.clip_norm
        )
        if config.privacy.sigma_dp is not None and config.privacy.clip_norm
        else None
    )
    labels = theory.epsilon_labels(
        dp_claim=optim.get_spec(config.optimizer.name).dp_claim, sampling=config.optimizer.sampling
    )
    summary = {
        "config": config.to_dict(),
        "derived": {
            "dataset_size_n": config.data.target_size,
            "sample_rate_q": config.optimizer.batch_size / config.data.target_size,
            "noise_multiplier_z": z,
            "steps_per_epoch": steps_per_epoch(
                dataset_size=config.data.target_size, batch_size=config.optimizer.batch_size
            ),
            "dp_claim": optim.get_spec(config.optimizer.name).dp_claim,
            "target_epsilon": target_epsilon,
            "planned_epsilon": planned_epsilon(config),
            "planned_epsilon_shuffled_upper": planned_shuffled_epsilon(config),
            "planned_epsilon_label": labels["epsilon"],
            "planned_epsilon_shuffled_upper_label": labels.get("shuffled_upper"),
            "delta": config.privacy.delta,
            "accountant": config.privacy.accountant,
        },
        "models": [TARGET] + [shadow_name(i) for i in range(config.audit.num_shadows)],
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
    }
    integrity.remove_partial_writes(out)
    write_json(RunDir(out).config, summary)
    split.save(RunDir(out).split)
    # Per-epoch test metrics: the target's non-members (as Liang et al.), or as many test records for "halves".
    held_out = test_set.subset(
        split.target_nonmembers
        if split.nonmember_source == "test"
        else np.arange(min(config.data.target_size, len(test_set)))
    )
    members = [(TARGET, split.target_members)] + [
        (shadow_name(i), shadow.members) for i, shadow in enumerate(split.shadows)
    ]
    by_size: dict[int, list[Member]] = {}
    for model_index, (name, indices) in enumerate(members):
        by_size.setdefault(len(indices), []).append(
            Member(
                train_data=train_set.subset(indices),
                model_index=model_index,
                label=name,
                out_dir=RunDir(out).model(name).path,
            )
        )
    for group in by_size.values():
        train_models(
            config=config, members=group, test_data=held_out, progress=progress, resume=resume, state_every=state_every
        )
    integrity.mark_complete(out)
    return summary


#: float32 copies the engine holds of each canary coordinate, or of each model parameter, besides the per-record
#: gradients: the parameter, its gradient, the optimizer's sum, noise and momentum, statistics and torch's temporaries
COPIES = 12


def _canary_dimension(config: TrainConfig) -> int:
    """Size of the run's canary tensor (``canary_dimension`` of its canaries and design; projection-aligned canaries,
    of an optimizer with a projection, also of its reduction rate and convention)."""
    settings = config.optimizer.settings
    if not isinstance(settings, ProjectionSettings):
        return canary_dimension(count=config.audit.canaries, design=config.audit.canary_design)
    return canary_dimension(
        count=config.audit.canaries,
        design=config.audit.canary_design,
        reduction_rate=settings.reduction_rate,
        reduction_convention=settings.reduction_convention,
    )


def available_memory_bytes() -> int | None:
    """Memory this process can still take (MemAvailable of /proc/meminfo; None where the system does not say)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(config: TrainConfig, *, available: int | None = None) -> None:
    """Refuse, before any data loads, settings whose memory alone exceeds what the machine has free.

    Args:
        config: a validated configuration.
        available: bytes free (default: :func:`available_memory_bytes`; None: no check).

    Raises:
        DPAuditError: the canary block (``canaries``) or the models trained together (the target and
            ``num_shadows`` shadows of ``model``) would need more memory than is available, naming the setting.
            (``memory_budget_mb`` bounds one gradient call on the device, a GPU's memory on a GPU: not checked
            against the host's.)
    """
    available = available_memory_bytes() if available is None else available
    if available is None:
        return
    needs = []
    if config.audit.canaries:
        dimension = _canary_dimension(config)
        # per-step canaries take a per-record (zero) gradient of the canary block, and its clipped copy, for each
        # record of a gradient call (a Poisson batch can be larger than b: up to 2b counted); whole-run ones do not
        records = (
            0
            if config.audit.canary_design == "whole-run"
            else 2 * min(config.engine.microbatch_size, 2 * config.optimizer.batch_size)
        )
        values = records + COPIES
        needs.append(
            (
                4 * dimension * values,
                f"canaries = {config.audit.canaries}",
                f"{values} for each of {dimension} coordinates",
            )
        )
    info = dataset_info(config.data.dataset)
    with torch.device("meta"):  # shapes only: no memory, and the global random stream untouched (seeded, forked)
        network = model_registry.build_model(
            config.model.name, input_shape=info.input_shape, num_classes=info.num_classes, seed=0
        )
    size = sum(parameter.numel() for parameter in network.parameters())
    models = 1 + config.audit.num_shadows
    needs.append(
        (
            4 * size * models * COPIES,
            f"num_shadows = {config.audit.num_shadows}",
            f"{COPIES} for each of {models}×{size} parameters",
        )
    )
    for needed, setting, what in needs:
        if needed > available:
            raise DPAuditError(
                f"{setting} needs about {needed / 2**30:.3g} GiB of float32 values ({what}), more than the "
                f"{available / 2**30:.3g} GiB free here; lower it"
            )


def planned_epsilon(config: TrainConfig) -> float | None:
    """Theoretical ε at ``config.privacy.delta`` of the target's planned steps (None for non-private optimizers).

    It is the Poisson-subsampled accountants' ε: a guarantee only for ``sampling: poisson`` and an optimizer with a
    DP claim (``derived.dp_claim``); for shuffled batches see :func:`planned_shuffled_epsilon`, for an optimizer
    with no DP claim it is what the optimizer claims."""
    spec = optim.get_spec(config.optimizer.name)
    if not issubclass(spec.cls, optim.PrivateOptimizer):
        return None
    hyper = config.hyperparameters(config.data.target_size)
    return theory.epsilon(
        noise_multiplier=spec.cls.planned_noise_multipliers(hyper),
        sample_rate=hyper.sample_rate,
        delta=config.privacy.delta,
        accountant=config.privacy.accountant,
    )


def planned_shuffled_epsilon(config: TrainConfig) -> float | None:
    """For ``sampling: shuffle``, a valid upper bound on ε at ``config.privacy.delta`` of the target's planned steps:
    each epoch one unsubsampled Gaussian step per record, composed over the epochs
    (:func:`dpaudit.theory.shuffled_upper_epsilon`). None for Poisson sampling and non-private optimizers."""
    spec = optim.get_spec(config.optimizer.name)
    if config.optimizer.sampling != "shuffle" or not issubclass(spec.cls, optim.PrivateOptimizer):
        return None
    hyper = config.hyperparameters(config.data.target_size)
    z = np.asarray(spec.cls.planned_noise_multipliers(hyper), dtype=float).reshape(-1)
    per_epoch = steps_per_epoch(dataset_size=config.data.target_size, batch_size=config.optimizer.batch_size)
    ends = list(range(per_epoch, z.size + 1, per_epoch))
    return theory.shuffled_upper_epsilon(noise_multipliers=z, epoch_ends=ends, delta=config.privacy.delta)
