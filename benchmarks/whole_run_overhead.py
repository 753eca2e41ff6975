"""What whole-run Dirac canaries add to the training time of the run they audit, on the CPU; prints JSON.

The run of ``whole_run_audit.py``: DP-SGD (dpsgd-gc, lr 0.2) on digits (cnn-digits, n = 360, b = 36 Poisson, 20
epochs = 200 steps, or ``--epochs``, C = 1), its noise calibrated with the PRV accountant to ε = 4 at δ = 1e-5,
trained without canaries and with M whole-run canaries (``--canaries M --canary-design whole-run``; M = 2·10⁴ and
2·10⁵, i.e. 10⁴ and 10⁵ per side; M = 20 measures what the canaries cost per step whatever their number), one after
the other in each repetition (the order rotating), in this one process. Two times per training: ``loop`` is the
training loop's own seconds (``metrics.json``'s last ``elapsed_seconds``: the steps, the canaries' work, the epochs'
evaluations and writes), ``wall`` the whole ``train_configuration`` call (the noise's calibration, the data, the
loop, the files). Per M: the median of the per-repetition ratios with / without canaries (each repetition's
trainings run back to back), the ratio of the medians, and ``milliseconds_per_step_added`` (the median of the
repetitions' differences, per step).

Per M also the floor of any implementation: the work every canary needs at every step whatever the code around it —
the members' presence draw (``bernoulli_positions``: by the gaps between present steps, about q·M/2 draws), the
canaries' noise draw (``torch.Tensor.normal_``, float32), their Λ terms (one exp and one log1p each, numpy's, in
float32) and three online sums of float32 partials that float64 sums take every 16 steps — measured twice:

* ``floor_milliseconds_per_step``: timed alone (median of 200 steps);
* ``floor_in_loop_milliseconds_per_step``: what it adds to the same training loop, done at every step by an observer
  of the model that does nothing else (``_FloorWork``), measured as the canaries are (the median of the repetitions'
  differences); this includes what M values passing through the caches at every step cost the model's own work,
  which any implementation pays too.

``ratio_to_floor_in_loop`` (ms added / in-loop floor) is the acceptance's ratio: both are differences of the same
loop's time. Beside each of the two medians, the quartiles of the repetitions' differences
(``milliseconds_per_step_added_quartiles``, ``floor_in_loop_quartiles``), and ``ratio_to_floor_in_loop_interval``,
the ratio's 90 % percentile bootstrap interval over the repetitions (each resample draws whole repetitions, so a
repetition's three trainings stay together): where it is wide, the machine's noise, not the code, decides the ratio,
and a quieter machine or more repetitions are needed. The engine's statistics are computed as the floor's
(``dpaudit._online``), so what lies above the floor is the engine's own work: the sampler's and the optimizer's
passes over the block, the observer and its Python.

``--phases`` also says where the added time goes: every training is timed part by part inside its loop (``PHASES``:
the batch's draw with the canaries' presences, the gradients, the observers before and after the update, the
optimizer's step with the canary block's noise and release, the epochs' ends), and per M ``phases`` gives each
part's milliseconds per step added (the median of the repetitions' differences with the training without canaries),
for the canaries and for the floor's observer. A part's time includes the caches its work finds evicted by the
others', which is why the gradients can take longer with canaries, whose own work they do not include. The timers add
a few microseconds per step to every training: record the acceptance's ratios without ``--phases``.

Usage: python benchmarks/whole_run_overhead.py [--canaries 20000 200000] [--repeats 5] [--epochs 20] [--threads N]
       [--phases]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _train(config, out: Path) -> tuple[float, float]:
    """(loop seconds, wall seconds) of one training of ``config`` into ``out``."""
    from dpaudit.rundir import RunDir
    from dpaudit.train import train_configuration

    started = time.perf_counter()
    train_configuration(config, out_dir=out, progress=False)
    wall = time.perf_counter() - started
    loop = json.loads(RunDir(out).target.metrics.read_text())["elapsed_seconds"][-1]
    return float(loop), wall


class _Floor:
    """The floor's state and its work of one step at M = ``count`` (module docstring)."""

    def __init__(self, count: int, *, rate: float = 0.1) -> None:
        import numpy as np
        import torch

        self.count, self.rate, self.steps = count, rate, 0
        self.rng, self.generator = np.random.default_rng(0), torch.Generator().manual_seed(0)
        self.noise, self.terms = torch.empty(count), np.empty(count, dtype=np.float32)
        self.partial, self.totals = torch.zeros((3, count)), torch.zeros((3, count), dtype=torch.float64)

    def step(self) -> None:
        import numpy as np
        import torch

        from dpaudit.sampling import bernoulli_positions

        bernoulli_positions(self.rng, count=self.count // 2, rate=self.rate)
        noise, terms = self.noise, self.terms
        noise.normal_(generator=self.generator)
        np.multiply(noise.numpy(), 0.6, out=terms)  # log(1 − q) + log1p(e^(x/σ² + s)), σ = 1.3: Λ's term
        terms += -2.5
        np.exp(terms, out=terms)
        np.log1p(terms, out=terms)
        self.partial[0].add_(torch.from_numpy(terms))
        self.partial[1].add_(noise)
        self.partial[2].addcmul_(noise, noise)
        self.steps += 1
        if self.steps % 16 == 0:
            self.totals.add_(self.partial)
            self.partial.zero_()


def _floor_milliseconds(count: int, *, steps: int = 200) -> float:
    """Median milliseconds per step of the floor's work at M = ``count``, timed alone."""
    floor, times = _Floor(count), []
    for _ in range(steps):
        started = time.perf_counter()
        floor.step()
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


@contextlib.contextmanager
def _floor_in_loop(count: int) -> Iterator[None]:
    """Within it, the target of every training has one more observer, which does the floor's work at every step."""
    from dpaudit import train
    from dpaudit.observers import TrainingObserver

    class _FloorWork(TrainingObserver):
        name = "floor_work"

        def __init__(self) -> None:
            self.floor = _Floor(count)

        def after_update(self, optimizer, cost, *, epoch: int) -> None:
            self.floor.step()

    original = train._observers

    def observers(config, member, **kwargs):
        found = original(config, member, **kwargs)
        return found + [_FloorWork()] if member.model_index == 0 else found

    train._observers = observers
    try:
        yield
    finally:
        train._observers = original


PHASES = ("batch", "gradients", "before_update", "step", "after_update", "end_epoch")


@contextlib.contextmanager
def _timed_phases(totals: dict[str, float]) -> Iterator[None]:
    """Within it, the training loop's parts (``PHASES``) add their seconds to ``totals``: the engine's methods that the
    loop calls (``dpaudit.train``) wrapped with a timer; the batch's draw is timed at each ``next`` of its iterator."""
    from dpaudit import train
    from dpaudit.optim.clipping import PrivateOptimizer

    def timed(phase: str, function):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                totals[phase] += time.perf_counter() - started

        return wrapper

    def batches(run):
        iterator = original["batches"](run)
        while True:
            started = time.perf_counter()
            try:
                records = next(iterator)
            except StopIteration:
                return
            finally:
                totals["batch"] += time.perf_counter() - started
            yield records

    def gradient_engine(config, runs):
        feed, method = original["_gradient_engine"](config, runs)
        return timed("gradients", feed), method

    step_together = PrivateOptimizer.__dict__["step_together"]  # a classmethod
    methods = ("before_update", "after_update", "end_epoch")
    original = {name: getattr(train._ModelRun, name) for name in ("batches", *methods)}
    original["_gradient_engine"] = train._gradient_engine
    for name in methods:
        setattr(train._ModelRun, name, timed(name, original[name]))
    train._ModelRun.batches = batches
    train._gradient_engine = gradient_engine
    PrivateOptimizer.step_together = classmethod(timed("step", step_together.__func__))
    try:
        yield
    finally:
        for name in ("batches", *methods):
            setattr(train._ModelRun, name, original[name])
        train._gradient_engine = original["_gradient_engine"]
        PrivateOptimizer.step_together = step_together


def _added_milliseconds(seconds: list[float], without: list[float], *, steps: int) -> float:
    """Milliseconds per step added: the median over the repetitions of each one's difference (its trainings run back
    to back, so a slow spell of the machine affects both)."""
    return 1e3 * statistics.median(a - b for a, b in zip(seconds, without)) / steps


def _added_quartiles(seconds: list[float], without: list[float], *, steps: int) -> list[float]:
    """The first and third quartiles of the repetitions' differences, in milliseconds per step (the spread around
    :func:`_added_milliseconds`)."""
    differences = [1e3 * (a - b) / steps for a, b in zip(seconds, without)]
    if len(differences) < 2:
        return differences * 2
    quartiles = statistics.quantiles(differences, n=4)
    return [quartiles[0], quartiles[2]]


def _ratio_interval(
    added: list[float], floor: list[float], without: list[float], *, level: float = 0.9, draws: int = 2000
) -> list[float]:
    """The ``level`` percentile bootstrap interval of median(added − without) / median(floor − without) over the
    repetitions (seconds per training, one entry per repetition in each list), resampling whole repetitions; a fixed
    seed, so that a record is reproducible from its seconds."""
    import numpy as np

    differences = np.array([added, floor]) - np.array(without)  # [2, repetitions]
    picks = np.random.default_rng(0).integers(0, differences.shape[1], size=(draws, differences.shape[1]))
    medians = np.median(differences[:, picks], axis=2)  # [2, draws]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = medians[0] / medians[1]
    tail = (1 - level) / 2
    return [float(value) for value in np.quantile(ratios, [tail, 1 - tail])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, nargs="+", default=[20_000, 200_000], help="M, both sides together")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=20, help="ceil(n/b) = 10 steps each")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--phases", action="store_true", help="also time the loop's parts (module docstring)")
    args = parser.parse_args()

    import torch

    from dpaudit.config import TrainConfig
    from dpaudit.sampling import steps_per_epoch

    if args.threads:
        torch.set_num_threads(args.threads)
    base = TrainConfig.from_dict(
        dict(
            dataset="digits",
            model="cnn-digits",
            optimizer="dpsgd-gc",
            lr=0.2,
            sampling="poisson",
            batch_size=36,
            epochs=args.epochs,
            clip_norm=1.0,
            target_epsilon=args.epsilon,
            accountant="prv",
            delta=1e-5,
            target_size=360,
            num_shadows=0,
            diagnostics=False,
            seed=args.seed,
            device="cpu",
        )
    )
    steps = args.epochs * steps_per_epoch(dataset_size=base.data.target_size, batch_size=base.optimizer.batch_size)
    cases = [("none", base, None)]
    for count in args.canaries:
        cases += [(str(count), base.replaced(canaries=count, canary_design="whole-run"), None)]
        cases += [(f"floor_{count}", base, count)]
    times: dict[str, dict[str, list[float]]] = {name: {"loop": [], "wall": []} for name, _, _ in cases}
    phases: dict[str, dict[str, list[float]]] = {name: {phase: [] for phase in PHASES} for name, _, _ in cases}
    with tempfile.TemporaryDirectory() as work:
        _train(base, Path(work) / "warm-up")  # imports, data, first-call costs
        for repeat in range(args.repeats):
            shift = repeat % len(cases)
            for name, config, floor in cases[shift:] + cases[:shift]:
                totals = dict.fromkeys(PHASES, 0.0)
                with contextlib.ExitStack() as context:
                    if floor:
                        context.enter_context(_floor_in_loop(floor))
                    if args.phases:
                        context.enter_context(_timed_phases(totals))
                    loop, wall = _train(config, Path(work) / f"{name}_{repeat}")
                for phase, seconds in totals.items():
                    phases[name][phase].append(seconds)
                times[name]["loop"].append(loop)
                times[name]["wall"].append(wall)
                print(json.dumps({"repeat": repeat, "canaries": name, "loop": loop, "wall": wall}), flush=True)
    result = {
        "machine": platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "steps": steps,
        "seconds_without_canaries": {kind: statistics.median(times["none"][kind]) for kind in ("loop", "wall")},
    }
    for count in args.canaries:
        with_canaries = times[str(count)]
        summary = {}
        for kind in ("loop", "wall"):
            ratios = [a / b for a, b in zip(with_canaries[kind], times["none"][kind])]
            summary[f"{kind}_ratio_median"] = statistics.median(ratios)
            summary[f"{kind}_ratio_of_medians"] = statistics.median(with_canaries[kind]) / statistics.median(
                times["none"][kind]
            )
            summary[f"{kind}_seconds_median"] = statistics.median(with_canaries[kind])
            summary[f"{kind}_ratios"] = ratios  # a list: kept in the JSON file, not in the docs' table
        without = statistics.median(times["none"]["loop"])
        added = _added_milliseconds(with_canaries["loop"], times["none"]["loop"], steps=steps)
        in_loop = _added_milliseconds(times[f"floor_{count}"]["loop"], times["none"]["loop"], steps=steps)
        floor = _floor_milliseconds(count)
        summary["milliseconds_per_step_added"] = added
        summary["floor_milliseconds_per_step"] = floor
        summary["floor_in_loop_milliseconds_per_step"] = in_loop
        summary["milliseconds_per_step_added_quartiles"] = _added_quartiles(
            with_canaries["loop"], times["none"]["loop"], steps=steps
        )
        summary["floor_in_loop_quartiles"] = _added_quartiles(
            times[f"floor_{count}"]["loop"], times["none"]["loop"], steps=steps
        )
        summary["ratio_to_floor"] = added / floor
        summary["ratio_to_floor_in_loop"] = added / in_loop
        summary["ratio_to_floor_in_loop_interval"] = _ratio_interval(
            with_canaries["loop"], times[f"floor_{count}"]["loop"], times["none"]["loop"]
        )
        summary["floor_loop_ratio"] = 1 + floor * steps / 1e3 / without
        if args.phases:
            summary["phases"] = {
                who: {
                    phase: _added_milliseconds(phases[case][phase], phases["none"][phase], steps=steps)
                    for phase in PHASES
                }
                for who, case in (("canaries", str(count)), ("floor", f"floor_{count}"))
            }
        result[f"canaries_{count}"] = summary
    if args.phases:
        result["phases_milliseconds_per_step_without_canaries"] = {
            phase: 1e3 * statistics.median(phases["none"][phase]) / steps for phase in PHASES
        }
    result["seconds"] = times
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
