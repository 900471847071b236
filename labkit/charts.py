"""Charts: data in, plotly figure out, every figure in the labkit style (:mod:`labkit.style`).

- :func:`timeline` — one run over time: TPS per second (and per 100 ms) with goodput, latency on
  a log axis, the wait events of the server's backends grouped by class, and any other probe;
  stalls shaded and pgbench's planned end (``-T``) marked.
- :class:`LiveChart` — the same picture, redrawn while the run happens.
- :func:`compare` — several runs: tps over time and one bar each; :func:`sweep` — throughput
  against clients; :func:`logs_beside` — an article's progress logs beside this machine's runs.

A run (or a method of a sweep) has one colour in every chart; its tps is solid, its goodput dashed.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import zip_longest
from time import monotonic

from . import style
from .pgbench import Progress, find_stalls
from .phases import in_part
from .probes import CPU, HELD_BY, WORK, counted, rate
from .records import Run
from .records import order as records_order

STALL_COLOR = style.STALL_COLOR
TPS_NAME = "tps per second"  # the browser test finds the live chart's tps by this name
GOODPUT_NAME = "goodput (work per second)"
STALL_NAME = "stall (tps < 10% of the steady median)"
MAX_WAIT_SERIES = 7
NAMED_FIRST, NAMED_SHARE = 4, 0.05  # events named before any class is folded: the largest, if not tiny
OTHER_WAITS = "other waits"
LATENCY_COLORS = {"avg": style.VERMILLION, "p99": style.ORANGE, "max": style.BLACK}
PROBE_COLORS = (style.BLACK, style.SKY, style.ORANGE, style.PURPLE, style.GREEN, style.VERMILLION, style.BLUE)
LIVE_COLOR = style.BLUE  # a live chart that was not told its run's name

# Panel heights in pixels: the wait panel is as tall as it needs to be read.
ROW_PIXELS = {"tps": 260, "latency": 200, "waits": 260}
PROBE_PIXELS = 160
GAP_PIXELS = 55  # room for each panel's title
TOP_PIXELS, BOTTOM_PIXELS, LEGEND_PIXELS = 90, 60, 240

# A redraw is a whole figure the browser must draw again (a tenth of a second on a laptop, more on
# a busy one): at most one a second, progress and the samples since together.
PROGRESS_REDRAW_S = 1.0
SAMPLES_REDRAW_S = 1.0


def _go():
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    return go, make_subplots


def run_color(run: Run) -> str:
    """A run's colour: that of its method (what a sweep records) or of its name."""
    return style.color(run.extra.get("method") or run.name)


# -- the frame of a timeline


def _rows(probe_names: list[str]) -> list[str]:
    rows = ["tps", "latency"]
    if "waits" in probe_names:
        rows.append("waits")
    rows += [name for name in probe_names if name not in ("waits", WORK, HELD_BY)]
    return rows


_TITLES = {"tps": "transactions per second", "latency": "latency (ms, log scale)",
           "waits": "the run's clients, by what each does", CPU: "CPU, in cores (from the operating system)"}


def _legend_of(row_index: int) -> str:
    return "legend" if row_index == 1 else f"legend{row_index}"


def _frame(rows: list[str], title: str):
    """Panels one above the other on one time axis, each with its legend beside it."""
    go, make_subplots = _go()
    heights = [ROW_PIXELS.get(row, PROBE_PIXELS) for row in rows]
    plot_height = sum(heights) + GAP_PIXELS * (len(rows) - 1)
    figure = make_subplots(
        rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=GAP_PIXELS / plot_height,
        row_heights=heights, subplot_titles=[_TITLES.get(row, f"probe: {row}") for row in rows],
    )
    style.apply(figure)
    figure.update_layout(
        title=title, height=plot_height + TOP_PIXELS + BOTTOM_PIXELS, hovermode="x unified",
        margin=dict(t=TOP_PIXELS, b=BOTTOM_PIXELS, r=LEGEND_PIXELS), **_row_legends(figure, rows),
    )
    figure.update_xaxes(title_text="seconds since the run started", row=len(rows), col=1)
    figure.update_yaxes(rangemode="tozero")  # a second at zero sits on the axis, on both sides
    figure.update_yaxes(title_text="tps", row=1, col=1)
    # ticks at 1, 2, 5, 10, 20, 50 ... written in full (plotly's default labels every digit on a
    # short log axis, and writes 20 and 50 as "2" and "5")
    figure.update_yaxes(title_text="ms", type="log", tickformat=",~g", dtick="D2", row=2, col=1)
    if "waits" in rows:
        figure.update_yaxes(title_text="backends", rangemode="tozero", row=rows.index("waits") + 1, col=1)
    return figure


def _row_legends(figure, rows: list[str]) -> dict:
    """One legend beside each panel, level with its top: a legend no taller than its panel."""
    legends = {}
    for index, row in enumerate(rows, start=1):
        top = figure.layout["yaxis" if index == 1 else f"yaxis{index}"].domain[1]
        legends[_legend_of(index)] = dict(
            x=1.01, xanchor="left", y=top, yanchor="top", bgcolor="rgba(0,0,0,0)",
            traceorder="reversed" if row == "waits" else "normal",  # as the areas are stacked
        )
    return legends


def _add(figure, trace, row_index: int) -> None:
    trace.legend = _legend_of(row_index)
    figure.add_trace(trace, row=row_index, col=1)


def _stall_shapes(stalls) -> list[dict]:
    return [
        dict(type="rect", name="stall", xref="x", yref="paper", x0=s["start"], x1=s["end"], y0=0, y1=1,
             fillcolor=STALL_COLOR, line_width=0, layer="below")
        for s in stalls
    ]


def _phase_shapes(run: Run) -> list[dict]:
    """The start and the tail, shaded apart from stalls: the run's figures leave both out."""
    parts = run.phase_parts()
    if parts is None:
        return []
    bands = [("start", 0, parts.steady_from_s, style.START_COLOR), ("tail", parts.steady_to_s, parts.end_s,
                                                                      style.TAIL_COLOR)]
    return [dict(type="rect", name=name, xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor=color,
                 line_width=0, layer="below") for name, x0, x1, color in bands if x1 - x0 >= 0.05]


def _phase_keys(run: Run) -> list:
    """Legend entries for the start and tail bands."""
    go, _ = _go()
    names = {shape["name"]: shape["fillcolor"] for shape in _phase_shapes(run)}
    labels = {"start": "start: connecting, first second (left out)", "tail": "tail: after the planned end (left out)"}
    return [go.Scatter(x=[None], y=[None], name=labels[name], mode="markers", hoverinfo="skip",
                       marker=dict(symbol="square", size=14, color=color, line=dict(width=0)))
            for name, color in names.items()]


def _stall_key(shown: bool):
    """A legend entry for the stall bands (a shape has none): a square in their colour."""
    go, _ = _go()
    return go.Scatter(x=[None], y=[None], name=STALL_NAME, mode="markers", showlegend=shown, hoverinfo="skip",
                      marker=dict(symbol="square", size=14, color=STALL_COLOR, line=dict(width=0)))


def _planned_end_shapes(planned_s: float | None) -> list[dict]:
    if not planned_s:
        return []
    return [dict(type="line", name="planned end", xref="x", yref="paper", x0=planned_s, x1=planned_s, y0=0, y1=1,
                 line=dict(color=style.PLANNED_END_COLOR, width=1.5, dash="dot"))]


def _planned_end_label(planned_s: float, overrun_s: float | None = None) -> dict:
    """The planned end's label, in the tps panel, left of the line (the run's data is there)."""
    text = f"planned end (-T {planned_s:g} s)"
    if overrun_s and overrun_s >= 0.1:
        text += f"<br>ran {overrun_s:.1f} s over"
    return dict(name="planned end", text=text, x=planned_s, xref="x", y=1, yref="y domain", showarrow=False,
                xanchor="right", yanchor="top", align="right", bgcolor="rgba(255,255,255,0.75)",
                font=dict(size=11, color=style.PLANNED_END_COLOR))


# -- tps and latency


def _tps_trace(x, y, color: str):
    go, _ = _go()
    return go.Scatter(x=x, y=y, name=TPS_NAME, mode="lines+markers", marker_size=5,
                      line=dict(color=color, width=2, dash=style.TPS_DASH))


def work_rates(samples: list[dict]) -> list[tuple[float, float]]:
    """Work per second between consecutive samples of a work counter (at the later sample's time).

    >>> work_rates([{"t": 0.0, "work": 0}, {"t": 1.0, "work": 50}, {"t": 2.0, "work": 150}])
    [(1.0, 50.0), (2.0, 100.0)]
    """
    points = [row for row in samples if row.get("work") is not None]
    rates = [(after["t"], rate(before, after, "work")) for before, after in zip(points, points[1:])]
    return [(round(t, 3), round(speed, 1)) for t, speed in rates if speed is not None]


def _goodput_trace(samples: list[dict], color: str):
    go, _ = _go()
    rates = work_rates(samples)
    return go.Scatter(x=[t for t, _ in rates], y=[r for _, r in rates], name=GOODPUT_NAME, mode="lines+markers",
                      marker=dict(size=5, symbol="diamond"), line=dict(color=color, width=2, dash=style.GOODPUT_DASH))


def _positive(xs, ys) -> tuple[list, list]:
    """The points a log axis can draw: it has no place for zero or a missing value.

    >>> _positive([1, 2, 3, 4], [5.0, None, 0, 2.5])
    ([1, 4], [5.0, 2.5])
    """
    kept = [(x, y) for x, y in zip(xs, ys) if isinstance(y, (int, float)) and y > 0]
    return [x for x, _ in kept], [y for _, y in kept]


def _longest_per_second(fine: list[dict]) -> tuple[list[float], list[float]]:
    """The longest transaction that ended in each second, from the 100 ms bins (``t`` is a bin's end).

    >>> _longest_per_second([{"t": 0.1, "max_ms": 2.0}, {"t": 1.0, "max_ms": 9.0}, {"t": 1.1, "max_ms": None}])
    ([1.0], [9.0])
    """
    longest: dict[int, float] = {}
    for row in fine:
        if row.get("max_ms"):
            second = math.ceil(row["t"] - 1e-9)
            longest[second] = max(longest.get(second, 0.0), row["max_ms"])
    return [float(second) for second in sorted(longest)], [longest[second] for second in sorted(longest)]


def _latency_traces(run: Run) -> list:
    """Average per second, and from the transaction log the p99 per bin and the maximum per second."""
    go, _ = _go()
    seconds = run.per_second
    x, y = _positive([p["t"] for p in seconds], [p.get("lat_ms") for p in seconds])
    traces = [go.Scatter(x=x, y=y, name="latency avg", mode="lines+markers", marker_size=5,
                         line=dict(color=LATENCY_COLORS["avg"], width=2))]
    if run.fine:
        width = int(round((run.fine_width_s or 0.1) * 1000))
        x, y = _positive([b["t"] for b in run.fine], [b.get("p99_ms") for b in run.fine])
        traces.append(go.Scatter(x=x, y=y, name=f"latency p99 per {width} ms", mode="lines",
                                 line=dict(color=LATENCY_COLORS["p99"], width=1)))
        x, y = _longest_per_second(run.fine)
        traces.append(go.Scatter(x=x, y=y, name="latency max per second", mode="lines+markers",
                                 marker=dict(size=6, symbol="triangle-up"),
                                 line=dict(color=LATENCY_COLORS["max"], width=1)))
    return traces


# -- wait events


def wait_class(event: str) -> str:
    """The class of a wait event: the part before its colon ("CPU" and "idle" are their own).

    >>> wait_class("Lock: transactionid"), wait_class("CPU")
    ('Lock', 'CPU')
    """
    return event.split(":", 1)[0].strip()


@dataclass
class WaitSeries:
    """One area of the wait panel: one event, or the smaller events of a class folded together."""

    name: str
    color: str
    events: list[str]
    folded: bool = False


def wait_series(totals: Mapping[str, float], limit: int = MAX_WAIT_SERIES) -> list[WaitSeries]:
    """The wait panel's areas: the largest events by name, the others as 'other <class>', at most ``limit``.

    ``totals`` are backends summed over the run per event. The few largest events are named
    first; each class then gets one area for the rest of its events, the smallest classes sharing
    'other waits' when there are too many; room left over names more events. The areas of a
    class are next to each other, in shades of its colour.

    >>> [s.name for s in wait_series({"CPU": 9, "Lock: tuple": 5, "Lock: relation": 1, "Lock: page": 1}, limit=3)]
    ['CPU', 'Lock: tuple', 'other Lock']
    """
    ranked = sorted(totals, key=lambda event: (-totals[event], event))
    everything = sum(totals.values()) or 1
    named = {event for event in ranked[:min(NAMED_FIRST, limit - 1)] if totals[event] >= NAMED_SHARE * everything}
    merged = _merged_classes(ranked, named, totals, limit - len(named))
    for event in ranked:
        if wait_class(event) not in merged and _count(ranked, named | {event}, merged) <= limit:
            named.add(event)
    groups = _groups(ranked, named, merged)
    order = sorted(groups, key=lambda group: (group == OTHER_WAITS, -sum(totals[e] for e in groups[group])))
    return [series for group in order for series in _group_series(group, groups[group], named)]


def _merged_classes(ranked: list[str], named: set[str], totals: Mapping[str, float], room: int) -> set[str]:
    """The classes whose unnamed events share 'other waits': the smallest, when more than ``room`` are left."""
    left: dict[str, float] = {}
    for event in ranked:
        if event not in named:
            left[wait_class(event)] = left.get(wait_class(event), 0) + totals[event]
    if len(left) <= room:
        return set()
    return set(sorted(left, key=lambda group: -left[group])[max(room - 1, 0):])


def _groups(ranked: list[str], named: set[str], merged: set[str]) -> dict[str, list[str]]:
    """Events by the group drawn for them: their class, or 'other waits' for the unnamed of a merged class."""
    groups: dict[str, list[str]] = {}
    for event in ranked:
        group = OTHER_WAITS if event not in named and wait_class(event) in merged else wait_class(event)
        groups.setdefault(group, []).append(event)
    return groups


def _count(ranked: list[str], named: set[str], merged: set[str]) -> int:
    """How many areas ``named`` events make: one each, and one per group with events left over."""
    groups = _groups(ranked, named, merged)
    return sum(len([e for e in events if e in named]) + any(e not in named for e in events)
               for events in groups.values())


def _group_series(group: str, events: list[str], named: set[str]) -> list[WaitSeries]:
    """The areas of one group: its named events, then one area for the rest, in shades of its colour."""
    shown = [event for event in events if event in named]
    rest = [event for event in events if event not in named]
    if len(rest) == 1 and group != OTHER_WAITS:  # an 'other' of one event is that event
        shown, rest = shown + rest, []
    series = [WaitSeries(event, style.wait_color(group, rank), [event]) for rank, event in enumerate(shown)]
    if rest:
        name, color = ((OTHER_WAITS, style.OTHER_WAITS_COLOR) if group == OTHER_WAITS
                       else (f"other {group}", style.wait_color(group, len(shown))))
        series.append(WaitSeries(name, color, rest, folded=True))
    return series


class WaitCounts:
    """Backends per wait event and sampling instant, added to as samples come (idle instants count too)."""

    def __init__(self, samples: list[dict] | None = None):
        self.instants: set[float] = set()
        self.counts: dict[str, dict[float, int]] = {}
        self.totals: dict[str, int] = {}
        self.add(samples or [])

    def add(self, samples: list[dict]) -> None:
        for row in samples:
            self.instants.add(row["t"])
            if row["wait"] != "idle":
                per_instant = self.counts.setdefault(row["wait"], {})
                backends = row.get("backends") or 0
                per_instant[row["t"]] = per_instant.get(row["t"], 0) + backends
                self.totals[row["wait"]] = self.totals.get(row["wait"], 0) + backends

    def areas(self) -> list[tuple[WaitSeries, list, list, list | None]]:
        """Each area of the wait panel: its series, times, backends and (when folded) the events in it."""
        times = sorted(self.instants)
        drawn = []
        for series in wait_series(self.totals):
            per_event = [self.counts[event] for event in series.events]
            values = [sum(counts.get(t, 0) for counts in per_event) for t in times]
            texts = [self._folded_text(series, t) for t in times] if series.folded else None
            drawn.append((series, times, values, texts))
        return drawn

    def _folded_text(self, series: WaitSeries, t: float) -> str:
        """Which events an 'other' area holds at ``t``, one a line, for its hover."""
        return "".join(f"<br>  {event} ({self.counts[event][t]})" for event in series.events
                       if self.counts[event].get(t))


def _wait_hover(series: WaitSeries) -> str:
    return "%{y} backends%{hovertext}" if series.folded else "%{y} backends"


def _wait_traces(samples: list[dict]):
    """Stacked areas of backends per wait event, at most seven (see :func:`wait_series`)."""
    go, _ = _go()
    return [
        go.Scatter(x=times, y=values, hovertext=texts, hovertemplate=_wait_hover(series), name=series.name,
                   stackgroup="waits", mode="lines", line=dict(width=0.5, color=series.color),
                   fillcolor=series.color)
        for series, times, values, texts in WaitCounts(samples).areas()
    ]


# -- other probes


def _probe_columns(name: str, samples: list[dict]) -> list[tuple[str, list, list, str]]:
    """(trace name, x, y, colour) of each numeric column of a probe's samples."""
    names = list(dict.fromkeys(c for row in samples for c in row if c != "t"))
    # a column is drawn when any sample has a number in it (the first may be NULL, e.g. a ratio of 0/0)
    columns = [c for c in names if any(isinstance(row.get(c), (int, float)) and not isinstance(row.get(c), bool)
                                       for row in samples)]
    x = [row["t"] for row in samples]
    return [(f"{name}: {c}", x, [row.get(c) for row in samples], PROBE_COLORS[index % len(PROBE_COLORS)])
            for index, c in enumerate(columns)]


def _probe_trace(trace_name: str, x, y, color: str, samples: list[dict] | None = None):
    """One probe column as a line, or as points where the probe returns several rows per instant.

    A probe that returns a row per backend (every backend tied on the oldest xmin) has several
    values at one instant: a line through them would zigzag. Each row's text columns go to the
    hover (what each backend was doing).
    """
    go, _ = _go()
    trace = go.Scatter(x=x, y=y, name=trace_name, mode="lines+markers", marker_size=4, line=dict(color=color))
    if samples:
        _probe_style(trace, samples)
    return trace


def _probe_style(trace, samples: list[dict]) -> None:
    times = [row["t"] for row in samples]
    texts = [c for c in dict.fromkeys(c for row in samples for c in row if c != "t")
             if any(isinstance(row.get(c), str) for row in samples)]
    trace.update(mode="markers" if len(set(times)) < len(times) else "lines+markers",
                 marker_size=6 if len(set(times)) < len(times) else 4)
    if texts:
        trace.update(hovertext=["<br>".join(f"{c}: {row[c]}" for c in texts if row.get(c) is not None) for row in samples],
                     hovertemplate="%{y}<br>%{hovertext}<extra>%{fullData.name}</extra>")


def _probe_traces(name: str, samples: list[dict]):
    return [_probe_trace(*column, samples=samples) for column in _probe_columns(name, samples)]


# -- the charts


def timeline(run: Run, *, title: str | None = None, probes: list[str] | None = None):
    """One run over time, stalls (seconds below 10% of the median TPS) shaded, pgbench's planned end marked."""
    go, _ = _go()
    probe_names = [name for name in (probes if probes is not None else run.probes) if run.probes.get(name)]
    rows = _rows(probe_names)
    heading = title or f"{run.name}: {run.clients} clients, {run.tps or 0:,.0f} tps over the steady phase"
    if run.phases:  # what the figures are over, under the title
        heading += "<br><sup>" + "<br>".join(textwrap.wrap(run.phases_sentence(), 130)) + "</sup>"
    figure = _frame(rows, heading)
    color = run_color(run)
    if run.fine:
        width = int(round((run.fine_width_s or 0.1) * 1000))
        _add(figure, go.Scatter(x=[b["t"] for b in run.fine], y=[b["tps"] for b in run.fine],
                                name=f"tps per {width} ms", mode="lines",
                                line=dict(color=style.translucent(color, 0.35), width=1)), 1)
    _add(figure, _tps_trace([p["t"] for p in run.per_second], [p["tps"] for p in run.per_second], color), 1)
    if run.probes.get(WORK):
        _add(figure, _goodput_trace(run.probes[WORK], color), 1)
    if run.stalls:
        _add(figure, _stall_key(True), 1)
    for key in _phase_keys(run):
        _add(figure, key, 1)
    for trace in _latency_traces(run):
        _add(figure, trace, 2)
    for index, row in enumerate(rows[2:], start=3):
        traces = _wait_traces(run.probes[row]) if row == "waits" else _probe_traces(row, run.probes[row])
        for trace in traces:
            _add(figure, trace, index)
    figure.update_layout(shapes=_phase_shapes(run) + _stall_shapes(run.stalls) + _planned_end_shapes(run.duration_s))
    if run.duration_s:
        figure.add_annotation(_planned_end_label(run.duration_s, run.overrun_s))
    for name, note in (run.extra.get("probe_notes") or {}).items():
        if name in rows:  # over the probe's panel: what its zeros can and cannot say
            figure.add_annotation(_panel_note(note, rows.index(name) + 1, style.PLANNED_END_COLOR))
    warning = (run.extra.get("cpu") or {}).get("warning")
    if warning and CPU in rows:
        figure.add_annotation(_cpu_warning_label(warning, rows.index(CPU) + 1))
    return figure


def _cpu_warning_label(text: str, row_index: int) -> dict:
    """The CPU warning, over the CPU panel: the client may have limited the tps."""
    return {**_panel_note(text, row_index, style.VERMILLION), "name": "cpu warning"}


def _panel_note(text: str, row_index: int, color: str) -> dict:
    """A note written over one panel, at its top left."""
    axis = "y" if row_index == 1 else f"y{row_index}"
    return dict(name="probe note", text="<br>".join(textwrap.wrap(text, 90)), x=0, xref="paper", y=1,
                yref=f"{axis} domain", showarrow=False, xanchor="left", yanchor="top", align="left",
                bgcolor="rgba(255,255,255,0.85)", font=dict(size=11, color=color))


class LiveChart:
    """A figure that grows while the run happens, stalls shaded as they happen.

    The first progress line is drawn as soon as it arrives; after that, redraws are at most every
    second. Each redraw hands the figure to
    ``publish`` (the notebook's live view shows it). ``name`` gives the chart its run's colour;
    ``planned_s`` (pgbench's ``-T``) marks the planned end.
    """

    def __init__(self, title: str, probe_names: list[str], *, name: str | None = None,
                 planned_s: float | None = None, publish=None):
        go, _ = _go()
        self.publish = publish
        self.rows = _rows(probe_names)
        self.figure = _frame(self.rows, title)
        color = style.color(name) if name else LIVE_COLOR
        _add(self.figure, _tps_trace([], [], color), 1)
        _add(self.figure, go.Scatter(x=[], y=[], name="latency avg", mode="lines+markers", marker_size=5,
                                     line=dict(color=LATENCY_COLORS["avg"], width=2)), 2)
        if WORK in probe_names:
            _add(self.figure, _goodput_trace([], color), 1)
        _add(self.figure, _stall_key(False), 1)
        self._stall_key = self.figure.data[-1]
        self._wait_slots = self._add_wait_slots() if "waits" in self.rows else []
        self._waits, self._waits_counted = WaitCounts(), 0
        self._planned = _planned_end_shapes(planned_s)
        self.figure.layout.uirevision = "live"  # a zoom or a hidden series survives the next redraw
        if planned_s:
            self.figure.layout.shapes = self._planned
            self.figure.add_annotation(_planned_end_label(planned_s))
        self.points: list[tuple[float, float]] = []
        self.latencies: list[float | None] = []
        self.probe_samples: dict[str, list[dict]] = {name: [] for name in probe_names}
        self.title = title
        self._dirty: set[str] = set()
        self._progress_waiting = False
        self._progress_shown = False
        self._drawn_at: float | None = None
        self.received = 0  # progress lines received; the chart's title shows it (a browser test reads it)
        self.held_by: tuple[float, str] | None = None  # (when, who): every client waits for their lock

    def _add_wait_slots(self) -> list:
        """Empty areas for the wait panel, filled by each redraw (cheaper than adding traces then)."""
        go, _ = _go()
        row_index = self.rows.index("waits") + 1
        for _ in range(MAX_WAIT_SERIES):
            _add(self.figure, go.Scatter(x=[], y=[], name="", stackgroup="waits", mode="lines", showlegend=False,
                                         line=dict(width=0.5)), row_index)
        return list(self.figure.data[-MAX_WAIT_SERIES:])

    def add_progress(self, point: Progress) -> None:
        """One progress line (one per second): the first is drawn at once, later ones with the samples since."""
        self.points.append((point.t, point.tps))
        self.latencies.append(point.lat_ms)
        self.received += 1
        self._progress_waiting = True
        if not self._progress_shown or self._due(PROGRESS_REDRAW_S):
            self._draw()

    def add_samples(self, fresh: dict[str, list[dict]]) -> None:
        """Probe samples; drawn with the next progress line (or within a second if none comes)."""
        if fresh.get(HELD_BY):
            row = fresh[HELD_BY][-1]
            self.held_by = (row["t"], row["holders"])
            self._progress_waiting = True  # the title says it with the next redraw
        for name, rows in fresh.items():
            if name in self.probe_samples:
                self.probe_samples[name].extend(rows)
                self._dirty.add(name)
        if self._progress_waiting and self._due(PROGRESS_REDRAW_S):
            self._draw()
        elif self._dirty and self._due(SAMPLES_REDRAW_S):
            self._draw()

    def _due(self, seconds: float) -> bool:
        return self._drawn_at is None or monotonic() - self._drawn_at >= seconds

    def _draw(self) -> None:
        # One batched update: each update is a redraw in the browser.
        with self.figure.batch_update():
            if self.points:
                self._draw_progress()
            for name in sorted(self._dirty):
                self._draw_probe(name, self.probe_samples[name])
        self._dirty.clear()
        self._progress_waiting = False
        self._drawn_at = monotonic()
        if self.publish is not None:
            self.publish(self.figure)

    def _draw_progress(self) -> None:
        self.figure.layout.title.text = f"{self.title} · {self.received} s so far" + self._held_by_notice()
        times = [t for t, _ in self.points]
        tps, latency = self.figure.data[0], self.figure.data[1]
        tps.x, tps.y = times, [value for _, value in self.points]
        latency.x, latency.y = _positive(times, self.latencies)
        stalls = [{"start": s.start, "end": s.end} for s in find_stalls(self.points)]
        self.figure.layout.shapes = _stall_shapes(stalls) + self._planned
        self._stall_key.showlegend = bool(stalls)
        self._progress_shown = True

    def _held_by_notice(self) -> str:
        """While every client waits for a lock held outside the run (seen within 2 s): by whom."""
        if self.held_by is None or not self.points or self.points[-1][0] - self.held_by[0] > 2.0:
            return ""
        return f" · every client waits for a lock held by {self.held_by[1]}"

    def _draw_waits(self, samples: list[dict]) -> None:
        """The wait areas, counted from the samples not counted yet, into the fixed slots."""
        self._waits.add(samples[self._waits_counted:])
        self._waits_counted = len(samples)
        for slot, drawn in zip_longest(self._wait_slots, self._waits.areas()):
            if drawn is None:
                if slot.name:  # an area of an earlier redraw, now gone
                    slot.update(x=[], y=[], hovertext=None, name="", showlegend=False)
                continue
            series, times, values, texts = drawn
            slot.update(x=list(times), y=list(values), hovertext=texts, hovertemplate=_wait_hover(series),
                        name=series.name, showlegend=True, line_color=series.color, fillcolor=series.color)

    def _draw_probe(self, name: str, samples: list[dict]) -> None:
        if name == WORK:
            goodput = next(t for t in self.figure.data if t.name == GOODPUT_NAME)
            rates = work_rates(samples)
            goodput.x, goodput.y = [t for t, _ in rates], [r for _, r in rates]
        elif name == "waits":
            self._draw_waits(samples)
        elif name in self.rows:
            existing = {trace.name: trace for trace in self.figure.data}
            for trace_name, x, y, color in _probe_columns(name, samples):
                if trace_name in existing:
                    existing[trace_name].x, existing[trace_name].y = x, y
                    _probe_style(existing[trace_name], samples)
                else:
                    _add(self.figure, _probe_trace(trace_name, x, y, color, samples), self.rows.index(name) + 1)


def probe_over_time(runs: list[Run], probe: str, column: str, *, per: str | None = None, title: str | None = None,
                    log_y: bool = False):
    """One probe column of several runs on one time axis, each run in its colour (e.g. an index's size).

    ``per`` divides the column by another of the same sample (HOT updates per update); samples
    where that one is zero or missing are left out. ``log_y`` draws the values on a log axis, for
    runs whose values differ by orders of magnitude.
    """
    go, _ = _go()
    figure = style.apply(go.Figure())
    for run in runs:
        points = [(row["t"], _ratio(row, column, per)) for row in run.probes.get(probe, [])]
        points = [(t, y) for t, y in points if y is not None]
        figure.add_trace(_probe_trace(run.label, [t for t, _ in points], [y for _, y in points], run_color(run)))
    label = column if per is None else f"{column} / {per}"
    figure.update_layout(title=title or f"{probe}: {label}", height=360,
                         xaxis_title="seconds since the run started", yaxis_title=label)
    if log_y:
        figure.update_yaxes(type="log", dtick="D2")
    return figure


def probe_by_count(runs: list[Run], probe: str, part: str, whole: str, *, title: str | None = None):
    """A counter probe's share ``part`` / ``whole``, interval by interval, against ``whole`` counted so far.

    Say the HOT share of each interval against the updates done by then. Runs that did different amounts of work are compared at the same amount, not at the same second.
    """
    go, _ = _go()
    figure = style.apply(go.Figure())
    for run in runs:
        rows = run.probes.get(probe, [])
        counts = counted(rows, whole)
        points = [(count[whole], _ratio(row, f"{part}_per_s", f"{whole}_per_s")) for row, count in zip(rows, counts)]
        points = [(x, y) for x, y in points if y is not None]
        figure.add_trace(_probe_trace(run.label, [x for x, _ in points], [y for _, y in points], run_color(run)))
    figure.update_layout(title=title or f"{probe}: {part} / {whole}", height=360,
                         xaxis_title=f"{whole} so far (from the {probe} probe)", yaxis_title=f"{part} / {whole}")
    return figure


def _ratio(row: dict, column: str, per: str | None) -> float | None:
    """``row[column]``, or ``row[column] / row[per]``; None where either is missing or the divisor is 0.

    >>> _ratio({"hot": 3, "all": 4}, "hot", "all"), _ratio({"hot": 3, "all": 0}, "hot", "all"), _ratio({"hot": 3}, "hot", None)
    (0.75, None, 3)
    """
    value = row.get(column)
    if not isinstance(value, (int, float)):
        return None
    if per is None:
        return value
    divisor = row.get(per)
    return value / divisor if isinstance(divisor, (int, float)) and divisor else None


def _grouped(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs by name, in the order given: the repeats of one name together."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.name, []).append(run)
    return groups


def _group_label(group: list[Run]) -> str:
    return group[0].label + (f" ×{len(group)}" if len(group) > 1 else "")


def compare(runs: list[Run], *, metric: str = "tps", title: str | None = None):
    """Several runs, each name in its colour: tps per second over time (top) and one bar each (below).

    Repeats of one name (``lab.pgbench(..., repeats=3)``) are drawn together: every repeat's line
    over time, and one bar at their mean with their range as an error bar. Figures are over each
    run's steady phase. ``metric`` is ``tps`` or the name of an ``extra`` figure (e.g.
    ``goodput``), drawn as hatched bars beside tps; goodput is also drawn dashed over time for
    runs that sampled their work.
    """
    go, make_subplots = _go()
    groups = _grouped(runs)
    beside = metric != "tps"
    heights = [300, 50 + 28 * len(groups) * (2 if beside else 1)]
    gap = GAP_PIXELS + 30  # the top panel's axis title, then the bars' panel title
    figure = make_subplots(rows=2, cols=1, row_heights=heights, vertical_spacing=gap / (sum(heights) + gap),
                           subplot_titles=["tps per second", "per run, over its steady phase"
                                           + (f": tps and {metric}" if beside else "")])
    style.apply(figure)
    for group in groups.values():
        label = _group_label(group)
        for index, run in enumerate(group):
            color = run_color(run)
            figure.add_trace(go.Scatter(x=[p["t"] for p in run.per_second], y=[p["tps"] for p in run.per_second],
                                        name=label, mode="lines", legendgroup=label, showlegend=index == 0,
                                        line=dict(color=color, width=2 if index == 0 else 1, dash=style.TPS_DASH)),
                             row=1, col=1)
            if metric == "goodput" and run.probes.get(WORK):
                goodput = _goodput_trace(run.probes[WORK], color).update(name=f"{label}: goodput", legendgroup=label,
                                                                         mode="lines", showlegend=index == 0)
                figure.add_trace(goodput, row=1, col=1)
    for trace in _bars(list(groups.values()), metric):
        figure.add_trace(trace, row=2, col=1)
    figure.update_layout(
        title=title or "runs compared", height=sum(heights) + gap + TOP_PIXELS + BOTTOM_PIXELS, barmode="group",
        margin=dict(t=TOP_PIXELS, b=BOTTOM_PIXELS, r=LEGEND_PIXELS), **_bar_legends(figure),
    )
    figure.update_xaxes(title_text="seconds", row=1, col=1)
    figure.update_yaxes(rangemode="tozero")  # a second at zero sits on the axis, on both sides
    figure.update_yaxes(title_text="tps", row=1, col=1)
    figure.update_yaxes(autorange="reversed", row=2, col=1)  # the first run on top
    values = [run.tps for run in runs] + ([run.extra.get(metric) for run in runs] if beside else [])
    largest = max((value for value in values if isinstance(value, (int, float))), default=0)
    # room right of the longest bar for its figure
    figure.update_xaxes(title_text="per second", range=[0, largest * 1.18 or 1], row=2, col=1)
    return figure


def _mean_and_range(group: list[Run], metric: str) -> tuple[float | None, float, float]:
    """The group's mean of ``metric`` and how far its lowest and highest value lie below and above it."""
    from .verdict import value

    values = [v for v in (value(run, metric) for run in group) if v is not None]
    if not values:
        return None, 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, mean - min(values), max(values) - mean


def _bars(groups: list[list[Run]], metric: str) -> list:
    """Horizontal bars (their labels stay readable): tps solid, ``metric`` hatched, each name in its colour.

    A bar is the mean of the name's repeats; its error bar spans their lowest to highest value.
    """
    go, _ = _go()
    labels = [_group_label(group) for group in groups]
    colors = [run_color(group[0]) for group in groups]
    common = dict(y=labels, orientation="h", textposition="outside", cliponaxis=False, legend="legend2")
    bars = []
    repeated = any(len(group) > 1 for group in groups)
    for shown in ["tps"] + ([metric] if metric != "tps" else []):
        figures = [_mean_and_range(group, shown) for group in groups]
        error = dict(type="data", array=[up for _, _, up in figures], arrayminus=[down for _, down, _ in figures],
                     visible=repeated, color=style.PLANNED_END_COLOR, thickness=1.2)
        marker = dict(color=colors) if shown == "tps" else dict(
            color="white", line=dict(color=colors, width=1.5), pattern=dict(shape="/", fgcolor=colors, solidity=0.45))
        bars.append(go.Bar(x=[mean for mean, _, _ in figures],
                           name=("tps (mean of repeats)" if repeated else "tps") if shown == "tps" else shown,
                           marker=marker, error_x=error,
                           texttemplate="%{x:,.0f}" if shown in ("tps", "goodput") else "%{x:,.4~g}", **common))
    return bars


def _bar_legends(figure) -> dict:
    return {
        "legend": dict(x=1.01, xanchor="left", y=figure.layout.yaxis.domain[1], yanchor="top"),
        "legend2": dict(x=1.01, xanchor="left", y=figure.layout.yaxis2.domain[1], yanchor="top"),
    }


def sweep(runs: list[Run], *, title: str | None = None):
    """Throughput against clients, one colour per method: tps (solid) and goodput (dashed), each with its range.

    A method is ``run.extra["method"]`` (what :meth:`labkit.lab.Lab.sweep` records) or the run's name;
    of several runs with the same method and clients, the newest series counts (its repeats: the
    point is their mean, the error bar their range). The x axis is logarithmic, with a tick at each
    number of clients measured.
    """
    go, _ = _go()
    points: dict[str, dict[int, list[Run]]] = {}
    for run in sorted(runs, key=records_order):
        by_clients = points.setdefault(run.extra.get("method", run.name), {})
        kept = by_clients.get(run.clients)
        if kept and run.series and kept[-1].series == run.series:
            kept.append(run)
        else:
            by_clients[run.clients] = [run]
    figure = style.apply(go.Figure())
    for method, by_clients in points.items():
        color = style.color(method)
        clients = sorted(by_clients)
        for metric, dash, symbol in (("tps", style.TPS_DASH, "circle"), ("goodput", style.GOODPUT_DASH, "diamond")):
            figures = [_mean_and_range(by_clients[c], metric) for c in clients]
            if all(mean is None for mean, _, _ in figures):
                continue
            repeated = any(len(by_clients[c]) > 1 for c in clients)
            figure.add_trace(go.Scatter(
                x=clients, y=[mean for mean, _, _ in figures], name=f"{method}: {metric}", mode="lines+markers",
                legendgroup=method, line=dict(color=color, width=2, dash=dash), marker_symbol=symbol,
                error_y=dict(type="data", array=[up for _, _, up in figures],
                             arrayminus=[down for _, down, _ in figures], visible=repeated, thickness=1.2)))
    measured = sorted({clients for by_clients in points.values() for clients in by_clients})
    figure.update_layout(title=title or "throughput by number of clients", height=460, hovermode="x unified")
    figure.update_xaxes(type="log", title_text="clients (log scale)", tickmode="array", tickvals=measured,
                        ticktext=[str(clients) for clients in measured], minor=dict(showgrid=False))
    figure.update_yaxes(title_text="per second", rangemode="tozero")
    return figure


def logs_beside(logs, runs: list[Run], *, by: list[str], title: str | None = None):
    """An article's per-second progress logs (left) beside this machine's runs (right), over their steady phases.

    ``logs`` is a frame with ``t`` and ``tps`` columns (e.g. from :func:`labkit.article.figures`);
    each distinct combination of the ``by`` columns is one line. Seconds at zero show as zero. A
    run's start and its tail after ``-T`` are left out: an article's logs are excerpts from within
    its runs, and a tail's seconds at zero are pgbench waiting for its last clients, not a stall.
    With no runs the article's logs are drawn alone, over the whole width.
    """
    go, make_subplots = _go()
    columns = 2 if runs else 1  # the article's logs alone (no run yet) take the whole width
    figure = make_subplots(rows=1, cols=columns, subplot_titles=["the article (its machine and version)",
                                                                 "this run (this machine)"][:columns])
    style.apply(figure)
    for key, group in logs.groupby(by, sort=False):
        values = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{column} {value}" for column, value in zip(by, values))
        figure.add_trace(go.Scatter(x=group["t"], y=group["tps"], name=label, mode="lines+markers",
                                    marker_size=4, legendgroup="article", legendgrouptitle_text="the article",
                                    line=dict(color=style.color(label))), row=1, col=1)
    for run in runs:
        # its steady phase: the article's logs are excerpts from within long runs, with no start or tail
        parts = run.phase_parts()
        steady = [point for _, _, point in in_part(run.per_second, parts)] if parts else run.per_second
        figure.add_trace(go.Scatter(x=[p["t"] for p in steady], y=[p["tps"] for p in steady],
                                    name=run.label, mode="lines+markers", marker_size=4, legendgroup="here",
                                    legendgrouptitle_text="this machine",
                                    line=dict(color=run_color(run), dash=style.TPS_DASH)), row=1, col=2)
    figure.update_layout(title=title or "per-second throughput: the article beside this run", height=480)
    figure.update_xaxes(title_text="seconds")
    figure.update_yaxes(rangemode="tozero")  # a second at zero sits on the axis, on both sides
    figure.update_yaxes(title_text="tps", row=1, col=1)
    return figure


# -- an interleaving, one lane per session


def lanes(run, *, title: str | None = None):
    """One permutation of an interleaving (:class:`labkit.interleave.PermutationRun`) as lanes.

    One lane per session, a box per step from its launch to its completion, in the order things
    happened. A step the server made wait is drawn faded while it waited, with the lock it asked
    for and who held it (from ``pg_locks`` at that moment), and an arrow from the step whose
    completion released it. A step that ended in an error is outlined in red with the error.
    """
    go, _ = _go()
    figure = style.apply(go.Figure())
    sessions = list(run.sessions)
    last = max([e.completed_order or 0 for e in run.events] + [e.order for e in run.events] + [0]) + 1
    for event in run.events:
        end = event.completed_order if event.completed_order is not None else last
        color = style.color(event.session)
        waited = event.waiting_s is not None
        hover = (f"<b>{event.step}</b> ({event.session})<br>{_html_lines(event.sql)}<br>launched at "
                 f"{event.launched_s * 1000:,.0f} ms" + (f", seen waiting at {event.waiting_s * 1000:,.0f} ms"
                                                       if waited else "")
                 + (f", completed at {event.completed_s * 1000:,.0f} ms" if event.completed_s is not None else
                    ", did not complete") + (f"<br>{event.error}" if event.error else ""))
        figure.add_trace(go.Bar(
            x=[max(end - event.order, 0.8)], base=[event.order], y=[event.session], orientation="h",
            name=event.step, showlegend=False, text=[event.step], textposition="inside", insidetextanchor="start",
            textangle=0, constraintext="none",
            marker=dict(color=style.translucent(color, 0.3 if waited else 0.85),
                        line=dict(color=style.VERMILLION if event.error else color, width=3 if event.error else 1),
                        pattern=dict(shape="/" if waited else "", fgcolor=color, solidity=0.25)),
            hovertemplate=hover + "<extra></extra>", width=0.6))
        if waited:
            lock = event.lock
            said = (f"waits for {lock.get('mode')} on {lock.get('locktype')} {lock.get('what')}".strip()
                    + (f", held by {', '.join(lock['held_by'])}" if lock.get("held_by") else "")) if lock else "waits"
            figure.add_annotation(x=event.order + 0.1, y=event.session, yshift=-22, text=said, showarrow=False,
                                  xanchor="left", font=dict(size=11, color=style.PLANNED_END_COLOR))
        elif event.held_s is not None:  # reported waiting by a marker of the permutation, not by a lock
            figure.add_annotation(x=event.order + 0.1, y=event.session, yshift=-22, showarrow=False, xanchor="left",
                                  text="held by a marker of the permutation (no lock wait)",
                                  font=dict(size=11, color=style.PLANNED_END_COLOR))
        if event.error:
            figure.add_annotation(x=end, y=event.session, yshift=22, text=event.error, showarrow=False,
                                  xanchor="right", font=dict(size=11, color=style.VERMILLION))
        releaser = next((e for e in run.events if e.step == event.released_by and e.completed_order is not None), None)
        if waited and releaser is not None and event.completed_order is not None:
            figure.add_annotation(x=event.completed_order, y=event.session, ax=releaser.completed_order,
                                  ay=releaser.session, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                                  arrowhead=3, arrowwidth=1.5, arrowcolor=style.PLANNED_END_COLOR, text="")
    figure.update_layout(
        title=title or f"permutation: {run.name}", barmode="overlay", height=140 + 90 * len(sessions),
        margin=dict(l=80, r=40, t=70, b=60), bargap=0.3)
    figure.update_yaxes(categoryorder="array", categoryarray=sessions[::-1], title_text="session")
    figure.update_xaxes(title_text="order of events (each launch and each completion)", dtick=1, range=[-0.2, last + 0.2])
    return figure


def _html_lines(sql: str) -> str:
    import html

    return "<br>".join(html.escape(line) for line in sql.strip().splitlines())
