"""Training configuration: a small validated dataclass, importable without torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from dpaudit._validation import DPAuditError, check_choice, check_positive, check_positive_int, check_probability
from dpaudit.data import MIASplit, dataset_info, make_mia_split

SAMPLING_SCHEMES = ("poisson", "shuffle")
GRAD_SAMPLE_BACKENDS = ("functorch", "opacus")


@dataclass(frozen=True)
class TrainConfig:
    """One training configuration: data, model, optimizer and its privacy parameters.

    Attributes:
        dataset: dataset name (``dpaudit.data.available_datasets()``).
        model: model name (``dpaudit.models.available()``).
        optimizer: optimizer name (``dpaudit.optim.available()``).
        epochs: number of epochs E; T = ceil(n / b) · E steps.
        batch_size: (expected) batch size b.
        lr: learning rate η.
        clip_norm: per-sample ℓ2 clipping threshold C (DP optimizers).
        sigma_dp: std of the noise on the averaged clipped gradient, σ_DP (seed 004's convention).
        noise_multiplier: z = σ_DP · b / C; give this or ``sigma_dp``, not both.
        domain_radius: D, radius of the ℓ2 ball of DPSGD-DC.
        domain_center: "origin" or "init" (ball centred at θ_0).
        target_epsilon: calibrate the noise so the run's theoretical ε at ``delta`` is this (instead of
            giving sigma_dp or noise_multiplier); dynamic schedules keep their shape.
        delta: δ of ``target_epsilon``.
        accountant: accountant used for ``target_epsilon``: "rdp" or "prv".
        momentum: heavy-ball momentum μ of the outer SGD update (0: plain SGD).
        r: regulariser r of the DP-PSAC / Auto-S weights.
        gamma: stability constant γ of automatic clipping (D2P2 family).
        noise_decay_exponent: a in the dynamic noise schedule z·k^(−a) (0.25: authors' code; 0.5: paper text).
        noise_decay_unit: k counts "epoch"s or "step"s in the dynamic schedule.
        reduction_rate: random-projection rate in (0, 1] (D2P2 family).
        reduction_convention: "code" (p = ⌊rate·d⌋, kept fraction) or "paper" (p = round((1 − rate)·d)).
        projection_refresh: "step" (new matrix each step) or "run" (one matrix per run).
        sampling: "poisson" (each record with probability q = b / n; what accountants assume) or
            "shuffle" (a permutation cut into ceil(n / b) batches per epoch; seed 004's experiments).
        eval_epochs: epochs at which checkpoints are saved (default: the last epoch).
        target_size: n, the number of target members (and of target non-members).
        num_shadows: number of shadow models.
        shadow_size: members per shadow (default ``target_size``).
        trial: Monte Carlo trial index; shadows and noise are re-drawn per trial.
        seed: base seed; (seed, trial, model) fixes initialisation, sampling and noise.
        data_root: folder holding the downloaded datasets.
        download: fetch a missing dataset (torchvision datasets only).
        microbatch_size: per-sample gradients are computed this many records at a time.
        grad_sample: per-sample gradient backend, "functorch" (torch.func) or "opacus".
        device: "cpu", "cuda" or "auto".
    """

    dataset: str = "digits"
    model: str = "cnn-digits"
    optimizer: str = "dpsgd-gc"
    epochs: int = 10
    batch_size: int = 50
    lr: float = 0.1
    clip_norm: float | None = None
    sigma_dp: float | None = None
    noise_multiplier: float | None = None
    domain_radius: float | None = None
    domain_center: str = "origin"
    target_epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = "rdp"
    momentum: float = 0.0
    r: float = 0.1
    gamma: float = 0.01
    noise_decay_exponent: float = 0.25
    noise_decay_unit: str = "epoch"
    reduction_rate: float = 0.3
    reduction_convention: str = "code"
    projection_refresh: str = "step"
    sampling: str = "poisson"
    eval_epochs: tuple[int, ...] = ()
    target_size: int = 300
    num_shadows: int = 3
    shadow_size: int | None = None
    trial: int = 0
    seed: int = 0
    data_root: str = "data"
    download: bool = False
    microbatch_size: int = 256
    grad_sample: str = "functorch"
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
        check_positive_int("trial", self.trial, allow_zero=True)
        check_positive_int("seed", self.seed, allow_zero=True)
        check_choice("sampling", self.sampling, SAMPLING_SCHEMES)
        check_probability("delta (δ)", self.delta)
        check_choice("accountant", self.accountant, ("rdp", "prv"))
        check_choice("grad_sample", self.grad_sample, GRAD_SAMPLE_BACKENDS)
        check_choice("device", self.device, ("auto", "cpu", "cuda"))
        if self.batch_size > self.target_size:
            raise DPAuditError(
                f"batch_size {self.batch_size} is larger than the training data (target_size {self.target_size})"
            )
        shadow_size = self.shadow_size if self.shadow_size is not None else self.target_size
        check_positive_int("shadow_size", shadow_size)
        if self.num_shadows and self.batch_size > shadow_size:
            raise DPAuditError(f"batch_size {self.batch_size} is larger than shadow_size {shadow_size}")
        eval_epochs = tuple(sorted(set(self.eval_epochs))) or (self.epochs,)
        for epoch in eval_epochs:
            check_positive_int("eval_epochs entries", epoch)
            if epoch > self.epochs:
                raise DPAuditError(f"eval_epochs entry {epoch} exceeds epochs {self.epochs}")
        sigma_dp = self.sigma_dp
        if sum(value is not None for value in (self.sigma_dp, self.noise_multiplier, self.target_epsilon)) > 1:
            raise DPAuditError("give one of sigma_dp, noise_multiplier and target_epsilon")
        if self.target_epsilon is not None:
            sigma_dp = self._calibrated_sigma_dp(spec.cls)
        if self.noise_multiplier is not None:
            check_positive("noise_multiplier", self.noise_multiplier, allow_zero=True)
            if self.clip_norm is None:
                raise DPAuditError("noise_multiplier needs clip_norm (C) to give σ_DP = z·C/b")
            check_positive("clip_norm (C)", self.clip_norm)
            sigma_dp = self.noise_multiplier * self.clip_norm / self.batch_size  # σ_DP = z·C/b
        config = replace(self, eval_epochs=eval_epochs, shadow_size=shadow_size, sigma_dp=sigma_dp, noise_multiplier=None,
                         target_epsilon=None)
        spec.cls.check(config.hyperparameters(self.target_size))
        # The split is cheap; building it now reports an impossible data budget before training.
        config.make_split()
        return config

    def _calibrated_sigma_dp(self, optimizer_cls) -> float:
        """σ_DP whose run (this optimizer's schedule, q = b/n, all epochs) has ε = target_epsilon at δ."""
        from dpaudit.theory import calibrate_noise

        check_positive("target_epsilon (ε)", self.target_epsilon)
        if self.clip_norm is None:
            raise DPAuditError("target_epsilon needs clip_norm (C) to give σ_DP = z·C/b")
        check_positive("clip_norm (C)", self.clip_norm)
        schedule = optimizer_cls.noise_schedule(self.hyperparameters(self.target_size), epochs=self.epochs)
        z = calibrate_noise(target_epsilon=self.target_epsilon, delta=self.delta,
                            sample_rate=self.batch_size / self.target_size, noise_schedule=schedule,
                            accountant=self.accountant)
        return z * self.clip_norm / self.batch_size

    def hyperparameters(self, dataset_size: int):
        """The optimizer's ``dpaudit.optim.Hyperparameters`` for a training set of ``dataset_size``."""
        from dpaudit.optim import Hyperparameters

        return Hyperparameters(
            lr=self.lr,
            expected_batch_size=self.batch_size,
            dataset_size=dataset_size,
            clip_norm=self.clip_norm,
            sigma_dp=self.sigma_dp,
            domain_radius=self.domain_radius,
            domain_center=self.domain_center,
            momentum=self.momentum,
            r=self.r,
            gamma=self.gamma,
            noise_decay_exponent=self.noise_decay_exponent,
            noise_decay_unit=self.noise_decay_unit,
            reduction_rate=self.reduction_rate,
            reduction_convention=self.reduction_convention,
            projection_refresh=self.projection_refresh,
        )

    def make_split(self) -> MIASplit:
        info = dataset_info(self.dataset)
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
