"""PostgreSQL's units for settings (memory and time), read in one place.

A value is written with a unit ("128MB", "2s") or without one, in the setting's own unit
(``pg_settings.unit``: "8kB" for shared_buffers, "ms" for lock_timeout).
"""

from __future__ import annotations

import re

_UNITS = {
    "B": ("memory", 1.0), "kB": ("memory", 1024.0), "8kB": ("memory", 8192.0), "MB": ("memory", 2.0**20),
    "GB": ("memory", 2.0**30), "TB": ("memory", 2.0**40),
    "us": ("time", 0.001), "ms": ("time", 1.0), "s": ("time", 1000.0), "min": ("time", 60000.0),
    "h": ("time", 3600000.0), "d": ("time", 86400000.0),
}
_VALUE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|kB|MB|GB|TB|us|ms|s|min|h|d)?\s*")


def quantity(text: str, unit: str | None = None) -> tuple[str, float] | None:
    """("memory", bytes) or ("time", milliseconds) of ``text``; ``unit`` is the setting's own. None: not a quantity.

    >>> quantity("128MB"), quantity("16384", "8kB"), quantity("2s"), quantity("250", "ms"), quantity("on")
    (('memory', 134217728.0), ('memory', 134217728.0), ('time', 2000.0), ('time', 250.0), None)
    """
    match = _VALUE.fullmatch(text or "")
    written = match and (match.group(2) or unit)
    if not match or written not in _UNITS:
        return None
    kind, factor = _UNITS[written]
    return kind, float(match.group(1)) * factor


def shown(setting: str, unit: str | None) -> str:
    """A setting as ``SHOW`` writes it: memory in the largest whole unit, a count as it is.

    >>> shown("16384", "8kB"), shown("300", None), shown("131072", "kB")
    ('128MB', '300', '128MB')
    """
    found = quantity(setting, unit)
    if found is None or found[0] != "memory":
        return setting if not unit else f"{setting}{unit}"
    size = found[1]
    for name, factor in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("kB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{int(size // factor)}{name}"
    return f"{int(size)}B"


def seconds(text: str) -> float | None:
    """Seconds in a duration setting (a bare number is milliseconds, as for the timeouts); None if unreadable.

    >>> seconds("1s"), seconds("500ms"), seconds("2min"), seconds("250"), seconds("soon"), seconds("8MB")
    (1.0, 0.5, 120.0, 0.25, None, None)
    """
    found = quantity(text, "ms")
    return found[1] / 1000 if found and found[0] == "time" else None


def same(setting: str, unit: str | None, wanted: str) -> bool:
    """Whether a pg_settings value (in its unit) equals a wanted value written with a unit.

    >>> same("16384", "8kB", "128MB"), same("2000", "ms", "2s"), same("on", None, "off"), same("on", None, "on")
    (True, True, False, True)
    """
    if setting == wanted:
        return True
    have, want = quantity(setting, unit), quantity(wanted, unit)
    return have is not None and have == want
