"""What a notebook shows during and after a run: the live chart, then the timeline and a summary."""

from __future__ import annotations

from .errors import LabkitError
from .probes import WORK


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets can be shown)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def show_run(lab, spec, probes, *, live: bool | None = None, work: str | None = None, perf: bool = False):
    """Run ``spec`` with a live chart (in a notebook), then show the timeline and the summary."""
    runner = lab.runner()
    live = in_notebook() if live is None else live
    if not live:
        return runner.run(spec, probes=probes, work=work, perf=perf)
    from IPython.display import HTML, display

    from .charts import LiveChart, timeline

    title = f"{spec.name}: {spec.clients} clients, live"
    chart = LiveChart(title, [p.name for p in probes] + ([WORK] if work else []))
    handle = display(chart.figure, display_id=True)
    try:
        run = runner.run(spec, probes=probes, chart=chart, work=work, perf=perf)
    except KeyboardInterrupt:
        handle.update(HTML(f"<b>{spec.name}</b>: interrupted; pgbench was stopped and its backends terminated."))
        raise
    except LabkitError:
        handle.update(HTML(f"<b>{spec.name}</b>: pgbench stopped with an error (below)."))
        raise
    # A static figure replaces the widget: it survives saving, HTML export and a closed kernel.
    # (a plotly Figure ignores display ids when shown directly: send its bundle instead)
    handle.update(timeline(run)._repr_mimebundle_(), raw=True)
    return run
