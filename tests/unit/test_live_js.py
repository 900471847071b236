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
URL.createObjectURL = () => "data:text/javascript," + encodeURIComponent(source);
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
    "already_there": """
        globalThis.Plotly = { version: "9.9.9", react: () => calls.push("theirs"), purge() {}, Plots: {} };
        loader.initialize({ model: model({ source: "x", version: "9.9.9" }) });
        out.loading = globalThis.__labkitPlotly !== undefined;
        out.anyAbort = typeof AbortSignal.any;
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
    assert out == {"loading": False, "anyAbort": "function"}
