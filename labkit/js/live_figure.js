// A live chart: one plot, updated in place with Plotly.react each time the kernel sends a frame.
// (No new output per frame: no teardown, no second redraw, no PNG snapshot.)
const WAIT_MS = 50;
const GIVE_UP_MS = 120000;

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The page's plotly.js: the kernel's loader's (which may start after this view), or one already there.
async function plotly(alive) {
  const started = performance.now();
  while (alive()) {
    if (globalThis.__labkitPlotly) return await globalThis.__labkitPlotly;
    if (globalThis.Plotly?.react) return globalThis.Plotly;
    if (performance.now() - started > GIVE_UP_MS) {
      throw new Error("plotly.js did not reach this page: the final chart appears when the run ends");
    }
    await pause(WAIT_MS);
  }
  return null;
}

// The view's element is attached to the page after render() starts: plotly sizes the chart from it.
async function attached(el, alive) {
  const started = performance.now();
  while (alive() && !(el.isConnected && el.clientWidth > 0) && performance.now() - started < 5000) {
    await new Promise((resolve) => requestAnimationFrame(resolve));
  }
}

export default {
  async render({ model, el }) {
    let disposed = false;
    const alive = () => !disposed;
    let stop = () => {};
    const cleanup = () => {
      disposed = true;
      stop();
    };
    el.style.width = "100%";
    el.textContent = "loading the live chart...";
    (async () => {
      let Plotly;
      try {
        Plotly = await plotly(alive);
      } catch (error) {
        el.textContent = String(error.message);
        return;
      }
      await attached(el, alive);
      if (!alive()) return;
      let drawing = Promise.resolve();
      let pending = false;
      // Frames that arrive while one is drawn collapse into one: only the newest is drawn.
      const draw = () => {
        if (pending) return;
        pending = true;
        drawing = drawing.then(() => {
          pending = false;
          if (!alive()) return undefined;
          const figure = JSON.parse(model.get("figure"));
          return Plotly.react(el, figure.data, figure.layout, { displaylogo: false });
        }).catch((error) => console.error("labkit: live chart", error));
      };
      // The chart follows its output's width (a sidebar opened, the window resized).
      let width = el.clientWidth;
      const resized = new ResizeObserver(() => {
        if (el.clientWidth === width || !el.clientWidth) return;
        width = el.clientWidth;
        drawing = drawing.then(() => alive() && Plotly.Plots.resize(el)).catch(() => {});
      });
      el.textContent = "";
      draw();
      model.on("change:figure", draw);
      resized.observe(el);
      stop = () => {
        resized.disconnect();
        model.off("change:figure", draw);
        Plotly.purge(el);
      };
    })();
    return cleanup;
  },
};
