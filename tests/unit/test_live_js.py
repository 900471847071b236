"""The live chart's JavaScript, run in Node with a stand-in page: load order, collapsed frames, errors.

The real page is checked by tests/browser; this runs the modules' own logic where a browser is not
needed (Node 18+). Skipped, with the reason, where Node is not installed.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

NODE = shutil.which("node")
JS = Path(__file__).resolve().parents[2] / "labkit" / "js"

pytestmark = pytest.mark.skipif(NODE is None, reason="Node is not installed (the browser test still runs the JS)")

# A stand-in page: a model with traits and listeners, an element, and a fake plotly.js whose
# source the loader "imports" (Node cannot import blob: URLs; a data: URL carries the same text).
PAGE = r"""
const calls = [];
globalThis.calls = calls;
globalThis.requestAnimationFrame = (f) => setTimeout(f, 0);
globalThis.ResizeObserver = class { observe() {} disconnect() { calls.push("disconnect"); } };
const FAKE_PLOTLY = `globalThis.Plotly = { version: "9.9.9",
  react: (el, data) => { calls.push("react " + data[0].y.join(",")); return new Promise((r) => setTimeout(r, 20)); },
  purge: () => calls.push("purge"), Plots: { resize: () => calls.push("resize") } };`;
const BROKEN = "throw new Error('broken plotly');";
let source = FAKE_PLOTLY;
let loads = 0;
URL.createObjectURL = () => { loads += 1; return "data:text/javascript," + encodeURIComponent(source); };
URL.revokeObjectURL = () => {};
function model(traits) {
  const listeners = {};
  return { get: (name) => traits[name], set: (name, value) => { traits[name] = value; },
           on: (event, f) => { listeners[event] = f; }, off: (event) => { delete listeners[event]; },
           fire: (event) => listeners[event] && listeners[event](), listening: () => Object.keys(listeners) };
}
const element = () => ({ style: {}, textContent: "", isConnected: true, clientWidth: 800 });
const pause = (ms) => new Promise((r) => setTimeout(r, ms));
const figure = (y) => JSON.stringify({ data: [{ y }], layout: {} });
const nativeAny = AbortSignal.any;  // Node 20+ has it; Node 18, like Safari < 17.4, does not
const loader = (await import(process.argv[1])).default;
const live = (await import(process.argv[2])).default;
const out = {};
"""

SCENARIOS = {
    # the chart's view renders before the loader's model initializes: it waits, then draws
    "render_first": """
        const chart = model({ figure: figure([1]) }); const el = element();
        const cleanup = await live.render({ model: chart, el });
        await pause(100); out.before = [el.textContent, calls.length];
        loader.initialize({ model: model({ source: "x", version: "9.9.9" }) });
        await pause(200); out.after = [...calls];
        // a frame, then two more while it is drawn (a draw takes 20 ms): those two collapse into the newest
        chart.set("figure", figure([1, 2])); chart.fire("change:figure");
        await pause(5);
        chart.set("figure", figure([1, 2, 3])); chart.fire("change:figure");
        chart.set("figure", figure([1, 2, 3, 4])); chart.fire("change:figure");
        await pause(200); out.frames = calls.filter((c) => c.startsWith("react"));
        cleanup(); out.end = [calls.slice(-2), chart.listening()];
    """,
    "broken": """
        source = BROKEN;
        const error = console.error; console.error = () => {};
        loader.initialize({ model: model({ source: "x", version: "9.9.9" }) });
        const el = element();
        await live.render({ model: model({ figure: figure([1]) }), el });
        await pause(200); console.error = error;
        out.text = el.textContent; out.reset = globalThis.__labkitPlotly === undefined;
    """,
    # the page already has the same plotly.js (JupyterLab's, or another kernel's): nothing is loaded, the
    # chart draws with the page's; a page with another version gets the kernel's
    "already_there": """
        globalThis.Plotly = { version: "9.9.9", react: () => { calls.push("theirs"); return Promise.resolve(); },
                              purge() {}, Plots: {} };
        loader.initialize({ model: model({ source: "x", version: "9.9.9" }) });
        out.same = [loads, globalThis.__labkitPlotly === undefined];
        const el = element();
        const cleanup = await live.render({ model: model({ figure: figure([1]) }), el });
        await pause(100); out.drawn = [...calls]; cleanup();
        globalThis.Plotly = { version: "1.0.0", react() {}, purge() {}, Plots: {} };
        loader.initialize({ model: model({ source: "x", version: "9.9.9" }) });
        out.other = [loads, (await globalThis.__labkitPlotly).version];
    """,
    # anywidget's views call AbortSignal.any: where the browser has none, the loader provides one
    "abort_any": """
        out.nativeKept = nativeAny === undefined || AbortSignal.any === nativeAny;
        delete AbortSignal.any;  // an older browser's page
        await import(process.argv[1] + "?older-browser");  // the loader again, as that page evaluates it
        const a = new AbortController(), b = new AbortController();
        const either = AbortSignal.any([a.signal, b.signal]);
        out.before = either.aborted;
        b.abort("b stopped");
        out.after = [either.aborted, either.reason];
        const early = new AbortController(); early.abort("already");
        const late = AbortSignal.any([a.signal, early.signal]);
        out.already = [late.aborted, late.reason];
    """,
}


def run(scenario: str) -> dict:
    script = PAGE + SCENARIOS[scenario] + "\nconsole.log(JSON.stringify(out));\n"
    result = subprocess.run([NODE, "--input-type=module", "-e", script, (JS / "plotly_loader.js").as_uri(),
                             (JS / "live_figure.js").as_uri()], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-1500:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_chart_shown_before_plotly_js_arrives_waits_then_draws_the_newest_frames():
    out = run("render_first")
    assert out["before"] == ["loading the live chart...", 0]
    assert out["after"] == ["react 1"]
    assert out["frames"] == ["react 1", "react 1,2", "react 1,2,3,4"]  # 1,2,3 never drawn: it was overtaken
    assert out["end"] == [["disconnect", "purge"], []]  # no listener left on the model


def test_a_failed_load_is_said_in_the_chart_and_can_be_tried_again():
    out = run("broken")
    assert out["text"].startswith("plotly.js did not load in this page (broken plotly)")
    assert out["reset"]  # the next kernel's loader tries again


def test_a_page_with_the_same_plotly_js_loads_nothing():
    out = run("already_there")
    assert out["same"] == [0, True]  # no import started, nothing for the charts to await
    assert out["drawn"] == ["theirs"]  # the chart drew with the page's plotly.js
    assert out["other"] == [1, "9.9.9"]  # another version on the page: the kernel's is loaded


def test_an_older_browser_gets_abort_signal_any():
    out = run("abort_any")
    assert out["nativeKept"]  # a browser's own is left alone
    assert out["before"] is False
    assert out["after"] == [True, "b stopped"]  # aborted by any one of its signals, with that one's reason
    assert out["already"] == [True, "already"]  # a signal aborted beforehand aborts it at once
