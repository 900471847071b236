"""Charts: stalls shaded, waits grouped by class, latency on a log axis, colours that keep their meaning."""

import pytest

from labkit import charts, style
from labkit.pgbench import Progress
from tests.unit.sample_runs import make_run

CLASSES = ("Lock", "LWLock", "IO", "IPC")


def twenty_waits() -> list[dict]:
    """Samples of 20 distinct wait events (CPU and 19 in four classes), event i with i + 1 backends."""
    events = ["CPU"] + [f"{CLASSES[i % 4]}: event{i}" for i in range(19)]
    return [{"t": t / 4, "wait": event, "backends": index + 1}
            for t in range(8) for index, event in enumerate(events)]


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(charts, "monotonic", clock)
    return clock


def stacked(figure):
    return [trace for trace in figure.data if trace.stackgroup == "waits" and trace.showlegend is not False]


def test_timeline_shades_stalls_and_stacks_waits():
    figure = charts.timeline(make_run())
    assert len(figure.layout.shapes) == 1
    assert figure.layout.shapes[0].x0 == 1.0 and figure.layout.shapes[0].x1 == 2.0
    assert {trace.name for trace in stacked(figure)} == {"CPU", "Lock: tuple"}
    key = next(trace for trace in figure.data if trace.name == charts.STALL_NAME)
    assert key.marker.color == charts.STALL_COLOR and key.showlegend


def test_twenty_wait_events_fold_into_seven_series_named_in_the_hover():
    run = make_run()
    run.probes["waits"] = twenty_waits()
    areas = stacked(charts.timeline(run))
    assert 1 < len(areas) <= charts.MAX_WAIT_SERIES
    assert areas[0].name == "IO: event18"  # the largest class (IO) at the bottom, its largest event first
    assert {"LWLock: event17", "Lock: event16"} <= {area.name for area in areas}
    folded = [area for area in areas if area.name.startswith("other ")]
    assert {area.name for area in folded} == {"other IO", "other LWLock", charts.OTHER_WAITS}
    hover = " ".join(text for area in folded for text in area.hovertext)
    assert "Lock: event0 (2)" in hover and "IO: event2 (4)" in hover
    named = {area.name for area in areas}
    assert all(event in named or f"{event} (" in hover for event in {row["wait"] for row in twenty_waits()})
    colors = {area.name: area.line.color for area in areas}
    assert colors["Lock: event16"] == style.wait_color("Lock") and colors["other IO"] == style.wait_color("IO", 1)
    assert len(set(colors.values())) == len(colors)


def test_more_classes_than_series_share_one_other_area():
    totals = {f"Class{i}: event": 10 - i for i in range(9)}
    series = charts.wait_series(totals)
    assert len(series) == charts.MAX_WAIT_SERIES and series[-1].name == charts.OTHER_WAITS
    assert series[-1].events == ["Class6: event", "Class7: event", "Class8: event"]


def test_latency_is_on_a_log_axis_without_zeros_or_gaps():
    run = make_run()
    run.fine, run.fine_width_s = [{"t": 0.1, "tps": 10.0, "p99_ms": 0.9, "max_ms": 1.2},
                                  {"t": 1.0, "tps": 0.0, "p99_ms": None, "max_ms": None},
                                  {"t": 2.9, "tps": 10.0, "p99_ms": 2.0, "max_ms": 54_000.0}], 0.1
    figure = charts.timeline(run)
    assert figure.layout.yaxis2.type == "log"
    traces = {trace.name: trace for trace in figure.data}
    assert list(traces["latency avg"].y) == [1.0, 1.1] and traces["latency avg"].yaxis == "y2"
    assert list(traces["latency max per second"].x) == [1.0, 3.0]
    assert list(traces["latency max per second"].y) == [1.2, 54_000.0]
    assert list(traces["latency p99 per 100 ms"].y) == [0.9, 2.0]


def test_the_planned_end_is_marked_when_the_run_had_one():
    run = make_run()
    assert not [shape for shape in charts.timeline(run).layout.shapes if shape.name == "planned end"]
    run.duration_s, run.overrun_s = 2.5, 1.5
    figure = charts.timeline(run)
    line = next(shape for shape in figure.layout.shapes if shape.name == "planned end")
    assert line.x0 == line.x1 == 2.5 and line.type == "line"
    label = next(note for note in figure.layout.annotations if note.name == "planned end")
    assert "-T 2.5 s" in label.text and "1.5 s over" in label.text


def test_timeline_draws_goodput_from_the_work_probe():
    run = make_run()
    run.probes["work"] = [{"t": 0.0, "work": 0}, {"t": 1.0, "work": 40}, {"t": 2.0, "work": 100}]
    figure = charts.timeline(run)
    goodput = next(trace for trace in figure.data if trace.name.startswith("goodput"))
    assert list(goodput.x) == [1.0, 2.0] and list(goodput.y) == [40.0, 60.0]
    assert goodput.yaxis == "y"  # drawn over tps, not in a probe row of its own
    assert "probe: work" not in [a.text for a in figure.layout.annotations]
    tps = next(trace for trace in figure.data if trace.name == charts.TPS_NAME)
    assert goodput.line.color == tps.line.color == style.color("plain")
    assert goodput.line.dash == "dash" and tps.line.dash == "solid"


def test_each_panel_has_its_legend_beside_it():
    run = make_run()
    run.probes["pending"] = [{"t": 0.5, "pages": 3}]
    figure = charts.timeline(run)
    legends = {trace.name: trace.legend for trace in figure.data}
    assert legends[charts.TPS_NAME] == "legend" and legends["latency avg"] == "legend2"
    assert legends["Lock: tuple"] == "legend3" and legends["pending: pages"] == "legend4"
    assert figure.layout.legend4.y == figure.layout.yaxis4.domain[1]
    assert figure.layout.height >= 900


def test_live_chart_draws_its_first_point_at_once_then_at_most_once_a_second(clock):
    published = []
    chart = charts.LiveChart("demo", ["waits"], publish=lambda figure: published.append(figure.layout.title.text))
    chart.add_samples({"waits": [{"t": 0.25, "wait": "CPU", "backends": 1}]})  # drawn: nothing was yet
    clock.now += 0.1
    chart.add_progress(Progress(t=1, tps=100.0, lat_ms=1.0, stddev_ms=0.1))  # the first point: at once
    assert list(chart.figure.data[0].y) == [100.0] and chart.figure.layout.title.text == "demo · 1 s so far"
    for t, tps in [(2, 110.0), (3, 2.0), (4, 105.0)]:  # a burst (a loaded machine): drawn later, together
        chart.add_progress(Progress(t=t, tps=tps, lat_ms=1.0, stddev_ms=0.1))
    chart.add_samples({"waits": [{"t": 1.25, "wait": "Lock: transactionid", "backends": 5}]})
    assert list(chart.figure.data[0].y) == [100.0]
    assert "Lock: transactionid" not in {trace.name for trace in chart.figure.data}
    clock.now += 0.5
    chart.add_samples({})
    assert list(chart.figure.data[0].y) == [100.0]  # half a second: not yet
    clock.now += 0.5
    chart.add_samples({})  # the runner's loop, 0.2 s later at most
    assert list(chart.figure.data[0].y) == [100.0, 110.0, 2.0, 105.0]
    assert published == ["demo", "demo · 1 s so far", "demo · 4 s so far"]  # one figure per redraw
    assert len(chart.figure.layout.shapes) == 1
    assert "Lock: transactionid" in {trace.name for trace in stacked(chart.figure)}
    assert chart.received == 4 and chart.figure.layout.title.text == "demo · 4 s so far"
    key = next(trace for trace in chart.figure.data if trace.name == charts.STALL_NAME)
    assert key.showlegend


def test_live_chart_says_who_holds_the_lock_every_client_waits_for(clock):
    chart = charts.LiveChart("demo", ["waits"])
    chart.add_progress(Progress(t=1, tps=100.0, lat_ms=1.0, stddev_ms=0.1))
    chart.add_samples({"held_by": [{"t": 1.5, "clients": 8, "holders": "T1 (idle in transaction)"}]})
    clock.now += 1.0
    chart.add_progress(Progress(t=2, tps=0.0, lat_ms=None, stddev_ms=None))
    assert chart.figure.layout.title.text == (
        "demo · 2 s so far · every client waits for a lock held by T1 (idle in transaction)")
    for t in (3, 4, 5):  # released: no more samples, the notice goes
        clock.now += 1.0
        chart.add_progress(Progress(t=t, tps=100.0, lat_ms=1.0, stddev_ms=0.1))
    assert chart.figure.layout.title.text == "demo · 5 s so far"
    assert "held_by" not in [annotation.text for annotation in chart.figure.layout.annotations]


def test_live_chart_samples_alone_redraw_once_a_second(clock):
    chart = charts.LiveChart("demo", ["waits"])
    chart.add_progress(Progress(t=1, tps=100.0, lat_ms=None, stddev_ms=None))
    assert list(chart.figure.data[1].y) == []  # no latency yet: a log axis cannot draw it
    clock.now += 0.6
    chart.add_samples({"waits": [{"t": 1.0, "wait": "CPU", "backends": 2}]})
    assert not stacked(chart.figure)
    clock.now += 0.5
    chart.add_samples({})
    assert [trace.name for trace in stacked(chart.figure)] == ["CPU"]


def test_live_chart_folds_waits_like_the_timeline(clock):
    chart = charts.LiveChart("demo", ["waits"], name="live-folding", planned_s=3)
    chart.add_samples({"waits": twenty_waits()})
    chart.add_progress(Progress(t=1, tps=100.0, lat_ms=1.0, stddev_ms=0.1))
    run = make_run()
    run.probes["waits"] = twenty_waits()
    assert [trace.name for trace in stacked(chart.figure)] == [trace.name for trace in stacked(charts.timeline(run))]
    assert any(shape.name == "planned end" for shape in chart.figure.layout.shapes)
    assert chart.figure.data[0].line.color == style.color("live-folding")
    assert chart.figure.layout.yaxis2.type == "log"


def test_live_chart_draws_goodput():
    live = charts.LiveChart("live", ["waits", "work"])
    live.add_samples({"work": [{"t": 0.0, "work": 10}, {"t": 1.0, "work": 30}]})
    live.add_samples({"work": [{"t": 2.0, "work": 60}]})
    live.add_progress(Progress(t=2, tps=50.0, lat_ms=1.0, stddev_ms=0.1))
    goodput = next(trace for trace in live.figure.data if trace.name.startswith("goodput"))
    assert list(goodput.y) == [20.0, 30.0]
    assert goodput.line.dash == "dash" and goodput.line.color == live.figure.data[0].line.color


def sweep_runs(method="plain"):
    runs = []
    for clients, tps, started in ((8, 100.0, "10:00"), (32, 80.0, "10:01"), (8, 120.0, "10:02"), (100, 50.0, "10:03")):
        run = make_run(name=f"sweep-{method}", started=f"2026-11-21T{started}:00+00:00", tps=tps)
        run.clients, run.extra = clients, {"method": method, "goodput": tps / 2}
        runs.append(run)
    return runs


def test_sweep_chart_one_colour_per_method_newest_wins():
    figure = charts.sweep(sweep_runs())
    tps, goodput = figure.data
    assert tps.name == "plain: tps" and list(tps.x) == [8, 32, 100] and list(tps.y) == [120.0, 80.0, 50.0]
    assert goodput.name == "plain: goodput" and list(goodput.y) == [60.0, 40.0, 25.0]
    assert tps.line.color == goodput.line.color and goodput.line.dash == "dash"


def test_sweep_ticks_are_the_client_counts_measured():
    runs = sweep_runs() + [make_run(name="sweep-other", started="2026-11-21T11:00:00+00:00")]
    runs[-1].clients, runs[-1].extra = 2, {"method": "other"}
    axis = charts.sweep(runs).layout.xaxis
    assert axis.type == "log"
    assert list(axis.tickvals) == [2, 8, 32, 100] and list(axis.ticktext) == ["2", "8", "32", "100"]


def test_a_run_keeps_its_colour_from_chart_to_chart():
    plain, advisory = make_run("plain"), make_run("advisory", tps=300.0)
    compared = charts.compare([advisory, plain], metric="goodput")
    swept = charts.sweep(sweep_runs("plain") + sweep_runs("advisory"))
    colors = {trace.name: trace.line.color for trace in compared.data if trace.type == "scatter"}
    swept_colors = {trace.name: trace.line.color for trace in swept.data}
    assert colors[plain.label] == swept_colors["plain: tps"] == swept_colors["plain: goodput"] == style.color("plain")
    assert colors[advisory.label] == swept_colors["advisory: tps"] != colors[plain.label]
    tps = next(trace for trace in charts.timeline(plain).data if trace.name == charts.TPS_NAME)
    assert tps.line.color == style.color("plain")


def test_compare_bars_are_horizontal_with_goodput_beside_tps():
    plain, advisory = make_run("plain"), make_run("advisory", tps=300.0)
    advisory.probes["work"] = [{"t": 0.0, "work": 0}, {"t": 1.0, "work": 40}]
    figure = charts.compare([plain, advisory], metric="goodput")
    tps, goodput = [trace for trace in figure.data if trace.type == "bar"]
    assert tps.orientation == goodput.orientation == "h" and list(tps.y) == [plain.label, advisory.label]
    assert list(tps.x) == [100.0, 300.0] and list(goodput.x) == [42.0, 42.0]
    assert list(goodput.marker.pattern.fgcolor) == list(tps.marker.color) == [style.color("plain"),
                                                                              style.color("advisory")]
    line = next(trace for trace in figure.data if trace.name == f"{advisory.label}: goodput")
    assert line.line.dash == "dash" and line.line.color == style.color("advisory")
    assert figure.layout.yaxis2.autorange == "reversed"
    assert tps.name == "tps"  # one run of each: no mean of repeats to speak of


def test_every_figure_has_the_labkit_style():
    import pandas as pd
    import plotly.graph_objects as go

    logs = pd.DataFrame({"t": [1, 2], "tps": [10.0, 0.0], "release": ["9.4", "9.4"]})
    figures = [charts.timeline(make_run()), charts.LiveChart("live", []).figure, charts.sweep(sweep_runs()),
               charts.compare([make_run()]), charts.logs_beside(logs, [make_run()], by=["release"])]
    for figure in figures:
        assert figure.layout.template.layout.colorway == style.template().layout.colorway
    icicle = style.styled(lambda: go.Figure().update_layout(template="plotly_white"))()
    assert icicle.layout.template.layout.font.family == style.FONT


def test_probe_over_time_draws_each_run_in_its_colour_and_skips_empty_samples():
    hash_run, btree_run = make_run(name="hash"), make_run(name="btree")
    hash_run.probes["index"] = [{"t": 0.0, "index_mb": 2.0}, {"t": 1.0, "index_mb": None}, {"t": 2.0, "index_mb": 4.0}]
    btree_run.probes["index"] = [{"t": 0.0, "index_mb": 3.0}]
    figure = charts.probe_over_time([hash_run, btree_run], "index", "index_mb")
    assert [trace.name for trace in figure.data] == [hash_run.label, btree_run.label]
    assert list(figure.data[0].x) == [0.0, 2.0] and list(figure.data[0].y) == [2.0, 4.0]
    assert figure.data[0].line.color == charts.run_color(hash_run) != figure.data[1].line.color
    assert figure.layout.xaxis.title.text == "seconds since the run started"
    assert figure.layout.yaxis.type is None
    assert charts.probe_over_time([hash_run], "index", "index_mb", log_y=True).layout.yaxis.type == "log"


def test_probe_over_time_draws_a_share_of_two_columns():
    run = make_run(name="gin")
    run.probes["hot"] = [{"t": 1.0, "hot_updates_per_s": None, "updates_per_s": None},
                         {"t": 2.0, "hot_updates_per_s": 30.0, "updates_per_s": 40.0},
                         {"t": 3.0, "hot_updates_per_s": 0.0, "updates_per_s": 0.0},  # nothing updated: no share
                         {"t": 4.0, "hot_updates_per_s": 5.0, "updates_per_s": 50.0}]
    figure = charts.probe_over_time([run], "hot", "hot_updates_per_s", per="updates_per_s")
    assert list(figure.data[0].x) == [2.0, 4.0] and list(figure.data[0].y) == [0.75, 0.1]
    assert figure.layout.yaxis.title.text == "hot_updates_per_s / updates_per_s"


def test_the_cpu_panel_and_its_warning():
    from labkit import cpu

    rows = [{"t": t, "pgbench": 0.95, "backends": 0.9, "server_other": 0.02, "idle": 0.05} for t in range(1, 5)]
    run = make_run()
    run.probes["cpu"] = rows
    run.extra["cpu"] = cpu.figures(rows, threads=1, cpus=2)
    figure = charts.timeline(run)
    assert {"cpu: pgbench", "cpu: backends", "cpu: server_other", "cpu: idle"} <= {trace.name for trace in figure.data}
    (warning,) = [a for a in figure.layout.annotations if a.name == "cpu warning"]
    assert warning.text.replace("<br>", " ").startswith(
        "Held back by the client: pgbench kept 95% of a core busy per thread (1 thread)")
    run.extra["cpu"] = cpu.figures([{**row, "pgbench": 0.2, "backends": 0.3, "idle": 1.4} for row in rows], 1, 2)
    assert run.extra["cpu"]["warning"] is None
    assert not [a for a in charts.timeline(run).layout.annotations if a.name == "cpu warning"]


def test_a_machine_with_no_idle_cpu_is_said():
    from labkit import cpu

    rows = [{"t": t, "pgbench": 0.4, "backends": 0.55, "server_other": 0.05, "idle": 0.0} for t in (1, 2)]
    rows = [{**row, "t": row["t"] + quarter} for row in rows for quarter in (0, 0.25)]  # a second of 250 ms samples
    split = cpu.figures(rows, 2, 1.0)
    assert split["warning"] == ("Held back by the CPU: the server (0.6 cores) and pgbench (0.4) used all 1 core in "
                                "the run: the tps is not the server's alone.")
    assert cpu.figures(rows[:1], 2, 1.0)["warning"] is None  # one second says nothing


def test_a_machine_kept_busy_by_other_processes_is_never_read_as_the_client_limit():
    """Lab 00 under ci on a busy machine: pgbench 0.1 cores, the server 0.4, nothing idle, of 2."""
    from labkit import cpu

    rows = [{"t": t / 4, "pgbench": 0.1, "backends": 0.35, "server_other": 0.05, "idle": 0.0} for t in range(4, 16)]
    split = cpu.figures(rows, 1, 2.0)
    assert split["warning"] == ("Held back by other processes on this machine used 1.5 of its 2 cores in the run "
                                "(pgbench 0.1, the server 0.4): the tps is not the server's alone.")
    assert "client" not in split["warning"]
    # a server labkit did not start here (docker, LABKIT_DSN): its CPU is unknown, so nothing is said of the rest
    unknown = cpu.figures([{**row, "backends": None, "server_other": None} for row in rows], 1, 2.0)
    assert unknown["warning"] is None
