"""How often an experiment's verdict says "stands" when it should not (A/A) and when it should (A/A′). Prints; asserts nothing.

    python tests/benchmarks/bench_experiment.py --calibrate          # the per-look error rates, by simulation
    python tests/benchmarks/bench_experiment.py --trials 40          # real runs on this machine
    python tests/benchmarks/bench_experiment.py --trials 20 --budget 40 --designs "budget" \
        --lock /tmp/heavy.lock                                       # the budgeted designs, each trial under a lock

Real runs: one CPU-bound client (``select count(*) from generate_series(1, N)``), runs of 3 s,
three runs of each arm. Halfway through each experiment (before its fourth run: B's first run
when the arms run back to back) three busy processes start, each in a session of its own
(``setsid``: Linux shares the CPU between sessions first, so loops started in this process's
session would barely touch the server), and stop when the experiment ends. Each trial runs:

- A/A, interleaved (``lab.experiment``: A B B A A B);
- A/A, back to back (A A A, then B B B: two ``lab.pgbench(repeats=3)`` cells, as labs did);
- A/A′, interleaved, A′ doing 1.3 times A's work per transaction (a known effect: 0.77× tps);
- with ``--budget S``, A/A and A/A′ again with a budget: rounds added until decided or S seconds spent.

It prints, per design, how often the verdict stood and the ratios seen, and for each verdict that
stood in an A/A design the pairs it was judged on. ``--designs`` keeps the designs whose name
contains one of its ``|``-separated parts (design names hold commas); ``--lock PATH`` takes an exclusive lock on that file
around each trial, so that other heavy work on the machine takes turns with the trials. Run it alone on the
machine: anything else running is part of what it measures. Linux (setsid) only.

``--calibrate`` simulates 200,000 experiments of normal paired differences for each number of
looks and prints the per-look error rate that keeps all looks together at 5%
(``labkit.experiment.LOOK_ALPHA``), and the rates of the rules under other noise: heavy tails,
a step change of load, a steady drift, interleaved and back to back.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.private_home import private_home  # noqa: E402

BUSY = "while True: pass"
WORK = 60_000


def busy(count: int) -> list[subprocess.Popen]:
    """``count`` CPU-bound processes, each in a session of its own."""
    return [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True) for _ in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait()


def script(work: int) -> str:
    return f"select count(*) from generate_series(1, {work});"


class LoadHalfway:
    """A setup hook that starts the busy processes before the experiment's fourth run."""

    def __init__(self, at_run: int = 4, count: int = 3):
        self.at_run, self.count, self.seen, self.started = at_run, count, 0, []

    def __call__(self, lab, arm=None) -> None:
        self.seen += 1
        if self.seen == self.at_run:
            self.started = busy(self.count)

    def end(self) -> None:
        stop(self.started)


def trial(lab, design: str, budget: float | None) -> tuple[bool, float | None, int]:
    """One experiment of ``design``: whether its verdict stood, its ratio, and the runs of each arm.

    An A/A verdict that stands is printed with the pairs it was judged on.
    """
    load = LoadHalfway()
    effect = 1.3 if design.startswith("A/A′") else 1.0
    try:
        if design == "A/A back to back":
            a = lab.pgbench(script(WORK), name="bench-a", clients=1, duration=3, repeats=3, live=False,
                            setup=lambda lab: load(lab))
            b = lab.pgbench(script(WORK), name="bench-b", clients=1, duration=3, repeats=3, live=False,
                            setup=lambda lab: load(lab))
            from labkit.verdict import compare

            found = compare(a, b)
            return found.stands, found.ratio, len(a)
        result = lab.experiment({"bench-a": script(WORK), "bench-b": script(round(WORK * effect))}, repeats=3,
                                clients=1, duration=3, setup=load, budget_s=budget)
        found = result.verdict()
        if found.stands and effect == 1.0:
            print(f"  A/A stood: {found.sentence}")
            for a, b in zip(result.groups["bench-a"], result.groups["bench-b"]):
                print(f"    pair {a.repeat}: tps {a.tps:.1f} / {b.tps:.1f}, others' cores "
                      f"{_others_shown(a)} / {_others_shown(b)}")
        return found.stands, found.ratio, len(result.groups["bench-a"])
    finally:
        load.end()


def _others_shown(run) -> str:
    from labkit.verdict import _others

    found = _others(run)
    return "?" if found is None else f"{found[0]:.2f}"


@contextlib.contextmanager
def taking_turns(path: str | None):
    """An exclusive lock on ``path`` while the block runs (none without a path)."""
    if not path:
        yield
        return
    import fcntl

    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def real(trials: int, budget: float | None, only: str | None = None, lock: str | None = None) -> None:
    import labkit

    designs = ["A/A interleaved", "A/A back to back", "A/A′ interleaved (0.77×)"]
    if budget:
        designs += [f"A/A interleaved, budget {budget:g} s", f"A/A′ interleaved (0.77×), budget {budget:g} s"]
    if only:
        designs = [design for design in designs if any(part and part in design for part in only.split("|"))]
        if not designs:
            sys.exit(f"--designs {only!r} matches none of the designs")
    seen: dict[str, list[tuple[bool, float | None, int]]] = {design: [] for design in designs}
    with private_home():
        lab = labkit.start("bench-experiment", profile="ci")
        started = time.monotonic()
        for number in range(1, trials + 1):
            with taking_turns(lock):
                for design in designs:
                    seen[design].append(trial(lab, design, budget if "budget" in design else None))
            print(f"trial {number}/{trials} done after {time.monotonic() - started:.0f} s", flush=True)
        lab.close()
    print("\n| design | trials | verdict stands | ratios (median, range) | runs of each arm |")
    print("|---|---|---|---|---|")
    for design, outcomes in seen.items():
        stood = sum(1 for s, _, _ in outcomes if s)
        ratios = [r for _, r, _ in outcomes if r is not None]
        runs = [n for _, _, n in outcomes]
        print(f"| {design} | {len(outcomes)} | {stood} ({stood / len(outcomes):.0%}) | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | "
              f"{min(runs)}–{max(runs)} |")


def calibrate() -> None:
    import numpy as np

    from labkit.experiment import LOOK_ALPHA
    from labkit.stats import t_quantile

    rng = np.random.default_rng(7)
    size = 200_000

    def paired_stands(d, alpha):
        n = d.shape[1]
        return np.abs(d.mean(1)) / (d.std(1, ddof=1) / np.sqrt(n)) > t_quantile(1 - alpha / 2, n - 1)

    def sequential(d, first, last, alpha):
        hit = np.zeros(len(d), bool)
        for n in range(first, last + 1):
            hit |= paired_stands(d[:, :n], alpha)
        return hit.mean()

    normal = rng.normal(size=(size, 10))
    print("| looks | per-look error rate (LOOK_ALPHA) | all looks, from 2 pairs | from 3 pairs |")
    print("|---|---|---|---|")
    for looks, alpha in LOOK_ALPHA.items():
        print(f"| {looks} | {alpha} | {sequential(normal, 2, 1 + looks, alpha):.3f} | "
              f"{sequential(normal, 3, 2 + looks, alpha):.3f} |")
    print("\nOne look, 3 pairs (A B, B A, A B), 5%: how often A/A stands")
    heavy = rng.standard_t(3, size=(size, 6)) / np.sqrt(3)
    runs = {"normal noise": rng.normal(size=(size, 6)), "heavy tails (t, 3 df)": heavy}
    step = np.zeros(6)
    step[3:] = -0.5  # log tps halves from the fourth run on (load starts halfway)
    drift = np.linspace(0, -0.5, 6)
    order = [0, 1, 1, 0, 0, 1]  # arm of each run position, interleaved
    for label, shift in (("a step halfway", step), ("a steady drift", drift)):
        runs[label] = rng.normal(scale=0.05, size=(size, 6)) + shift
    for label, values in runs.items():
        a = values[:, [i for i, arm in enumerate(order) if arm == 0]]
        b = values[:, [i for i, arm in enumerate(order) if arm == 1]]
        interleaved = paired_stands(b - a, 0.05).mean()
        back = values[:, :3], values[:, 3:]  # A A A then B B B
        welch = _welch_stands(back[0], back[1], t_quantile)
        print(f"  {label}: interleaved {interleaved:.3f}; back to back {welch:.3f}")


def _welch_stands(a, b, t_quantile):
    """Welch's test at 5% for each row (the critical value of each row's degrees of freedom, to a tenth)."""
    import numpy as np

    va, vb = a.var(1, ddof=1) / a.shape[1], b.var(1, ddof=1) / b.shape[1]
    df = np.maximum(1.0, np.round((va + vb) ** 2 / (va ** 2 / (a.shape[1] - 1) + vb ** 2 / (b.shape[1] - 1)), 1))
    values, inverse = np.unique(df, return_inverse=True)
    critical = np.array([t_quantile(0.975, value) for value in values])[inverse]
    return (np.abs(b.mean(1) - a.mean(1)) / np.sqrt(va + vb) > critical).mean()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--budget", type=float, default=None, help="also run experiments with this budget (s)")
    parser.add_argument("--designs", default=None, help="only the designs whose name contains one of these parts")
    parser.add_argument("--lock", default=None, help="a file to lock around each trial")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return
    if os.name != "posix":
        sys.exit("This benchmark starts its busy processes with setsid: POSIX only.")
    real(args.trials, args.budget, args.designs, args.lock)


if __name__ == "__main__":
    main()
