// A live chart: one plot, updated in place with Plotly.react each time the kernel sends a frame.
// (No new output per frame: no teardown, no second redraw, no PNG snapshot.)
const WAIT_MS = 50;
const GIVE_UP_MS = 120000;

async function plotly(el) {
  const started = performance.now();
  while (!globalThis.Plotly?.react) {
    if (performance.now() - started > GIVE_UP_MS) {
      throw new Error("plotly.js did not load in the page: the final chart appears when the run ends");
    }
    await new Promise((resolve) => setTimeout(resolve, WAIT_MS));
  }
  return globalThis.Plotly;
}

// The view's element is attached to the page after render() starts: plotly sizes the chart from it.
async function attached(el) {
  const started = performance.now();
  while (!(el.isConnected && el.clientWidth > 0) && performance.now() - started < 5000) {
    await new Promise((resolve) => requestAnimationFrame(resolve));
  }
}

export default {
  async render({ model, el }) {
    el.style.width = "100%";
    el.textContent = "waiting for the first progress line...";
    let Plotly;
    try {
      Plotly = await plotly(el);
    } catch (error) {
      el.textContent = String(error.message);
      return;
    }
    await attached(el);
    let drawing = Promise.resolve();
    let pending = false;
    // Frames that arrive while one is drawn collapse into one: only the newest is drawn.
    const draw = () => {
      if (pending) return;
      pending = true;
      drawing = drawing.then(() => {
        pending = false;
        const figure = JSON.parse(model.get("figure"));
        return Plotly.react(el, figure.data, figure.layout, { displaylogo: false });
      }).catch((error) => console.error("labkit: live chart", error));
    };
    el.textContent = "";
    draw();
    model.on("change:figure", draw);
    // The chart follows its output's width (a sidebar opened, the window resized).
    let width = el.clientWidth;
    const resized = new ResizeObserver(() => {
      if (el.clientWidth === width || !el.clientWidth) return;
      width = el.clientWidth;
      drawing = drawing.then(() => Plotly.Plots.resize(el)).catch(() => {});
    });
    resized.observe(el);
    return () => {
      resized.disconnect();
      model.off("change:figure", draw);
      Plotly.purge(el);
    };
  },
};
