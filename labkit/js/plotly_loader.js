// plotly.js, loaded into the page once per kernel: the live charts draw with it.
// The source comes from the kernel's plotly package as a binary buffer (no JSON escaping).
// initialize() only starts the import: anywidget gives a model 2 s to initialize, and
// evaluating plotly.js on a loaded laptop can take longer. Live charts await
// globalThis.__labkitPlotly, the one load of the page; a load that failed is tried again by the
// next kernel's loader, and the live charts show its error.

// anywidget's views use AbortSignal.any (Safari 17.4, Firefox 124, Chrome 116): older browsers get it here.
if (typeof AbortSignal.any !== "function") {
  AbortSignal.any = (signals) => {
    const controller = new AbortController();
    for (const signal of signals) {
      if (signal.aborted) {
        controller.abort(signal.reason);
        break;
      }
      signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
    }
    return controller.signal;
  };
}

export default {
  initialize({ model }) {
    if (globalThis.Plotly?.version === model.get("version") || globalThis.__labkitPlotly) return;
    const url = URL.createObjectURL(new Blob([model.get("source")], { type: "text/javascript" }));
    const loading = import(/* webpackIgnore: true */ url)
      .then(() => {
        if (!globalThis.Plotly?.react) throw new Error("the module did not define window.Plotly");
        return globalThis.Plotly;
      })
      .catch((error) => {
        globalThis.__labkitPlotly = undefined;
        throw new Error(`plotly.js did not load in this page (${error.message}): the final chart appears when the run ends`);
      })
      .finally(() => URL.revokeObjectURL(url));
    loading.catch((error) => console.error("labkit:", error.message));
    globalThis.__labkitPlotly = loading;
  },
};
