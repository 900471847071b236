"""The live view in a kernel: one widget redrawn in place, then the final figure as plain data."""

import json
import re

import pytest

pytest.importorskip("anywidget")

from labkit import live, livewidget, notebooks  # noqa: E402
from labkit.pgbench import Progress  # noqa: E402
from tests.unit.sample_runs import make_run  # noqa: E402

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"


class Handle:
    """A display handle that keeps what the page would be sent."""

    def __init__(self):
        self.updates = []

    def update(self, shown, raw=False):
        self.updates.append(json.dumps(shown) if raw else shown._repr_html_())


def shown(view) -> dict:
    return view.output.outputs[0]["data"]


@pytest.fixture
def mimetype(monkeypatch):
    import plotly.io

    monkeypatch.setattr(plotly.io.renderers, "default", "plotly_mimetype")  # as in JupyterLab


def test_each_frame_goes_to_the_same_widget_and_the_end_takes_the_display(mimetype):
    view = live.LiveView("demo", 4, ["waits"], planned_s=3)
    view.handle = Handle()
    model_id = shown(view)[WIDGET_VIEW]["model_id"]
    assert model_id == view.widget.model_id
    frames = []
    view.widget.observe(lambda change: frames.append(json.loads(change["new"])), names="figure")
    for t in (1, 2):
        view.progress(Progress(t=t, tps=100.0 * t, lat_ms=1.0, stddev_ms=0.1), "")
    view.chart._drawn_at = None  # the second second's redraw is due (the chart redraws at most once a second)
    view.samples({"waits": [{"t": 1.5, "wait": "CPU", "backends": 2}]})
    assert [frame["layout"]["title"]["text"] for frame in frames] == ["demo: 4 clients, live · 1 s so far",
                                                                      "demo: 4 clients, live · 2 s so far"]
    assert frames[-1]["data"][0]["y"] == [100.0, 200.0]
    assert frames[-1]["layout"]["uirevision"] == "live"  # Plotly.react keeps the student's zoom
    assert shown(view)[WIDGET_VIEW]["model_id"] == model_id  # no new output per frame
    view.finished(make_run())
    assert [PLOTLY in update for update in view.handle.updates] == [True]  # the final figure, as plain data
    # the kernel keeps no widget per run: the chart, the Output and their layouts are closed
    assert [w.comm for w in (view.widget, view.widget.layout, view.output, view.output.layout)] == [None] * 4


def test_in_a_panel_the_end_is_shown_by_the_live_view_s_own_output(mimetype):
    with live.nested():
        view = live.LiveView("demo", 4, [])
    view.handle = Handle()
    view.finished(make_run())
    assert PLOTLY in shown(view) and WIDGET_VIEW not in shown(view)
    assert view.widget.comm is None and view.output.comm is not None  # the panel still shows the Output


def test_a_stopped_run_says_why_and_closes_its_widgets():
    view = live.LiveView("demo", 4, [])
    view.handle = Handle()
    view.stopped("interrupted")
    assert "interrupted" in view.handle.updates[0]
    assert view.widget.comm is None and view.output.comm is None


def test_the_loader_sends_the_plotly_package_s_own_plotly_js_once():
    loader = livewidget.plotly_in_page()
    header = re.match(rb"/\*\*\n\* plotly\.js v(\S+)", loader.source)
    assert header and header.group(1).decode() == loader.version
    assert b"window.Plotly = Plotly" in loader.source
    live.LiveView("demo", 4, [])
    assert livewidget.plotly_in_page() is loader


def test_an_executed_notebook_keeps_no_live_widget_state():
    import ipywidgets
    import nbformat

    kept = ipywidgets.Button(description="Run")
    widgets = [livewidget.plotly_in_page(), livewidget.LiveFigure(), kept]
    stored = {}  # as nbclient stores it: each model's state, by model id
    for widget in [*widgets, *(widget.layout for widget in widgets)]:
        stored[widget.model_id] = {"model_name": widget._model_name, "state": widget.get_state()}
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": stored}}
    notebooks._drop_live_widgets(notebook)
    left = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert sorted(left) == sorted([kept.model_id, kept.layout.model_id])
