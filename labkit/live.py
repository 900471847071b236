"""What a notebook shows during and after a run: the live chart, then the timeline.

:class:`LiveView` is an observer of :class:`labkit.runner.PgbenchRunner`: it is told about
progress and samples, and about the end of the run; it never calls back into the lab.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys

from .probes import CPU, HELD_BY, WORK


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets can be shown)."""
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return False
    shell = shell_module.get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


_NESTED: contextvars.ContextVar[list | None] = contextvars.ContextVar("labkit_live_nested", default=None)


@contextlib.contextmanager
def nested():
    """Live views made in this block are shown inside another Output (a panel's) and end there.

    Yields the list of those views: :meth:`LiveView.close` them when that Output is cleared.
    """
    views: list[LiveView] = []
    token = _NESTED.set(views)
    try:
        yield views
    finally:
        _NESTED.reset(token)


class FigureView:
    """A plotly figure redrawn in place while something happens, then replaced by its final picture.

    The figure is a :class:`labkit.livewidget.LiveFigure` (one plot, redrawn in place) inside an
    :class:`ipywidgets.Output`. At the end the final figure takes the display's place (in a
    panel, made inside :func:`nested`, the Output's), drawn by JupyterLab's plotly renderer, so it
    survives saving, HTML export and a closed kernel; the widgets are then closed.
    """

    def __init__(self, name: str, figure):
        import ipywidgets
        from IPython.display import display

        from .livewidget import LiveFigure, plotly_in_page

        self.name = name
        inside = _NESTED.get()
        self.nested = inside is not None
        if inside is not None:
            inside.append(self)
        self.output = ipywidgets.Output()
        plotly_in_page()
        self.widget = LiveFigure()
        self.widget.show(figure)
        # The widget's state is set from the kernel: no `with output:` (whose exit would swallow a
        # Ctrl+C under IPython), and the page does not send each frame back to the kernel.
        self._frame(self.widget.bundle())
        self.handle = display(self.output, display_id=True)

    def show(self, figure) -> None:
        """The next frame."""
        self.widget.show(figure)

    def final(self, figure) -> None:
        """The final picture in place of the live one."""
        self._end(figure._repr_mimebundle_())

    def _frame(self, bundle: dict) -> None:
        self.output.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    def stopped(self, why: str) -> None:
        """The run ended without a record to draw (interrupted, failed, or an error in labkit)."""
        import html

        self._end({"text/html": f"<b>{html.escape(self.name)}</b>: {html.escape(why)}", "text/plain": f"{self.name}: {why}"})

    def _end(self, bundle: dict) -> None:
        """Show the end in place of the live view; close the widgets the page no longer shows."""
        if self.nested or self.handle is None:
            # inside a panel's own output the display update does not reach the page: the Output shows it
            # (handle None: no IPython display, e.g. a panel driven from a script)
            self._frame(bundle)
            _close(self.widget)
        else:
            # sent as a bundle: a plotly Figure ignores display ids when shown directly
            self.handle.update(bundle, raw=True)
            _close(self.widget, self.output)

    def close(self) -> None:
        """Close the Output the view was shown in (once the page no longer shows it)."""
        _close(self.output)


class LiveView(FigureView):
    """The live chart of one run, replaced by the final timeline when the run ends."""

    def __init__(self, name: str, clients: int, probe_names: list[str], *, planned_s: float | None = None):
        from .charts import LiveChart

        self.chart = LiveChart(f"{name}: {clients} clients, live", probe_names, name=name, planned_s=planned_s)
        super().__init__(name, self.chart.figure)
        self.chart.publish = self.widget.show

    def progress(self, point, line: str) -> None:
        self.chart.add_progress(point)

    def samples(self, fresh: dict[str, list[dict]]) -> None:
        self.chart.add_samples(fresh)

    def finished(self, run) -> None:
        """A static figure replaces the live view: it survives saving, HTML export and a closed kernel."""
        from .charts import timeline

        try:
            bundle = timeline(run)._repr_mimebundle_()
        except Exception as error:  # noqa: BLE001 - the run is recorded: a chart that fails must not hide it
            self.stopped(f"the run is recorded, but its chart could not be drawn ({type(error).__name__}: {error}).")
            return
        self._end(bundle)

def _close(*widgets) -> None:
    """Close each widget and its layout (the Layout model would otherwise stay in the kernel)."""
    for widget in widgets:
        widget.layout.close()
        widget.close()


class RunsProgress:
    """One line, redrawn in place, while an experiment's runs go on: which run, its second and its tps.

    An experiment's runs show no live chart each (four to ten charts would bury its table): this
    line is what moves meanwhile. It is an :class:`labkit.runner.Observer` of each run in turn.
    ``show`` draws a line (default: a display updated in place in the notebook).
    """

    def __init__(self, show=None):
        self.show = show or _line_in_place()
        self.said = ""
        self.run = ""
        self.duration_s: float | None = None

    def begin(self, position: int, planned: int, arm: str, repeat: int, repeats: int,
              duration_s: float | None) -> None:
        """Run ``position`` of ``planned`` (from 1) starts: ``arm``'s ``repeat`` of ``repeats``."""
        self.run = f"run {position} of {planned}: {arm} ({repeat} of {repeats})"
        self.duration_s = duration_s
        self._say(f"{self.run}, starting")

    def progress(self, point, line: str) -> None:
        self._say(progress_line(self.run, point.t, self.duration_s, point.tps))

    def samples(self, fresh: dict[str, list[dict]]) -> None:
        """Probe samples are not shown on the line."""

    def finish(self, runs: int, elapsed_s: float) -> None:
        self._say(f"{runs} runs in {elapsed_s:.0f} s.")

    def _say(self, text: str) -> None:
        if text != self.said:
            self.said = text
            self.show(text)


def progress_line(run: str, t: float, duration_s: float | None, tps: float) -> str:
    """The progress line during one run of an experiment.

    >>> progress_line("run 3 of 6: spread (2 of 3)", 2.0, 4, 1204.4)
    'run 3 of 6: spread (2 of 3), 2 of 4 s, 1,204 tps'
    >>> progress_line("run 1 of 2: a (1 of 1)", 5.0, None, 12.0)
    'run 1 of 2: a (1 of 1), 5 s, 12 tps'
    """
    planned = f" of {duration_s:g}" if duration_s else ""
    return f"{run}, {t:g}{planned} s, {tps:,.0f} tps"


def _line_in_place():
    """A function that shows a line of text in one display, each call replacing the last line."""
    from IPython.display import display

    handle = None

    def show(text: str) -> None:
        nonlocal handle
        if handle is None:
            handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            handle.update({"text/plain": text}, raw=True)

    return show


class Printer:
    """The command line's observer: pgbench's progress lines as they come."""

    def __init__(self):
        self.held_by = None

    def progress(self, point, line: str) -> None:
        print(line, flush=True)

    def samples(self, fresh: dict[str, list[dict]]) -> None:
        for row in fresh.get(HELD_BY, []):  # said once per holder, not once a second
            if row["holders"] != self.held_by:
                print(f"every client waits for a lock held by {row['holders']}", flush=True)
                self.held_by = row["holders"]


def probe_names(probes, work: str | None) -> list[str]:
    """The probe panels a live chart needs."""
    return [probe.name for probe in probes] + ([WORK] if work else []) + [CPU]
