"""Training configuration: a small validated dataclass, importable without torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from dpaudit._validation import DPAuditError, check_choice, check_positive, check_positive_int, check_probability
from dpaudit.data import HalvesSplit, MIASplit, dataset_info, make_halves_split, make_mia_split
from dpaudit.data.splits import SPLIT_DESIGNS
from dpaudit.settings import SETTINGS, declare_settings

SAMPLING_SCHEMES = ("poisson", "shuffle")
# dpaudit.attacks.canary, and "whole-run": dpaudit.attacks.canary_run
CANARY_DESIGNS = ("dirac", "projection-aligned", "support", "noise-scale", "whole-run")
# fewer whole-run canaries leave a class with < 2 canaries too often (probability 2·11/2¹⁰ ≈ 2 % at 10)
WHOLE_RUN_MIN_CANARIES = 10
GRAD_SAMPLE_BACKENDS = ("auto", "layers", "functorch", "opacus")
ENGINES = ("ensemble", "sequential")


@dataclass(frozen=True)
@declare_settings(after="batch_size")
class TrainConfig:
    """One training configuration: data, model, optimizer and its privacy parameters.

    Attributes:
        dataset: dataset name (``dpaudit.data.available_datasets()``).
        model: model name (``dpaudit.models.available()``).
        optimizer: optimizer name (``dpaudit.optim.available()``).
        epochs: number of epochs E; T = ceil(n / b) · E steps.
        batch_size: (expected) batch size b.
        lr … standardise_constant: the optimizer and privacy settings, declared once in
            :data:`dpaudit.settings.SETTINGS` (each with its help, units and accepted values); inserted here in
            that order.
        diagnostics: record the target's gradient histogram and support diagnostics (diagnostics.json).
        histogram_epoch: epoch of the gradient-value histogram (default: min(5, epochs); AdaDPIGU's Fig 2).
        canaries: m white-box gradient canaries observed in the target's released updates
            (``dpaudit.attacks.canary``; 0: none). They do not touch the model.
        canary_design: "dirac" (one coordinate per canary), "projection-aligned" (along the top singular
            directions of the optimizer's random projection; dp2-sgd, d2p2-sgd and their variants only),
            "support" (in or out of every dense step; scored by the learned support; AdaDPIGU and the
            two-phase optimizers only) or "noise-scale" (one canary per step, every other record's gradient
            zeroed; scored by the noise level of the release; needs canaries = 1) — each audits the
            mechanism of one step — or "whole-run" (an audit of the whole run's composed, subsampled ε: each
            canary a member with probability ½, drawn once, and a member sampled into the batches as a record
            is; ``dpaudit.attacks.canary_run``; the optimizers that weight each record's gradient by a function
            of its norm only: the DP-SGD family, Auto-S/NSGD, Auto-V, DP-PSAC, DPSGD-Auto, D2P-SGD).
        sampling: "poisson" (each record with probability q = b / n; what accountants assume) or
            "shuffle" (a permutation cut into ceil(n / b) batches per epoch; the DPSGD-GC/DC experiments).
        eval_epochs: epochs at which checkpoints are saved (default: the last epoch).
        target_size: n, the number of target members (and of target non-members).
        num_shadows: number of shadow models.
        shadow_size: members per shadow (default ``target_size``).
        split_design: "disjoint" (target non-members from the test split, shadows on disjoint train
            records) or "halves" (LiRA: the target on a random half of a pool of 2·target_size train
            records, an even num_shadows on complementary halves; every record is in half the shadows).
        trial: Monte Carlo trial index; shadows and noise are re-drawn per trial.
        seed: base seed; (seed, trial, model) fixes initialisation, sampling and noise.
        data_root: folder holding the downloaded datasets.
        download: fetch a missing dataset (torchvision datasets only).
        microbatch_size: per-sample gradients are computed this many records at a time.
        grad_sample: how per-sample gradients are computed: "layers" (the model's layers in closed form,
            ``dpaudit.layerwise``; sequential CNNs and MLPs), "functorch" (torch.func's vmap, any model),
            "opacus" (Opacus hooks; sequential engine only) or "auto" (layers where the model allows, else
            functorch).
        engine: "ensemble" (the target and shadows train together, gradients of all models in one call;
            ``dpaudit.ensemble``) or "sequential" (one model's gradients at a time).
            Both run the same algorithm with the same seeds.
        memory_budget_mb: MiB one ensemble gradient call may take (models × samples per call are chosen
            to fit).
        device: "cpu", "cuda" or "auto".
    """

    dataset: str = "digits"
    model: str = "cnn-digits"
    optimizer: str = "dpsgd-gc"
    epochs: int = 10
    batch_size: int = 50
    diagnostics: bool = True
    histogram_epoch: int | None = None
    canaries: int = 0
    canary_design: str = "dirac"
    sampling: str = "poisson"
    eval_epochs: tuple[int, ...] = ()
    target_size: int = 300
    num_shadows: int = 3
    shadow_size: int | None = None
    split_design: str = "disjoint"
    trial: int = 0
    seed: int = 0
    data_root: str = "data"
    download: bool = False
    microbatch_size: int = 256
    grad_sample: str = "auto"
    engine: str = "ensemble"
    memory_budget_mb: float = 2048
    device: str = "auto"

    def validated(self) -> TrainConfig:
        """Check every field and return the config with derived defaults filled in.

        Raises:
            DPAuditError: one line naming the first bad value, before any data is loaded.
        """
        from dpaudit import models as model_registry
        from dpaudit import optim

        spec = optim.get_spec(self.optimizer)
        info = dataset_info(self.dataset)
        model_registry.check_model_input(self.model, input_shape=info.input_shape, num_classes=info.num_classes)
        check_positive_int("epochs", self.epochs)
        check_positive_int("batch_size", self.batch_size)
        check_positive_int("target_size", self.target_size)
        check_positive_int("num_shadows", self.num_shadows, allow_zero=True)
        check_positive_int("microbatch_size", self.microbatch_size)
        check_positive_int("canaries", self.canaries, allow_zero=True)
        self._check_canary_design(spec.cls)
        check_positive_int("trial", self.trial, allow_zero=True)
        check_positive_int("seed", self.seed, allow_zero=True)
        check_choice("sampling", self.sampling, SAMPLING_SCHEMES)
        check_choice("split_design", self.split_design, SPLIT_DESIGNS)
        if self.split_design == "halves" and self.shadow_size not in (None, self.target_size):
            raise DPAuditError(
                "split_design 'halves' trains every model on target_size records; leave shadow_size unset"
            )
        check_probability("delta (δ)", self.delta)
        SETTINGS["accountant"].check(self.accountant)
        check_choice("grad_sample", self.grad_sample, GRAD_SAMPLE_BACKENDS)
        check_choice("engine", self.engine, ENGINES)
        check_positive("memory_budget_mb", self.memory_budget_mb)
        if self.engine == "ensemble" and self.grad_sample == "opacus":
            raise DPAuditError("grad_sample 'opacus' computes one model's gradients at a time; set engine: sequential")
        if self.grad_sample == "layers":
            from dpaudit.ensemble import resolve_method

            resolve_method(
                model_registry.build_model(self.model, input_shape=info.input_shape, num_classes=info.num_classes),
                "layers",
                name=self.model,
            )
        check_choice("device", self.device, ("auto", "cpu", "cuda"))
        if self.batch_size > self.target_size:
            raise DPAuditError(
                f"batch_size {self.batch_size} is larger than the training data (target_size {self.target_size})"
            )
        shadow_size = self.shadow_size if self.shadow_size is not None else self.target_size
        check_positive_int("shadow_size", shadow_size)
        if self.num_shadows and self.batch_size > shadow_size:
            raise DPAuditError(f"batch_size {self.batch_size} is larger than shadow_size {shadow_size}")
        if (
            self.histogram_epoch is not None
            and not 1 <= check_positive_int("histogram_epoch", self.histogram_epoch) <= self.epochs
        ):
            raise DPAuditError(f"histogram_epoch {self.histogram_epoch} is not an epoch of the run (1 … {self.epochs})")
        eval_epochs = tuple(sorted(set(self.eval_epochs))) or (self.epochs,)
        for epoch in eval_epochs:
            check_positive_int("eval_epochs entries", epoch)
            if epoch > self.epochs:
                raise DPAuditError(f"eval_epochs entry {epoch} exceeds epochs {self.epochs}")
        sigma_dp = self.sigma_dp
        if sum(value is not None for value in (self.sigma_dp, self.noise_multiplier, self.target_epsilon)) > 1:
            raise DPAuditError("give one of sigma_dp, noise_multiplier and target_epsilon")
        SETTINGS["warmup_budget_fraction"].check(self.warmup_budget_fraction)
        warmup_sigma_dp = self.warmup_sigma_dp
        if self.target_epsilon is not None:
            sigma_dp, warmup_sigma_dp = self._calibrated_noise(spec.cls)
        if self.noise_multiplier is not None:
            check_positive("noise_multiplier", self.noise_multiplier, allow_zero=True)
            if self.clip_norm is None:
                raise DPAuditError("noise_multiplier needs clip_norm (C) to give σ_DP = z·C/b")
            SETTINGS["clip_norm"].check(self.clip_norm)
            sigma_dp = self.noise_multiplier * self.clip_norm / self.batch_size  # σ_DP = z·C/b
        if warmup_sigma_dp is None:
            warmup_sigma_dp = sigma_dp
        config = replace(
            self,
            eval_epochs=eval_epochs,
            shadow_size=shadow_size,
            sigma_dp=sigma_dp,
            noise_multiplier=None,
            target_epsilon=None,
            warmup_sigma_dp=warmup_sigma_dp,
        )
        spec.cls.check(config.hyperparameters(self.target_size))
        # The split is cheap; building it now reports an impossible data budget before training.
        config.make_split()
        return config

    def _check_canary_design(self, optimizer_cls) -> None:
        check_choice("canary_design", self.canary_design, CANARY_DESIGNS)
        if self.canary_design == "projection-aligned":
            from dpaudit.optim import ProjectedNoise

            if not issubclass(optimizer_cls, ProjectedNoise):
                raise DPAuditError(
                    f"canary_design 'projection-aligned' aligns canaries with a random projection; "
                    f"{self.optimizer} has none (use dp2-sgd, d2p2-sgd or their variants)"
                )
            if self.reduction_convention == "paper" and self.reduction_rate >= 1:
                raise DPAuditError(
                    "canary_design 'projection-aligned' needs a projection that keeps coordinates "
                    "(reduction_rate < 1 with the paper convention)"
                )
        if self.canary_design == "support":
            from dpaudit.optim import AdaDPIGU, TwoPhaseSparse

            if not issubclass(optimizer_cls, (AdaDPIGU, TwoPhaseSparse)):
                raise DPAuditError(
                    f"canary_design 'support' audits a support learned once from dense steps; "
                    f"{self.optimizer} learns none (use adadpigu, tp-topk, tp-rand or their variants)"
                )
        if self.canary_design == "whole-run" and not optimizer_cls.takes_dirac_records():
            from dpaudit.optim import MaskedSupport, PrivateOptimizer, ProjectedNoise, available, get_spec

            supported = [name for name in available() if get_spec(name).cls.takes_dirac_records()]
            if issubclass(optimizer_cls, ProjectedNoise):
                why = "mixes the coordinates of every record's gradient by a random projection before clipping"
            elif issubclass(optimizer_cls, MaskedSupport):
                why = "masks, ranks or standardises each record's gradient over all coordinates before clipping"
            elif not issubclass(optimizer_cls, PrivateOptimizer):
                why = "does not clip per record"
            else:
                why = "processes each record's gradient its own way"
            raise DPAuditError(
                f"canary_design 'whole-run' supports optimizers that clip each record's gradient by its norm "
                f"({', '.join(supported)}); {self.optimizer} {why}, which is not supported yet"
            )
        if self.canary_design == "whole-run" and 0 < self.canaries < WHOLE_RUN_MIN_CANARIES:
            raise DPAuditError(
                f"canary_design 'whole-run' needs at least {WHOLE_RUN_MIN_CANARIES} canaries (each is a member with "
                f"probability ½, and an audit needs 2 of each); got {self.canaries}"
            )
        if self.canary_design == "noise-scale" and self.canaries not in (0, 1):
            raise DPAuditError(
                f"canary_design 'noise-scale' inserts one canary per step (the noise level is one "
                f"number per step); set canaries to 1, not {self.canaries}"
            )

    def _calibrated_noise(self, optimizer_cls) -> tuple[float, float | None]:
        """(σ_DP, warm-up σ_DP) whose run has ε = target_epsilon at δ (this optimizer's schedule, q = b/n).

        Two-phase optimizers: σ_1 meets ε1 = warmup_budget_fraction · ε for the warm-up alone, then σ_2 is
        the smallest noise whose composition with the warm-up meets ε (TP-TopK's Section 7.3 budget split,
        composed exactly).
        """
        from dpaudit.optim import TwoPhaseSparse
        from dpaudit.theory import calibrate_noise

        SETTINGS["target_epsilon"].check(self.target_epsilon)
        if self.clip_norm is None:
            raise DPAuditError("target_epsilon needs clip_norm (C) to give σ_DP = z·C/b")
        SETTINGS["clip_norm"].check(self.clip_norm)
        hyper = self.hyperparameters(self.target_size)
        options = {"delta": self.delta, "sample_rate": hyper.sample_rate, "accountant": self.accountant}
        to_sigma_dp = self.clip_norm / self.batch_size  # σ_DP = z·C/b
        schedule = optimizer_cls.noise_schedule(hyper)
        if not issubclass(optimizer_cls, TwoPhaseSparse):
            return calibrate_noise(
                target_epsilon=self.target_epsilon, noise_schedule=schedule, **options
            ) * to_sigma_dp, None
        warmup = hyper.warmup_steps
        if not 1 <= warmup < len(schedule):
            raise DPAuditError(f"the warm-up must leave steps for phase 2: T1 = {warmup} of T = {len(schedule)}")
        z1 = calibrate_noise(
            target_epsilon=self.warmup_budget_fraction * self.target_epsilon,
            noise_schedule=schedule[:warmup],
            **options,
        )
        z2 = calibrate_noise(
            target_epsilon=self.target_epsilon,
            noise_schedule=schedule[warmup:],
            preceding=(np.full(warmup, z1), hyper.sample_rate),
            **options,
        )
        return z2 * to_sigma_dp, z1 * to_sigma_dp

    def hyperparameters(self, dataset_size: int):
        """The optimizer's ``dpaudit.optim.Hyperparameters`` for a training set of ``dataset_size``.

        Every Hyperparameters field that TrainConfig also has is copied by name; the warm-up noise
        defaults to ``sigma_dp``.
        """
        from dpaudit.optim import Hyperparameters

        shared = {item.name: getattr(self, item.name) for item in fields(Hyperparameters) if hasattr(self, item.name)}
        if shared["warmup_sigma_dp"] is None:
            shared["warmup_sigma_dp"] = self.sigma_dp
        return Hyperparameters(**shared, expected_batch_size=self.batch_size, dataset_size=dataset_size)

    def make_split(self) -> MIASplit | HalvesSplit:
        info = dataset_info(self.dataset)
        if self.split_design == "halves":
            return make_halves_split(
                dataset=self.dataset,
                train_size=info.train_size,
                target_size=self.target_size,
                num_shadows=self.num_shadows,
                trial=self.trial,
                seed=self.seed,
            )
        return make_mia_split(
            dataset=self.dataset,
            train_size=info.train_size,
            test_size=info.test_size,
            target_size=self.target_size,
            num_shadows=self.num_shadows,
            shadow_size=self.shadow_size,
            trial=self.trial,
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["eval_epochs"] = list(self.eval_epochs)
        return payload

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(payload) - known)
        if unknown:
            raise DPAuditError(f"unknown configuration keys: {', '.join(unknown)}")
        values = dict(payload)
        if "eval_epochs" in values:
            values["eval_epochs"] = tuple(values["eval_epochs"])
        return cls(**values)
