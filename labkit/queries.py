"""The SQL labkit itself runs, one file per query in ``labkit/sql``, loaded by name."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def query(name: str) -> str:
    """The text of ``labkit/sql/<name>.sql``."""
    return files("labkit").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
