"""One look for every figure labkit draws: a plotly template and colours that keep their meaning.

- :func:`apply` (or the :func:`styled` decorator) gives a figure the ``labkit`` template: the
  Okabe-Ito palette, which readers with the common colour-vision deficiencies tell apart, and
  readable fonts and margins. The template is also registered as ``"labkit"`` in ``plotly.io``,
  so a notebook's own figures can use ``template="labkit"``.
- :func:`color` gives a run name or method one colour for the whole process: the first name
  asked for gets the first colour, and so on, so "plain" is the same colour in every chart of a
  notebook. tps is drawn solid and goodput dashed, in that colour.
- :func:`wait_color` gives each class of wait event (Lock, LWLock, IO, ...) one colour family.
"""

from __future__ import annotations

import functools

NAME = "labkit"

# Okabe & Ito (2008), "Color Universal Design". Yellow is left out of the run colours: a thin
# yellow line on white is hard to see. It still fills the Timeout area of the wait panel.
BLUE, VERMILLION, GREEN, PURPLE = "#0072B2", "#D55E00", "#009E73", "#CC79A7"
ORANGE, SKY, BLACK, YELLOW = "#E69F00", "#56B4E9", "#000000", "#F0E442"
GREY = "#999999"
RUN_COLORS = (BLUE, VERMILLION, GREEN, PURPLE, ORANGE, SKY, BLACK)

FONT = '"Open Sans", "Segoe UI", "Helvetica Neue", Arial, sans-serif'

TPS_DASH = "solid"
GOODPUT_DASH = "dash"
STALL_COLOR = "rgba(213, 94, 0, 0.16)"  # vermillion, faint: a band behind the data
PLANNED_END_COLOR = "#444444"
START_COLOR = "rgba(153, 153, 153, 0.14)"  # grey: connecting and the first second, not part of the figures
TAIL_COLOR = "rgba(86, 180, 233, 0.14)"  # sky: after the planned end, fewer clients, not part of the figures

# One family per class of wait event; the events of a class are shades of it (see ``shade``).
WAIT_CLASS_COLORS = {
    "CPU": GREEN,
    "Lock": VERMILLION,
    "LWLock": PURPLE,
    "IO": ORANGE,
    "IPC": SKY,
    "BufferPin": BLUE,
    "Timeout": YELLOW,
    "Client": "#7F7F7F",
    "idle in transaction": "#8C564B",
    "Activity": "#B0B0B0",
    "Extension": "#333333",
}
OTHER_WAITS_COLOR = "#D0D0D0"

_colors: dict[str, str] = {}


def color(name: str) -> str:
    """The colour of a run name or method, the same in every figure of this process.

    >>> color("a doctest run") == color("a doctest run")
    True
    """
    if name not in _colors:
        _colors[name] = RUN_COLORS[len(_colors) % len(RUN_COLORS)]
    return _colors[name]


def wait_color(wait_class: str, rank: int = 0) -> str:
    """The colour of the ``rank``-th series (0: the largest) of a class of wait events.

    >>> wait_color("Lock"), wait_color("Lock", 1)
    ('#D55E00', '#E28E4C')
    """
    return shade(WAIT_CLASS_COLORS.get(wait_class, GREY), rank)


_SHADES = (0.0, 0.3, 0.5, 0.62, 0.72, 0.8, 0.86)


def shade(hex_color: str, rank: int) -> str:
    """``hex_color`` mixed with white, more for a higher rank (rank 0 is the colour itself).

    >>> shade("#000000", 2)
    '#808080'
    """
    amount = _SHADES[min(rank, len(_SHADES) - 1)]
    red, green, blue = _channels(hex_color)
    return "#" + "".join(f"{round(c + (255 - c) * amount):02X}" for c in (red, green, blue))


def translucent(hex_color: str, alpha: float) -> str:
    """``hex_color`` as an rgba() colour with opacity ``alpha``.

    >>> translucent("#0072B2", 0.35)
    'rgba(0, 114, 178, 0.35)'
    """
    red, green, blue = _channels(hex_color)
    return f"rgba({red}, {green}, {blue}, {alpha})"


def _channels(hex_color: str) -> tuple[int, int, int]:
    value = hex_color.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def template():
    """The ``labkit`` plotly template (built and registered with plotly.io once)."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if NAME not in pio.templates:
        built = go.layout.Template(pio.templates["plotly_white"])
        axis = dict(showline=True, linecolor="#888888", ticks="outside", tickcolor="#888888",
                    gridcolor="#EBEBEB", zerolinecolor="#D0D0D0", title_font_size=13, automargin=True)
        built.layout.update(
            colorway=list(RUN_COLORS), font=dict(family=FONT, size=13, color="#222222"),
            title=dict(font_size=17, x=0.01, xanchor="left"), margin=dict(l=70, r=30, t=80, b=60),
            legend=dict(font_size=12), hoverlabel=dict(font_size=12, font_family=FONT),
            xaxis=axis, yaxis=axis,
        )
        pio.templates[NAME] = built
    return pio.templates[NAME]


def apply(figure):
    """Give ``figure`` the labkit template; returns the figure (for ``return apply(figure)``)."""
    figure.update_layout(template=template())
    return figure


def styled(make):
    """A decorator for functions that return a figure: the figure comes back with the labkit template."""

    @functools.wraps(make)
    def wrapper(*args, **kwargs):
        return apply(make(*args, **kwargs))

    return wrapper
