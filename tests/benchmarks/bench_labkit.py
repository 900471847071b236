"""labkit's own cost, measured side by side in one run (prints figures; asserts nothing).

    python tests/benchmarks/bench_labkit.py [--seconds 5] [--repeats 3] [--clients 4]

1. TPS of one script through labkit (live chart + wait-event probe + transaction log) vs raw
   pgbench with the same options, alternating repetitions: the ratio of medians.
2. Probe overhead: the same run with and without probes, and the time the probes spent querying.
3. Kernel start to first query with the server already running, in a fresh Python process.
4. First-ever start (a new LABKIT_HOME: initdb, start, create the database) to first query.
5. One live-chart frame in the kernel: what the live widget sends (the figure's JSON) vs the
   notebook output plotly's renderer would need (its mime bundle), for a 60 s run with waits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

SCRIPT = "\\set id random(1, 1000)\nupdate bench set n = n + 1 where id = :id;\n"
FIRST_QUERY = (
    "import time; t = time.perf_counter(); import labkit; lab = labkit.start('bench');"
    "lab.value('select 1'); print(time.perf_counter() - t)"
)


def first_query_seconds(env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", FIRST_QUERY], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="labkit-bench-")
    results = tempfile.mkdtemp(prefix="labkit-bench-results-")
    os.environ.update(LABKIT_HOME=home, LABKIT_RESULTS=results, LABKIT_PROFILE="ci", LABKIT_IDLE_STOP="60")
    import labkit
    from labkit import pgbench
    from labkit.binaries import program
    from labkit.charts import LiveChart
    from labkit.embedded import EmbeddedServer
    from labkit.probes import WAIT_EVENTS
    from labkit.runner import PgbenchRunner

    try:
        env = os.environ.copy()
        first_ever = [first_query_seconds(env)]
        for _ in range(args.repeats - 1):  # again from nothing, in a new home each time
            fresh = tempfile.mkdtemp(prefix="labkit-bench-fresh-")
            try:
                first_ever.append(first_query_seconds({**env, "LABKIT_HOME": fresh}))
            finally:
                EmbeddedServer(__import__("pathlib").Path(fresh)).stop(mode="immediate")
                shutil.rmtree(fresh, ignore_errors=True)
        warm = [first_query_seconds(env) for _ in range(args.repeats)]

        lab = labkit.start("bench")
        lab.sql("drop table if exists bench; create table bench (id int primary key, n int);"
                "insert into bench select g, 0 from generate_series(1, 1000) g")
        spec = pgbench.parse_options(["-c", str(args.clients), "-T", str(args.seconds), "--name", "bench"],
                                     script=SCRIPT)
        target = lab._target()
        runner = PgbenchRunner(target)
        raw_tps, labkit_tps, no_probe_tps, probe_share = [], [], [], []
        bare = pgbench.parse_options(["-c", str(args.clients), "-T", str(args.seconds), "--no-log",
                                      "--name", "bench-plain"], script=SCRIPT)

        def full():
            run = runner.run(spec, probes=[WAIT_EVENTS], observer=ChartObserver(LiveChart("bench", ["waits"])))
            probe_share.append(len(run.probes["waits"]))
            labkit_tps.append(run.tps)

        variants = [
            lambda: raw_tps.append(raw_pgbench(program("pgbench"), spec, target.environment)),
            full,
            lambda: no_probe_tps.append(runner.run(bare, probes=[]).tps),
        ]
        for repetition in range(args.repeats):
            # rotate the order so that no variant always runs first (the table grows as it goes)
            for index in range(len(variants)):
                variants[(index + repetition) % len(variants)]()
        lab.close()

        def median(values):
            return statistics.median(values)

        print(f"machine: {os.cpu_count()} cores; {args.clients} clients, {args.seconds} s per run, "
              f"{args.repeats} alternating repetitions")
        print(f"raw pgbench tps (median):                         {median(raw_tps):,.0f}  {[round(v) for v in raw_tps]}")
        print(f"labkit tps, live chart + waits probe + tx log:    {median(labkit_tps):,.0f}  {[round(v) for v in labkit_tps]}")
        print(f"labkit tps, no probes, no tx log:                 {median(no_probe_tps):,.0f}  {[round(v) for v in no_probe_tps]}")
        print(f"ratio labkit(full) / raw:                         {median(labkit_tps) / median(raw_tps):.3f}  (goal >= 0.99)")
        print(f"ratio labkit(bare) / raw:                         {median(no_probe_tps) / median(raw_tps):.3f}")
        print(f"wait-event samples per run:                       {median(probe_share):.0f} "
              f"({median(probe_share) / args.seconds:.1f} per second)")
        print(f"first query, server running (s, median):          {median(warm):.2f}  {[round(v, 2) for v in warm]}  (goal <= 1 s)")
        print(f"first query, first-ever start (s, median):        {median(first_ever):.2f}  {[round(v, 2) for v in first_ever]}  (goal <= 5 s)")
        widget_s, bundle_s, size = frame_cost(args.repeats * 5)
        print(f"one live frame, widget JSON vs plotly bundle (ms): {widget_s * 1000:.0f} vs {bundle_s * 1000:.0f}  "
              f"(ratio {bundle_s / widget_s:.1f}; {size / 1000:.0f} kB a frame)")
    finally:
        EmbeddedServer().stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(results, ignore_errors=True)


def frame_cost(repeats: int) -> tuple[float, float, int]:
    """Median seconds to make one frame of a 60 s live chart with 8 wait events: widget JSON, mime bundle."""
    import time

    import plotly.io

    from labkit.charts import LiveChart
    from labkit.pgbench import Progress

    plotly.io.renderers.default = "plotly_mimetype"  # what a JupyterLab kernel uses
    chart = LiveChart("bench", ["waits"], planned_s=60)
    for second in range(1, 61):
        chart.add_samples({"waits": [{"t": second - 1 + q / 4, "wait": f"LWLock: event{e}", "backends": e + 1}
                                     for q in range(4) for e in range(8)]})
        chart.add_progress(Progress(t=second, tps=1000.0 + second, lat_ms=1.0, stddev_ms=0.1))
    chart._draw()
    widget, bundle = [], []
    for _ in range(repeats):  # alternating, side by side
        started = time.perf_counter()
        text = plotly.io.to_json(chart.figure, validate=False)
        widget.append(time.perf_counter() - started)
        started = time.perf_counter()
        chart.figure._repr_mimebundle_()
        bundle.append(time.perf_counter() - started)
    return statistics.median(widget), statistics.median(bundle), len(text)


class ChartObserver:
    """The live chart fed as a notebook feeds it, without a notebook to show it in."""

    def __init__(self, chart):
        self.chart = chart

    def progress(self, point, line):
        self.chart.add_progress(point)

    def samples(self, fresh):
        self.chart.add_samples(fresh)


def raw_pgbench(binary, spec, env_extra) -> float:
    """pgbench alone: same script and options, progress only (what a student would type in a shell)."""
    from pathlib import Path

    from labkit import pgbench

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "s.sql"
        script.write_text(SCRIPT, encoding="utf-8")
        argv = pgbench.build_argv(spec, [script])
        out = subprocess.run([str(binary), *argv], capture_output=True, text=True, env={**os.environ, **env_extra},
                             check=True)
    return pgbench.parse_summary(out.stdout).tps


if __name__ == "__main__":
    main()
