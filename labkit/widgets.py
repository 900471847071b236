"""A control panel for a run: sliders for clients, duration and the experiment's knobs, a Run button.

The panel only builds parameters and calls :meth:`labkit.lab.Lab.pgbench`; the live chart
appears below it. Values the server cannot take (more clients than free connections) are
refused in the panel with a message, before anything starts.
"""

from __future__ import annotations

import inspect

from . import live, records
from .errors import LabkitError, UsageError


def panel_run_name(base: str, clients: int, knobs: dict) -> str:
    """A panel run's name: the panel's name (and method), the clients, then each knob's value.

    >>> panel_run_name("explore-advisory", 64, {"rows": 1000, "limit": "64kB"})
    'explore-advisory-c64-rows-1000-limit-64kB'
    """
    return "-".join([base, f"c{clients}", *(f"{label}-{value}" for label, value in knobs.items())])


def _check_before(before, knobs: dict) -> None:
    """Refuse, when the panel is made, a ``before`` that could not be called as ``before(lab, **knobs)``.

    >>> _check_before(lambda lab, rows: None, {"rows": [1, 10]})
    >>> _check_before(lambda rows: None, {"rows": [1, 10]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    labkit.errors.UsageError: before= must accept the lab and each knob as before(lab, rows=...): ...multiple values...
    """
    if before is None:
        return
    try:
        inspect.signature(before).bind(None, **{label: None for label in knobs})
    except TypeError as error:
        example = ", ".join(f"{label}=..." for label in knobs)
        raise UsageError(f"before= must accept the lab and each knob as before(lab{', ' if example else ''}{example}): "
                         f"{error}") from None


def panel(lab, script: str | dict[str, str], *, name: str = "explore", clients: tuple[int, int] = (1, 64), duration: tuple[int, int] = (2, 60),
          knobs: dict | None = None, before=None, after=None, probes=None, work: str | None = None,
          mode: str = "simple", repeats: int = 1):
    """A panel that runs ``script`` with the chosen clients, duration and knobs.

    script: one pgbench script, or ``{"method": script}`` for a dropdown of methods.

    Each run is named by what was chosen (:func:`panel_run_name`), and its record keeps each knob's
    value in ``extra`` (a column of ``lab.runs()``), so panel runs can be told apart and compared.

    knobs: ``{"label": [choices]}`` gives a dropdown, ``{"label": (low, high)}`` an integer slider.
        Each knob's value reaches the script as a pgbench variable (``:label``) and ``before``.
    before: called as ``before(lab, **knob_values)`` ahead of each run (e.g. to rebuild an index).
    after: called as ``after(lab, run)`` once each run is recorded (e.g. to note a check in it).
    work, mode: as for :meth:`labkit.lab.Lab.pgbench` (goodput is then shown beside tps).
    repeats: the repeats slider's starting value (1 to 5): each choice runs that many times, kept together.
    """
    import ipywidgets as w

    knobs = knobs or {}
    _check_before(before, knobs)
    low, high = clients
    default_clients = min(max(lab.profile.clients, low), high)
    client_box = w.BoundedIntText(value=default_clients, min=1, max=100_000, description="clients")
    seconds = w.IntSlider(value=min(max(lab.profile.duration_s, duration[0]), duration[1]), min=duration[0],
                          max=duration[1], description="seconds")
    repeat_slider = w.IntSlider(value=min(max(repeats, 1), 5), min=1, max=5, description="repeats")
    knob_widgets = {}
    methods = w.Dropdown(options=list(script), description="method") if isinstance(script, dict) else None
    for label, choice in knobs.items():
        if isinstance(choice, tuple):
            knob_widgets[label] = w.IntSlider(value=choice[0], min=choice[0], max=choice[1], description=label)
        else:
            knob_widgets[label] = w.Dropdown(options=list(choice), description=label)
    button = w.Button(description="Run", button_style="primary", icon="play")
    message = w.HTML()
    output = w.Output()
    shown: list = []  # the live view of the panel's last run (closed when the next run clears the output)

    def check(value: int) -> str | None:
        if not low <= value <= high:
            return f"Clients must be between {low} and {high} in this panel."
        return None

    def on_click(_):
        count = client_box.value
        problem = check(count)
        if problem:
            message.value = f"<span style='color:#b00'>{problem}</span>"
            return
        values = {label: widget.value for label, widget in knob_widgets.items()}
        text, run_name = (script[methods.value], f"{name}-{methods.value}") if methods else (script, name)
        run_name = panel_run_name(run_name, count, values)
        times = repeat_slider.value
        message.value = (f"Running {run_name} with {count} clients for {seconds.value} s"
                         + (f", {times} times" if times > 1 else "") + " ...")
        button.disabled = True
        output.clear_output()
        for view in shown:  # the last run's live view, no longer in the panel
            view.close()
        views = []
        result = None
        try:
            with output, live.nested() as views:
                options = [item for label, value in values.items() for item in ("-D", f"{label}={value}")]

                def each(run):
                    run.note(**values)  # one column each in lab.runs()
                    if after is not None:
                        after(lab, run)

                # before each repeat, as its docstring says: each starts from the same state
                setup = (lambda lab: before(lab, **values)) if before is not None else None
                result = lab.pgbench(text, name=run_name, clients=count, duration=seconds.value, options=options,
                                     probes=probes, live=True, work=work, mode=mode, repeats=times, after=each,
                                     setup=setup)
            if result is None:  # the Output showed the error (it keeps a cell's exception in the panel)
                message.value = f"<span style='color:#b00'>{run_name}: the run did not complete (the error is below).</span>"
                return
            group = result if isinstance(result, records.Repeats) else records.Repeats([result])
            spread = group.spread("tps")
            ranged = f" ({spread[0]:,.0f}–{spread[1]:,.0f} over {len(group)} runs)" if len(group) > 1 and spread else ""
            goodput = group.mean("goodput")
            shown_goodput = f", goodput {goodput:,.0f}/s" if goodput is not None else ""
            message.value = f"{run_name}: {group.tps or 0:,.0f} tps{ranged}{shown_goodput} with {count} clients (saved)."
        except LabkitError as error:
            message.value = f"<span style='color:#b00'>{error.short}</span>"
        finally:
            shown[:] = views
            button.disabled = False

    button.on_click(on_click)
    controls = w.VBox([*([methods] if methods else []), client_box, seconds, repeat_slider, *knob_widgets.values(),
                       w.HBox([button, message])])
    box = w.VBox([controls, output])
    box.run = lambda: on_click(None)  # for tests and headless runs: press the button
    box.views = shown
    box.message = message
    box.clients = client_box
    box.methods = methods
    box.knobs = knob_widgets
    box.repeats = repeat_slider
    return box
