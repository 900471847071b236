// plotly.js, loaded into the page once per kernel: the live charts draw with it.
// The source comes from the kernel's plotly package as a binary buffer (no JSON escaping).
// initialize() only starts the import: anywidget gives a model 2 s to initialize, and
// evaluating plotly.js on a loaded laptop can take longer. Live charts wait for window.Plotly.
export default {
  initialize({ model }) {
    if (globalThis.Plotly?.react || globalThis.__labkitPlotlyLoading) return;
    globalThis.__labkitPlotlyLoading = true;
    const url = URL.createObjectURL(new Blob([model.get("source")], { type: "text/javascript" }));
    import(/* webpackIgnore: true */ url)
      .catch((error) => console.error("labkit: plotly.js did not load", error))
      .finally(() => {
        URL.revokeObjectURL(url);
        globalThis.__labkitPlotlyLoading = false;
      });
  },
};
