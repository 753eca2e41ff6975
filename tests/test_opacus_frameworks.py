"""dpaudit.opacus.RecordCanaries inside training frameworks: PyTorch Lightning; the Hugging Face Trainer refused.

The plain API (``dataset``, ``model``, ``attach``, ``report``) works unchanged in a Lightning run: Lightning steps
the ``DPOptimizer`` itself, through ``step(closure)`` (Opacus runs the closure, then ``pre_step``, which the
canaries wrap), zeroes it with ``optimizer.zero_grad()`` and iterates the loader ``train_dataloader`` returns
(unchanged on one device), whose ``collate_fn`` attach replaced. Each run trains the small digits model for two
epochs (2-4 s): the plain placement runs by default, the others and the bugs are ``integration``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")
L = pytest.importorskip("lightning")

from opacus import PrivacyEngine  # noqa: E402
from opacus.data_loader import DPDataLoader  # noqa: E402

from dpaudit._validation import DPAuditError  # noqa: E402
from dpaudit.opacus import RecordCanaries  # noqa: E402
from dpaudit.opacus.planted import digits_dataset as _digits  # noqa: E402
from dpaudit.opacus.planted import digits_mlp as _model  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_torch")

DELTA = 1e-5
BATCH = 64  # the real records' expected batch


def _trainer(**options):
    return L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )


def _accounted_steps(accountant) -> int:
    return sum(steps for _, _, steps in accountant.history)


class PrivateBeforeFit(L.LightningModule):
    """make_private before ``Trainer.fit``: the module holds the private model and optimizer, ``train_dataloader``
    returns the DP loader; Lightning's automatic optimization, or the manual one (``manual``: ``self.optimizers()``,
    Lightning's wrapper of the DPOptimizer, zeroed and stepped in ``training_step``)."""

    def __init__(self, model, optimizer, loader, reduction, *, manual=False):
        super().__init__()
        self.model, self.reduction = model, reduction
        self._optimizer, self._loader = optimizer, loader
        self.automatic_optimization = not manual

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self.model(images), labels, reduction=self.reduction)
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()

    def configure_optimizers(self):
        return self._optimizer

    def train_dataloader(self):
        return self._loader


def _before_fit(*, reduction="sum", poisson=True, accumulate=1, manual=False, seed=0):
    torch.manual_seed(seed)
    canaries = RecordCanaries(num_canaries=4000, seed=seed)
    data = canaries.dataset(_digits())
    model = canaries.model(_model())
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = engine.make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=torch.utils.data.DataLoader(data, batch_size=data.batch_size_for(BATCH), shuffle=not poisson),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        loss_reduction=reduction,
        poisson_sampling=poisson,
    )
    canaries.attach(optimizer, data_loader=loader)
    trainer = _trainer(accumulate_grad_batches=accumulate)
    trainer.fit(PrivateBeforeFit(model, optimizer, loader, reduction, manual=manual))
    return canaries, engine, trainer


class PrivateInConfigureOptimizers(L.LightningModule):
    """make_private in ``configure_optimizers``, as Opacus's examples/mnist_lightning.py: ``train_dataloader``
    returns a Poisson DPDataLoader (what ``opacus.lightning.DPLightningDataModule`` does for a data module), the
    module is made private on the loader Lightning iterates (``trainer.train_dataloader``), the optimizer is
    returned to Lightning; the canaries attach there. ``train_dataloader`` returning a plain loader instead is
    the classic bug (``plain_loader``): make_private's Poisson loader is dropped and Lightning trains on the plain
    one, the accountant assuming Poisson sampling."""

    def __init__(self, canaries, *, plain_loader=False):
        super().__init__()
        self.canaries, self.plain_loader = canaries, plain_loader
        self.model = canaries.model(_model())
        self.engine = PrivacyEngine(accountant="prv")

    def train_dataloader(self):
        data = self.canaries._dataset
        if self.plain_loader:
            return torch.utils.data.DataLoader(data, batch_size=data.batch_size_for(BATCH), shuffle=True)
        return DPDataLoader.from_data_loader(torch.utils.data.DataLoader(data, batch_size=data.batch_size_for(BATCH)))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.model(images), labels)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.5)
        self.trainer.fit_loop.setup_data()
        loader = self.trainer.train_dataloader
        _, optimizer, private_loader = self.engine.make_private(
            module=self, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0
        )
        # the loader the audit takes the sampling from: the one Lightning iterates (correct), or make_private's,
        # which the buggy module drops
        self.canaries.attach(optimizer, data_loader=private_loader if self.plain_loader else loader)
        return optimizer


def _in_configure_optimizers(*, plain_loader=False, seed=0):
    torch.manual_seed(seed)
    canaries = RecordCanaries(num_canaries=4000, seed=seed)
    canaries.dataset(_digits())
    module = PrivateInConfigureOptimizers(canaries, plain_loader=plain_loader)
    trainer = _trainer()
    trainer.fit(module)
    return canaries, module.engine, trainer


@pytest.mark.parametrize(
    "placement",
    [
        "before_fit",
        pytest.param("manual_optimization", marks=pytest.mark.integration),
        pytest.param("configure_optimizers", marks=pytest.mark.integration),
    ],
)
def test_a_correct_lightning_run_is_audited_and_not_flagged(placement):
    if placement == "configure_optimizers":
        canaries, engine, trainer = _in_configure_optimizers()
    else:
        canaries, engine, trainer = _before_fit(manual=placement == "manual_optimization")
    report = canaries.report(accountant=engine.accountant, delta=DELTA)
    assert not report.flagged, report.summary()
    assert report.steps == _accounted_steps(engine.accountant) == trainer.global_step > 0
    assert report.observed["canary_rows_per_step"] > 10
    assert report.observed["noise_multiplier"] == pytest.approx(1.0, rel=0.05)
    assert report.whole_run.all_iterates_family.epsilon <= report.epsilon_accountant
    if placement != "configure_optimizers":  # loss_reduction="sum"; Opacus's default "mean" divides by ⌊q·n⌋
        assert report.observed["divisor"] == pytest.approx(1.0)
    else:
        expected_batch_size = int(len(canaries._dataset) * engine.accountant.history[0][1])  # ⌊q·n⌋
        assert report.observed["divisor"] == pytest.approx(expected_batch_size, rel=1e-4)


@pytest.mark.integration
def test_lightning_gradient_accumulation_of_shuffled_batches_is_flagged():
    """``Trainer(accumulate_grad_batches=4)``: Opacus refuses it with Poisson sampling (below), so the loader is
    shuffled (poisson_sampling=False). The canaries see each step clip four batches, and Opacus's accountant records
    4q for them (``accumulated_iterations``): the rate is right, the shuffled batches (every record once an epoch)
    are not the Poisson sampling the accountant assumes."""
    canaries, engine, trainer = _before_fit(poisson=False, accumulate=4)
    report = canaries.report(accountant=engine.accountant, delta=DELTA)
    assert report.steps == _accounted_steps(engine.accountant) == trainer.global_step == 2 * 8  # ⌈29/4⌉ an epoch
    assert report.observed["real_rows_per_step"] == pytest.approx(1797 / 8)  # every record once an epoch
    assert report.observed["member_presence_mean"] == pytest.approx(report.observed["member_presence_expected"])
    assert report.flagged and "presence" in report.flag.flagged_by, report.summary()


def test_lightning_poisson_accumulation_is_refused_by_opacus():
    with pytest.raises(ValueError, match="Poisson sampling is not compatible with grad accumulation"):
        _before_fit(accumulate=4)


@pytest.mark.integration
def test_lightning_training_on_a_plain_loader_instead_of_the_dp_one_is_flagged():
    canaries, engine, trainer = _in_configure_optimizers(plain_loader=True)
    report = canaries.report(accountant=engine.accountant, delta=DELTA)
    assert report.steps == _accounted_steps(engine.accountant) == trainer.global_step
    assert report.flagged and "presence" in report.flag.flagged_by, report.summary()


# ----------------------------------------------------------------------------------------------------------------
# Wrapped optimizers: Lightning's (taken), Hugging Face accelerate's (refused with the reason)
# ----------------------------------------------------------------------------------------------------------------


def _private_digits(canaries):
    data, model = canaries.dataset(_digits()), canaries.model(_model())
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = engine.make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=torch.utils.data.DataLoader(data, batch_size=data.batch_size_for(BATCH)),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        loss_reduction="sum",
    )
    return engine, model, optimizer, loader


def test_attach_takes_lightnings_wrapper_and_observes_the_dp_optimizer_it_wraps():
    from lightning.pytorch.core.optimizer import LightningOptimizer

    canaries = RecordCanaries(num_canaries=40)
    _, _, optimizer, loader = _private_digits(canaries)
    canaries.attach(LightningOptimizer(optimizer), data_loader=loader)
    assert optimizer._dpaudit_canaries is canaries and optimizer.pre_step == canaries._pre_step
    assert optimizer.original_optimizer.param_groups[-1] is canaries._group()  # the block's group (empty between steps)


class AttachedInAHook(PrivateBeforeFit):
    """The canaries attached in ``on_train_start`` to ``self.optimizers()``, Lightning's wrapper."""

    def __init__(self, canaries, *private):
        super().__init__(*private, "sum")
        self.canaries = canaries

    def on_train_start(self):
        self.canaries.attach(self.optimizers(), data_loader=self.trainer.train_dataloader)


@pytest.mark.integration
def test_canaries_attached_to_self_optimizers_in_a_hook_audit_the_run():
    torch.manual_seed(0)
    canaries = RecordCanaries(num_canaries=4000)
    engine, model, optimizer, loader = _private_digits(canaries)
    trainer = _trainer()
    trainer.fit(AttachedInAHook(canaries, model, optimizer, loader))
    report = canaries.report(accountant=engine.accountant, delta=DELTA)
    assert not report.flagged, report.summary()
    assert report.steps == _accounted_steps(engine.accountant) == trainer.global_step > 0


class AcceleratedOptimizer(torch.optim.Optimizer):
    """A stand-in for Hugging Face accelerate's wrapper (``accelerate.optimizer.AcceleratedOptimizer``, what the
    transformers Trainer steps): the wrapped optimizer in ``.optimizer``, its parameter groups shared."""

    def __init__(self, optimizer):  # accelerate's does not call Optimizer.__init__ either
        self.optimizer = optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups


def test_hugging_face_accelerated_optimizer_is_refused_with_its_reason():
    canaries = RecordCanaries(num_canaries=40)
    _, _, optimizer, loader = _private_digits(canaries)
    with pytest.raises(DPAuditError, match="cannot audit AcceleratedOptimizer: .*Trainer iterates its own DataLoader"):
        canaries.attach(AcceleratedOptimizer(optimizer), data_loader=loader)
    assert getattr(optimizer, "_dpaudit_canaries", None) is None
