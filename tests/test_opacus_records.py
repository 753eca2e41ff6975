"""dpaudit.opacus.RecordCanaries: canaries that are records of the user's dataset, in the user's Opacus loop.

Unit tests (the dataset and model wrappers, the per-sample gradients Opacus computes, the refusals) run by default;
each misconfiguration of the issue is a small training run with its correct twin, marked ``integration``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus import GradSampleModule, PrivacyEngine  # noqa: E402
from opacus.optimizers import DistributedDPOptimizer  # noqa: E402
from torch.utils.data._utils.collate import default_collate  # noqa: E402

from dpaudit._validation import DPAuditError  # noqa: E402
from dpaudit.opacus import RecordCanaries, accountant_ledger, mark_canaries  # noqa: E402
from dpaudit.opacus.planted import digits_dataset as _digits  # noqa: E402
from dpaudit.opacus.planted import digits_mlp as _model  # noqa: E402
from dpaudit.opacus.planted import run_digits, train_digits  # noqa: E402

pytestmark = pytest.mark.usefixtures("quiet_torch")

DELTA = 1e-5


# ----------------------------------------------------------------------------------------------------------------
# The wrappers
# ----------------------------------------------------------------------------------------------------------------


def test_dataset_holds_the_user_records_then_the_member_canaries():
    data = _digits(100)
    canaries = RecordCanaries(num_canaries=50, seed=3)
    wrapped = canaries.dataset(data)
    members = int(canaries.members.sum())
    assert len(wrapped) == 100 + members
    for index in (0, 57, 99):
        assert all(torch.equal(a, b) for a, b in zip(wrapped[index], data[index]))
    inputs, target = wrapped[100]
    assert math.isnan(float(inputs[0])) and int(inputs[1]) == canaries.member_ids[0]
    assert torch.equal(torch.as_tensor(target), data[0][1])
    # the attached loader's vectorised collation gives the same batch as torch's default, row for row as a set
    positions = [3, 100, 5, 100 + members - 1, 120]
    batch = wrapped.__getitems__(positions)
    fast = wrapped.collating(default_collate)(batch)
    slow = default_collate(list(batch))
    assert sorted(map(tuple, fast[0].nan_to_num(-1).tolist())) == sorted(map(tuple, slow[0].nan_to_num(-1).tolist()))
    assert sorted(fast[1].tolist()) == sorted(slow[1].tolist())


def test_canary_marks_carry_the_ids_exactly():
    ids = torch.tensor([0, 1, 2**23 + 5, 2**24 - 1])
    marked = mark_canaries(ids, template=torch.zeros(1, 8, 8))
    assert torch.isnan(marked[:, 0, 0, 0]).all() and torch.equal(marked[:, 0, 0, 1].long(), ids)
    integer = mark_canaries(ids, template=torch.zeros(5, dtype=torch.int64))
    assert (integer[:, 0] == torch.iinfo(torch.int64).min).all() and torch.equal(integer[:, 1], ids)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_real_rows_get_the_per_sample_gradients_they_get_without_canaries(reduction):
    """Opacus's hooks on the user's module, with canary rows in the batch: each real row's per-sample gradient is
    that of its own loss, as in a batch without canary rows (the mean's divisor corrected), and a canary row's
    gradient on the block is the known slope of the loss at zero output: 1/K − [target = 0] for cross-entropy."""
    torch.manual_seed(0)
    data = _digits(40)
    canaries = RecordCanaries(num_canaries=20, seed=0)
    wrapped = canaries.dataset(data)
    module = canaries.model(_model())
    canaries._mean = reduction == "mean"
    model = GradSampleModule(module, loss_reduction=reduction)
    real = [wrapped[i] for i in range(8)]
    batch = default_collate(real + [wrapped[40 + k] for k in range(5)])
    torch.nn.functional.cross_entropy(model(batch[0]), batch[1], reduction=reduction).backward()
    with_canaries = [p.grad_sample.clone() for p in module.parameters()]
    slopes = torch.cat([slope for _, slope in canaries._pending])
    expected = 1 / 10 - float(int(data[0][1]) == 0)
    assert torch.allclose(slopes, torch.full_like(slopes, expected), rtol=1e-5)
    model.zero_grad()
    for p in module.parameters():
        p.grad_sample = None
    alone = default_collate(real)
    torch.nn.functional.cross_entropy(model(alone[0]), alone[1], reduction=reduction).backward()
    for p, before in zip(module.parameters(), with_canaries):
        assert torch.allclose(p.grad_sample, before, rtol=1e-5, atol=1e-7)


def test_online_sums_are_the_sums_of_the_kept_observations_across_a_change_of_noise():
    """The online sums (partial sums in float32 over up to 16 steps, then float64) against the same statistics
    computed afterwards from the kept observations x_tj: Λ (likelihood_ratio_scores at σ_t = z_t·C/|c|), Σx, Σx/σ
    and Σx²/σ², over 40 steps whose noise multiplier changes at step 23 (a partial sum cut short)."""
    from dpaudit.whole_run import likelihood_ratio_scores

    torch.manual_seed(1)
    canaries = RecordCanaries(num_canaries=300, seed=1, keep_observations=True)
    engine, model, optimizer, loader = _private(canaries, data=_digits(200), batch_size=60)
    canaries.attach(optimizer, data_loader=loader)
    steps = 0
    while steps < 40:
        for images, labels in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
            steps += 1
            if steps == 23:
                optimizer.noise_multiplier = 1.7
            if steps == 40:
                break
    observations = canaries.observations.astype(float)  # [T, M]
    record = canaries.record(accountant=engine.accountant)
    sigma = np.asarray(canaries.noise_multipliers) * 1.0 / np.abs(np.asarray(canaries.contributions))
    assert observations.shape == (40, 300) and len(set(canaries.noise_multipliers)) == 2
    rates = np.full(40, canaries._rate)
    expected = {
        "all_iterates_scores": likelihood_ratio_scores(observations.T, noise_multipliers=sigma, sample_rates=rates),
        "final_model_scores": observations.sum(axis=0),
        "standardised_sum": (observations / sigma[:, None]).sum(axis=0),
        "standardised_sum_of_squares": np.square(observations / sigma[:, None]).sum(axis=0),
    }
    for name, values in expected.items():
        np.testing.assert_allclose(getattr(record, name), values, rtol=1e-5, atol=1e-5 * np.abs(values).max())


def test_accountant_ledger_expands_a_history_of_several_runs_and_checks_its_steps():
    """An accountant whose rate changed (two history entries): z_t and q_t step by step, and a one-line error when
    its steps are not the canaries' (a history of several entries caught a shadowed step count once)."""

    class Accountant:
        history = [(1.0, 0.1, 3), (0.5, 0.2, 2)]

    z, q = accountant_ledger(Accountant(), steps=5)
    assert z.tolist() == [1.0, 1.0, 1.0, 0.5, 0.5] and q.tolist() == [0.1, 0.1, 0.1, 0.2, 0.2]
    with pytest.raises(DPAuditError, match="recorded 5 steps but the canaries saw 4"):
        accountant_ledger(Accountant(), steps=4)


def test_cross_record_layers_are_refused_before_training():
    canaries = RecordCanaries(num_canaries=10)
    no_affine = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.BatchNorm1d(8, affine=False))
    with pytest.raises(DPAuditError, match=r"layer .1. \(BatchNorm1d\) mixes each record"):
        canaries.model(no_affine)
    frozen = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.BatchNorm1d(8))
    frozen[1].requires_grad_(False)
    with pytest.raises(DPAuditError, match="not DP"):
        RecordCanaries(num_canaries=10).model(frozen)


def _private(canaries, *, data, batch_size, **options):
    wrapped, model = canaries.dataset(data), canaries.model(_model())
    engine = PrivacyEngine(accountant="prv")
    if options.get("grad_sample_mode") == "ghost":  # it wraps the loss too
        options["criterion"] = torch.nn.CrossEntropyLoss()
    made = engine.make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=torch.utils.data.DataLoader(wrapped, batch_size=batch_size),
        noise_multiplier=options.pop("noise_multiplier", 1.0),
        max_grad_norm=options.pop("max_grad_norm", 1.0),
        **options,
    )
    return engine, made[0], made[1], made[-1]


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"grad_sample_mode": "ghost"}, "ghost clipping"),
        ({"clipping": "per_layer", "max_grad_norm": [1.0] * 4}, "per-layer clipping"),
    ],
)
def test_unsupported_optimizers_are_refused_with_their_reason(options, reason):
    canaries = RecordCanaries(num_canaries=20)
    *_, optimizer, loader = _private(canaries, data=_digits(100), batch_size=10, **options)
    with pytest.raises(DPAuditError, match=reason):
        canaries.attach(optimizer, data_loader=loader)


def test_distributed_optimizers_are_refused_with_their_reason():
    distributed = object.__new__(DistributedDPOptimizer)
    with pytest.raises(DPAuditError, match="DistributedDataParallel.*single-process"):
        RecordCanaries(num_canaries=4).attach(distributed, data_loader=None)


def test_attach_needs_both_wrappers_and_the_wrapped_loader():
    canaries = RecordCanaries(num_canaries=20)
    engine, model, optimizer, loader = _private(canaries, data=_digits(100), batch_size=10)
    with pytest.raises(DPAuditError, match="iterate the wrapped dataset"):
        canaries.attach(optimizer, data_loader=torch.utils.data.DataLoader(_digits(100)))
    with pytest.raises(DPAuditError, match="wrap the dataset"):
        RecordCanaries(num_canaries=20).attach(optimizer, data_loader=loader)
    with pytest.raises(DPAuditError, match="train"):
        canaries.report(accountant=engine.accountant, delta=DELTA)


def test_altered_canary_inputs_are_an_error_not_a_silent_audit():
    torch.manual_seed(0)
    canaries = RecordCanaries(num_canaries=200)
    engine, model, optimizer, loader = _private(canaries, data=_digits(200), batch_size=50)
    canaries.attach(optimizer, data_loader=loader)
    images, labels = next(iter(loader))
    with pytest.raises(DPAuditError, match="altered"):
        model(images * 2.0 + 1.0)


# ----------------------------------------------------------------------------------------------------------------
# The run's bugs, each with its correct twin (small runs: ``integration``)
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_correct_run_is_not_flagged_and_its_bounds_hold():
    report = run_digits(None)
    assert not report.flagged, report.summary()
    run = report.whole_run
    assert 0 < run.all_iterates_family.epsilon <= report.epsilon_accountant
    assert run.all_iterates.epsilon_lower <= run.all_iterates_family.epsilon
    assert report.observed["canary_rows_per_step"] > 10
    assert report.observed["divisor"] == pytest.approx(1.0)  # loss_reduction="sum"
    assert report.observed["noise_multiplier"] == pytest.approx(report.observed["noise_multiplier_claimed"], rel=0.01)


@pytest.mark.integration
def test_any_delta_gives_a_number_or_one_line(tmp_path):
    """δ = 0.5 and 1e-300 (the Opacus review's crashes), the plot and the saved record of one small run."""
    canaries, engine = train_digits(None, canaries=400, epochs=1)
    accountant = engine.accountant
    large = canaries.report(accountant=accountant, delta=0.5)
    assert large.epsilon_accountant >= 0 and not large.flagged, large.summary()
    with pytest.raises(DPAuditError, match=r"^the (family bound|prv accountant) [^\n]* at δ = 1e-300[^\n]*$"):
        canaries.report(accountant=accountant, delta=1e-300)
    paths = canaries.report(accountant=accountant, delta=1e-5).plot(stem=tmp_path / "canaries")
    assert all(path.stat().st_size > 0 for path in paths)
    saved = canaries.save(tmp_path / "canaries.npz", accountant=accountant)
    assert saved.is_file() and saved.with_suffix(".json").is_file()


@pytest.mark.integration
@pytest.mark.parametrize("misconfiguration", ["other-loader", "shuffled-as-poisson", "manual-accumulation"])
def test_sampling_other_than_the_accounted_is_flagged_by_presence(misconfiguration):
    """Another loader (4× the batch), shuffled batches accounted as Poisson, 4 batches accumulated per step: the
    members reach the optimizer at other rates, or less independently, than the accountant's q (ε = 4 claimed)."""
    report = run_digits(misconfiguration)
    assert report.flagged and "presence" in report.flag.flagged_by, report.summary()
    if misconfiguration == "manual-accumulation":  # calibrated as if each batch were a step: the bounds exceed it
        assert "all_iterates_family" in report.flag.flagged_by, report.summary()
        assert any("the pr" in note and "accountant gives" in note for note in report.notes), report.summary()


@pytest.mark.integration
def test_expected_batch_size_normalisation_at_small_n_is_flagged_and_the_sum_twin_is_not():
    """Opacus #819: a mean-reduced loss is divided by ⌊q·n⌋; with q = 1/2 one record more or fewer moves it."""
    small = {"canaries": 60, "records": 30, "batch": 15, "epochs": 20}
    report = run_digits("expected-batch-small-n", **small)
    assert report.flagged and any("#819" in finding for finding in report.findings), report.summary()
    twin = run_digits(None, reduction="sum", **small)
    assert not twin.flagged, twin.summary()


@pytest.mark.integration
def test_noise_scaled_down_by_the_batch_size_is_flagged():
    """A bug in the model's own noise (the same call noises the canary block): its std divided by the batch size."""
    report = run_digits("noise-over-batch")
    assert report.flagged and "noise" in report.flag.flagged_by, report.summary()
    assert report.observed["noise_multiplier"] < 0.1


def test_an_unknown_misconfiguration_is_a_one_line_error():
    with pytest.raises(DPAuditError, match="misconfiguration must be one of"):
        run_digits("reseeded")


@pytest.mark.gpu
def test_record_canaries_on_cuda():
    """The block, its noise and the online sums on the GPU, the canary bookkeeping on the CPU: a correct run is not
    flagged and the measured noise is the claimed one."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    report = run_digits(None, device="cuda")
    assert not report.flagged, report.summary()
    assert report.observed["noise_multiplier"] == pytest.approx(report.observed["noise_multiplier_claimed"], rel=0.01)
    assert report.observed["canary_rows_per_step"] > 10
    planted = run_digits("noise-over-batch", device="cuda")
    assert planted.flagged and "noise" in planted.flag.flagged_by, planted.summary()
