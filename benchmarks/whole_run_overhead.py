"""What whole-run Dirac canaries add to the training time of the run they audit, on the CPU; prints JSON.

The run of ``whole_run_audit.py``: DP-SGD (dpsgd-gc, lr 0.2) on digits (cnn-digits, n = 360, b = 36 Poisson,
20 epochs = 200 steps, C = 1), its noise calibrated with the PRV accountant to ε = 4 at δ = 1e-5, trained without
canaries and with M whole-run canaries (``--canaries M --canary-design whole-run``; M = 2·10⁴ and 2·10⁵, i.e. 10⁴
and 10⁵ per side), one after the other in each repetition (the order rotating), in this one process. Two times per
training: ``loop`` is the training loop's own seconds (``metrics.json``'s last ``elapsed_seconds``: the steps, the
canaries' work, the epochs' evaluations and writes), ``wall`` the whole ``train_configuration`` call (the noise's
calibration, the data, the loop, the files). Per M: the median of the per-repetition ratios with / without canaries
(each repetition's three trainings run back to back), and the ratio of the medians.

Per M also the floor of any implementation (``floor_*``): the work every canary needs at every step whatever the
code around it, its noise draw (``torch.Tensor.normal_``) and its Λ term (``step_log_ratio``: one exp and one log)
plus the four float64 sums kept online, timed alone on one thread (median of 200 steps), and the loop ratio it
alone would give (1 + 200·floor / loop seconds without canaries).

Usage: python benchmarks/whole_run_overhead.py [--canaries 20000 200000] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
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


def _floor_milliseconds(count: int, *, steps: int = 200) -> float:
    """Median milliseconds per step of the canary block's unavoidable work at M = ``count`` on one thread."""
    import torch

    from dpaudit._device import one_cpu_thread
    from dpaudit.whole_run import step_log_ratio

    generator = torch.Generator().manual_seed(0)
    noise = torch.empty(count)
    x, out, work = (torch.empty(count, dtype=torch.float64) for _ in range(3))
    sums = [torch.zeros(count, dtype=torch.float64) for _ in range(4)]
    times = []
    with one_cpu_thread(torch.device("cpu")):
        for _ in range(steps):
            started = time.perf_counter()
            noise.normal_(generator=generator)
            x.copy_(noise)
            terms = step_log_ratio(x, 1.0, 0.1, out=out, work=work)
            sums[0] += terms
            sums[1] += x
            sums[2] += x
            sums[3].addcmul_(x, x)
            times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, nargs="+", default=[20_000, 200_000], help="M, both sides together")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()

    import torch

    from dpaudit.config import TrainConfig

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
            epochs=20,
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
    cases = [("none", base)] + [
        (str(count), base.replaced(canaries=count, canary_design="whole-run")) for count in args.canaries
    ]
    times: dict[str, dict[str, list[float]]] = {name: {"loop": [], "wall": []} for name, _ in cases}
    with tempfile.TemporaryDirectory() as work:
        _train(base, Path(work) / "warm-up")  # imports, data, first-call costs
        for repeat in range(args.repeats):
            shift = repeat % len(cases)
            for name, config in cases[shift:] + cases[:shift]:
                loop, wall = _train(config, Path(work) / f"{name}_{repeat}")
                times[name]["loop"].append(loop)
                times[name]["wall"].append(wall)
                print(json.dumps({"repeat": repeat, "canaries": name, "loop": loop, "wall": wall}), flush=True)
    result = {
        "machine": platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "steps": 200,
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
        summary["milliseconds_per_step_added"] = (
            1e3 * (statistics.median(with_canaries["loop"]) - statistics.median(times["none"]["loop"])) / 200
        )
        floor = _floor_milliseconds(count)
        summary["floor_milliseconds_per_step"] = floor
        summary["floor_loop_ratio"] = 1 + floor * 200 / 1e3 / statistics.median(times["none"]["loop"])
        result[f"canaries_{count}"] = summary
    result["seconds"] = times
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
