"""The live chart's own widget: one plot in the page, updated in place.

JupyterLab's plotly renderer draws a new output from scratch each time, then redraws it and
renders it a third time off-screen for a PNG snapshot: on a laptop whose cores run pgbench, the
page fell seconds behind the run. :class:`LiveFigure` keeps one plot and hands each frame to
``Plotly.react``, which redraws only what changed and keeps the student's zoom.

plotly.js reaches the page once per kernel (:func:`plotly_in_page`), from the plotly package's own
copy: nothing is fetched from the network, and a widget sends only its figure. The loader is
made before the first chart (by ``labkit.start()`` in a kernel), so the page has it first.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import anywidget
import traitlets

JS = Path(__file__).with_name("js")
# Both widgets live only while a run is drawn: an executed notebook does not keep their state.
TRANSIENT = "labkit.live"


class PlotlyLoader(anywidget.AnyWidget):
    """plotly.js for the page: created once per kernel, never shown."""

    _esm = JS / "plotly_loader.js"
    source = traitlets.Bytes().tag(sync=True)
    version = traitlets.Unicode().tag(sync=True)  # a page that has this plotly.js already loads nothing
    role = traitlets.Unicode(TRANSIENT).tag(sync=True)


class LiveFigure(anywidget.AnyWidget):
    """One plotly chart, redrawn in place each time ``figure`` (the figure's JSON) changes."""

    _esm = JS / "live_figure.js"
    figure = traitlets.Unicode("{}").tag(sync=True)
    role = traitlets.Unicode(TRANSIENT).tag(sync=True)

    def bundle(self) -> dict:
        """The widget's view as display data, for an Output widget's ``outputs``."""
        shown = self._repr_mimebundle_()
        bundle = shown[0] if isinstance(shown, tuple) else shown  # (data, metadata) from anywidget
        return dict(bundle or {})

    def show(self, figure) -> None:
        """Send a plotly figure as the next frame."""
        import plotly.io

        self.figure = plotly.io.to_json(figure, validate=False)


_LOADER: PlotlyLoader | None = None


def plotly_in_page() -> PlotlyLoader:
    """The kernel's loader (created on first use: the page loads plotly.js while the kernel waits)."""
    global _LOADER
    if _LOADER is None:
        source = resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()
        version = re.search(rb"plotly\.js v(\S+)", source[:200])
        _LOADER = PlotlyLoader(source=source, version=version.group(1).decode() if version else "")
    return _LOADER
