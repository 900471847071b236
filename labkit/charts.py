"""Charts: data in, plotly figure out.

- :func:`timeline` — one run over time: TPS per second (and per 100 ms), latency, the
  wait events of the server's backends and any other probe, with stalls shaded.
- :class:`LiveChart` — the same picture, filled while the run happens (a FigureWidget).
- :func:`compare` — several runs side by side; :func:`bars` — one figure per run.
"""

from __future__ import annotations

import time

from .pgbench import Progress, find_stalls
from .probes import WORK
from .records import Run

STALL_COLOR = "rgba(214, 39, 40, 0.15)"
TPS_COLOR = "#1f77b4"
GOODPUT_COLOR = "#2ca02c"
GOODPUT_NAME = "goodput (work per second)"
FINE_COLOR = "rgba(31, 119, 180, 0.35)"
LATENCY_COLOR = "#ff7f0e"
WAIT_COLORS = {
    "CPU": "#2ca02c",
    "idle": "#dddddd",
    "Lock: transactionid": "#d62728",
    "Lock: tuple": "#ff9896",
    "Lock: relation": "#9467bd",
    "Lock: advisory": "#8c564b",
    "LWLock: BufferContent": "#e377c2",
    "LWLock: WALWrite": "#7f7f7f",
    "IO: DataFileRead": "#bcbd22",
    "IPC: ProcArrayGroupUpdate": "#17becf",
}


def _go():
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    return go, make_subplots


def _rows(probe_names: list[str]) -> list[str]:
    rows = ["tps", "latency"]
    if "waits" in probe_names:
        rows.append("waits")
    rows += [name for name in probe_names if name not in ("waits", WORK)]
    return rows


_TITLES = {"tps": "transactions per second", "latency": "latency (ms)", "waits": "backends by wait event"}


def _frame(rows: list[str], title: str, widget: bool = False):
    go, make_subplots = _go()
    heights = [0.4] + [0.6 / (len(rows) - 1)] * (len(rows) - 1)
    figure = make_subplots(
        rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=heights,
        subplot_titles=[_TITLES.get(row, f"probe: {row}") for row in rows],
    )
    figure.update_layout(
        title=title, height=260 + 150 * len(rows), margin=dict(l=60, r=20, t=70, b=40),
        legend=dict(orientation="h", y=-0.08), template="plotly_white", hovermode="x unified",
    )
    figure.update_xaxes(title_text="seconds since the run started", row=len(rows), col=1)
    if widget:
        figure = go.FigureWidget(figure)
    return figure


def _stall_shapes(stalls, rows_count: int) -> list[dict]:
    return [
        dict(type="rect", xref="x", yref="paper", x0=s["start"], x1=s["end"], y0=0, y1=1,
             fillcolor=STALL_COLOR, line_width=0, layer="below")
        for s in stalls
    ]


def _wait_traces(samples: list[dict]):
    """Stacked areas of backends per wait event, one trace per event."""
    go, _ = _go()
    times = sorted({row["t"] for row in samples})
    events: dict[str, dict[float, int]] = {}
    for row in samples:
        events.setdefault(row["wait"], {})[row["t"]] = row["backends"]
    order = sorted(events, key=lambda name: -sum(events[name].values()))
    return [
        go.Scatter(
            x=times, y=[events[name].get(t, 0) for t in times], name=name, stackgroup="waits",
            mode="lines", line=dict(width=0.5, color=WAIT_COLORS.get(name)), legendgroup="waits",
        )
        for name in order if name != "idle"
    ]


def _probe_traces(name: str, samples: list[dict]):
    go, _ = _go()
    names = list(dict.fromkeys(c for row in samples for c in row if c != "t"))
    # a column is drawn when any sample has a number in it (the first may be NULL, e.g. a ratio of 0/0)
    columns = [c for c in names if any(isinstance(row.get(c), (int, float)) and not isinstance(row.get(c), bool)
                                       for row in samples)]
    return [
        go.Scatter(x=[row["t"] for row in samples], y=[row.get(c) for row in samples], name=f"{name}: {c}",
                   mode="lines+markers", marker_size=4)
        for c in columns
    ]


def work_rates(samples: list[dict]) -> list[tuple[float, float]]:
    """Work per second between consecutive samples of a work counter (at the later sample's time).

    >>> work_rates([{"t": 0.0, "work": 0}, {"t": 1.0, "work": 50}, {"t": 2.0, "work": 150}])
    [(1.0, 50.0), (2.0, 100.0)]
    """
    points = [(row["t"], row["work"]) for row in samples if row.get("work") is not None]
    return [(round(t1, 3), round((w1 - w0) / (t1 - t0), 1))
            for (t0, w0), (t1, w1) in zip(points, points[1:]) if t1 > t0]


def _goodput_trace(samples: list[dict]):
    go, _ = _go()
    rates = work_rates(samples)
    return go.Scatter(x=[t for t, _ in rates], y=[r for _, r in rates], name=GOODPUT_NAME,
                      mode="lines+markers", line=dict(color=GOODPUT_COLOR, width=2, dash="dot"))


def timeline(run: Run, *, title: str | None = None, probes: list[str] | None = None):
    """One run over time, with stalls (seconds below 10% of the median TPS) shaded."""
    go, _ = _go()
    probe_names = [name for name in (probes if probes is not None else run.probes) if run.probes.get(name)]
    rows = _rows(probe_names)
    figure = _frame(rows, title or f"{run.name}: {run.clients} clients, {run.tps or 0:,.0f} tps")
    seconds = run.per_second
    if run.fine:
        figure.add_trace(go.Scatter(x=[b["t"] for b in run.fine], y=[b["tps"] for b in run.fine],
                                    name=f"tps per {int(run.fine_width_s * 1000)} ms", mode="lines",
                                    line=dict(color=FINE_COLOR, width=1)), row=1, col=1)
    figure.add_trace(go.Scatter(x=[p["t"] for p in seconds], y=[p["tps"] for p in seconds], name="tps per second",
                                mode="lines+markers", line=dict(color=TPS_COLOR, width=2)), row=1, col=1)
    if run.probes.get(WORK):
        figure.add_trace(_goodput_trace(run.probes[WORK]), row=1, col=1)
    figure.add_trace(go.Scatter(x=[p["t"] for p in seconds], y=[p["lat_ms"] for p in seconds], name="latency avg",
                                mode="lines+markers", line=dict(color=LATENCY_COLOR)), row=2, col=1)
    if run.fine:
        figure.add_trace(go.Scatter(x=[b["t"] for b in run.fine], y=[b["max_ms"] for b in run.fine],
                                    name="latency max per bin", mode="lines",
                                    line=dict(color="rgba(255,127,14,0.35)", width=1)), row=2, col=1)
    for index, row in enumerate(rows[2:], start=3):
        traces = _wait_traces(run.probes[row]) if row == "waits" else _probe_traces(row, run.probes[row])
        for trace in traces:
            figure.add_trace(trace, row=index, col=1)
    figure.update_layout(shapes=_stall_shapes(run.stalls, len(rows)))
    return figure


class LiveChart:
    """A FigureWidget that grows one point per progress line, stalls shaded as they happen."""

    def __init__(self, title: str, probe_names: list[str]):
        go, _ = _go()
        self.rows = _rows(probe_names)
        self.figure = _frame(self.rows, title, widget=True)
        self.figure.add_trace(go.Scatter(x=[], y=[], name="tps per second", mode="lines+markers",
                                         line=dict(color=TPS_COLOR, width=2)), row=1, col=1)
        self.figure.add_trace(go.Scatter(x=[], y=[], name="latency avg", mode="lines+markers",
                                         line=dict(color=LATENCY_COLOR)), row=2, col=1)
        if WORK in probe_names:
            self.figure.add_trace(_goodput_trace([]), row=1, col=1)
        self.points: list[tuple[float, float]] = []
        self.latencies: list[float | None] = []
        self.probe_samples: dict[str, list[dict]] = {name: [] for name in probe_names}
        self.title = title
        self._dirty: set[str] = set()
        self._drawn_at = 0.0
        self.received = 0  # progress lines drawn; the chart's title shows it (a browser test reads it)

    def add_progress(self, point: Progress) -> None:
        """One progress line (one per second): the chart is redrawn with it and the samples since."""
        self.points.append((point.t, point.tps))
        self.latencies.append(point.lat_ms)
        self.received += 1
        self._draw()

    def add_samples(self, fresh: dict[str, list[dict]]) -> None:
        """Probe samples; drawn with the next progress line (or within a second if none comes)."""
        for name, rows in fresh.items():
            if name in self.probe_samples:
                self.probe_samples[name].extend(rows)
                self._dirty.add(name)
        if self._dirty and time.monotonic() - self._drawn_at >= 1.0:
            self._draw()

    def _draw(self) -> None:
        # One batched update per second at most: each update is a redraw in the browser, and a
        # browser that redraws several times a second on a busy laptop falls behind.
        with self.figure.batch_update():
            if self.points:
                self.figure.layout.title.text = f"{self.title} · {self.received} s so far"
                tps, latency = self.figure.data[0], self.figure.data[1]
                tps.x, tps.y = [t for t, _ in self.points], [v for _, v in self.points]
                latency.x, latency.y = tps.x, self.latencies
                stalls = [{"start": s.start, "end": s.end} for s in find_stalls(self.points)]
                self.figure.layout.shapes = _stall_shapes(stalls, len(self.rows))
            for name in sorted(self._dirty):
                samples = self.probe_samples[name]
                if name == WORK:
                    goodput = next(t for t in self.figure.data if t.name == GOODPUT_NAME)
                    rates = work_rates(samples)
                    goodput.x, goodput.y = [t for t, _ in rates], [r for _, r in rates]
                    continue
                if name not in self.rows:
                    continue
                row_index = self.rows.index(name) + 1
                traces = _wait_traces(samples) if name == "waits" else _probe_traces(name, samples)
                existing = {trace.name: trace for trace in self.figure.data}
                for trace in traces:
                    if trace.name in existing:
                        existing[trace.name].x, existing[trace.name].y = trace.x, trace.y
                    else:
                        self.figure.add_trace(trace, row=row_index, col=1)
        self._dirty.clear()
        self._drawn_at = time.monotonic()


def compare(runs: list[Run], *, metric: str = "tps", title: str | None = None):
    """Several runs: their per-second TPS over time (left) and one bar each (right).

    ``metric`` is ``tps`` or the name of an ``extra`` figure (e.g. ``goodput``), drawn beside tps.
    """
    go, make_subplots = _go()
    figure = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38],
                           subplot_titles=["tps per second", "per run"])
    for run in runs:
        figure.add_trace(go.Scatter(x=[p["t"] for p in run.per_second], y=[p["tps"] for p in run.per_second],
                                    name=run.label, mode="lines"), row=1, col=1)
    labels = [run.label for run in runs]
    figure.add_trace(go.Bar(x=labels, y=[run.tps for run in runs], name="tps (pgbench)",
                            marker_color=TPS_COLOR), row=1, col=2)
    if metric != "tps":
        figure.add_trace(go.Bar(x=labels, y=[run.extra.get(metric) for run in runs], name=metric,
                                marker_color="#2ca02c"), row=1, col=2)
    figure.update_layout(title=title or "runs compared", template="plotly_white", height=420, barmode="group",
                         legend=dict(orientation="h", y=-0.2))
    figure.update_xaxes(title_text="seconds", row=1, col=1)
    return figure


def sweep(runs: list[Run], *, title: str | None = None):
    """Throughput against clients, one colour per method: pgbench's tps (solid) and goodput (dashed).

    A method is ``run.extra["method"]`` (what :meth:`labkit.lab.Lab.sweep` records) or the run's name;
    of several runs with the same method and clients, the newest counts.
    """
    go, _ = _go()
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    points: dict[str, dict[int, Run]] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        points.setdefault(run.extra.get("method", run.name), {})[run.clients] = run
    figure = go.Figure()
    for index, (method, by_clients) in enumerate(points.items()):
        color = palette[index % len(palette)]
        clients = sorted(by_clients)
        figure.add_trace(go.Scatter(x=clients, y=[by_clients[c].tps for c in clients], name=f"{method}: tps",
                                    mode="lines+markers", line=dict(color=color), legendgroup=method))
        if any("goodput" in by_clients[c].extra for c in clients):
            figure.add_trace(go.Scatter(x=clients, y=[by_clients[c].extra.get("goodput") for c in clients],
                                        name=f"{method}: goodput", mode="lines+markers", legendgroup=method,
                                        line=dict(color=color, dash="dash"), marker_symbol="diamond"))
    figure.update_layout(title=title or "throughput by number of clients", template="plotly_white", height=450,
                         legend=dict(orientation="h", y=-0.2), hovermode="x unified")
    figure.update_xaxes(type="log", title_text="clients (log scale)")
    figure.update_yaxes(title_text="per second", rangemode="tozero")
    return figure


def logs_beside(logs, runs: list[Run], *, by: list[str], title: str | None = None):
    """An article's per-second progress logs (left) beside this machine's runs (right).

    ``logs`` is a frame with ``t`` and ``tps`` columns (e.g. from :func:`labkit.article.figures`);
    each distinct combination of the ``by`` columns is one line. Seconds at zero show as zero.
    """
    go, make_subplots = _go()
    figure = make_subplots(rows=1, cols=2, subplot_titles=["the article (its machine and version)",
                                                           "this run (this machine)"])
    for key, group in logs.groupby(by, sort=False):
        values = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{column} {value}" for column, value in zip(by, values))
        figure.add_trace(go.Scatter(x=group["t"], y=group["tps"], name=label, mode="lines+markers",
                                    marker_size=4, legendgroup="article"), row=1, col=1)
    for run in runs:
        figure.add_trace(go.Scatter(x=[p["t"] for p in run.per_second], y=[p["tps"] for p in run.per_second],
                                    name=run.label, mode="lines+markers", marker_size=4, legendgroup="here",
                                    line=dict(dash="dot")), row=1, col=2)
    figure.update_layout(title=title or "per-second throughput: the article beside this run",
                         template="plotly_white", height=460, legend=dict(orientation="h", y=-0.22))
    figure.update_xaxes(title_text="seconds")
    figure.update_yaxes(title_text="tps", rangemode="tozero", row=1, col=1)
    return figure
