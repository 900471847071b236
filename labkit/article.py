"""The source articles' figures (``data/<lab>.csv``) and this machine's runs, side by side.

Each CSV starts with ``#`` lines naming its source (title, author, date, link); the rows are the
figures the article published, keyed by the lab's run names. Hardware differs, so the
comparison that means something is a ratio: each method against the lab's baseline method,
in the article and in this run.
"""

from __future__ import annotations

from . import config
from .errors import UsageError
from .records import Run


def figures(lab: str):
    """The article's figures for ``lab`` (e.g. ``"02-flash-sale"``); the source is in ``.attrs["source"]``."""
    import pandas as pd

    path = config.shipped("data") / f"{lab}.csv"
    if not path.exists():
        raise UsageError(f"No article figures for {lab!r}: expected {path}.")
    lines = path.read_text(encoding="utf-8").splitlines()
    source = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
    frame = pd.read_csv(path, comment="#")
    frame.attrs["source"] = "\n".join(source)
    return frame


def side_by_side(article, runs: list[Run], *, baseline: str, key: str = "run"):
    """The article's tps and this run's tps and goodput per method, each also as a multiple of ``baseline``.

    ``article`` is :func:`figures` (one row per run name in column ``key``, with ``tps``).
    """
    import pandas as pd

    mine = {run.name: run for run in runs}
    if baseline not in mine:
        raise UsageError(f"Run {baseline!r} first: it is the baseline of the comparison.")
    published = article.set_index(key)
    base_article = published["tps"].get(baseline)
    base = mine[baseline]
    base_goodput = base.extra.get("goodput")
    with_goodput = any("goodput" in run.extra for run in mine.values())
    rows = []
    for name, run in mine.items():
        goodput = run.extra.get("goodput")
        article_tps = published["tps"].get(name)
        rows.append({
            "run": name,
            "article clients": published["clients"].get(name) if "clients" in published else None,
            "article tps": article_tps,
            "article ×": _ratio(article_tps, base_article),
            "clients": run.clients,
            "tps": round(run.tps, 1) if run.tps is not None else None,
            "tps ×": _ratio(run.tps, base.tps),
        })
        if with_goodput:
            rows[-1].update({"goodput": goodput, "goodput ×": _ratio(goodput, base_goodput)})
    return pd.DataFrame(rows)


def _ratio(value, base):
    """``value / base`` to two decimals, or None when either is missing.

    >>> _ratio(23915.35, 230.27), _ratio(None, 1.0)
    (103.86, None)
    """
    if value is None or base in (None, 0) or value != value or base != base:
        return None
    return round(float(value) / float(base), 2)
