"""labkit's start and drawing costs, measured side by side in one run (prints figures; asserts nothing).

    python tests/benchmarks/bench_labkit.py [--repeats 3]

1. Kernel start to first query with the server already running, in a fresh Python process.
2. First-ever start (a new LABKIT_HOME: initdb, start, create the database) to first query.
3. One live-chart frame in the kernel: what the live widget sends (the figure's JSON) vs the
   notebook output plotly's renderer would need (its mime bundle), for a 60 s run with waits.

What measuring costs a run (raw pgbench vs labkit, each probe alone): bench_probes.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from private_home import private_home

FIRST_QUERY = (
    "import time; t = time.perf_counter(); import labkit; lab = labkit.start('bench');"
    "lab.value('select 1'); print(time.perf_counter() - t)"
)


def first_query_seconds(env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", FIRST_QUERY], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with private_home(60):
        from labkit.embedded import EmbeddedServer

        env = os.environ.copy()
        first_ever = [first_query_seconds(env)]
        for _ in range(args.repeats - 1):  # again from nothing, in a new home each time
            fresh = tempfile.mkdtemp(prefix="labkit-bench-fresh-")
            try:
                first_ever.append(first_query_seconds({**env, "LABKIT_HOME": fresh}))
            finally:
                EmbeddedServer(Path(fresh)).stop(mode="immediate")
                shutil.rmtree(fresh, ignore_errors=True)
        warm = [first_query_seconds(env) for _ in range(args.repeats)]

        def median(values):
            return statistics.median(values)

        print(f"first query, server running (s, median):          {median(warm):.2f}  {[round(v, 2) for v in warm]}  (goal <= 1 s)")
        print(f"first query, first-ever start (s, median):        {median(first_ever):.2f}  {[round(v, 2) for v in first_ever]}  (goal <= 5 s)")
        widget_s, bundle_s, size = frame_cost(args.repeats * 5)
        print(f"one live frame, widget JSON vs plotly bundle (ms): {widget_s * 1000:.0f} vs {bundle_s * 1000:.0f}  "
              f"(ratio {bundle_s / widget_s:.1f}; {size / 1000:.0f} kB a frame)")


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


if __name__ == "__main__":
    main()
