"""The live view in a kernel: one widget redrawn in place, then the final figure as plain data."""

import json

import pytest

pytest.importorskip("anywidget")

from labkit import live, livewidget, notebooks  # noqa: E402
from labkit.pgbench import Progress  # noqa: E402
from tests.unit.sample_runs import make_run  # noqa: E402

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"


def shown(view) -> dict:
    return view.output.outputs[0]["data"]


def test_each_frame_goes_to_the_same_widget_and_the_end_leaves_a_plain_figure(monkeypatch):
    import plotly.io

    monkeypatch.setattr(plotly.io.renderers, "default", "plotly_mimetype")  # as in JupyterLab
    view = live.LiveView("demo", 4, ["waits"], planned_s=3)
    model_id = shown(view)[WIDGET_VIEW]["model_id"]
    assert model_id == view.widget.model_id
    assert view.widget.loader is livewidget.plotly_in_page()  # one plotly.js for the page, per kernel
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
    view.handle = None  # (no front end here to update the display)
    view.finished(make_run())
    assert PLOTLY in shown(view) and WIDGET_VIEW not in shown(view)
    assert view.widget.comm is None  # closed: the kernel keeps no live widget per run


def test_a_stopped_run_says_why_and_closes_its_widget():
    view = live.LiveView("demo", 4, [])
    view.handle = None
    view.stopped("interrupted")
    assert shown(view)["text/plain"] == "demo: interrupted"
    assert view.widget.comm is None


def test_the_loader_sends_the_plotly_package_s_own_plotly_js():
    import plotly

    loader = livewidget.plotly_in_page()
    assert loader.source.startswith(b"/**\n* plotly.js v") and b"window.Plotly = Plotly" in loader.source
    assert plotly.__version__ and livewidget.plotly_in_page() is loader


def test_an_executed_notebook_keeps_no_live_widget_state():
    import nbformat

    notebook = nbformat.v4.new_notebook()
    state = {"loader": {"state": {"role": livewidget.TRANSIENT, "layout": "IPY_MODEL_l1"}}, "l1": {"state": {}},
             "live": {"state": {"role": livewidget.TRANSIENT}}, "panel": {"state": {"description": "Run"}}}
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    notebooks._drop_live_widgets(notebook)
    assert list(notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]) == ["panel"]
