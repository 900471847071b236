"""What labkit's measuring costs the run it measures (prints figures; asserts nothing).

    python tests/benchmarks/bench_probes.py [--seconds 6] [--rounds 3]

Two workloads: a light read at the highest rate the machine reaches (4 clients, 2 threads,
prepared), and one hot row updated by 200 clients. For each, in alternating rounds (the order
rotates every round, so that no variant always runs first): raw pgbench; pgbench with labkit's
flags (-r -P 1 -l); labkit with no probes; labkit with its default probes (waits, held_by, cpu);
each built-in probe alone; and labkit's default with the transaction log sampled at 10%. Each
is printed as the ratio of its median tps to raw pgbench's median, with every round's figure.
For the sampled log, the 100 ms bins are compared with pgbench's own per-second counts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from private_home import private_home

LIGHT = "\\set id random(1, 1000)\nselect :id::int + 1;\n"
HOT = "update hot set n = n + 1 where id = 1;\n"


def raw(binary: Path, spec, environment: dict, *, labkit_flags: bool) -> float:
    """pgbench alone, as a student would type it in a shell (or with the flags labkit adds)."""
    from labkit import pgbench

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "s.sql").write_text(spec.scripts[0].text, encoding="utf-8")
        if labkit_flags:
            argv = pgbench.build_argv(spec, [Path("s.sql")], log_prefix=Path("tx"))
        else:
            argv = ["-n", "-c", str(spec.clients), "-j", str(spec.threads), "-M", spec.mode,
                    "-T", str(int(spec.duration_s)), "-f", "s.sql"]
        done = subprocess.run([str(binary), *argv], capture_output=True, encoding="utf-8", cwd=folder,
                              env={**os.environ, **environment}, check=True)
    return pgbench.parse_summary(done.stdout).tps


def bins_against_progress(run) -> float:
    """The largest gap between the 100 ms bins (averaged per second) and pgbench's per-second tps, as a share."""
    worst = 0.0
    for point in run.per_second[1:-1]:  # whole seconds only
        inside = [b["tps"] for b in run.fine if point["t"] - 1 < b["t"] - 1e-6 <= point["t"]]
        if len(inside) == 10 and point["tps"]:
            worst = max(worst, abs(statistics.mean(inside) - point["tps"]) / point["tps"])
    return worst


def measure(title: str, spec, runner, binary: Path, environment: dict, args) -> None:
    """One workload: every variant in alternating rounds, printed as ratios to raw pgbench."""
    from labkit.probes import CPU, HELD_BY, WAIT_EVENTS

    sampled = replace(spec, sampling_rate=0.1)
    figures: dict[str, list[float]] = {}
    bins: list[float] = []

    def labkit_run(probes, own, chosen=spec):
        run = runner.run(chosen, probes=probes, own_probes=own)
        if chosen is sampled:
            bins.append(bins_against_progress(run))
        return run.tps

    variants = {
        "raw pgbench": lambda: raw(binary, spec, environment, labkit_flags=False),
        "pgbench with labkit's flags": lambda: raw(binary, spec, environment, labkit_flags=True),
        "labkit, no probes": lambda: labkit_run([], ()),
        "labkit, default probes": lambda: labkit_run([WAIT_EVENTS], (HELD_BY, CPU)),
        "labkit, waits alone": lambda: labkit_run([WAIT_EVENTS], ()),
        "labkit, held_by alone": lambda: labkit_run([], (HELD_BY,)),
        "labkit, cpu alone": lambda: labkit_run([], (CPU,)),
        "labkit, default probes, log sampled 10%": lambda: labkit_run([WAIT_EVENTS], (HELD_BY, CPU), sampled),
    }
    names = list(variants)
    for round_ in range(args.rounds):
        for index in range(len(names)):
            name = names[(index + round_) % len(names)]
            figures.setdefault(name, []).append(variants[name]())
    base = statistics.median(figures["raw pgbench"])
    print(f"\n{title}: {args.seconds} s runs, {args.rounds} alternating rounds, {os.cpu_count()} cores")
    for name in names:
        values = figures[name]
        print(f"  {name:<42} {statistics.median(values) / base:6.3f}   "
              f"median {statistics.median(values):>9,.0f} tps   rounds {[round(v) for v in values]}")
    if bins:
        print(f"  sampled log: largest gap between the 100 ms bins and pgbench's per-second tps: {max(bins):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with private_home(120):
        import labkit
        from labkit import pgbench
        from labkit.binaries import program
        from labkit.runner import PgbenchRunner

        lab = labkit.start("bench")
        lab.need_connections(210)
        lab.sql("drop table if exists hot; create table hot (id int primary key, n int); insert into hot values (1, 0)")
        target = lab._target()
        runner = PgbenchRunner(target)
        workloads = {
            "light read, 4 clients": pgbench.parse_options(
                ["-c", "4", "-j", "2", "-M", "prepared", "-T", str(args.seconds), "--name", "light"], script=LIGHT),
            "hot row, 200 clients": pgbench.parse_options(
                ["-c", "200", "-j", "2", "-T", str(args.seconds), "--name", "hot"], script=HOT),
        }
        for title, spec in workloads.items():
            measure(title, spec, runner, program("pgbench"), target.environment, args)
        lab.close()


if __name__ == "__main__":
    main()
